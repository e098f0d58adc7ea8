"""A failed sync stops writes instead of acknowledging later ones on top of lost data.

Linux reports a failed fsync once and may drop the pages it could not write; a later fsync
that succeeds does not write them again. ``PowerLossIO.fail_syncs`` models that: the file's
unsynced writes stay readable until the simulated power cut, which loses them. A log that went
on after such a failure would acknowledge records that follow a hole, and after the power cut
its reader would find a damaged block before valid ones. So the stores and the index's journal
refuse every write after a failed one (storage_backends/write_stop.py), and each test checks
that every write acknowledged before the failure survives the power cut, and that the files
reopen without an error.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp import journal, snapshot
from sarp.errors import RecoveryError, SyncFailedError, WritesStoppedError
from storage_backends import open_store
from storage_backends.io import FileIO
from storage_backends.power_loss import PowerLossIO
from storage_backends.write_stop import WriteStop

from . import size_limited_writer
from .power import killed, open_through, snapshot_cut_by_power
from .workload import CONFIG, assert_holds, check_match, full_blocks, insert, metadata

SIZE_LIMITED = Path(size_limited_writer.__file__)


def _value(key: int, version: int) -> bytes:
    return (key.to_bytes(8, "little") + version.to_bytes(8, "little")) * 20


@pytest.mark.parametrize("kind", ["flashlog", "odirect"])
def test_a_store_whose_sync_failed_writes_nothing_more_and_survives_a_power_cut(
        kind: str, tmp_path: Path) -> None:
    """flashlog and odirect under ``sync``: a batch whose sync fails raises; the next batch
    is refused, not written after the pages the failed sync dropped. close() then writes no
    clean marker: odirect's saved newest-copy bits would point at the copies the failed batch
    wrote, which hold an older version again after the power cut."""
    io = PowerLossIO(0)
    # dense keys, as the index opens its store: odirect then trusts its saved bits
    options = {"instances": 4} if kind == "flashlog" else {"dense_keys": True}
    path = tmp_path / "s"
    store = open_store(kind, path, memory_budget=1 << 20, durability="sync", io=io, **options)
    for version in (1, 2):  # each slot of odirect holds both copies
        store.put_many([(k, _value(k, version)) for k in range(50)])
    io.fail_syncs(1)
    with pytest.raises(OSError, match="simulated failed sync"):
        store.put_many([(k, _value(k, 3)) for k in range(40, 60)])
    with pytest.raises(WritesStoppedError, match=f"{kind} store .* simulated failed sync"):
        store.put_many([(k, _value(k, 4)) for k in range(60, 70)])
    store.close()
    io.crash("drop")
    with open_store(kind, path, memory_budget=1 << 20, durability="sync", **options) as again:
        got = again.get_many(range(70))
        assert got[:40] == [_value(k, 2) for k in range(40)]
        assert all(got[k] in (_value(k, 2), _value(k, 3)) for k in range(40, 50))
        assert all(got[k] in (None, _value(k, 3)) for k in range(50, 60))
        assert got[60:] == [None] * 10
        again.put(60, b"after")
        assert again.get(60) == b"after"


def test_without_the_stop_a_write_after_a_failed_sync_would_be_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the stop prevents, shown with it turned off: flashlog acknowledges a batch synced
    after the failed one. After the power cut its WAL has a hole before that batch, and no
    block written after the later sync shows that it covered the hole, so recovery takes the
    hole for a torn tail: the acknowledged batch is gone."""
    monkeypatch.setattr(WriteStop, "check", lambda self: None)
    io = PowerLossIO(0)
    path = tmp_path / "s"
    store = open_store("flashlog", path, memory_budget=1 << 20, durability="sync", io=io,
                       instances=4)
    store.put_many([(k, _value(k, 1)) for k in range(50)])
    io.fail_syncs(1)
    with pytest.raises(OSError, match="simulated failed sync"):
        store.put_many([(k, _value(k, 1)) for k in range(50, 60)])
    store.put_many([(k, _value(k, 1)) for k in range(60, 70)])  # acknowledged
    store.close()
    io.crash("drop")
    with open_store("flashlog", path, memory_budget=1 << 20, durability="sync",
                    instances=4) as again:
        assert all(again.get(k) is None for k in range(60, 70))


