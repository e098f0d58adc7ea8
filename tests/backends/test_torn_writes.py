"""Power loss and corruption for flashlog and odirect, through the simulated I/O layer.

After a simulated power cut (every unsynced write dropped, or the newest one torn at a 512-byte
boundary) each key must read as its last durable value or a later one, never a mix; a flipped
byte is caught by a checksum; sync, group and none issue the syncs they promise.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from typing import Any

import pytest

from sarp._core.slot_versions import LIVE, write_version
from sarp.errors import CorruptionError, SyncFailedError, WritesStoppedError
from storage_backends import RecordStore, open_store, salvage
from storage_backends.io import FileIO
from storage_backends.power_loss import PowerLossIO
from storage_backends.superblock import read_superblock, write_superblock

from ..kernels.reference import slot_copy_offset

KINDS = ("flashlog", "odirect")
BUDGET = 1 << 20


def _open(kind: str, path: Path, durability: str = "group", **options: Any) -> RecordStore:
    options.setdefault("memory_budget", BUDGET)
    if kind == "flashlog":
        options.setdefault("instances", 4)
    return open_store(kind, path, durability=durability, **options)


def _value(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice((0, 40, 700, 1576, 3000)))


@pytest.mark.parametrize("kind, options", [("flashlog", {}), ("odirect", {}),
                                           ("odirect", {"key_mode": "dense"})])
@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("mode", ["drop", "tear", "reorder"])
@pytest.mark.parametrize("seed", range(3))
def test_power_loss_keeps_every_durable_value(kind: str, options: dict[str, Any],
                                              durability: str, mode: str, seed: int,
                                              tmp_path: Path) -> None:
    """Batches of new keys are written in runs (odirect, sparse and dense keys): a torn run
    leaves each of its keys old or new too."""
    power_loss_session(kind, options, durability, mode, seed, tmp_path)


@pytest.mark.parametrize("kind, options", [("flashlog", {}), ("odirect", {}),
                                           ("odirect", {"key_mode": "dense"})])
@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("mode", ["tear", "reorder"])
@pytest.mark.parametrize("sectors", [512, 4096])
@pytest.mark.parametrize("seed", range(3))
def test_power_loss_tearing_any_sectors_keeps_every_durable_value(
        kind: str, options: dict[str, Any], durability: str, mode: str, sectors: int, seed: int,
        tmp_path: Path) -> None:
    """The sessions above, the newest write torn in any subset of its sectors (a later one
    kept without an earlier one)."""
    power_loss_session(kind, options, durability, mode, seed, tmp_path, sectors)


@pytest.mark.slow
@pytest.mark.parametrize("kind, options", [("flashlog", {}), ("odirect", {}),
                                           ("odirect", {"key_mode": "dense"})])
@pytest.mark.parametrize("mode", ["tear", "reorder"])
@pytest.mark.parametrize("sectors", [512, 4096])
@pytest.mark.parametrize("seed", range(3, 60))
def test_power_loss_tearing_any_sectors_over_many_seeds(
        kind: str, options: dict[str, Any], mode: str, sectors: int, seed: int,
        tmp_path: Path) -> None:
    for durability in ("sync", "group"):
        power_loss_session(kind, options, durability, mode, seed, tmp_path / durability, sectors)


def power_loss_session(kind: str, options: dict[str, Any], durability: str, mode: str,
                       seed: int, tmp_path: Path, sectors: int | None = None) -> None:
    """Random puts and deletes of keys below 200, flushed now and then, a power cut of
    ``mode`` (tearing whole sectors in any subset with ``sectors``, ``PowerLossIO``), then a
    reopen: each key reads as its last durable value or a later one."""
    rng = random.Random(seed)
    io = PowerLossIO(seed, sectors)
    s = _open(kind, tmp_path / "s", durability, io=io, **options)
    history: dict[int, list[bytes | None]] = {}
    durable: dict[int, int] = {}  # key -> index in its history of the last durable version

    def acknowledge() -> None:
        durable.update({k: len(h) - 1 for k, h in history.items()})

    for step in range(60):
        if rng.random() < 0.15 and history:
            k = rng.choice(list(history))
            s.delete(k)
            history[k].append(None)
        else:
            batch = {rng.randrange(200): _value(rng) for _ in range(rng.randrange(1, 12))}
            s.put_many(batch.items())
            for k, v in batch.items():
                history.setdefault(k, [None]).append(v)
        if durability == "sync" or step % 7 == 6:
            if durability == "group":
                s.flush()
            acknowledge()
    io.crash(mode)
    with _open(kind, tmp_path / "s", durability) as s2:
        for k, h in history.items():
            allowed = h[durable.get(k, 0):]
            assert s2.get(k) in allowed, f"key {k}"
        assert all(v in history[k] for k, v in s2.scan())


@pytest.mark.parametrize("key_mode", ["dense", "sparse"])
@pytest.mark.parametrize("seed", range(6))
def test_odirect_rewrites_before_a_sync_keep_the_synced_copy(key_mode: str, seed: int,
                                                             tmp_path: Path) -> None:
    """Two rewrites of a slot between syncs go to the same copy: the copy holding the last
    acknowledged version stays whole, whichever of them the device wrote (crash "reorder")."""
    a, b, c, d = (bytes([ch]) * 2000 for ch in b"abcd")
    io = PowerLossIO(seed)
    s = _open("odirect", tmp_path / "s", io=io, key_mode=key_mode)
    s.put(5, a)
    s.put(5, b)
    s.flush()  # b acknowledged
    s.put(5, c)
    s.put(5, d)
    io.crash("reorder")
    with _open("odirect", tmp_path / "s") as s2:
        assert s2.get(5) in (b, c, d)


@pytest.mark.parametrize("key_mode", ["dense", "sparse"])
@pytest.mark.parametrize("seed", range(4))
def test_odirect_a_batch_naming_a_key_twice_keeps_the_synced_copy(key_mode: str, seed: int,
                                                                   tmp_path: Path) -> None:
    a, b, c, d = (bytes([ch]) * 2000 for ch in b"abcd")
    io = PowerLossIO(seed)
    s = _open("odirect", tmp_path / "s", "sync", io=io, key_mode=key_mode)
    s.put(5, a)
    s.put(5, b)  # acknowledged
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        s.put_many([(5, c), (5, d)])
    io.crash("reorder")
    with _open("odirect", tmp_path / "s") as s2:
        assert s2.get(5) in (b, c, d)


def _key_in_two_slots(io: PowerLossIO, path: Path) -> tuple[bytes, bytes]:
    """A delete, its slot taken by another key, the key put again into a new slot, then a
    crash (``reorder``) that may keep only the last write: key 100 in two slots. Returns
    its two values, the older and the newer."""
    s = _open("odirect", path, io=io)
    v1, v2 = b"1" * 1000, b"2" * 1000
    s.put(100, v1)
    s.flush()
    s.delete(100)
    s.put(200, b"x")  # takes the slot the delete freed
    s.put(100, v2)  # a new slot
    io.crash("reorder")  # undoes the delete and the put of 200; keeps v2 whole, or cut
    return v1, v2


@pytest.mark.parametrize("seed", range(8))
def test_odirect_a_key_left_in_two_slots_by_a_crash_keeps_its_newest(seed: int,
                                                                     tmp_path: Path) -> None:
    """A delete, its slot taken by another key, the key put again into a new slot, and a crash
    that keeps only the last write: the key is in two slots. The newer version is the key's and
    the older is cleared, so a later acknowledged delete is not undone by a reopen."""
    v1, v2 = _key_in_two_slots(PowerLossIO(seed), tmp_path / "s")
    # the cut falls at a 512-byte step: v2's value whole means its version is (checksum too)
    kept = v2 in (tmp_path / "s" / "slots.dat").read_bytes()
    with _open("odirect", tmp_path / "s") as s2:
        assert s2.get(100) == (v2 if kept else v1)
        keys = [k for k, _ in s2.scan()]
        assert len(keys) == len(set(keys))
        s2.delete(100)
        s2.put(300, b"y")
    with _open("odirect", tmp_path / "s") as s3:
        assert s3.get(100) is None
        assert [k for k, _ in s3.scan()] == sorted({200, 300} & {k for k, _ in s3.scan()})
        assert s3.get(300) == b"y"


class _CutAtSlotsSync(PowerLossIO):
    """Tears the newest write, in any subset of its 512-byte sectors, at sync ``at`` of
    slots.dat: the power fails while the device writes it."""

    def __init__(self, seed: int, at: int) -> None:
        super().__init__(seed, sectors=512)
        self.left = at

    def _sync(self, f: Any, data_only: bool) -> None:
        if f.path.name == "slots.dat":
            self.left -= 1
            if not self.left:
                self.crash("tear")
                raise OSError(errno.EIO, "power cut (simulated)")
        super()._sync(f, data_only)


@pytest.mark.parametrize("seed", range(12))
def test_odirect_a_torn_clearing_of_a_superseded_version_is_not_damage(seed: int,
                                                                       tmp_path: Path) -> None:
    """A key left in two slots by a crash: the open clears the older slot's copies, copy 0
    then (after a sync) copy 1, which holds the older version (synced, numbered below the
    synced point the newer records). A power cut while it clears copy 1 may keep any of
    that write's sectors. Had the clearing zeroed the whole copy, a kept zeroed sector
    without the header's would leave the header of a synced version over zeroed data, and
    every later open raised CorruptionError. Clearing the magic alone, in a write that
    rewrites the rest of its block as it was, leaves the copy whole or empty: the next open
    clears it again and serves the newer version."""
    path = tmp_path / "s"
    _, v2 = _key_in_two_slots(PowerLossIO(0), path)  # seed 0 keeps v2 whole
    assert v2 in (path / "slots.dat").read_bytes()
    with pytest.raises(OSError, match="power cut"):
        _open("odirect", path, io=_CutAtSlotsSync(seed, at=2))
    with _open("odirect", path) as s2:
        assert s2.get(100) == v2
        assert [k for k, _ in s2.scan()] == [100]


def _only_offset(directory: Path, needle: bytes) -> tuple[Path, int]:
    hits = [(p, p.read_bytes().find(needle)) for p in sorted(directory.iterdir()) if p.is_file()]
    hits = [(p, i) for p, i in hits if i >= 0]
    assert len(hits) == 1, hits
    return hits[0]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind, options", [("flashlog", {}), ("odirect", {"dense_keys": True}),
                                           ("odirect", {})])
def test_flipped_byte_is_detected(kind: str, options: dict[str, Any], tmp_path: Path) -> None:
    """The flipped record's read raises and its neighbours read whole; odirect with sparse
    keys reads every slot at open, which raises there (docs/odirect_format.txt)."""
    rng = random.Random(5)
    values = {k: rng.randbytes(1500) for k in range(400)}
    path = tmp_path / "s"
    with _open(kind, path, **options) as s:
        s.put_many(values.items())
    with _open(kind, path):
        pass  # flashlog: reopening moves everything into synced pages
    f, off = _only_offset(path, values[123][700:760])
    _flip(f, off + 10)
    if kind == "odirect" and not options:
        with pytest.raises(CorruptionError, match="slot 123: no version passes its checks"):
            _open(kind, path)
        return
    with _open(kind, path) as s:
        with pytest.raises(CorruptionError):
            s.get(123)
        assert s.get(124) == values[124]


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("damage", ["flip", "zero"])
@pytest.mark.parametrize("versions", [1, 2])
def test_odirect_a_damaged_newest_version_is_corruption_not_the_older_one(
        tmp_path: Path, dense: bool, damage: str, versions: int) -> None:
    """docs/odirect_format.txt: the newest-copy bits of a clean close name each slot's newest
    version; if it fails its checks, or reads as empty (also where it is the slot's only
    version, so that both copies read as empty), the device lost it. That is corruption
    (raised by the get in dense mode, by the open that reads every slot in sparse mode),
    never the older version served in its place, nor a slot never written."""
    path = tmp_path / "s"
    old, new = b"o" * 1000 + b"OLD", b"n" * 1000 + b"NEW"
    with _open("odirect", path, dense_keys=dense) as s:
        if versions == 2:
            s.put_many([(7, old), (8, old)])
            s.flush()  # a rewrite before a sync would take the same copy again
        s.put_many([(7, new), (8, new)])
    f, off = _only_offset(path, b"n" * 100 + b"NEW")  # key 7's newest version
    if damage == "flip":
        _flip(f, off)
    else:
        with open(f, "r+b") as fh:
            fh.seek(off - off % 4096)
            fh.write(bytes(4096))  # the slot's whole copy (a version is one 4 KiB block)
    copy = 0 if versions == 2 else 1  # a slot's first version goes to copy 1
    match = f"slot {7 if dense else 0}: " + (
        f"its newest version \\(copy {copy}\\) reads as empty" if damage == "zero" else
        f"its newest version \\(copy {copy}\\) fails its checks" if versions == 2 else
        "no version passes its checks")
    if not dense:
        with pytest.raises(CorruptionError, match=match):
            _open("odirect", path)
        return
    with _open("odirect", path, dense_keys=True) as s:
        with pytest.raises(CorruptionError, match=match):
            s.get(7)
        assert s.get(8) == new
        assert s.get(9) is None  # never written


def test_odirect_newest_copy_bits_of_an_earlier_format_are_not_trusted(tmp_path: Path) -> None:
    """COPIES of magic SARPODC2 (earlier builds) may name copy 1 for a slot an unclean open
    cleared: the open reads every slot instead, as without COPIES. Here such bits name the
    older copy of key 7, which a trusted COPIES would serve."""
    path = tmp_path / "s"
    with _open("odirect", path, dense_keys=True) as s:
        s.put(7, b"old")
        s.flush()
        s.put(7, b"new")  # copy 0; its bit is 0
    payload = bytearray(read_superblock(FileIO(), path / "COPIES", b"SARPODC3"))
    payload[24] |= 1 << 7  # the bits follow three u64; slot 7's names copy 1 now
    write_superblock(FileIO(), path / "COPIES", b"SARPODC2", bytes(payload))
    with _open("odirect", path, dense_keys=True) as s:
        assert s.get(7) == b"new"
    write_superblock(FileIO(), path / "COPIES", b"SARPODC3", bytes(payload))
    with _open("odirect", path, dense_keys=True) as s:  # this build's magic: trusted
        assert s.get(7) == b"old"


@pytest.mark.parametrize("block, fault", [(0, "bad WAL header"),
                                          (3, "block 3 is damaged inside the log")])
def test_flashlog_damaged_wal_block_is_corruption(tmp_path: Path, block: int,
                                                  fault: str) -> None:
    """A damaged WAL header, or a damaged block that intact ones follow, is corruption (only a
    torn tail, with nothing intact after it, is dropped as an unacknowledged write)."""
    path = tmp_path / "s"
    with _open("flashlog", path, memory_budget=64 << 20) as s:  # big pages: all stays in the WAL
        for k in range(30):
            s.put(k, bytes([k]) * 3000)
            s.flush()
    wal = next(p for p in path.iterdir() if p.name.startswith("wal."))
    _flip(wal, block * 4096 + 100)
    with pytest.raises(CorruptionError, match=f"{wal.name}: {fault}"):
        _open("flashlog", path)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("durability", ["sync", "group", "none"])
def test_syncs_follow_the_durability_mode(kind: str, durability: str, tmp_path: Path) -> None:
    io = FileIO()
    with _open(kind, tmp_path / "s", durability, io=io) as s:
        start = io.syncs
        for k in range(5):
            s.put(k, b"v" * 100)
            if durability == "sync":
                assert io.syncs >= start + k + 1
        s.delete(1)
        after_puts = io.syncs
        s.flush()
        after_flush = io.syncs
    if durability == "sync":
        assert after_puts - start >= 6
    elif durability == "group":
        assert after_puts == start
        assert after_flush > after_puts
    else:
        assert after_flush == start


@pytest.mark.parametrize("dense", [False, True])
def test_odirect_slot_damaged_after_a_clean_close_is_corruption(tmp_path: Path,
                                                                dense: bool) -> None:
    """docs/odirect_format.txt: after a clean close a slot whose only version fails its checks
    is corruption, raised by the open that reads every slot (sparse mode) or, in dense mode
    with the newest-copy bits saved by that close, by the get of that key."""
    path = tmp_path / "s"
    values = {k: bytes([k]) * 1000 + b"end" for k in range(8)}
    with _open("odirect", path, dense_keys=dense) as s:
        s.put_many(values.items())
    f, off = _only_offset(path, values[5])
    _flip(f, off + 500)
    if not dense:
        with pytest.raises(CorruptionError, match="no version passes its checks"):
            _open("odirect", path)
        return
    with _open("odirect", path, dense_keys=True) as s:
        with pytest.raises(CorruptionError, match="no version passes its checks"):
            s.get(5)
        assert s.get_many([4, 6]) == [values[4], values[6]]


@pytest.mark.parametrize("dense", [False, True])
def test_odirect_both_copies_damaged_is_corruption_also_after_a_crash(tmp_path: Path,
                                                                      dense: bool) -> None:
    """A crash tears at most one copy of a slot, so an unclean open that finds both copies
    failing their checks raises CorruptionError instead of zeroing the slot as a torn write
    (docs/odirect_format.txt)."""
    io = PowerLossIO(0)
    path = tmp_path / "s"
    old, new = b"o" * 1000 + b"OLD", b"n" * 1000 + b"NEW"
    s = _open("odirect", path, io=io, dense_keys=dense)
    s.put_many([(5, old), (6, b"kept")])
    s.flush()
    s.put(5, new)
    s.flush()
    io.crash("drop")  # nothing unsynced: the store is left unclean, its slots whole
    for needle in (b"o" * 100 + b"OLD", b"n" * 100 + b"NEW"):
        f, off = _only_offset(path, needle)
        _flip(f, off)
    with pytest.raises(CorruptionError, match="slot .*: both copies fail their checks"):
        _open("odirect", path)
    salvage(path)
    with _open("odirect", path) as s:
        assert s.get_many([5, 6]) == [None, b"kept"]


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("versions", [1, 2])
def test_odirect_a_synced_version_damaged_after_a_crash_is_corruption_not_a_torn_write(
        tmp_path: Path, dense: bool, versions: int) -> None:
    """After a crash a copy failing its checks passes for a torn write, unless it was its
    slot's newest version and a version written later records that it had been synced: then
    the open raises CorruptionError (docs/odirect_format.txt) and changes no slot, where it
    served the older version, or cleared a slot's only one, as torn."""
    io = PowerLossIO(0)
    path = tmp_path / "s"
    old, new = b"o" * 1000 + b"OLD", b"n" * 1000 + b"NEW"
    s = _open("odirect", path, io=io, dense_keys=dense)
    if versions == 2:
        s.put(5, old)
        s.flush()
    s.put(5, new)
    s.flush()
    s.put(6, b"later")  # records that the store had synced key 5's newest version
    s.flush()
    io.crash("drop")  # nothing unsynced: the store is left unclean, its slots whole
    f, off = _only_offset(path, b"n" * 100 + b"NEW")
    _flip(f, off)
    slots = f.read_bytes()
    with pytest.raises(CorruptionError, match="slot .*: its newest version .* fails its checks, "
                                              "though every version below .* had been synced"):
        _open("odirect", path, dense_keys=dense)
    assert f.read_bytes() == slots
    salvage(path)  # clears the damaged copy: the slot serves its older version, if any
    with _open("odirect", path, dense_keys=dense) as s:
        assert s.get_many([5, 6]) == [old if versions == 2 else None, b"later"]


