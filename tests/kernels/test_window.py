"""The per-window loop (sarp._core.window.WindowMatcher) against the reference loop."""

from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarp._core.window import COUNTERS, WindowMatcher

from . import reference as ref

Seg = namedtuple("Seg", "segment_id start block_ids")
MSeg = namedtuple("MSeg", "segment_id start block_ids metadata")


class Table:
    """A routing table stand-in: key -> (segment ids, filters sorted as uint64). ``split``
    (1 to 3) keeps each list as two sorted runs, as the routing table keeps a long list: the
    references whose segment id plus ``split`` is a multiple of 3 make the second run."""

    def __init__(self, lists: dict[int, list[tuple[int, int]]], split: int = 0):
        self.keys = list(lists)
        self.lists = [sorted(refs, key=lambda r: r[1]) for refs in lists.values()]
        self.split = split

    def probe(self, key: int) -> int:
        return self.keys.index(key) if key in self.keys else -1

    def refs(self, entry: int):
        refs = self.lists[entry]
        return (np.array([r[0] for r in refs], np.uint64),
                np.array([r[1] for r in refs], np.uint64))

    def runs(self, entry: int):
        segs, filters = self.refs(entry)
        if not self.split:
            return segs, filters
        second = (segs % 3 + self.split) % 3 == 0
        return segs[~second], filters[~second], segs[second], filters[second]