def _index_with_inserts(tmp_path: Path, n: int) -> tuple[PowerLossIO, Path, sarp.Index]:
    """An index on odirect through a PowerLossIO, holding sequences 0 .. n-1."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", direct_io=False, store_options={"io": io},
                      _io=io, **CONFIG)
    for i in range(n):
        insert(index, i)
    return io, path, index


@contextmanager
def _journal_sync_fails(io: PowerLossIO, index: sarp.Index) -> Iterator[None]:
    """Within the block, the index's journal's next sync fails; the store's syncs pass."""
    journal_file = index._journal.path
    real_sync = io._sync

    def journal_fails(f, data_only):
        if f.path == journal_file:
            io.fail_syncs(1)
        real_sync(f, data_only)

    io._sync = journal_fails  # type: ignore[method-assign]
    try:
        yield
    finally:
        io._sync = real_sync  # type: ignore[method-assign]


@pytest.mark.parametrize("snapshot_on_close", [True, False])
def test_an_index_whose_journal_sync_failed_takes_no_insert_and_survives_a_power_cut(
        snapshot_on_close: bool, tmp_path: Path) -> None:
    """The journal's sync fails in an insert (durability ``sync``): that insert raises and
    every later one is refused, also after a snapshot, until the index is reopened; matches go
    on. Closing cuts the journal back to its last good sync, so recovery replays it whole
    after the power cut. With the closing snapshot, close() succeeds and the failed insert,
    which the snapshot covers, is kept; without it, close() raises, and the failed insert's
    segments come back by roll-forward (they are in the store)."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", durability="sync", direct_io=False,
                      snapshot_on_close=snapshot_on_close, store_options={"io": io}, _io=io,
                      **CONFIG)
    for i in range(20):
        insert(index, i)
    journal_file = index._journal.path
    synced_size = journal_file.stat().st_size
    with _journal_sync_fails(io, index), pytest.raises(
            OSError, match="simulated failed sync of journal-0+.log"):
        insert(index, 20)
    with pytest.raises(WritesStoppedError, match="the index's journal takes no more writes: "
                       "an earlier sync failed .*simulated failed sync of journal-0+.log"):
        insert(index, 21)
    with pytest.raises(WritesStoppedError):
        index.flush()
    assert index.stats()["writes_stopped"] and not index.stats()["store"]["writes_stopped"]
    assert_holds(index, 20)
    if snapshot_on_close:
        index.snapshot()
        with pytest.raises(WritesStoppedError):  # stopped until reopened
            insert(index, 21)
        index.close()
    else:
        with pytest.raises(WritesStoppedError):  # the failed insert's record is cut
            index.close()
        assert journal_file.stat().st_size == synced_size
    assert index.store.closed
    io.crash("drop")
    with sarp.open(path) as again:
        assert not again.stats()["writes_stopped"]
        assert again.recovery["torn_tail_bytes"] == 0
        assert_holds(again, 21)
        assert check_match(again, 21) < full_blocks(21)
        insert(again, 21)
        assert check_match(again, 21) == full_blocks(21)


def test_a_failed_journal_write_stops_nothing_and_is_written_again(tmp_path: Path) -> None:
    """Under ``group`` the journal is written once 64 KiB of records wait. A write that fails
    by itself (a full disk) acknowledged nothing: the insert raises, its records stay queued,
    and once the disk has room the next flush writes them; every insert is there after a
    power cut."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", durability="group", direct_io=False,
                      store_options={"io": io}, _io=io, **CONFIG)
    real = io._pwrite
    journal_file = index._journal.path

    def full_disk(f, buf, offset):
        if f.path == journal_file:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(f, buf, offset)

    io._pwrite = full_disk  # type: ignore[method-assign]
    inserted = 0
    with pytest.raises(OSError, match="No space left"):
        for i in range(2000):  # until 64 KiB of records wait
            insert(index, i)
            inserted += 1
    io._pwrite = real  # type: ignore[method-assign]
    insert(index, inserted + 1)
    index.flush()
    io.crash("drop")
    with sarp.open(path) as again:
        assert_holds(again, inserted + 2)


