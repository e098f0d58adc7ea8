"""odirect's checkpoints and write-intent list (dense keys, docs/odirect_format.txt, DIRTY).

A region's first write since the last checkpoint names it in DIRTY first; a write that leaves
enough regions named syncs, saves the newest-copy bits (COPIES) and names none; an open after a
crash scans only the regions DIRTY names over the checkpoint's bits, and every slot without a
usable checkpoint. Regions are one extent here, so that small stores span several.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sarp.errors import CorruptionError, WritesStoppedError
from storage_backends import odirect, odirect_files, salvage
from storage_backends.io import FileIO
from storage_backends.odirect import EXTENT_SLOTS, ODirectStore
from storage_backends.power_loss import PowerLossIO
from storage_backends.superblock import read_superblock, write_superblock

from .test_torn_writes import SlotCalls, _flip, _only_offset, _open, power_loss_session

K = EXTENT_SLOTS  # slots per region here
VERSION = 4096  # the version size of these stores (values up to 4060 bytes)
REGION_BYTES = 2 * K * VERSION


@pytest.fixture(autouse=True)
def small_regions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regions of one extent; a checkpoint once four regions are named."""
    monkeypatch.setattr(odirect, "SCAN_BYTES", REGION_BYTES)
    monkeypatch.setattr(odirect, "CHECKPOINT_REGIONS", 4)


def _dense(path: Path, io: FileIO | None = None) -> ODirectStore:
    store = _open("odirect", path, io=io, key_mode="dense")
    assert isinstance(store, ODirectStore)
    return store


def _named(path: Path) -> tuple[int, list[int]]:
    """(checkpoint sequence number, regions) of DIRTY."""
    dirty = odirect_files.read_dirty(FileIO(), path / "DIRTY")
    assert dirty is not None
    return dirty[0], sorted(dirty[2])


class Calls(SlotCalls):
    """SlotCalls that also records each file published: D (DIRTY), C (COPIES), H (HEADER)."""

    def publish(self, path: str | Path, data: bytes) -> None:
        self.calls.append(Path(path).name[0])
        super().publish(path, data)


class SlotReads(FileIO):
    """File I/O that counts the bytes read from slots.dat."""

    def __init__(self) -> None:
        super().__init__()
        self.slot_bytes = 0

    def _pread(self, f: Any, buf: Any, offset: int) -> int:
        n = super()._pread(f, buf, offset)
        if f.path.name == "slots.dat":
            self.slot_bytes += n
        return n


def test_a_region_is_named_before_its_first_write_and_a_sync_checkpoints(
        tmp_path: Path) -> None:
    path = tmp_path / "s"
    watch = Calls()
    s = _dense(path, watch)
    assert watch.calls[-2:] == ["D", "H"]  # a new store names no region before any write
    assert _named(path)[1] == []
    del watch.calls[:]
    s.put(0, b"a")  # region 0: named, then written
    s.put(1, b"b")  # named already
    s.put(K, b"c")  # region 1
    assert "".join(watch.calls) == "DwwDw"
    assert _named(path)[1] == [0, 1]
    del watch.calls[:]
    s.flush()  # two regions named: a sync, no checkpoint
    s.put(2 * K, b"d")
    s.put(3 * K, b"e")  # four: the write syncs and checkpoints (COPIES, then DIRTY)
    s.flush()
    assert "".join(watch.calls) == "sDwDwsCDs"
    seq, regions = _named(path)
    assert regions == [] and s.stats()["checkpoints"] == 1 and s.stats()["dirty_regions"] == 0
    copies = odirect_files.read_copies(FileIO(), path / "COPIES")
    assert copies is not None and copies.seq == seq  # the checkpoint DIRTY pairs with
    s.close()


