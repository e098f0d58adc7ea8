"""The segments a request holds (sarp.segments.HeldSegments): what a match read and an insert
wrote are not read again by that insert or the rematerialization it triggers, and a copy an
extension has since rewritten is never used."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

import sarp
from sarp.segments import HeldSegments, Segment, SegmentStore
from storage_backends.memory import MemoryStore

from .test_mechanisms import BASE, divergent, members, routing_state


def blocks(segment: Segment | None) -> int:
    """The block count of a segment that must be there."""
    assert segment is not None
    return segment.block_count


def keys_read(store) -> list[int]:
    """Record the keys of every read of ``store`` (an instance's get and get_many wrapped)."""
    seen: list[int] = []
    get, get_many = store.get, store.get_many

    def get_seen(key: int) -> bytes | None:
        seen.append(key)
        return get(key)

    def get_many_seen(keys: Iterable[int]) -> list[bytes | None]:
        keys = list(keys)
        seen.extend(keys)
        return get_many(keys)

    store.get, store.get_many = get_seen, get_many_seen
    return seen


def test_a_holder_serves_current_copies_and_reads_the_rest(tmp_path):
    store = MemoryStore(tmp_path / "s")
    segs = SegmentStore(store, meta_width=8, segment_blocks=64)
    ids = np.arange(1, 7, dtype=np.uint64)
    meta = np.zeros((6, 8), np.uint8)
    a, raw_a = segs.encode_new(0, ids[:3], meta[:3])
    b, raw_b = segs.encode_new(0, ids[3:], meta[3:])
    segs.put_all([(a, raw_a), (b, raw_b)])
    held = HeldSegments(segs)
    seen = keys_read(store)
    assert blocks(held.record(a.segment_id)) == 3 and seen == [a.segment_id]
    assert blocks(held.read(a.segment_id)) == 3 and seen == [a.segment_id]  # held
    got = held.read_many([b.segment_id, a.segment_id, 99])
    assert [s and s.segment_id for s in got] == [b.segment_id, a.segment_id, None]
    assert seen == [a.segment_id, b.segment_id, 99]  # only what it did not hold
    longer, raw = segs.encode_extended(a, ids[3:5], meta[3:5])
    segs.put_all([(longer, raw)], extensions=1)
    assert not held.current()
    assert blocks(held.read(a.segment_id)) == 5  # read again: the held copy is stale
    assert [blocks(s) for s in held.read_many([a.segment_id, b.segment_id])] == [5, 3]
    assert seen[-3:] == [a.segment_id, a.segment_id, b.segment_id]
    store.close()


def test_a_match_holds_the_segments_of_its_latest_window_only(tmp_path):
    store = MemoryStore(tmp_path / "s")
    segs = SegmentStore(store, meta_width=8, segment_blocks=64)
    meta = np.zeros((2, 8), np.uint8)
    made = [segs.encode_new(start, np.arange(start + 1, start + 3, dtype=np.uint64), meta)
            for start in (0, 0, 64)]
    segs.put_all(made)
    first, second, later = (seg.segment_id for seg, _ in made)
    held = HeldSegments(segs)
    for sid in (first, second):
        held.record(sid)
    seen = keys_read(store)
    held.read_many([first, second])
    assert seen == []  # both held: the same window
    held.record(later)
    held.read_many([first, second, later])
    assert seen == [later, first, second]  # the earlier window's were dropped
    store.close()


def test_a_rematerialization_reads_only_members_its_request_does_not_hold(tmp_path):
    """Three segments share blocks 0-5 at point 0 (point 4 pruned). A match of a fourth
    sequence reads some of them; its insert writes a fourth segment, and the list at point 0
    outgrows the threshold: the rematerialization reads only the members that neither the
    match read nor the insert wrote, and places all four at point 4."""
    threshold = 3
    with sarp.open(tmp_path / "i", backend="memory", background=False, refinement=False,
                   pruning_threshold=threshold, **BASE) as index:
        seqs = [divergent(6, i) for i in range(threshold + 1)]
        for s in seqs[:threshold]:
            index.insert(tokens=s)
        k0, k4 = sarp.block_ids(seqs[0], 1)[[0, 4]]
        seen = keys_read(index.store)
        index.match(tokens=seqs[-1])
        by_match = set(seen)
        seen.clear()
        index.insert(tokens=seqs[-1])
        by_insert = set(seen)
        written = members(index, k0) - {int(k) for k in range(threshold)}
        assert index.stats()["rematerializations"] == 1 and len(written) == 1
        assert by_match and not by_insert & (by_match | written)
        assert by_match | by_insert | written == members(index, k0) == members(index, k4)


def test_a_rematerialization_does_not_use_a_copy_an_extension_rewrote(tmp_path):
    """Thread A's match holds segment T (6 blocks); thread B then extends T to 8; A's next
    insert triggers the rematerialization that places T at point 4, where the filter covers
    blocks 4-7. The routing state must be the one of the same inserts without A's match:
    placed from T's current record, not from A's copy."""
    opts = dict(backend="memory", background=False, refinement=False, pruning_threshold=3,
                **BASE)
    short, extended, last = divergent(3, 5, 6), divergent(3, 5), divergent(3, 7)

    def run(path, match_first: bool):
        index = sarp.open(path, **opts)
        for i in range(2):
            index.insert(tokens=divergent(3, i))
        index.insert(tokens=short)
        if match_first:
            assert index.match(tokens=extended).num_blocks == len(short)  # holds T
        b = threading.Thread(target=lambda: index.insert(tokens=extended))
        b.start()
        b.join()
        assert index.stats()["segments_extended"] == 1
        index.insert(tokens=last)
        assert index.stats()["rematerializations"] == 1
        state = routing_state(index)
        index.close()
        return state

    assert run(tmp_path / "held", True) == run(tmp_path / "plain", False)
