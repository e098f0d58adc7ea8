"""Store probes: a snapshot names the newest segment writes, made durable before it was
published, and recovery checks that the store still holds each (sarp.recovery.check_probes).

Damage after a crash to a store's newest writes would otherwise pass for a torn tail and lose
acknowledged inserts without an error (docs/durability.md, "Damage after a crash")."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import sarp
from sarp import snapshot
from sarp._core.segment_codec import decode_segment, encode_segment
from sarp.errors import CorruptionError
from sarp.segments import PROBES, SegmentStore
from storage_backends import odirect_files, open_store
from storage_backends.io import FileIO
from storage_backends.memory import MemoryStore
from storage_backends.power_loss import PowerLossIO

from ..kernels.reference import slot_copy_offset
from .old_formats import snapshot_as_version
from .power import open_through
from .refusal import assert_open_refused
from .workload import CONFIG, assert_holds, check_match, full_blocks, insert

PERSISTENT = ["wiredtiger", "rocksdb", "flashlog", "odirect"]


def probes_of(path: Path) -> list[tuple[int, int]]:
    """The (segment id, block count) rows the newest snapshot at ``path`` names."""
    state = snapshot.load(FileIO(), snapshot.candidates(path)[0][1], False).state
    return [(int(sid), int(n)) for sid, n in state.probes]


def build(path: Path, n: int, backend: str, **options) -> None:
    with sarp.open(path, backend=backend, **CONFIG, **options) as index:
        for i in range(n):
            insert(index, i)


def test_probes_are_the_newest_writes_and_the_highest_id(tmp_path):
    segs = SegmentStore(MemoryStore(tmp_path / "s"), meta_width=8, segment_blocks=64)
    assert segs.probes().shape == (0, 2)
    meta = np.zeros((4, 8), np.uint8)
    made = [segs.encode_new(0, np.arange(k, k + 2, dtype=np.uint64), meta[:2])
            for k in range(12)]
    for pair in made:
        segs.put_all([pair])
    assert segs.probes().tolist() == [[sid, 2] for sid in range(12 - PROBES, 12)]
    for seg, _ in made[1:PROBES + 1]:  # extensions of older segments: the newest writes
        longer = segs.encode_extended(seg, np.arange(2, dtype=np.uint64), meta[:2])
        segs.put_all([longer], extensions=1)
    assert segs.probes().tolist() == [[11, 2]] + [[sid, 4] for sid in range(1, PROBES + 1)]
    segs.note_stored([made[1][0]])  # as recovery found it: newest last, with its count
    assert segs.probes().tolist() == [[11, 2]] + [[sid, 4] for sid in range(2, PROBES + 1)] \
        + [[1, 2]]


@pytest.mark.parametrize("backend", PERSISTENT)
def test_a_snapshot_names_its_newest_writes_and_recovery_reads_them(tmp_path, backend):
    path = tmp_path / "i"
    build(path, 6, backend)
    probes = probes_of(path)
    assert 0 < len(probes) <= PROBES + 1
    with sarp.open(path, backend=backend) as index:
        assert index.recovery["probed_segments"] == len(probes)
        for sid, n in probes:
            seg = index.segments.read(sid)
            assert seg is not None and seg.block_count == n
        assert max(sid for sid, _ in probes) == index.segments.next_id - 1
        assert_holds(index, 6)
    assert probes_of(path) == probes  # carried over a reopen without inserts


@pytest.mark.parametrize("backend", PERSISTENT)
def test_a_newest_write_the_store_lost_is_refused(tmp_path, backend):
    """A probe the store lacks: the open raises CorruptionError naming the segment, the store
    and the remedy, and changes no file; ``sarp rebuild`` then serves what the store holds."""
    path = tmp_path / "i"
    build(path, 6, backend)
    lost = probes_of(path)[-1][0]
    store = open_store(backend, path / "store")
    store.delete(lost)
    store.close()
    assert_open_refused(path, CorruptionError,
                        rf"lacks segments .*: {lost} \(\d+ blocks, none stored\).*sarp rebuild",
                        backend=backend)
    sarp.rebuild(path, backend=backend)
    with sarp.open(path, backend=backend) as index:
        assert all(check_match(index, i) <= full_blocks(i) for i in range(6))


def test_a_newest_write_held_shorter_is_refused(tmp_path):
    """A probe the store holds with fewer blocks than it was written with (an older version
    served in place of a lost newer one) is refused as a lost one is."""
    path = tmp_path / "i"
    build(path, 6, "odirect")
    sid, n = probes_of(path)[-1]
    store = open_store("odirect", path / "store")
    raw = store.get(sid)
    assert raw is not None
    seg = decode_segment(raw)
    store.put(sid, encode_segment(sid, seg.start, seg.block_ids[:n - 1], seg.metadata[:n - 1],
                                  seg.meta_width))
    store.close()
    with pytest.raises(CorruptionError, match=rf": {sid} \({n} blocks, {n - 1} stored\)"):
        sarp.open(path, backend="odirect")


def test_a_snapshot_of_version_3_is_read(tmp_path):
    """Version 3 carries no probes: recovery checks none, and the next snapshot names
    the writes recovery found (the journals' and the rolled-forward segments)."""
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False, **CONFIG) as index:
        for i in range(6):
            insert(index, i)
            if i == 3:
                index.snapshot()
    name = snapshot.candidates(path)[0][1]
    name.write_bytes(snapshot_as_version(name.read_bytes(), 3))
    assert snapshot.decode(name.read_bytes(), name.name).probes.shape == (0, 2)
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["probed_segments"] == 0
        assert_holds(index, 6)
        assert index.segments.probes()[-1, 0] == index.segments.next_id - 1