@st.composite
def scenes(draw):
    """A query over a 3-letter alphabet, stored segments sharing prefixes of its windows (some
    absent from the store, some starting elsewhere), and posting lists under some keys: the
    segments holding the key at a routing offset and a few others; filters mostly the real ones
    (at the key's first offset), else arbitrary."""
    n_fields, bits, stride = draw(st.sampled_from([(4, 16, 1), (8, 8, 1), (2, 32, 2)]))
    window = draw(st.sampled_from([4, 8]))
    offsets = sorted(draw(st.sets(st.integers(0, window - 1), min_size=1)), reverse=True)
    q = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3 * window))
    segments = {}
    ids_any = st.integers(0, 2**64 - 1) | st.integers(0, 30)
    for sid in draw(st.sets(ids_any, min_size=1, max_size=12)):
        ws = draw(st.integers(0, max(len(q) // window, 0))) * window
        shared = window - draw(st.integers(0, window))
        tail = draw(st.lists(st.integers(0, 3), max_size=window - min(shared, len(q) - ws)))
        ids = (q[ws:ws + shared] + tail)[:window]
        start = ws if draw(st.integers(0, 9)) else ws + window
        segments[sid] = Seg(sid, start, np.array(ids, np.uint64))
    lists = {}
    for key in draw(st.sets(st.sampled_from(sorted(set(q))) | st.just(3), min_size=1)):
        refs = []
        real = {sid for sid, s in segments.items()
                if any(o < len(s.block_ids) and s.block_ids[o] == key for o in offsets)}
        for sid in real | draw(st.sets(st.sampled_from(sorted(segments)), max_size=2)):
            ids = segments[sid].block_ids.tolist()
            at = [o for o in offsets if o < len(ids) and ids[o] == key] or [len(ids)]
            f = (draw(st.integers(0, 2**64 - 1)) if draw(st.integers(0, 3)) == 0
                 else ref.region_filter(ids, at[0], len(ids), n_fields, bits, stride))
            refs.append((sid, f))
        lists[key] = refs
    stored = {sid: s for sid, s in segments.items() if draw(st.integers(0, 9))}
    return dict(q=q, window=window, offsets=offsets, table=Table(lists, draw(st.integers(0, 3))),
                stored=stored, layout=(n_fields, bits, stride))


def _known(q, ws, window, stored):
    """(verified end, segment) of the lowest-id stored segment of window ``ws``, or None."""
    mine = [s for sid, s in sorted(stored.items()) if s.start == ws]
    if not mine:
        return None
    ids = mine[0].block_ids.tolist()
    stop = min(ws + window, len(q), ws + len(ids))
    end = ws
    while end < stop and ids[end - ws] == q[end]:
        end += 1
    return end, mine[0]


@settings(max_examples=300)
@given(scenes(), st.integers(0, 4), st.booleans(), st.booleans(), st.booleans())
def test_window_matcher_matches_reference(scene, max_retrieval, filtering, with_known, whole):
    """Also with a known match to beat (an insert's re-match): its segment is never read;
    and reading only candidates that may hold the window whole."""
    q, window, offsets = scene["q"], scene["window"], scene["offsets"]
    table, stored = scene["table"], scene["stored"]
    n_fields, bits, stride = scene["layout"]
    reads = []

    def read(sid):
        reads.append(sid)
        return stored.get(sid)
    m = WindowMatcher(table, read, np.array(q, np.uint64), window, offsets,
                      n_fields=n_fields, bits=bits, stride=stride, filtering=filtering,
                      max_retrieval=max_retrieval)
    total = dict.fromkeys(COUNTERS, 0)
    for ws in range(0, len(q) + 1, window):
        known = _known(q, ws, window, stored) if with_known else None
        reads.clear()
        end, seg = m.match(ws, known, whole)
        want_end, want_seg, want_st = ref.match_window(
            table.probe, table.refs, stored.get, q, ws, window, offsets, n_fields, bits, stride,
            filtering, max_retrieval, known, whole)
        assert (end, seg) == (want_end, want_seg)
        if known is not None:
            assert end >= known[0] and known[1].segment_id not in reads
        for k, v in want_st.items():
            total[k] += v
        # nothing that verification did not confirm
        assert seg is None or seg.block_ids[: end - ws].tolist() == q[ws:end]
    assert m.stats() == total
    assert [getattr(m, k) for k in COUNTERS] == list(total.values())


@settings(max_examples=200)
@given(scenes(), st.integers(0, 4), st.booleans())
def test_prefix_matches_window_by_window_while_windows_match_whole(scene, max_retrieval,
                                                                   filtering):
    """``prefix`` is the reference's window-by-window match from block 0: on while a window
    matches to its end, with each matched window's metadata rows and where it stopped."""
    q, window, offsets = scene["q"], scene["window"], scene["offsets"]
    table = scene["table"]
    n_fields, bits, stride = scene["layout"]
    stored = {sid: MSeg(s.segment_id, s.start, s.block_ids,
                        s.block_ids.view(np.uint8).reshape(-1, 8))
              for sid, s in scene["stored"].items()}
    m = WindowMatcher(table, stored.get, np.array(q, np.uint64), window, offsets,
                      n_fields=n_fields, bits=bits, stride=stride, filtering=filtering,
                      max_retrieval=max_retrieval)
    end, parts, tail = m.prefix()
    pos, want_parts, want_tail, total = 0, [], None, dict.fromkeys(COUNTERS, 0)
    while pos < len(q):
        got, seg, counts = ref.match_window(table.probe, table.refs, stored.get, q, pos, window,
                                            offsets, n_fields, bits, stride, filtering,
                                            max_retrieval)
        for k, v in counts.items():
            total[k] += v
        if seg is None or got == pos:
            break
        want_parts.append(seg.metadata[:got - pos].tobytes())
        if got < pos + window:
            want_tail, pos = (pos, got, seg), got
            break
        pos = got
    assert (end, tail) == (pos, want_tail)
    assert [p.tobytes() for p in parts] == want_parts
    assert m.stats() == total


def test_newest_full_field_candidate_is_read_first():
    q = list(range(10, 18))
    segments = {sid: Seg(sid, 0, np.array(q[:keep] + [99] * (8 - keep), np.uint64))
                for sid, keep in ((3, 5), (8, 8), (5, 6))}
    f = ref.region_filter(q, 0, 8, 4, 16, 1)
    table = Table({10: [(3, f), (8, f), (5, f)]})
    m = WindowMatcher(table, segments.get, np.array(q, np.uint64), 8, [4, 0],
                      n_fields=4, bits=16, stride=1, max_retrieval=3)
    end, seg = m.match(0)
    assert (end, seg.segment_id) == (8, 8)
    assert m.stats() == dict(windows=1, routing_probes=2, candidates_before=3,
                             candidates_after=3, segments_retrieved=1, blocks_verified=8,
                             segments_missing=0)


def test_a_known_match_spares_the_candidates_that_cannot_beat_it():
    """Segments 3 and 8 both share q's first 3 blocks; given 3's verified match, 8 (newer, so
    first in line) is not read: its filter says it cannot share more."""
    q = list(range(10, 18))
    segments = {sid: Seg(sid, 0, np.array(q[:3] + [99] * 5, np.uint64)) for sid in (3, 8)}
    f = ref.region_filter(segments[3].block_ids.tolist(), 0, 8, 4, 16, 1)
    table = Table({10: [(3, f), (8, f)]})
    reads: list[int] = []

    def read(sid: int) -> Seg:
        reads.append(sid)
        return segments[sid]

    m = WindowMatcher(table, read,
                      np.array(q, np.uint64), 8, [0], n_fields=4, bits=16, stride=1)
    assert m.match(0, (3, segments[3])) == (3, segments[3]) and reads == []
    assert m.match(0) == (3, segments[8]) and reads == [8]


def test_whole_reads_only_candidates_that_may_hold_the_window_or_end_where_they_stop():
    """Given 3's verified match of q's first 3 blocks: segment 8 shares 4 blocks and then
    diverges, 7 holds q's first 5 blocks and ends, 5 holds all 8. ``whole`` reads 5, which
    may hold the window whole; then 7, whose filter is empty past the field where it stops
    matching (an insert would extend it); never 8, whose filter shows blocks past it.
    Without ``whole``, 8 is read as well."""
    q = list(range(10, 18))
    segments = {3: Seg(3, 0, np.array(q[:3] + [99] * 5, np.uint64)),
                8: Seg(8, 0, np.array(q[:4] + [99] * 4, np.uint64)),
                7: Seg(7, 0, np.array(q[:5], np.uint64)),
                5: Seg(5, 0, np.array(q, np.uint64))}

    def matcher(sids, reads):
        lists = {10: [(sid, ref.region_filter(segments[sid].block_ids.tolist(), 0,
                                              len(segments[sid].block_ids), 4, 16, 2))
                      for sid in sids]}  # 4 fields of 2 blocks: the filter sees the window
        return WindowMatcher(Table(lists), lambda sid: reads.append(sid) or segments[sid],
                             np.array(q, np.uint64), 8, [0], n_fields=4, bits=16, stride=2,
                             max_retrieval=0)
    known = (3, segments[3])
    reads: list[int] = []
    assert matcher([3, 8, 7, 5], reads).match(0, known, whole=True) == (8, segments[5])
    assert reads == [5]
    reads.clear()
    assert matcher([3, 8, 7], reads).match(0, known, whole=True) == (5, segments[7])
    assert reads == [7]
    reads.clear()
    assert matcher([3, 8], reads).match(0, known, whole=True) == known and reads == []
    assert matcher([3, 8], reads).match(0, known) == (4, segments[8]) and reads == [8]


def test_missing_and_misplaced_segments_count_as_retrieved_and_missing_ones_as_missing():
    q = [1, 2, 3, 4]
    table = Table({1: [(0, 0), (1, 0)]})
    stored = {1: Seg(1, 4, np.array(q, np.uint64))}  # 0 is absent; 1 starts in another window
    m = WindowMatcher(table, stored.get, np.array(q, np.uint64), 4, [0], n_fields=4, bits=16,
                      stride=1, filtering=False, max_retrieval=0)
    assert m.match(0) == (0, None)
    assert m.segments_retrieved == 2 and m.blocks_verified == 0 and m.segments_missing == 1
    assert m.match(4) == (4, None)  # an empty window: nothing probed
    assert m.windows == 2 and m.routing_probes == 1


def _absent(sid: int) -> None:
    """A segment reader of an empty store."""


def test_window_matcher_argument_errors():
    table = Table({})
    q = np.arange(4, dtype=np.uint64)
    with pytest.raises(TypeError, match="q"):
        WindowMatcher(table, _absent, np.arange(4), 4, [0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="q"):
        WindowMatcher(table, _absent, q[::2], 4, [0])
    odd = np.frombuffer(bytearray(8 * 4 + 1), np.uint64, count=4, offset=1)
    with pytest.raises(ValueError, match="q must be aligned"):
        WindowMatcher(table, _absent, odd, 4, [0])
    with pytest.raises(ValueError, match="n_fields"):
        WindowMatcher(table, _absent, q, 4, [0], n_fields=3)
    with pytest.raises(ValueError, match="probe_offsets"):
        WindowMatcher(table, _absent, q, 4, [4])
    with pytest.raises(ValueError, match="max_retrieval"):
        WindowMatcher(table, _absent, q, 4, [0], max_retrieval=-1)
    # a window or stride whose sums with a block position could wrap
    with pytest.raises(ValueError, match="window_blocks and stride must be in"):
        WindowMatcher(table, _absent, q, 2**63 - 4, [0])
    with pytest.raises(ValueError, match="window_blocks and stride must be in"):
        WindowMatcher(table, _absent, q, 4, [0], stride=2**63 - 1)
    m = WindowMatcher(table, _absent, q, 4, [0])
    with pytest.raises(ValueError, match="ws"):
        m.match(5)
    with pytest.raises(ValueError, match="known"):
        m.match(0, (5, Seg(1, 0, q)))  # verified past the window's end
    with pytest.raises(ValueError, match="known"):
        m.match(0, (1, Seg(1, 4, q)))  # a segment of another window
    bad = Table({0: [(1, 0)]})
    m = WindowMatcher(bad, {1: Seg(1, 0, np.zeros(2, np.int64))}.get, q * 0, 4, [0])
    with pytest.raises(TypeError, match="block_ids"):
        m.match(0)
    m = WindowMatcher(Table({0: [(1, 0)]}), {1: Seg(1, 0, odd)}.get, q * 0, 4, [0])
    with pytest.raises(ValueError, match="block_ids must be aligned"):
        m.match(0)