def test_a_journal_write_that_fails_at_close_keeps_the_file_and_a_later_close_writes_it(
        tmp_path: Path) -> None:
    """Only a failed sync cuts a journal back: a write that fails at close (a full disk) is
    raised with the file left as it is, and the next close writes the rest."""
    io = FileIO()
    path = tmp_path / journal.FILES.name(0)
    writer = journal.JournalWriter(io, path, 0, 0, index_id=7)
    for seq in (1, 2):
        writer.append(journal.Record(seq, seq, 1, [seq - 1], [1]))
        if seq == 1:
            writer.sync()
    real = io._pwrite

    def full_disk(f, buf, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    io._pwrite = full_disk  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    io._pwrite = real  # type: ignore[method-assign]
    writer.close()
    replay = journal.read(io, path, last=True)
    assert [r.record_seq for r in replay.records] == [1, 2] and replay.torn_tail == 0


@pytest.mark.parametrize("backend", ["odirect", "flashlog"])
def test_snapshots_the_kernel_refuses_leave_no_file_and_close_takes_one(
        backend: str, tmp_path: Path) -> None:
    """Snapshots that fail on a real write limit (RLIMIT_FSIZE in a writer subprocess: EFBIG,
    as a full file system fails them) each raise, leave no temporary file to hold the space
    they took, and leave the routing directory unsnapshotted: once writes go through again,
    close takes the snapshot, so the next open replays no journal record."""
    path = tmp_path / "index"
    child = subprocess.run(
        [sys.executable, str(SIZE_LIMITED), backend, str(path), "300", "3"],
        capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split("\n")[:4] == [f"failed {errno.EFBIG}"] * 3 + ["leftovers"]
    assert not list(path.glob("*.tmp"))
    with sarp.open(path) as index:
        assert index.recovery["snapshot"] is not None
        assert index.recovery["journal_records"] == 0
        assert_holds(index, 300)


def test_the_next_snapshot_removes_what_a_publish_cut_short_left(tmp_path: Path) -> None:
    """A crash during a publish leaves ``<name>.tmp``; the next snapshot removes those of
    snapshots and journals numbered up to its own, and leaves other files alone."""
    path = tmp_path / "index"
    with sarp.open(path, backend="odirect", memory_budget=1 << 20, **CONFIG) as index:
        insert(index, 0)
    left = [snapshot.FILES.name(1) + ".tmp", journal.FILES.name(1) + ".tmp",
            journal.FILES.name(2) + ".tmp"]
    for name in [*left, "notes.tmp"]:
        (path / name).write_bytes(b"cut short")
    with sarp.open(path) as index:
        assert index.snapshot()["seq"] == 2
        assert sorted(p.name for p in path.glob("*.tmp")) == ["notes.tmp"]
        assert_holds(index, 1)


@pytest.mark.parametrize("fail_at", ["write", "rename", "directory sync",
                                     "directory sync, twice"])
def test_a_journal_switch_that_fails_keeps_the_index_going(fail_at: str,
                                                           tmp_path: Path) -> None:
    """A snapshot whose new journal cannot be created (a full disk, or a failed fsync of the
    directory after its rename) raises, and the index goes on in the journal it had, leaving
    no new journal behind; a later snapshot succeeds, and after a power cut every insert is
    there, from the fallback snapshot too. If the new journal cannot be removed durably
    either (the directory fsync fails again), it might outlive a power cut and break the
    chain of record numbers: inserts stop until the index is reopened."""
    io, path, index = _index_with_inserts(tmp_path, 4)
    real_write, real_rename, real_dir_sync = io._pwrite, io.rename, io.fsync_dir
    dir_failures = [2 if fail_at.endswith("twice") else 1]

    def full_disk(f, buf, offset):
        if f.path.name.startswith("journal-"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(f, buf, offset)

    def rename_then_fail(src, dst):
        real_rename(src, dst)
        if Path(dst).name.startswith("journal-"):
            if fail_at == "rename":
                raise OSError(errno.ENOSPC, "No space left on device")
            io.fsync_dir = failing_dir_sync  # type: ignore[method-assign]

    def failing_dir_sync(directory):
        dir_failures[0] -= 1
        if dir_failures[0] >= 0:
            raise SyncFailedError(errno.EIO, "sync of directory failed")
        real_dir_sync(directory)

    if fail_at == "write":
        io._pwrite = full_disk  # type: ignore[method-assign]
    else:
        io.rename = rename_then_fail  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left|sync of directory failed"):
        index.snapshot()
    io._pwrite, io.rename, io.fsync_dir = (  # type: ignore[method-assign]
        real_write, real_rename, real_dir_sync)
    assert [seq for seq, _ in journal.files(path)] == [0]
    if fail_at.endswith("twice"):
        with pytest.raises(WritesStoppedError):
            insert(index, 4)
        assert index.stats()["writes_stopped"]
        index.close()
        with sarp.open(path) as again:
            assert_holds(again, 4)
        return
    for i in range(4, 8):
        insert(index, i)
    index.snapshot()
    insert(index, 8)
    io.crash("drop")
    for damage_newest in (False, True):
        if damage_newest:
            newest = sorted(path.glob("snapshot-*"))[-1]
            newest.write_bytes(b"damaged")
        with sarp.open(path) as again:
            assert bool(again.recovery["faults"]) == damage_newest
            assert_holds(again, 9)


@pytest.mark.parametrize("then", ["power cut before the snapshot", "newest snapshot damaged"])
def test_a_journal_cut_after_a_failed_sync_is_followed_without_a_gap(then: str,
                                                                     tmp_path: Path) -> None:
    """A journal whose sync failed is cut back at the next snapshot's switch; the new journal
    follows the last record left in it, so recovery that replays both (the snapshot never
    published, or found damaged) finds no gap, and every acknowledged insert is there."""
    io, path, index = _index_with_inserts(tmp_path, 5)
    with _journal_sync_fails(io, index), pytest.raises(SyncFailedError):
        insert(index, 5)
    if then.startswith("power cut"):
        snapshot_cut_by_power(index, io)
    else:
        index.snapshot()
        index.close()
        io.crash("drop")
        sorted(path.glob("snapshot-*"))[-1].write_bytes(b"damaged")
    assert [seq for seq, _ in journal.files(path)] == [0, 1]
    with sarp.open(path) as again:
        assert_holds(again, 5)


class _CutAtJournalSync(PowerLossIO):
    """The power fails during the journal's next sync: of the writes not yet synced, the
    device kept only a prefix of the newest (``reorder``), or (``mode``, ``sectors``: see
    ``PowerLossIO``) any subset of its sectors, with or without the earlier ones."""

    armed = False

    def __init__(self, seed: int, mode: str = "reorder", sectors: int | None = None) -> None:
        super().__init__(seed, sectors)
        self.mode = mode

    def _sync(self, f, data_only):
        if self.armed and f.path.name.startswith("journal-"):
            self.crash(self.mode)
            raise OSError(errno.EIO, "power cut (simulated)")
        return super()._sync(f, data_only)


def _one_block(i: int) -> np.ndarray:
    return np.array([10_000_000 + i], dtype=np.uint64)


@pytest.mark.parametrize("seed", range(4))
def test_records_written_behind_and_lost_out_of_order_are_a_torn_tail(tmp_path, seed):
    """Under ``group`` the journal writes records behind, unsynced, once 64 KiB wait. A power
    cut during the next flush may keep the flush's write and lose an earlier one: a hole
    followed by valid records, none of which a sync covered. Their inserts were never
    acknowledged: recovery cuts the journal at the hole (their segments come back by
    roll-forward) instead of refusing the index, and every acknowledged insert is there."""
    _cut_behind_records(tmp_path, _CutAtJournalSync(seed), tail=True)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["tear", "reorder"])
@pytest.mark.parametrize("sectors", [512, 4096])
def test_records_torn_in_any_sectors_are_a_torn_tail(tmp_path, seed, mode, sectors):
    """As above, the flush's write torn in any subset of its sectors (a later record kept, an
    earlier one damaged), after the records written behind (``tear``) or without them
    (``reorder``): none of it was synced, so recovery cuts what is left of it as a torn tail
    (none when no sector of it was kept, and the file ends where a write did)."""
    _cut_behind_records(tmp_path, _CutAtJournalSync(seed, mode, sectors), tail=False)


def _cut_behind_records(tmp_path: Path, io: _CutAtJournalSync, tail: bool) -> None:
    """Inserts under ``group``: 100 flushed, then records written behind and more queued,
    the power cut by ``io`` at the next flush; the reopened index has cut a torn tail (if
    ``tail``), holds the 100 whole, and serves only the records inserted."""
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", durability="group", direct_io=False,
                      store_options={"io": io}, _io=io, snapshot_on_close=False, **CONFIG)
    for i in range(100):
        index.insert(block_ids=_one_block(i), metadata=metadata(_one_block(i)))
    index.flush()  # 0..99 acknowledged
    jpath, n = index._journal.path, 100
    size = jpath.stat().st_size
    while jpath.stat().st_size == size:  # until records are written behind
        index.insert(block_ids=_one_block(n), metadata=metadata(_one_block(n)))
        n += 1
    for i in range(n, n + 200):  # and more, queued for the flush's own write
        index.insert(block_ids=_one_block(i), metadata=metadata(_one_block(i)))
    io.armed = True
    with pytest.raises(OSError, match="power cut"):
        index.flush()
    with sarp.open(path, backend="odirect", direct_io=False, snapshot_on_close=False) as again:
        assert again.recovery["torn_tail_bytes"] > 0 or not tail
        matched = [again.match(block_ids=_one_block(i)) for i in range(n + 200)]
        assert [i for i in range(100) if matched[i].num_blocks != 1] == []
        assert all(np.array_equal(m.metadata, metadata(m.block_ids)) for m in matched)


def test_damage_a_later_record_shows_synced_is_refused(tmp_path):
    """A record whose synced field reaches past a damaged one proves that a sync covered the
    damage: acknowledged inserts may be lost there, so recovery refuses the journal."""
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", durability="sync", snapshot_on_close=False,
                   **CONFIG) as index:
        for i in range(3):
            index.insert(block_ids=_one_block(i), metadata=metadata(_one_block(i)))
    jpath = journal.files(path)[-1][1]
    raw = bytearray(jpath.read_bytes())
    raw[journal.FILE_HEADER.size + journal.RECORD_HEADER.size] ^= 1  # the first record
    jpath.write_bytes(bytes(raw))
    with pytest.raises(RecoveryError, match=f"{jpath.name}: damaged record at offset "
                                            f"{journal.FILE_HEADER.size}, which a sync covered"):
        sarp.open(path, backend="wiredtiger")