@pytest.mark.parametrize("scan_bytes", [REGION_BYTES, 1])  # a region per read; slot by slot
def test_an_open_after_a_crash_scans_only_the_regions_named_since_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scan_bytes: int) -> None:
    """Eight regions written and checkpointed; then a rewrite in region 3 and new keys in
    region 9, synced, and an unsynced rewrite in region 5 the crash drops. The open reads
    those three regions, no other, and serves every synced version."""
    monkeypatch.setattr(odirect, "SCAN_BYTES", scan_bytes)  # regions of one extent either way
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    expect = {k: b"first %d" % k for k in range(8 * K)}
    s.put_many(expect.items())
    s.flush()
    assert _named(path)[1] == []
    later = {3 * K + 5: b"rewritten", 9 * K: b"new", 9 * K + 1: b"new too"}
    s.put_many(later.items())
    s.flush()
    expect.update(later)
    s.put(5 * K + 7, b"dropped")  # never synced
    assert _named(path)[1] == [3, 5, 9]
    io.crash("drop")
    reads = SlotReads()
    with _dense(path, reads) as s2:
        # regions 3 and 5 whole, and region 9 up to the file's end: copy 1 of slot 9K + 1
        assert reads.slot_bytes == 2 * REGION_BYTES + (K + 2) * VERSION
        assert s2.get_many(list(expect)) == list(expect.values())  # key 5K + 7 as synced
        assert _named(path)[1] == []  # the open checkpointed what it found


def test_an_open_after_a_crash_lists_the_scanned_slots_holding_no_record(
        tmp_path: Path) -> None:
    """``absent_after_crash``: the slots of the regions scanned after a crash that hold no
    record, a dropped first write's included. DIRTY keeps naming the regions with such a
    slot below the highest one holding a record (region 0 here, not region 2, where the
    empty slots are the file's tail), so that an abandoned open leaves them to the next open
    to list again; a clean close, after which an open scans nothing, ends that."""
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    s.put_many([(0, b"a"), (2, b"c"), (K + 1, b"d"), (2 * K, b"e")])
    s.flush()
    s.put(3, b"never synced")
    io.crash("drop")
    tail = list(range(2 * K + 1, 3 * K))
    absent = [1, *range(3, K), K, *range(K + 2, 2 * K), *tail]
    s2 = _dense(path)
    assert s2.absent_after_crash().tolist() == absent
    assert _named(path)[1] == [0, 1]
    s2.abandon()
    with _dense(path) as s3:  # the checkpoint of s2's open, and DIRTY's regions 0 and 1
        assert s3.absent_after_crash().tolist() == absent[:-len(tail)]
        assert s3.get_many([0, 1, 2, 3]) == [b"a", None, b"c", None]
    with _dense(path) as s4:  # after a clean close
        assert s4.absent_after_crash().tolist() == []
        assert _named(path)[1] == []


def test_an_open_after_a_crash_in_sparse_mode_lists_no_absent_slot(tmp_path: Path) -> None:
    """Sparse keys are not slot numbers: a free slot names no key, so none is listed."""
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _open("odirect", path, io=io, key_mode="sparse")
    s.put_many([(1 << 40, b"a"), (2 << 40, b"b")])
    s.flush()
    io.crash("drop")
    with _open("odirect", path, key_mode="sparse") as s2:
        assert s2.absent_after_crash().tolist() == []
        assert s2.get_many([1 << 40, 2 << 40]) == [b"a", b"b"]


@pytest.mark.parametrize("dirty", ["missing", "damaged", "of another checkpoint"])
def test_without_a_usable_checkpoint_an_open_after_a_crash_scans_every_slot(
        tmp_path: Path, dirty: str) -> None:
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    expect = {k: b"v%d" % k for k in range(0, 6 * K, 3)}
    s.put_many(expect.items())
    s.flush()  # a checkpoint
    s.put(K, b"again")
    s.flush()
    expect[K] = b"again"
    io.crash("drop")
    if dirty == "missing":
        (path / "DIRTY").unlink()
    elif dirty == "damaged":
        _flip(path / "DIRTY", 20)
    else:
        seq, regions = _named(path)
        payload = odirect_files.DIRTY.pack(seq - 1, K, 0)
        write_superblock(FileIO(), path / "DIRTY", odirect_files.DIRTY_MAGIC, payload)
    reads = SlotReads()
    with _dense(path, reads) as s2:
        assert reads.slot_bytes == (path / "slots.dat").stat().st_size  # the whole file
        assert s2.get_many(list(expect)) == list(expect.values())


