"""An insert skips the whole windows its thread's last match verified, and nothing else."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import sarp
from sarp.baselines import open_baseline
from sarp.matched_prefix import MatchedPrefix

from .helpers import metadata_for


def _ids(n: int, start: int = 1) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.uint64)


def _store_reads(index) -> int:
    return index.stats()["store"]["logical_reads"]


def test_recall_is_the_remembered_prefix_of_the_same_thread_only():
    mp = MatchedPrefix()
    q = _ids(100)
    assert mp.recall(q) == (0, None)
    mp.remember(q[:80], 70)
    assert mp.recall(q) == (70, None)  # no tail given
    assert mp.recall(q[:69]) == (0, None)  # shorter than what was verified
    other = q.copy()
    other[10] = 999_999
    assert mp.recall(other) == (0, None)  # not a prefix
    seen = []
    t = threading.Thread(target=lambda: seen.append(mp.recall(q)))
    t.start()
    t.join()
    assert seen == [(0, None)]


def test_a_match_is_settled_only_when_no_write_overlapped_it():
    mp = MatchedPrefix()
    assert not mp.settled()  # no match yet
    mp.remember(_ids(10), 10, mp.stamp())
    assert mp.settled()
    stamp = mp.stamp()
    with mp.clock.writing():  # a write begins during the match
        pass
    mp.remember(_ids(10), 10, stamp)
    assert not mp.settled()
    with mp.clock.writing():  # a write in flight when the match began
        mp.remember(_ids(10), 10, mp.stamp())
    assert not mp.settled()
    mp.remember(_ids(10), 10)  # no stamp
    assert not mp.settled()


def test_what_a_match_held_goes_to_the_next_insert_of_its_thread_only():
    mp = MatchedPrefix()
    assert mp.take_held() is None
    mp.remember(_ids(10), 10, mp.stamp(), None, held="held")
    seen = []
    t = threading.Thread(target=lambda: seen.append(mp.take_held()))
    t.start()
    t.join()
    assert seen == [None]
    assert mp.take_held() == "held"
    assert mp.take_held() is None  # taken once: a run of inserts does not share it
    assert mp.recall(_ids(10)) == (10, None)  # the verified prefix stays


def test_tail_needs_the_whole_matched_query_and_no_write_since_the_stamp():
    mp = MatchedPrefix()
    q = _ids(100)
    stamp = mp.stamp()
    mp.remember(q[:80], 70, stamp, (64, 70, "found"))
    known, tail = mp.recall(q)
    assert known == 70 and tail is not None
    assert (tail.window, tail.end, tail.result) == (64, 70, "found") and tail.current()
    assert tail.decided  # the match ended before its query did
    diverges_after_end = q.copy()
    diverges_after_end[75] = 999_999  # agrees with the verified 70 blocks, not with all 80
    assert mp.recall(diverges_after_end) == (70, None)
    with mp.clock.writing():
        assert mp.stamp() is None  # a write in flight: nothing a match reads now is relied on
        assert not tail.current()
    assert not tail.current()  # a write began after the stamp
    mp.remember(q[:80], 70, None, (64, 70, "found"))
    assert mp.recall(q) == (70, None)  # matched while a write was in flight
    mp.remember(q[:70], 70, mp.stamp(), (64, 70, "found"))
    tail = mp.recall(q)[1]
    assert tail is not None and not tail.decided  # it reached its query's end: q may go on


def test_insert_after_match_reads_only_the_windows_past_the_verified_prefix(tmp_path: Path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        first = _ids(200)
        index.insert(block_ids=first)
        longer = np.concatenate((first, _ids(100, start=10_000)))
        m = index.match(block_ids=longer)
        assert m.num_blocks == 200
        before = _store_reads(index)
        st = index.insert(block_ids=longer)
        # windows 0, 64 and 128 were verified; the match stopped at 200 in window 192 on a
        # segment it had read, which the insert extends without reading it again; window 256
        # is then new (nothing stored goes past that segment's end): no window is matched
        assert st["windows"] == 0 and st["segments_extended"] == 1
        assert st["segments_written"] == 1
        assert _store_reads(index) == before
        assert index.match(block_ids=longer).num_blocks == 300
        # no match before: every window is matched again
        third = np.concatenate((longer, _ids(10, start=50_000)))
        index.match(block_ids=_ids(5, start=70_000))
        assert index.insert(block_ids=third)["windows"] == 5
        assert index.match(block_ids=third).num_blocks == 310


def test_a_tail_at_the_end_of_the_query_is_verified_further_or_matched_again(tmp_path: Path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        first = _ids(200)
        index.insert(block_ids=first)
        # the context ends at 180, inside the segment of window 128 (blocks 128-191)
        assert index.match(block_ids=first[:180]).num_blocks == 180
        st = index.insert(block_ids=first)
        assert st["windows"] == 1  # window 128 holds q to its end (in memory); 192 matched
        assert st["segments_written"] == 0
        # q diverges inside that segment: another segment might share more, so match again
        assert index.match(block_ids=first[:180]).num_blocks == 180
        forked = np.concatenate((first[:180], _ids(40, start=40_000)))
        before = _store_reads(index)
        st = index.insert(block_ids=forked)
        # window 128 matched again, then a copy of its shared prefix; window 192 is new
        assert st["windows"] == 1 and st["segments_written"] == 2
        # its only candidate is the segment the match stopped on, still current: the match
        # to beat, not read again
        assert st["segments_retrieved"] == 0 and _store_reads(index) == before
        assert index.match(block_ids=forked).num_blocks == 220
        assert index.match(block_ids=first).num_blocks == 200


def _stored_and_fork(index, length: int, fork: int) -> tuple[np.ndarray, np.ndarray]:
    """Insert blocks 1..``length`` (records tagged 1), then a sequence forking from them at
    ``fork`` (tagged 2, newer); returns both."""
    first = _ids(length)
    index.insert(block_ids=first, metadata=metadata_for(first, 1))
    second = np.concatenate((first[:fork], _ids(20, start=30_000)))
    index.insert(block_ids=second, metadata=metadata_for(second, 2))
    return first, second


@pytest.mark.parametrize("max_retrieval", [3, 0])
def test_a_bounded_re_match_reads_only_segments_that_could_spare_the_write(
        tmp_path: Path, max_retrieval: int):
    """Window 128 holds T (the first insert, to 191) and U (a copy forking at 185, newer). A
    match of blocks 0-179 stops on U; the next insert goes on with T's blocks to 188, then
    forks. T shares more than U but cannot hold the window whole, so the window is written
    as a copy either way. Under a MaxRetrieval bound the re-match does not read T and the copy
    carries the caller's records past U's 185; unbounded, it reads T and keeps T's."""
    with sarp.open(tmp_path / "i", backend="memory", background=False, pruning=False,
                   max_retrieval=max_retrieval) as index:
        first, _ = _stored_and_fork(index, 200, 185)
        assert index.match(block_ids=first[:180]).num_blocks == 180
        third = np.concatenate((first[:188], _ids(20, start=40_000)))
        before = _store_reads(index)
        st = index.insert(block_ids=third, metadata=metadata_for(third, 3))
        assert st["windows"] == 1 and st["segments_written"] == 2
        assert st["segments_retrieved"] == (max_retrieval == 0)
        assert _store_reads(index) - before == (max_retrieval == 0)
        m = index.match(block_ids=third)
        assert m.num_blocks == 208
        assert m.metadata["node"][185:188].tolist() == [1 if max_retrieval == 0 else 3] * 3
        assert m.metadata["node"][:185].tolist() == [1] * 185
        assert index.match(block_ids=first).num_blocks == 200