@pytest.mark.parametrize("durability, point", [("group", "flush"), ("none", "flush"),
                                               ("none", "snapshot")])
def test_a_durable_point_survives_a_power_cut(tmp_path, durability, point):
    """``Index.flush()`` makes every earlier insert durable in every mode: its journal sync
    makes the store durable first (under ``none`` too, where writes are otherwise not synced
    before close). A snapshot syncs the segments it names first in every mode, else a power
    cut after it leaves a snapshot naming segments the store lost, and the index does not
    open. A power cut after either loses only the inserts after it."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", durability=durability, direct_io=False,
                      store_options={"io": io}, _io=io, snapshot_on_close=False, **CONFIG)
    for i in range(5):
        insert(index, i)
    index.flush() if point == "flush" else index.snapshot()
    insert(index, 5)
    io.crash("drop")
    with sarp.open(path, backend="odirect", direct_io=False) as again:
        assert again.recovery["missing_segments"] == 0
        assert_holds(again, 5)


@pytest.mark.parametrize("backend", ["odirect", "flashlog"])
def test_a_reopen_after_a_failed_store_sync_makes_what_it_reads_durable(
        backend: str, tmp_path: Path) -> None:
    """Under ``group``, a flush whose store sync fails raises, and the pages it lost still
    read back. A reopen without a power cut between takes their segments, and a later flush
    proves them: inserts acknowledged then (the same sequences again, which write nothing)
    rely on them. The reopen redoes the failed sync (``FileIO.redo_failed_syncs``), so they
    survive the power cut. Without it, odirect lost them."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    options: dict[str, Any] = dict(backend=backend, direct_io=False, durability="group",
                   store_options={"io": io}, _io=io)
    index = sarp.open(path, **options, **CONFIG)
    for i in range(20):
        insert(index, i)
        if i == 9:
            index.flush()
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        index.flush()
    with pytest.raises(WritesStoppedError):
        index.close()
    with sarp.open(path, **options) as again:
        assert again.recovery["redone_files"] >= 1
        for i in range(10, 20):
            insert(again, i)
        again.flush()
    io.crash("drop")
    with sarp.open(path) as again:
        assert again.recovery["redone_files"] == 0
        assert_holds(again, 20)