def test_damage_outside_the_named_regions_is_found_by_the_read_not_served_older(
        tmp_path: Path) -> None:
    """A version synced before the checkpoint lies in a region the open after a crash does
    not read; the checkpoint's bits name its copy, so a get of it raises CorruptionError,
    never the older version. Salvage then serves the older one."""
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    s.put_many([(k, b"filler") for k in range(3 * K)])
    s.put(7, b"o" * 1000 + b"OLD")
    s.flush()
    s.put(7, b"n" * 1000 + b"NEW")
    s.flush()
    s.put(3 * K, b"y")  # four regions: a checkpoint, key 7's newest version in its bits
    s.put(4 * K, b"z")
    s.flush()
    s.put(5 * K, b"after")
    s.flush()
    io.crash("drop")
    f, off = _only_offset(path, b"n" * 100 + b"NEW")
    _flip(f, off)
    with _dense(path) as s2:
        assert s2.get(5 * K) == b"after"
        with pytest.raises(CorruptionError, match="slot 7: its newest version"):
            s2.get(7)
    salvage(path)
    with _dense(path) as s3:
        assert s3.get_many([7, 5 * K]) == [b"o" * 1000 + b"OLD", b"after"]


@pytest.mark.parametrize("damage", ["zeroed sector", "flipped byte"])
@pytest.mark.parametrize("slot, copy", [(3, 1), (5, 0)])
def test_a_newest_copy_lost_since_the_checkpoint_is_corruption_after_a_crash(
        tmp_path: Path, damage: str, slot: int, copy: int) -> None:
    """In a region written since the checkpoint, the copy the checkpoint's bits name for a
    slot that nothing was written into since is damaged: slot 3's only version (copy 1, the
    other copy empty) or slot 5's newest (copy 0; copy 1 holds an older version). The scan
    after a crash cannot take it for a torn write: the open raises CorruptionError, where it
    would serve the older version or none. Salvage then does serve it."""
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    s.put_many([(3, b"only"), (5, b"older")])
    s.flush()
    s.put(5, b"newer")
    s.close()  # a clean close, and the next open checkpoints: slots 3 and 5 in its bits
    s = _dense(path, io)
    s.put(9, b"since")  # region 0 named again: the open after the crash scans it
    s.flush()
    io.crash("drop")
    at = (copy * K + slot) * VERSION  # copy c of slot s of extent 0
    if damage == "zeroed sector":
        with open(path / "slots.dat", "r+b") as fh:
            fh.seek(at)
            fh.write(bytes(512))
    else:
        _flip(path / "slots.dat", at + 30)  # in the value: the copy fails its checks
    what = "reads as empty" if damage == "zeroed sector" else "fails its checks"
    with pytest.raises(CorruptionError, match=rf"slot {slot}: its newest version at the last "
                                              rf"checkpoint \(copy {copy}\) {what}"):
        _dense(path)
    salvage(path)
    with _dense(path) as s2:
        assert s2.get_many([3, 5, 9]) == [None if slot == 3 else b"only",
                                          b"older" if slot == 5 else b"newer", b"since"]


def test_a_slot_first_written_since_the_checkpoint_may_lose_an_unsynced_write(
        tmp_path: Path) -> None:
    """The check leaves torn writes alone: a slot the checkpoint names no copy of, whose
    first write the crash dropped, and a slot rewritten since (its other copy numbered past
    the checkpoint), whose unsynced rewrite the crash tore, both open."""
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    s.put(4, b"kept")
    s.close()
    s = _dense(path, io)
    s.put(4, b"synced since")
    s.flush()
    s.put_many([(4, b"torn" * 300), (6, b"never synced")])
    io.crash("tear")
    with _dense(path) as s2:
        assert s2.get(4) in (b"synced since", b"torn" * 300)
        assert s2.get(6) in (None, b"never synced")