@pytest.mark.parametrize("backend, damaged", [("flashlog", "wal."), ("odirect", "slots.")])
def test_a_store_cut_after_a_power_cut_is_refused_not_taken_for_a_torn_tail(tmp_path, backend,
                                                                            damaged):
    """After a power cut a store takes a cut end for a torn tail. A cut into what the snapshot
    made durable (flashlog's WAL, odirect's slot file) loses the newest writes it names: the
    open refuses, where it served shorter matches before the probes."""
    path = tmp_path / "i"
    io = PowerLossIO(0)
    index = open_through(io, path, backend, durability="group", **CONFIG)
    for i in range(8):
        insert(index, i)
    index.snapshot()
    io.crash("drop")
    target = max((p for p in (path / "store").iterdir() if p.name.startswith(damaged)),
                 key=lambda p: (len(p.name), p.name))  # the newest WAL
    os.truncate(target, target.stat().st_size // 2)
    with pytest.raises(CorruptionError, match="lacks segments the snapshot names"):
        sarp.open(path, backend=backend, direct_io=False)


def _zero_slot(store: Path, slot: int) -> None:
    """Zero the first block of both copies of odirect ``slot``: each reads as empty, as a
    slot never written, laid out as HEADER says (docs/odirect_format.txt)."""
    layout = odirect_files.read_header(FileIO(), store / "HEADER")[0]
    block, vbytes, extent = layout.block, layout.vbytes, layout.extent
    with open(store / "slots.dat", "r+b") as fh:
        for copy in (0, 1):
            fh.seek(slot_copy_offset(slot, copy, extent, vbytes))
            fh.write(bytes(block))


def _snapshot_then_power_cut(path: Path, n: int) -> None:
    """An odirect index at ``path`` through a power cut (unsynced writes dropped), after
    ``n`` inserts and a snapshot, which made them durable."""
    io = PowerLossIO(0)
    index = open_through(io, path, "odirect", durability="group", **CONFIG)
    for i in range(n):
        insert(index, i)
    index.snapshot()
    io.crash("drop")


def test_a_named_segment_lost_since_the_checkpoint_is_refused_at_every_open(tmp_path):
    """odirect after a power cut: a segment the snapshot's routing directory names, written
    since the store's last checkpoint and not among the probes, whose copies the damage
    zeroed, reads as a slot never written. The open after the crash lists it
    (``absent_after_crash``) and recovery refuses it, where a match would count it missing
    and serve the prefix before it; the failed open leaves the store to the next open, which
    refuses it again. The index's files are unchanged; ``sarp rebuild`` then serves what the
    store holds."""
    path = tmp_path / "i"
    _snapshot_then_power_cut(path, 12)
    state = snapshot.load(FileIO(), snapshot.candidates(path)[0][1], False).state
    probed = {int(sid) for sid, _ in state.probes}
    lost = min(set(state.ref_segments.tolist()) - probed)
    _zero_slot(path / "store", lost)
    for _ in range(2):
        assert_open_refused(path, CorruptionError,
                            rf"holds no record of 1 of the segments the snapshot's routing "
                            rf"directory names \(ids {lost}\).*sarp rebuild",
                            backend="odirect", direct_io=False)
    sarp.rebuild(path, backend="odirect", direct_io=False)
    with sarp.open(path, backend="odirect", direct_io=False) as index:
        assert all(check_match(index, i) <= full_blocks(i) for i in range(12))


def test_a_crash_that_loses_no_named_segment_opens(tmp_path):
    """The same power cut without the damage: the slots the open lists hold no segment the
    snapshot names, and every insert matches whole."""
    path = tmp_path / "i"
    _snapshot_then_power_cut(path, 12)
    with sarp.open(path, backend="odirect", direct_io=False) as index:
        assert len(index.store.absent_after_crash())  # the slot file's tail, at least
        assert_holds(index, 12)
