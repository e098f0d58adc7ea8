"""odirect after a write to the slot file that fails by itself (a full disk, EIO on pwrite):
the keys of the failed write read, and reopen, as before it, new sparse keys give their slots
back, nothing stops; a batch keeps the runs written before the failure. A failure that leaves
an unsynced version lost, or the failed write's copies uncleared, stops writes."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from sarp.errors import SyncFailedError, WritesStoppedError
from storage_backends import open_store
from storage_backends.odirect import ODirectStore
from storage_backends.power_loss import PowerLossIO

V = 2000  # a value larger than the 512 bytes a "part" failure writes


class FailingWrites(PowerLossIO):
    """Runs ``plan`` over the next writes to slots.dat, one step each: "ok" writes, "none"
    fails (EIO) without writing, "part" writes 512 bytes then fails, "whole" writes it all
    then fails, "lost" returns without writing (a write the device dropped)."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: list[str] = []

    def _pwrite(self, f: Any, buf: Any, offset: int) -> None:
        step = self.plan.pop(0) if self.plan and f.path.name == "slots.dat" else "ok"
        if step == "lost":
            return
        if step in ("ok", "part", "whole"):
            super()._pwrite(f, memoryview(buf)[:512] if step == "part" else buf, offset)
        if step != "ok":
            raise OSError(errno.EIO, "Input/output error")


def _open(path: Path, io: FailingWrites | None = None, **options: Any) -> ODirectStore:
    store = open_store("odirect", path, durability="sync", io=io, memory_budget=1 << 20,
                       **options)
    assert isinstance(store, ODirectStore)
    return store


def _layout(s: ODirectStore) -> tuple[Any, ...]:
    """What a failed write must leave as it was: the key map, the free list, the slot count
    and the newest-copy bits."""
    return dict(s._slot_of), sorted(s._free), s._nslots, bytes(s._newer).rstrip(b"\0")


@pytest.mark.parametrize("key_mode", ["sparse", "dense"])
@pytest.mark.parametrize("written", ["none", "part", "whole"])
@pytest.mark.parametrize("full", [False, True], ids=["room", "extent-full"])
def test_a_failed_write_of_a_new_key_leaves_it_absent(key_mode: str, written: str,
                                                      full: bool, tmp_path: Path) -> None:
    """The new key reads as missing, a sparse key's slot is free again (and an extent added
    for it alone is gone, unless the failed write made the file that long), writes go on, and
    a clean reopen agrees. Without the undo, a sparse key kept its slot, off the free list
    until a reopen, and a copy left holding part of the write failed its checks in every get
    of that slot and made the reopen raise CorruptionError."""
    path, io = tmp_path / "s", FailingWrites()
    old = {k: bytes([k]) * V for k in range(64 if full else 3)}  # full: one whole extent
    key = 100 if full else 50  # extent-full: its slot is in extent 1 (a sparse key's too)
    s = _open(path, io, key_mode=key_mode)
    s.put_many(old.items())
    before = _layout(s)
    io.plan = [written]
    with pytest.raises(OSError, match="Input/output error") as e:
        s.put(key, b"n" * V)
    assert not isinstance(e.value, SyncFailedError)
    assert not s.stats()["writes_stopped"]
    assert s.get(key) is None and s.get_many(old) == list(old.values())
    if written == "none" or not full:  # else the failed write made the file reach extent 1
        assert _layout(s) == before
    stats = {k: s.stats()[k] for k in ("slots", "free_slots")}
    s.close()
    with _open(path) as s:
        assert {k: s.stats()[k] for k in stats} == stats
        assert s.get(key) is None and s.get_many(old) == list(old.values())
        s.put(key, b"m" * V)
        assert s.get(key) == b"m" * V


@pytest.mark.parametrize("key_mode", ["sparse", "dense"])
@pytest.mark.parametrize("written", ["part", "whole"])
def test_a_failed_rewrite_keeps_the_old_value_after_later_syncs_and_a_power_cut(
        key_mode: str, written: str, tmp_path: Path) -> None:
    """The failed rewrite went to the copy beside the synced version. Left there, its copy
    came back after a power cut in place of the value every get had served ("whole"), or,
    torn, named a sequence number that the syncs after it went past, so the open took it
    for an acknowledged version damaged and raised CorruptionError ("part")."""
    path, io = tmp_path / "s", FailingWrites()
    s = _open(path, io, key_mode=key_mode)
    s.put(1, b"a" * V)
    s.put(1, b"b" * V)
    io.plan = [written]
    with pytest.raises(OSError, match="Input/output error"):
        s.put(1, b"c" * V)
    assert s.get(1) == b"b" * V
    s.put(2, b"d" * V)  # later synced writes
    s.put(3, b"e" * V)
    io.crash("drop")
    with _open(path, key_mode=key_mode) as s:
        assert s.get_many([1, 2, 3]) == [b"b" * V, b"d" * V, b"e" * V]