def test_a_reopen_after_a_failed_journal_sync_makes_the_journal_durable(
        tmp_path: Path) -> None:
    """Under ``sync``, the journal's sync fails in an insert and the index is killed, so
    close() does not cut the journal back: its lost records still read back. The reopen
    takes them and appends after them, and later inserts are acknowledged; no snapshot
    covers them. The reopen redoes the journal's failed sync, so after the power cut the
    journal reads whole (without the redo, the lost bytes before synced records were
    damage, and the open failed)."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    options: dict[str, Any] = dict(backend="odirect", direct_io=False, durability="sync",
                   snapshot_on_close=False, store_options={"io": io}, _io=io)
    index = sarp.open(path, **options, **CONFIG)
    for i in range(10):
        insert(index, i)
    with _journal_sync_fails(io, index), pytest.raises(SyncFailedError):
        insert(index, 10)
    killed(index)
    with sarp.open(path, **options) as again:
        assert again.recovery["redone_files"] == 1
        for i in range(11, 20):
            insert(again, i)
    io.crash("drop")
    with sarp.open(path) as again:
        assert again.recovery["torn_tail_bytes"] == 0
        assert_holds(again, 20)


@pytest.mark.parametrize("backend", ["odirect", "flashlog"])
@pytest.mark.parametrize("failing", [1, 2, 3])
def test_a_failed_directory_sync_then_a_reopen_without_a_restart_loses_no_insert(
        backend: str, failing: int, tmp_path: Path) -> None:
    """The ``failing``-th directory sync of a snapshot fails: its entries (the new snapshot,
    the new journal, the files it removes) are not durable, though they read back. The
    process is killed and the index reopened without a restart; the inserts acknowledged
    after that, and those before, must survive the power cut that ends it. (Two defences
    hold here: a failed journal switch removes its new journal, and roll-forward registers
    stored segments that no journal names; the test fails only if both are gone.)"""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = open_through(io, path, backend, **CONFIG)
    for i in range(5):
        insert(index, i)
    index.snapshot()  # so that the next one removes the files of the first
    real_dir_sync, calls = io.fsync_dir, [0]

    def counted(directory):
        calls[0] += 1
        if calls[0] == failing:
            io.fail_dir_syncs(1)
        real_dir_sync(directory)

    io.fsync_dir = counted  # type: ignore[method-assign]
    with pytest.raises(SyncFailedError, match="directory"):
        index.snapshot()
    io.fsync_dir = real_dir_sync  # type: ignore[method-assign]
    killed(index)
    index = open_through(io, path, backend)
    for i in range(5, 10):
        insert(index, i)
    io.crash("drop")
    with sarp.open(path, backend=backend, direct_io=False) as again:
        assert_holds(again, 10)


def test_a_journal_rewrite_whose_directory_sync_failed_is_made_durable_by_the_next_open(
        tmp_path: Path) -> None:
    """Recovery rewrites a journal whose last record names a segment the store lost; the
    directory sync after that rename fails, and the open with it. The next open, without a
    restart, reads the rewritten journal and appends to it: it must first make the rename
    durable, or the power cut that follows brings the old journal back and, with it, drops
    the records of the inserts it acknowledged."""
    path = tmp_path / "i"
    first = np.arange(1, 21, dtype=np.uint64) * 7919
    index = sarp.open(path, backend="odirect", direct_io=False, durability="group",
                      snapshot_on_close=False, **CONFIG)
    index.insert(block_ids=first)
    index.flush()
    lost = index.segments.next_id
    index.insert(block_ids=np.array([10**9 + 1, 10**9 + 2], dtype=np.uint64))
    index._journal._write_pending()  # its record reaches the file; its segment will not
    killed(index)
    with open_store("odirect", path / "store", direct_io=False, dense_keys=True) as store:
        store.delete(lost)

    io = PowerLossIO(0)
    real_dir_sync = io.fsync_dir

    def failing(directory):
        if Path(directory) == path:  # the rewrite's rename, published in the index directory
            io.fail_dir_syncs(1)
        real_dir_sync(directory)

    io.fsync_dir = failing  # type: ignore[method-assign]
    with pytest.raises(SyncFailedError, match="directory"):
        open_through(io, path, "odirect", durability="sync")
    io.fsync_dir = real_dir_sync  # type: ignore[method-assign]
    index = open_through(io, path, "odirect", durability="sync")
    index.segments.allocate()  # another request's id, never stored: roll-forward stops there
    later = np.array([5 * 10**9 + 1, 5 * 10**9 + 2, 5 * 10**9 + 3], dtype=np.uint64)
    index.insert(block_ids=later)  # acknowledged: durable in sync mode
    io.crash("drop")
    with sarp.open(path, backend="odirect", direct_io=False) as again:
        assert again.match(block_ids=later).num_blocks == 3
        assert again.match(block_ids=first).num_blocks == 20


def test_the_closing_snapshot_covers_an_insert_whose_journal_sync_failed(
        tmp_path: Path) -> None:
    """A snapshot, then an insert whose journal sync fails: the insert placed its segments,
    so close() takes the closing snapshot, which holds them, and succeeds (docs/durability.md,
    "Failed writes"). After a power cut the failed insert is there."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", durability="sync", direct_io=False,
                      store_options={"io": io}, _io=io, **CONFIG)
    for i in range(5):
        insert(index, i)
    index.snapshot()
    with _journal_sync_fails(io, index), pytest.raises(
            OSError, match="simulated failed sync of journal-0+1.log"):
        insert(index, 5)
    with pytest.raises(WritesStoppedError, match="simulated failed sync of journal-0+1.log"):
        insert(index, 6)
    index.close()
    assert len(snapshot_files(path)) == 2
    io.crash("drop")
    with sarp.open(path) as again:
        assert again.recovery["snapshot"] == snapshot_files(path)[-1].name
        assert_holds(again, 6)


def snapshot_files(path: Path) -> list[Path]:
    return sorted(path.glob("snapshot-*.snap"))