@pytest.mark.parametrize("dense", [False, True])
def test_odirect_a_torn_rewrite_is_cleared_so_no_later_crash_takes_it_for_damage(
        tmp_path: Path, dense: bool) -> None:
    """A copy a crash tore, beside the slot's valid one, is cleared by the open that finds it:
    versions written later record syncs past its sequence number, and a later open after a
    crash would otherwise take it for a synced version damaged."""
    io = PowerLossIO(0)
    path = tmp_path / "s"
    s = _open("odirect", path, io=io, dense_keys=dense)
    s.put(5, b"o" * 1000 + b"OLD")
    s.flush()
    io.crash("drop")
    # the rewrite the crash tore: its first 512 bytes reached the device (header and all),
    # in copy 0 of slot 0 (sparse: key 5's slot) or 5, the copy the rewrite goes to
    torn = bytearray(4096)
    write_version(torn, 0, 4096, 5 if dense else 0, LIVE, 5, 2, 2, b"n" * 1000 + b"NEW")
    torn[512:] = bytes(4096 - 512)
    with open(path / "slots.dat", "r+b") as fh:
        fh.seek(slot_copy_offset(5 if dense else 0, 0, 64, 4096))
        fh.write(torn)
    io = PowerLossIO(1)
    s = _open("odirect", path, io=io, dense_keys=dense)
    assert s.get(5) == b"o" * 1000 + b"OLD"
    s.put(6, b"later")  # each records a sync past the torn version's sequence number
    s.flush()
    s.put(7, b"later still")
    s.flush()
    io.crash("drop")
    with _open("odirect", path, dense_keys=dense) as s:
        assert s.get_many([5, 6, 7]) == [b"o" * 1000 + b"OLD", b"later", b"later still"]