@pytest.mark.parametrize("key_mode", ["sparse", "dense"])
@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_batch_that_fails_keeps_the_runs_written_before(key_mode: str, failing: int,
                                                          tmp_path: Path) -> None:
    """A put_many writes its runs in order; the ``failing``-th write fails, part written.
    The keys of the runs before it read as new (not atomic, as the contract has it: each key
    of a write not acknowledged holds its old value or its new one), the rest as before,
    new sparse keys absent with their slots free, also after a clean reopen; the store takes
    the batch again."""
    path, io = tmp_path / "s", FailingWrites()
    s = _open(path, io, key_mode=key_mode)
    s.put_many([(k, b"o" * V) for k in (0, 1, 2)])  # slots 0, 1, 2
    # runs: key 0 (copy 0 of slot 0), key 2 (copy 0 of slot 2), then keys 7 and 8, new, side
    # by side (copies 1 of slots 3 and 4; dense: of 7 and 8)
    batch = [(0, b"x" * V), (2, b"y" * V), (7, b"z" * V), (8, b"w" * V)]
    runs = [[0], [2], [7, 8]]
    free = s.stats()["free_slots"]
    io.plan = ["ok"] * failing + ["part"]
    with pytest.raises(OSError, match="Input/output error"):
        s.put_many(batch)
    new = {k for run in runs[:failing] for k in run}
    expect = {k: v if k in new else (b"o" * V if k < 3 else None) for k, v in batch}
    assert dict(zip(expect, s.get_many(expect), strict=True)) == expect
    assert s.stats()["free_slots"] == free
    assert not s.stats()["writes_stopped"]
    s.close()
    with _open(path, key_mode=key_mode) as s:
        assert dict(zip(expect, s.get_many(expect), strict=True)) == expect
        assert s.stats()["free_slots"] == free
        s.put_many(batch)
        assert s.get_many([k for k, _ in batch]) == [v for _, v in batch]


def test_a_copy_the_zeroing_missed_loses_to_every_later_version(tmp_path: Path) -> None:
    """A failed write's sequence numbers are not given again, so a later version of a key
    outnumbers a copy of the failed write that outlived its zeroing: a power cut may keep
    the failed write and the later put but not the zeroing between them (here the zeroing is
    lost, the put synced, then the power cut). Given again, the failed version, in another
    slot, outnumbered the key's later put, and the open after the cut served it."""
    path, io = tmp_path / "s", FailingWrites()
    s = _open(path, io, key_mode="sparse")
    io.plan = ["whole", "lost"]  # keys 1 and 2 into slots 0 and 1; the zeroing is lost
    with pytest.raises(OSError, match="Input/output error"):
        s.put_many([(1, b"f" * V), (2, b"g" * V)])
    s.put(2, b"h" * V)  # takes slot 0, the lowest free one
    io.crash("drop")
    with _open(path) as s:
        assert s.get_many([1, 2]) == [None, b"h" * V]


@pytest.mark.parametrize("key_mode", ["sparse", "dense"])
def test_a_failed_write_whose_zeroing_fails_stops_writes(key_mode: str,
                                                         tmp_path: Path) -> None:
    """If the copies the failed write went to cannot be zeroed either, what they hold is not
    known: writes stop, as after a failed sync, reads serve the values from before, and a
    reopen recovers the store as after a crash."""
    path, io = tmp_path / "s", FailingWrites()
    s = _open(path, io, key_mode=key_mode)
    s.put(1, b"a" * V)
    s.put(1, b"b" * V)
    io.plan = ["part", "none"]
    with pytest.raises(SyncFailedError, match="and so did zeroing what it wrote"):
        s.put_many([(1, b"c" * V), (5, b"n" * V)])
    with pytest.raises(WritesStoppedError, match="zeroing"):
        s.put(6, b"x")
    assert s.get_many([1, 5]) == [b"b" * V, None]
    s.close()
    with _open(path, key_mode=key_mode) as s:
        assert s.get_many([1, 5]) == [b"b" * V, None]
        s.put(5, b"m" * V)
        assert s.get(5) == b"m" * V


@pytest.mark.parametrize("key_mode", ["sparse", "dense"])
def test_a_failed_write_over_a_first_unsynced_version_reads_as_missing(
        key_mode: str, tmp_path: Path) -> None:
    """A key whose only version is not synced yet is rewritten in the same copy; the write
    fails part-way. That version is lost, as in a crash: writes stop (a later sync must not
    acknowledge it) and the key reads as missing. The torn copy left there failed every get
    with CorruptionError."""
    path, io = tmp_path / "s", FailingWrites()
    s = open_store("odirect", path, durability="group", io=io, key_mode=key_mode)
    s.put(4, b"a" * V)  # not synced
    io.plan = ["part"]
    with pytest.raises(SyncFailedError, match="a write over versions not yet synced failed"):
        s.put(4, b"b" * V)
    assert s.stats()["writes_stopped"]
    assert s.get(4) is None
    s.close()
    with _open(path, key_mode=key_mode) as s:
        assert s.get(4) is None