@pytest.mark.parametrize("max_retrieval", [3, 0])
def test_a_bounded_re_match_reads_a_segment_that_ends_where_it_stops_matching(
        tmp_path: Path, max_retrieval: int):
    """Window 128 holds C (the first insert, to 149) and K (a copy forking at 140, newer). A
    match of blocks 0-134 ties them and stops on K; the next insert goes on with C's blocks
    to C's end, then past it. C cannot hold the window whole, but it shares every block it
    holds: the insert extends C, as an insert without the match does, and writes no copy."""
    with sarp.open(tmp_path / "i", backend="memory", background=False, pruning=False,
                   max_retrieval=max_retrieval) as index:
        first, second = _stored_and_fork(index, 150, 140)
        assert index.match(block_ids=first[:135]).num_blocks == 135
        third = np.concatenate((first, _ids(10, start=40_000)))
        segments = index.stats()["segments"]
        before = _store_reads(index)
        st = index.insert(block_ids=third, metadata=metadata_for(third, 3))
        assert st["segments_extended"] == 1 and st["segments_written"] == 0
        assert st["blocks_written"] == 10 and st["segments_retrieved"] == 1
        assert _store_reads(index) - before == 1
        assert index.stats()["segments"] == segments  # no copy
        m = index.match(block_ids=third)
        assert m.num_blocks == 160
        assert m.metadata["node"].tolist() == [1] * 150 + [3] * 10
        assert index.match(block_ids=second).num_blocks == 160