class SlotCalls(FileIO):
    """File I/O that records its writes (w) and syncs (s) of slots.dat, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def _pwrite(self, f, buf, offset):
        if f.path.name == "slots.dat":
            self.calls.append("w")
        super()._pwrite(f, buf, offset)

    def _sync(self, f, data_only):
        if f.path.name == "slots.dat":
            self.calls.append("s")
        super()._sync(f, data_only)


def test_odirect_clearing_after_a_crash_syncs_between_the_two_copies(tmp_path: Path) -> None:
    """The open after a crash zeroes torn first writes one copy at a time with a sync between,
    so that no later crash leaves a slot with two damaged copies."""
    io = PowerLossIO(0)
    s = _open("odirect", tmp_path / "s", io=io)
    s.put_many([(1, b"durable"), (2, b"t" * 1000 + b"TORN")])
    s.flush()
    io.crash("drop")  # unclean: the next open checks every slot
    f, off = _only_offset(tmp_path / "s", b"t" * 100 + b"TORN")
    _flip(f, off)  # key 2's only copy, as a torn first write leaves it
    watch = SlotCalls()
    s2 = _open("odirect", tmp_path / "s", io=watch)
    zeroing = "".join(watch.calls)
    with s2:
        assert s2.get_many([1, 2]) == [b"durable", None]
    # the first copy's zero write, a sync, the second copy's, a sync
    assert zeroing == "wsws", zeroing


def test_odirect_an_open_after_a_crash_syncs_what_it_found(tmp_path: Path) -> None:
    """An open after a crash that clears nothing still syncs slots.dat, once and before any
    write: the versions written next record every version it found as synced (the synced
    lag), so what it found must be durable first."""
    io = PowerLossIO(0)
    s = _open("odirect", tmp_path / "s", io=io)
    s.put_many([(1, b"durable"), (2, b"also")])
    s.flush()
    io.crash("drop")  # unclean, and nothing torn to clear
    watch = SlotCalls()
    with _open("odirect", tmp_path / "s", io=watch) as s2:
        assert "".join(watch.calls) == "s"
        assert s2.get_many([1, 2]) == [b"durable", b"also"]


@pytest.mark.parametrize("seed", range(4))
def test_odirect_torn_run_keeps_a_prefix_of_its_new_keys(tmp_path: Path, seed: int) -> None:
    """A batch of new keys is one write of side-by-side versions; a power cut that tears it
    leaves the keys whose versions the cut spared, each whole, and none of the others."""
    io = PowerLossIO(seed)
    s = _open("odirect", tmp_path / "s", io=io)
    s.put(1, b"durable")
    s.flush()
    keys = [(i + 2) << 40 for i in range(8)]
    writes = io.stats()["writes"]
    s.put_many([(k, bytes([i]) * 3000) for i, k in enumerate(keys)])
    assert io.stats()["writes"] - writes == 1
    io.crash("tear")
    with _open("odirect", tmp_path / "s") as s2:
        assert s2.get(1) == b"durable"
        got = s2.get_many(keys)
        present = [v is not None for v in got]
        assert present == sorted(present, reverse=True)  # a prefix of the run
        assert all(v in (None, bytes([i]) * 3000) for i, v in enumerate(got))


@pytest.mark.parametrize("key_mode", ["dense", "sparse"])
@pytest.mark.parametrize("seed", range(6))
def test_odirect_a_run_torn_in_any_sectors_keeps_each_key_whole_or_none(
        key_mode: str, seed: int, tmp_path: Path) -> None:
    """As above, the run torn in any subset of its 512-byte sectors: a version whose header
    sector was lost and a later one kept, or the reverse, fails its checks. Each key reads as
    its whole value or as missing, in any pattern, never as a mix."""
    io = PowerLossIO(seed, sectors=512)
    s = _open("odirect", tmp_path / "s", io=io, key_mode=key_mode)
    s.put(1, b"durable")
    s.flush()
    keys = [2 + i for i in range(8)] if key_mode == "dense" else [(i + 2) << 40 for i in range(8)]
    s.put_many([(k, bytes([i]) * 3000) for i, k in enumerate(keys)])
    io.crash("tear")
    with _open("odirect", tmp_path / "s", key_mode=key_mode) as s2:
        assert s2.get(1) == b"durable"
        got = s2.get_many(keys)
        assert all(v in (None, bytes([i]) * 3000) for i, v in enumerate(got))
        kept = {k: v for k, v in zip(keys, got, strict=True) if v}
        assert dict(s2.scan()) == {1: b"durable", **kept}


def _open_files_under(directory: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(Path(target).name)
    return sorted(out)


@pytest.mark.parametrize("kind", KINDS)
def test_an_open_that_finds_damage_leaves_no_file_open(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(kind, path, "sync") as s:
        for k in range(200):
            s.put(k, bytes([k]) * 3000)
    data = path / ("log.1" if kind == "flashlog" else "slots.dat")
    raw = bytearray(data.read_bytes())
    raw[100 if kind == "flashlog" else raw.find(bytes([7]) * 3000) + 10] ^= 1
    data.write_bytes(bytes(raw))
    for _ in range(3):
        with pytest.raises(CorruptionError):
            _open(kind, path)
    assert _open_files_under(path) == []


@pytest.mark.parametrize("key_mode", ["dense", "sparse"])
def test_odirect_a_failed_write_over_an_unsynced_version_stops_writes(key_mode: str,
                                                                     tmp_path: Path) -> None:
    """A slot written again before a sync takes the same copy, so a write that fails part-way
    (a device error) may tear the version it replaces, one not yet synced. That version is
    lost, as in a crash: the write raises SyncFailedError, writes stop, reads serve the
    slot's last synced version, and a reopen recovers the store."""

    class FailingWrite(FileIO):
        fail_next = False

        def _pwrite(self, f, buf, offset):
            if self.fail_next and f.path.name == "slots.dat":
                self.fail_next = False
                super()._pwrite(f, memoryview(buf)[:512], offset)  # part of it is written
                raise OSError(errno.EIO, "Input/output error")
            super()._pwrite(f, buf, offset)

    a, b, c = (bytes([ch]) * 2000 for ch in b"abc")
    io = FailingWrite()
    s = _open("odirect", tmp_path / "s", io=io, key_mode=key_mode)
    s.put(5, a)
    s.put(6, a)
    s.flush()
    s.put(5, b)  # not synced yet
    io.fail_next = True
    with pytest.raises(SyncFailedError, match="a write over versions not yet synced failed"):
        s.put(5, c)
    with pytest.raises(WritesStoppedError):
        s.flush()
    assert s.get(5) == a and s.get(6) == a
    s.close()
    with _open("odirect", tmp_path / "s", key_mode=key_mode) as s2:
        assert s2.get(5) == a and s2.get(6) == a
        s2.put(5, c)
        assert s2.get(5) == c


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("cut", ["extent", "all", "missing"])
def test_odirect_slot_file_cut_after_a_clean_close_is_corruption(tmp_path: Path, dense: bool,
                                                                 cut: str) -> None:
    """COPIES records the slot file's length at a clean close; the store never shortens it,
    so a shorter (or missing) file at the next open is corruption, not missing records."""
    path = tmp_path / "s"
    with _open("odirect", path, dense_keys=dense) as s:
        s.put_many([(k, bytes([k % 251]) * 2000) for k in range(3 * 64)])  # three extents
    data = path / "slots.dat"
    if cut == "missing":
        data.unlink()
    else:
        size = data.stat().st_size
        os.truncate(data, 0 if cut == "all" else size - 64 * 2 * 4096)
    with pytest.raises(CorruptionError, match="slots.dat"):
        _open("odirect", path)
