"""The matching path's per-window loop (paper 4.1, 4.3; docs/design.md section 3).

For the query window [ws, we), we = min(ws + S, n):

1. Approximate routing: probe K(p) at the window's routing points, deepest first, skipping
   points at or past we; the first hit gives the posting list C(p).
2. Pre-retrieval filtering (Algorithm 1): the query filter at p, then the candidates of C(p) by
   level, k* matched leading fields first (filters.pxd ``Selection``; a long list's two runs,
   routing_table.pyx, are selected over as they lie).
3. Retrieval and post-retrieval verification: read each selected segment and compare its block
   IDs with the query's from ws. Nothing counts as matched that verification did not confirm.

Selection order and stopping. A candidate whose first mismatching field is k+1 can match at
most to p + (k+1)*stride - 1 (its potential end); one that matches all N fields, up to we
(pruned routing points route through p, so the filter says nothing past p + L_max). Levels are
taken in decreasing potential, and retrieval stops once the verified match reaches the next
candidate's potential, reaches we, or MaxRetrieval segments were read. Within a level every
candidate has the same potential, and the newest segment (largest segment id) goes first: it
is the most recent branch from the shared prefix, which on agent traces is the one the next turn
continues (docs/architecture.md has the measurement). The tie order only decides which candidates
MaxRetrieval reaches: nothing unverified is returned, and with MaxRetrieval unbounded every
candidate whose potential exceeds the verified match is read, so the result equals exact
longest-prefix matching within the window.

MaxRetrieval is lifted at an entry for which ``unbounded_at(entry)`` is true: a pruned entry
whose rematerialization is still queued. Its list has outgrown the pruning threshold, and the
deeper entries that will split it do not exist yet, so its members tie; reading them all keeps
the match exact while the background worker catches up.

Only two kinds of call leave compiled code: the routing table's probe/runs lookups (in-memory)
and ``read``, the segment store's read of one segment. The window loop keeps the GIL
(``sarp/_core/gil.pxd`` says why); the store's I/O may release it.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t

from sarp._core.filters cimport (
    Selection,
    check_layout,
    leading_fields,
    pack,
    selection_init,
    selection_next,
)
from sarp._core.u64_array cimport u64_array

cnp.import_array()

#: the per-query counters, in the order ``WindowMatcher.stats`` reports them
COUNTERS = ("windows", "routing_probes", "candidates_before", "candidates_after",
            "segments_retrieved", "blocks_verified", "segments_missing")


#: the longest window and stride a matcher takes (Config keeps both within 65535): far below
#: what would make a window's end or a filter's reach wrap
cdef Py_ssize_t MAX_SPAN = 1 << 32


cdef inline const uint64_t* u64_data(cnp.ndarray a) noexcept:
    return <const uint64_t*>cnp.PyArray_DATA(a)


cdef Py_ssize_t run_of(tuple runs, Py_ssize_t at, const uint64_t** segs,
                       const uint64_t** filters) except -1:
    """The length of the run whose segment ids and filters are ``runs[at]`` and
    ``runs[at + 1]``, pointing ``segs`` and ``filters`` at their data."""
    cdef cnp.ndarray s = u64_array(runs[at], "segment ids")
    cdef cnp.ndarray f = u64_array(runs[at + 1], "filters")
    cdef Py_ssize_t n = cnp.PyArray_DIM(f, 0)
    if cnp.PyArray_DIM(s, 0) != n:
        raise ValueError("a posting list has different numbers of segment ids and filters")
    segs[0], filters[0] = u64_data(s), u64_data(f)
    return n


cdef struct Window:
    Py_ssize_t ws, we, p  # the window and its routing point
    Py_ssize_t best_end  # exclusive end of the longest verified match so far
    Py_ssize_t retrieved, total  # segments read; the most that may be read
    Py_ssize_t reach  # candidates whose potential end falls short of it are not read


cdef inline bint ends_within(uint64_t f, int k, int n_fields, int bits) noexcept nogil:
    """Whether filter ``f``, whose field k+1 is the first to differ from the query's, has
    no block in the fields after it (each 0): its segment may end in field k+1, sharing
    every block it holds. (A field whose blocks hash to 0 looks empty too: one read more.)"""
    if k >= n_fields - 1:
        return True
    return f & ((<uint64_t>1 << ((n_fields - 1 - k) * bits)) - 1) == 0


cdef bint _within(cnp.ndarray offsets, Py_ssize_t limit):
    """Whether every offset lies in [0, limit) (a 1-D C-contiguous int64 array)."""
    cdef const int64_t* o = <const int64_t*>cnp.PyArray_DATA(offsets)
    cdef Py_ssize_t i
    for i in range(cnp.PyArray_DIM(offsets, 0)):
        if o[i] < 0 or o[i] >= limit:
            return False
    return True


cdef class WindowMatcher:
    """The per-window loop of one query ``q`` (block IDs) over a routing table (its ``probe``
    and ``runs``, sarp._core.routing_table) and a segment store's ``read(segment_id) ->
    Segment | None``. Keeps the query's counters."""

    cdef object _probe, _runs, _read, _unbounded_at
    cdef cnp.ndarray _q, _offsets
    cdef const uint64_t* q
    cdef Py_ssize_t n, window_blocks, stride, max_retrieval
    cdef int n_fields, bits
    cdef bint filtering
    cdef public int64_t windows, routing_probes, candidates_before, candidates_after
    cdef public int64_t segments_retrieved, blocks_verified, segments_missing

    def __init__(self, table, read, q, Py_ssize_t window_blocks, probe_offsets, *,
                 int n_fields=8, int bits=8, Py_ssize_t stride=2, bint filtering=True,
                 Py_ssize_t max_retrieval=3, unbounded_at=None):
        """``probe_offsets``: routing-point offsets within a window, deepest first;
        ``max_retrieval`` 0 means unbounded; ``unbounded_at(entry)``, if given, says where to
        lift it."""
        check_layout(n_fields, bits)
        # bounded so that a window's end and a filter's reach stay far from wrapping
        if not (0 < window_blocks <= MAX_SPAN and 0 < stride <= MAX_SPAN and max_retrieval >= 0):
            raise ValueError(f"window_blocks and stride must be in [1, {MAX_SPAN}] and "
                             f"max_retrieval non-negative, got {window_blocks}, {stride}, "
                             f"{max_retrieval}")
        self._offsets = np.ascontiguousarray(probe_offsets, dtype=np.int64)
        if self._offsets.ndim != 1 or not _within(self._offsets, window_blocks):
            raise ValueError(f"probe_offsets must lie in [0, {window_blocks})")
        self._probe, self._runs, self._read = table.probe, table.runs, read
        self._unbounded_at = unbounded_at
        self._q = u64_array(q, "q")
        self.q = u64_data(self._q)
        self.n = cnp.PyArray_DIM(self._q, 0)
        self.window_blocks, self.stride, self.max_retrieval = window_blocks, stride, max_retrieval
        self.n_fields, self.bits, self.filtering = n_fields, bits, filtering

    def stats(self):
        """The counters by name (``COUNTERS``)."""
        return dict(zip(COUNTERS, (self.windows, self.routing_probes, self.candidates_before,
                                   self.candidates_after, self.segments_retrieved,
                                   self.blocks_verified, self.segments_missing)))

    cdef Py_ssize_t route(self, Window* w) except -2:
        """Approximate routing: the entry of the deepest routing point that hits, or -1."""
        cdef const int64_t* off = <const int64_t*>cnp.PyArray_DATA(self._offsets)
        cdef Py_ssize_t i, p, e
        for i in range(cnp.PyArray_DIM(self._offsets, 0)):
            p = w.ws + off[i]
            if p >= w.we:
                continue
            self.routing_probes += 1
            e = self._probe(self.q[p])
            if e >= 0:
                w.p = p
                return e
        return -1

    cdef inline Py_ssize_t potential_end(self, const Window* w, int k) noexcept nogil:
        if k >= self.n_fields:
            return w.we
        return min(w.we, w.p + (k + 1) * self.stride - 1)

    cdef inline Py_ssize_t next_candidate(self, Selection* sel, const Window* w) noexcept nogil:
        """The next list index to read, or -1: MaxRetrieval reached, nothing left, or no
        candidate left can beat the verified match."""
        cdef int k
        cdef Py_ssize_t i, pot
        if w.retrieved >= w.total or w.best_end >= w.we:
            return -1
        i = selection_next(sel, &k)
        if i < 0:
            return -1
        pot = self.potential_end(w, k)
        if w.best_end >= pot or pot < w.reach:
            return -1
        return i

    def prefix(self):
        """(end, parts, tail): the query matched from block 0 window by window while each
        window matches to its end (``sarp.matching.match``). ``end``: the blocks matched;
        ``parts``: each matched window's metadata rows, in order; ``tail``: (window start, end,
        segment) when the match stopped inside a window on a stored segment, else None."""
        cdef Py_ssize_t pos = 0, end
        parts = []
        while pos < self.n:
            end, seg = self._match(pos, None, False)
            if seg is None or end == pos:
                break
            parts.append(seg.metadata[:end - pos])
            if end < pos + self.window_blocks:
                return end, parts, (pos, end, seg)
            pos = end
        return pos, parts, None

    def match(self, Py_ssize_t ws, known=None, bint whole=False):
        """(end, segment): the longest verified match in the window starting at block ``ws``;
        ``end`` is its exclusive end (``ws`` when nothing matched), ``segment`` the decoded
        segment that verified it (None when nothing matched).

        ``known``: an (end, segment) already verified against this query in this window, and
        current (an insert's re-match of the window its match stopped in). It is the match to
        beat: it takes one of the window's MaxRetrieval retrievals, it is not read again, and
        only candidates whose potential exceeds its end are read.

        ``whole``: read only candidates that may hold the query to the window's end (whose
        potential end reaches it), then those that may end where they stop matching it
        (``ends_within``): an insert extends such a segment, and writes a copy of any other
        that does not hold the window whole (``sarp.insertion``)."""
        return self._match(ws, known, whole)

    cdef tuple _match(self, Py_ssize_t ws, object known, bint whole):
        if ws < 0 or ws > self.n:
            raise ValueError(f"ws must be in [0, {self.n}], got {ws}")
        cdef Window w
        w.ws = ws
        w.we = min(ws + self.window_blocks, self.n)
        w.best_end = ws
        w.retrieved = 0
        w.reach = w.we if whole else ws
        best = None
        cdef uint64_t known_id = 0
        cdef bint has_known = known is not None
        if has_known:
            w.best_end, best = known
            if not ws <= w.best_end <= w.we or best is None or best.start != ws:
                raise ValueError(f"known must be a segment of window {ws} verified to an end "
                                 f"in [{ws}, {w.we}], got end {w.best_end}")
            known_id = best.segment_id
            w.retrieved = 1
        self.windows += 1
        cdef Py_ssize_t entry = self.route(&w)
        if entry < 0:
            return w.best_end, best
        cdef tuple runs = self._runs(entry)  # keeps the runs' arrays alive for the pointers
        if len(runs) != 2 and len(runs) != 4:
            raise ValueError(f"a posting list comes as 1 or 2 runs, got {len(runs)} arrays")
        cdef const uint64_t* sid
        cdef const uint64_t* fl
        cdef const uint64_t* sid2 = NULL
        cdef const uint64_t* fl2 = NULL
        cdef Py_ssize_t m1 = run_of(runs, 0, &sid, &fl), m2 = 0
        if len(runs) == 4:
            m2 = run_of(runs, 2, &sid2, &fl2)
        cdef Py_ssize_t m = m1 + m2
        self.candidates_before += m
        cdef Py_ssize_t every = m + has_known  # retrievals that reach every candidate
        w.total = every if self.max_retrieval == 0 or self.max_retrieval > every \
            else self.max_retrieval
        if w.total < every and self._unbounded_at is not None and self._unbounded_at(entry):
            w.total = every
        cdef Selection sel
        cdef uint64_t fq = 0
        cdef Py_ssize_t top, i
        cdef uint64_t seg_id
        if self.filtering:
            fq = pack(self.q, w.p, w.we, self.n_fields, self.bits, self.stride)
        top = selection_init(&sel, fl, sid, m1, fl2, sid2, m2, fq, self.n_fields,
                             self.bits, self.filtering)
        i = self.next_candidate(&sel, &w)
        self.candidates_after += min(top, w.total)
        while i >= 0:
            seg_id = sid[i] if i < m1 else sid2[i - m1]
            if not (has_known and seg_id == known_id):
                best = self._verify(&w, seg_id, best)
            i = self.next_candidate(&sel, &w)
        if w.reach > ws and self.filtering:
            best = self._ending(&w, fq, sid, fl, m1, sid2, fl2, m2, known_id, has_known, best)
        return w.best_end, best

    cdef object _verify(self, Window* w, uint64_t seg_id, object best):
        """Read segment ``seg_id`` and verify it against the query from w.ws: the segment
        that now holds the longest verified match (``best`` or this one)."""
        seg = self._read(seg_id)
        w.retrieved += 1
        self.segments_retrieved += 1
        if seg is None:  # named by the routing directory, absent from the store: damage
            self.segments_missing += 1
            return best
        if seg.start != w.ws:
            return best
        cdef cnp.ndarray block_ids = u64_array(seg.block_ids, "a segment's block_ids")
        cdef const uint64_t* ids = u64_data(block_ids)
        cdef Py_ssize_t limit = min(cnp.PyArray_DIM(block_ids, 0), w.we - w.ws)
        cdef Py_ssize_t length = 0
        while length < limit and ids[length] == self.q[w.ws + length]:
            length += 1
        self.blocks_verified += length
        if w.ws + length > w.best_end:
            w.best_end = w.ws + length
            return seg
        return best

    cdef object _ending(self, Window* w, uint64_t fq, const uint64_t* sid, const uint64_t* fl,
                        Py_ssize_t m1, const uint64_t* sid2, const uint64_t* fl2,
                        Py_ssize_t m2, uint64_t known_id, bint has_known, object best):
        """``whole``'s second pass: the candidates whose potential end falls short of
        w.reach but beats the verified match, and that may end there (``ends_within``), by
        potential end, newest first within one, while MaxRetrieval allows. One scan of the
        list per read."""
        cdef Py_ssize_t i, pot, pick_pot, last_pot = w.we  # above every potential read here
        cdef uint64_t f, seg_id, pick_id, last_id = 0
        cdef int k
        while w.retrieved < w.total and w.best_end < w.we:
            pick_pot, pick_id = -1, 0
            for i in range(m1 + m2):
                if i < m1:
                    f, seg_id = fl[i], sid[i]
                else:
                    f, seg_id = fl2[i - m1], sid2[i - m1]
                k = leading_fields(f, fq, self.n_fields, self.bits)
                pot = self.potential_end(w, k)
                if (pot >= w.reach or pot <= w.best_end or (has_known and seg_id == known_id)
                        or not ends_within(f, k, self.n_fields, self.bits)):
                    continue
                # descending (potential, segment id), each after the last one read
                if pot > last_pot or pot == last_pot and seg_id >= last_id:
                    continue
                if pot > pick_pot or pot == pick_pot and seg_id > pick_id:
                    pick_pot, pick_id = pot, seg_id
            if pick_pot < 0:
                break
            best = self._verify(w, pick_id, best)
            last_pot, last_id = pick_pot, pick_id
        return best