@pytest.mark.parametrize("call_bound", [1, 2])
def test_a_match_under_a_tighter_bound_leaves_the_insert_its_own_search(
        tmp_path: Path, call_bound: int):
    """Window 128 holds T (the first insert, to 199) and U (a copy forking at 185, newer).
    A match of blocks 0-189 under ``max_retrieval=1`` reads U only (no filtering: newest
    first) and stops at 185, where U leaves the query. The index is unbounded, so the next
    insert must not take that as the window's answer: it finds T, which shares to 190, and
    its copy keeps T's records there. A bound of 2 reads both and finds T itself."""
    with sarp.open(tmp_path / "i", backend="memory", background=False, pruning=False,
                   filtering=False, max_retrieval=0) as index:
        first, _ = _stored_and_fork(index, 200, 185)
        m = index.match(block_ids=first[:190], max_retrieval=call_bound)
        assert m.num_blocks == (185 if call_bound == 1 else 190)
        third = np.concatenate((first[:190], _ids(20, start=40_000)))
        st = index.insert(block_ids=third, metadata=metadata_for(third, 3))
        assert st["segments_written"] == 2  # the copy of window 128, and window 192
        m = index.match(block_ids=third)
        assert m.num_blocks == 210
        assert m.metadata["node"][:190].tolist() == [1] * 190
        assert m.metadata["node"][190:].tolist() == [3] * 20


def test_after_an_extension_the_later_windows_are_new_without_matching(tmp_path: Path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        first = _ids(40)
        index.insert(block_ids=first)
        longer = np.concatenate((first, _ids(110, start=10_000)))
        st = index.insert(block_ids=longer)  # no match before it: window 0 is matched
        assert st["windows"] == 1 and st["segments_extended"] == 1
        assert st["segments_written"] == 2  # windows 64 and 128, new
        assert index.match(block_ids=longer).num_blocks == 150
        assert index.match(block_ids=first).num_blocks == 40


def test_a_write_after_the_match_makes_the_insert_read_the_window_again(tmp_path: Path):
    """The match stops on segment X (blocks 192-199). Another insert then extends X in place
    with a different continuation. The first sequence's insert must see the extended X and
    copy its shared prefix; extending its stale copy of X would overwrite the other insert."""
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        meta = np.zeros(300, sarp.DEFAULT_METADATA_DTYPE)
        meta["address"] = np.arange(300)
        first = _ids(200)
        index.insert(block_ids=first, metadata=meta[:200])
        longer = np.concatenate((first, _ids(100, start=10_000)))
        other = np.concatenate((first, _ids(100, start=20_000)))
        assert index.match(block_ids=longer).num_blocks == 200
        index.insert(block_ids=other, metadata=meta)
        st = index.insert(block_ids=longer, metadata=meta)
        assert st["windows"] == 1  # window 192 matched again (then diverged)
        assert st["segments_extended"] == 0
        for seq in (other, longer):
            got = index.match(block_ids=seq)
            assert got.num_blocks == 300
            assert np.array_equal(got.metadata["address"], np.arange(300))


@pytest.mark.parametrize("design", ["ssd_blockhash", "segment_hash", "dram_blockhash"])
def test_baselines_skip_the_verified_prefix_and_store_the_rest(tmp_path: Path, design: str):
    index = open_baseline(design, tmp_path / design, backend="memory")
    try:
        meta = np.zeros(300, index.settings.metadata_dtype)
        meta["address"] = np.arange(300)
        first = _ids(200)
        index.insert(first, meta[:200])
        longer = np.concatenate((first, _ids(100, start=10_000)))
        assert index.match(longer).num_blocks == 200
        st = index.insert(longer, meta)
        # the match's miss at block 200 (Segment-Hash: its descent of window 192) still holds
        reads = st["probes"] if design == "dram_blockhash" else st["store_reads"]
        assert reads == 0
        got = index.match(longer)
        assert got.num_blocks == 300
        assert np.array_equal(got.metadata["address"], np.arange(300))
        # a write after the match: the insert probes (descends) again, and stores the rest
        third = np.concatenate((first, _ids(100, start=20_000)))
        assert index.match(third).num_blocks == 200
        index.insert(np.concatenate((first, _ids(50, start=30_000))), meta[:250])
        st = index.insert(third, meta)
        reads = st["probes"] if design == "dram_blockhash" else st["store_reads"]
        assert reads >= 1
        assert np.array_equal(index.match(third).metadata["address"], np.arange(300))
    finally:
        index.close()