def test_a_slot_file_cut_below_the_checkpoint_is_corruption_after_a_crash(
        tmp_path: Path) -> None:
    path = tmp_path / "s"
    io = PowerLossIO(0)
    s = _dense(path, io)
    s.put_many([(k, b"v") for k in range(0, 4 * K, K)])
    s.flush()  # a checkpoint of a four-extent file
    s.put(1, b"w")
    s.flush()
    io.crash("drop")
    with open(path / "slots.dat", "r+b") as fh:
        fh.truncate(2 * REGION_BYTES)
    with pytest.raises(CorruptionError, match="at the last checkpoint \\(cut short\\)"):
        _dense(path)


def test_a_store_of_the_previous_header_opens_and_is_rewritten(tmp_path: Path) -> None:
    """A store of the builds before DIRTY (HEADER magic SARPODH3) opens; its HEADER is
    rewritten with this build's magic, which those builds refuse."""
    path = tmp_path / "s"
    with _dense(path) as s:
        s.put_many([(k, b"v%d" % k) for k in range(0, 3 * K, 5)])
    payload = read_superblock(FileIO(), path / "HEADER", odirect_files.HEADER_MAGIC)
    write_superblock(FileIO(), path / "HEADER", odirect_files.PREVIOUS_HEADER_MAGIC, payload)
    (path / "DIRTY").unlink()
    with _dense(path) as s:
        assert s.get_many([0, 5, 190]) == [b"v0", b"v5", b"v190"]
        assert (path / "HEADER").read_bytes()[:8] == odirect_files.HEADER_MAGIC
        assert _named(path)[1] == []


def test_sparse_keys_name_no_region(tmp_path: Path) -> None:
    """Sparse mode rebuilds its slot table from every slot at every open: no DIRTY."""
    with _open("odirect", tmp_path / "s", key_mode="sparse") as s:
        s.put_many([(k << 40, b"v") for k in range(1, 4 * K)])
        s.flush()
        assert s.stats()["dirty_regions"] == -1
    assert not (tmp_path / "s" / "DIRTY").exists()


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("mode", ["drop", "tear", "reorder"])
@pytest.mark.parametrize("seed", range(6))
def test_power_loss_across_checkpoints_keeps_every_durable_value(
        durability: str, mode: str, seed: int, tmp_path: Path) -> None:
    """The randomized power cuts of test_torn_writes over four regions, checkpointed as the
    session goes: cuts fall between a region's naming and its write, and inside checkpoints."""
    power_loss_session("odirect", {"key_mode": "dense"}, durability, mode, seed, tmp_path)


class FailSyncOf(PowerLossIO):
    """PowerLossIO whose next sync of a file named ``name`` (DIRTY.tmp, COPIES.tmp), once
    set, fails."""

    def __init__(self) -> None:
        super().__init__(0)
        self.name: str | None = None

    def _sync(self, f: Any, data_only: bool) -> None:
        if f.path.name == self.name:
            self.name = None
            self.fail_syncs(1)
        super()._sync(f, data_only)


@pytest.mark.parametrize("failing", ["DIRTY.tmp", "COPIES.tmp"])
def test_a_failed_sync_of_dirty_or_of_a_checkpoint_stops_writes_and_loses_nothing(
        tmp_path: Path, failing: str) -> None:
    """The put that names a fourth region fails at DIRTY's sync (before its slot is written)
    or at the checkpoint's COPIES (after its slot is synced): it raises, later writes are
    refused, and after a power cut every acknowledged value reads back."""
    path = tmp_path / "s"
    io = FailSyncOf()
    s = _dense(path, io)
    acked = {k: b"v%d" % k for k in (0, K, 2 * K)}
    s.put_many(acked.items())
    s.flush()
    io.name = failing
    with pytest.raises(OSError, match=f"simulated failed sync of {failing}"):
        s.put(3 * K, b"unacknowledged")
    with pytest.raises(WritesStoppedError):
        s.put(1, b"refused")
    s.close()
    io.crash("drop")
    with _dense(path) as s2:
        assert s2.get_many(list(acked)) == list(acked.values())
        assert s2.get(3 * K) in (None, b"unacknowledged")
        assert s2.get(1) is None
        s2.put(1, b"after")
        assert s2.get(1) == b"after"
