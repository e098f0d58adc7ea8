"""The routing directory's flat arrays: an open-addressing table keyed by K(p), and posting
lists of (segment id, filter) references in an arena, each list sorted by filter.

Lists are copy-on-write: a new version of a list is written past the arena's end and then
published by one 64-bit store of (offset, length). A reader therefore sees the old or the new
complete list, never a partial one. Growing or compacting the arrays builds a new generation
and swaps one reference, so a reader that captured the old generation keeps a consistent view.

A long list (DELTA_MIN references or more) is kept as two sorted runs: the main run, and a
delta run of the latest additions, at most about the square root of the main run's length.
An addition rewrites only the delta run; when it is full, both runs are merged into a new main
run. So adding to a list of n references copies O(sqrt(n)) of them, not n: an index where many
sequences share a prefix (one system prompt, many sessions) lists every copy of it under the
same keys (docs/architecture.md). Candidate selection reads the two runs as they are
(``runs``; filters.pxd selects over both in the order one merged list would give); ``refs``
and ``export`` merge them into the list one run would hold. Readers and writers hold the GIL
while they read or publish a list's two runs (a writer may release it only while growing the
arena, before it writes the new run), so a reader never sees one run of a version with the
other of another.
"""

import numpy as np

cimport numpy as cnp
from libc.math cimport sqrt
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from sarp._core.aligned cimport check_aligned
from sarp._core.filters cimport check_layout, pack
from sarp._core.u64_array cimport u64_array

cnp.import_array()

# Entry flags.
cdef enum:
    F_VISIBLE = 1  # probes may return the entry (private entries are being built)
    F_PRUNED = 2  # some segment skipped its later routing points because this list was small
    F_REFINING = 4  # midpoint (or last-block) entries below this one are being back-filled
    F_REFINED = 8  # the interval below this entry is refined: new segments register there too
    F_REMAT = 16  # a rematerialization of the points after this entry is pending

VISIBLE = F_VISIBLE
PRUNED = F_PRUNED
REFINING = F_REFINING
REFINED = F_REFINED
REMAT = F_REMAT

cdef uint32_t EMPTY = 0xFFFFFFFF
EMPTY_SLOT = EMPTY  # an empty slot in table_slots()

cdef int LEN_BITS = 24
cdef int64_t LEN_MASK = (1 << 24) - 1
cdef int64_t MAX_LIST = (1 << 24) - 1
cdef Py_ssize_t MAX_ENTRIES = 0xFFFFFFFE  # entry ids are 32-bit; EMPTY marks a free slot
# The main-run length from which a list takes its additions in a delta run (shorter lists
# are rewritten whole: their copy costs less than the merge each read of them would do).
cdef Py_ssize_t DELTA_MIN_REFS = 256
DELTA_MIN = DELTA_MIN_REFS


cdef cnp.ndarray _run_view(cnp.ndarray arena, Py_ssize_t off, Py_ssize_t n):
    """A read-only view of ``arena[off:off + n]`` (a uint64 arena array), which it keeps
    alive: ``arena[off:off + n]`` made read-only, built without Python-level indexing, as
    each window a match routes reads one or two runs."""
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    cdef cnp.ndarray a = cnp.PyArray_SimpleNewFromData(
        1, dims, cnp.NPY_UINT64, <uint64_t*>cnp.PyArray_DATA(arena) + off)
    cnp.PyArray_CLEARFLAGS(a, cnp.NPY_ARRAY_WRITEABLE)
    cnp.set_array_base(a, arena)
    return a


cdef inline Py_ssize_t delta_room(Py_ssize_t n_main) noexcept nogil:
    """The most references the delta run of a list with a main run of ``n_main`` holds."""
    if n_main < DELTA_MIN_REFS:
        return 0
    return <Py_ssize_t>sqrt(<double>n_main)


cdef inline uint64_t* base(uint64_t[::1] a) noexcept nogil:
    return &a[0] if a.shape[0] else NULL


cdef inline int64_t packed(Py_ssize_t off, Py_ssize_t n) noexcept nogil:
    return (<int64_t>off << LEN_BITS) | n


cdef Py_ssize_t merge_runs(const uint64_t* s1, const uint64_t* f1, Py_ssize_t n1,
                           Py_ssize_t drop1, const uint64_t* s2, const uint64_t* f2,
                           Py_ssize_t n2, Py_ssize_t drop2, bint extra, uint64_t seg,
                           uint64_t filt, uint64_t* out_s, uint64_t* out_f) noexcept nogil:
    """Write runs 1 and 2 (each sorted by filter, without its position ``drop1``/``drop2``;
    -1: none) merged by filter, run 1 first among equal filters, and with ``extra``, (seg,
    filt) after every filter <= ``filt``; return the count written."""
    cdef Py_ssize_t i = 0, j = 0, o = 0
    cdef uint64_t s, f
    while i < n1 or j < n2:
        if i == drop1:
            i += 1
            continue
        if j == drop2:
            j += 1
            continue
        if j >= n2 or (i < n1 and f1[i] <= f2[j]):
            s, f = s1[i], f1[i]
            i += 1
        else:
            s, f = s2[j], f2[j]
            j += 1
        if extra and f > filt:
            out_s[o], out_f[o] = seg, filt
            o += 1
            extra = False
        out_s[o], out_f[o] = s, f
        o += 1
    if extra:
        out_s[o], out_f[o] = seg, filt
        o += 1
    return o


cdef inline uint64_t _mix(uint64_t k) nogil:
    k ^= k >> 31
    k *= 0x7fb5d329728ea185ULL
    k ^= k >> 27
    return k


cdef class _Generation:
    """One consistent set of arrays. Readers capture it once per operation.

    The hash table holds only entry ids (``slots``, 4 bytes each): a probe compares the key
    through ``entry_key[slot]``, so keys are stored once. ``entry_ref`` holds each list's
    main run; ``deltas`` the delta runs of the few long lists that have one, by entry."""
    cdef public object slots, entry_key, entry_ref, entry_flags, ref_seg, ref_filter
    cdef public dict deltas
    cdef uint32_t[::1] s
    cdef uint64_t[::1] ek
    cdef int64_t[::1] er
    cdef uint8_t[::1] ef

    def __init__(self, slots, entry_key, entry_ref, entry_flags, ref_seg, ref_filter,
                 dict deltas):
        self.slots = slots
        self.entry_key, self.entry_ref, self.entry_flags = entry_key, entry_ref, entry_flags
        self.ref_seg, self.ref_filter = ref_seg, ref_filter
        self.deltas = deltas
        self.s = slots
        self.ek, self.er, self.ef = entry_key, entry_ref, entry_flags


cdef struct WalkRules:
    bint pruning, refinement
    Py_ssize_t threshold, tau


cdef class Points:
    """The routing points of a segment of ``count`` blocks and the placement rules, as
    ``RoutingTable.walk_points`` takes them: built once per segment length, so that each
    placement passes them in one argument and their ranges are checked once, not per walk.

    Point j is at offset ``offsets[j]``, needs a refined (or refining) entry at offset
    ``parents[j]`` unless that is -1, and ``refinable[j]`` says whether its entry may be
    refined. ``filters`` computes a segment's filter at each point."""

    cdef readonly Py_ssize_t count, n
    cdef cnp.ndarray _offsets, _parents, _refinable  # keep the arrays the pointers read
    cdef const int64_t* offsets_p
    cdef const int64_t* parents_p
    cdef const uint8_t* refinable_p
    cdef WalkRules rules
    cdef int n_fields, bits
    cdef Py_ssize_t stride

    def __init__(self, Py_ssize_t count, offsets, parents, refinable, *, bint pruning,
                 Py_ssize_t threshold, bint refinement, Py_ssize_t tau, int n_fields, int bits,
                 Py_ssize_t stride):
        self._offsets = np.array(offsets, dtype=np.int64)
        self._parents = np.array(parents, dtype=np.int64)
        self._refinable = np.array(refinable, dtype=np.uint8)
        cdef Py_ssize_t n = self._offsets.shape[0], j
        if (self._offsets.ndim != 1 or self._parents.ndim != 1 or self._refinable.ndim != 1
                or self._parents.shape[0] != n or self._refinable.shape[0] != n):
            raise ValueError("offsets, parents and refinable must be 1-D and of one length, got "
                             f"shapes {(<object>self._offsets).shape}, "
                             f"{(<object>self._parents).shape} and "
                             f"{(<object>self._refinable).shape}")
        check_layout(n_fields, bits)
        if stride < 1:
            raise ValueError(f"stride must be positive, got {stride}")
        self.offsets_p = <const int64_t*>cnp.PyArray_DATA(self._offsets)
        self.parents_p = <const int64_t*>cnp.PyArray_DATA(self._parents)
        self.refinable_p = <const uint8_t*>cnp.PyArray_DATA(self._refinable)
        for j in range(n):
            if not (0 <= self.offsets_p[j] < count and -1 <= self.parents_p[j] < count):
                raise ValueError(f"point {j}: offset {self.offsets_p[j]} or parent "
                                 f"{self.parents_p[j]} is not a block of the {count}")
        self.count, self.n = count, n
        self.rules.pruning, self.rules.threshold = pruning, threshold
        self.rules.refinement, self.rules.tau = refinement, tau
        self.n_fields, self.bits, self.stride = n_fields, bits, stride

    def filters(self, ids):
        """The packed filter at each point from the segment's block IDs ``ids`` (``count``
        of them): ``filters_at(ids, offsets, count, ...)``."""
        cdef cnp.ndarray a = self.checked(ids, "ids", self.count)
        cdef const uint64_t* p = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef cnp.ndarray out = np.empty(self.n, dtype=np.uint64)
        cdef uint64_t* f = <uint64_t*>cnp.PyArray_DATA(out)
        cdef Py_ssize_t j
        for j in range(self.n):
            f[j] = pack(p, self.offsets_p[j], self.count, self.n_fields, self.bits, self.stride)
        return out

    cdef cnp.ndarray checked(self, object x, str name, Py_ssize_t length):
        """``x`` if it is a uint64 array the walk can read (``u64_array``) of ``length``."""
        cdef cnp.ndarray a = u64_array(x, name)
        if cnp.PyArray_DIM(a, 0) != length:
            raise ValueError(f"{name} must hold {length} values, got {cnp.PyArray_DIM(a, 0)}")
        return a


cdef class RoutingTable:
    """Routing entries K(p) -> posting list. Writers must be serialized by the caller.

    A list holds at most ``max_list`` references (MAX_LIST, 2**24 - 1, unless lowered): a
    segment placed at a full entry is not listed there and counted in ``refs_skipped``, so
    placement never fails. A match that routes through that entry may then stop short of it,
    never past what it verifies."""
    cdef _Generation g
    cdef public Py_ssize_t n_entries
    cdef public Py_ssize_t arena_used
    cdef public Py_ssize_t live_refs
    cdef public Py_ssize_t refs_skipped
    cdef Py_ssize_t _max_list
    # Every listed segment id is at most _top_seg, once _top_known (a restored table finds it
    # when a walk first needs it): a new segment, whose id is above every earlier one's, is
    # then known to be on no list, and its walk joins long lists without scanning them.
    cdef uint64_t _top_seg
    cdef bint _top_known

    def __init__(self, Py_ssize_t capacity=64):
        if not 0 <= capacity <= MAX_ENTRIES:  # entries it is sized for; ids are 32-bit
            raise ValueError(f"capacity must be in [0, {MAX_ENTRIES}], got {capacity}")
        cdef Py_ssize_t cap = 16
        while 7 * cap < 10 * capacity:
            cap *= 2
        n = max(capacity, 16)
        self.g = _Generation(
            np.full(cap, EMPTY, np.uint32),
            np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros(n, np.uint8),
            np.zeros(4 * n, np.uint64), np.zeros(4 * n, np.uint64), {})
        self.n_entries = 0
        self.arena_used = 0
        self.live_refs = 0
        self.refs_skipped = 0
        self._max_list = MAX_LIST
        self._top_seg = 0
        self._top_known = True

    @property
    def max_list(self) -> int:
        return self._max_list

    @max_list.setter
    def max_list(self, Py_ssize_t value):
        if not 1 <= value <= MAX_LIST:
            raise ValueError(f"max_list must be in [1, {MAX_LIST}], got {value}")
        self._max_list = value

    # -- lookups ---------------------------------------------------------------------------
    cdef inline Py_ssize_t _find(self, _Generation g, uint64_t key) noexcept:
        cdef Py_ssize_t mask = g.s.shape[0] - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_mix(key) & mask)
        cdef uint32_t slot
        while True:
            slot = g.s[i]
            if slot == EMPTY:
                return -1
            if g.ek[slot] == key:
                return slot
            i = (i + 1) & mask

    def find(self, uint64_t key) -> int:
        """Entry id of ``key`` (visible or private), or -1."""
        return self._find(self.g, key)

    def probe(self, uint64_t key) -> int:
        """Entry id of ``key`` if it is visible to queries, else -1."""
        cdef _Generation g = self.g
        cdef Py_ssize_t e = self._find(g, key)
        if e >= 0 and (g.ef[e] & 1):
            return e
        return -1

    cdef inline int _check_entry(self, Py_ssize_t entry) except -1:
        """IndexError unless ``entry`` is an entry id of this table: the compiled code
        indexes its arrays unchecked."""
        if not 0 <= entry < self.n_entries:
            raise IndexError(f"entry {entry} is not in a table of {self.n_entries} entries")
        return 0

    cdef inline int64_t _delta(self, _Generation g, Py_ssize_t entry):
        """The packed (offset, length) of ``entry``'s delta run; 0 (empty) without one."""
        if not g.deltas:
            return 0
        return g.deltas.get(entry, 0)

    cdef inline Py_ssize_t _len(self, _Generation g, Py_ssize_t entry):
        return (g.er[entry] & LEN_MASK) + (self._delta(g, entry) & LEN_MASK)

    def refs(self, Py_ssize_t entry):
        """(segment ids, filters) of ``entry``: read-only arrays of one complete list (views
        of the arena, or the two runs of a long list merged)."""
        self._check_entry(entry)
        cdef _Generation g = self.g
        cdef int64_t main = g.er[entry], delta = self._delta(g, entry)
        cdef Py_ssize_t off = main >> LEN_BITS, n = main & LEN_MASK
        cdef Py_ssize_t doff = delta >> LEN_BITS, d = delta & LEN_MASK
        cdef uint64_t* rs
        cdef uint64_t* rf
        if d == 0:
            segs = g.ref_seg[off:off + n]
            filters = g.ref_filter[off:off + n]
        else:
            segs, filters = np.empty(n + d, np.uint64), np.empty(n + d, np.uint64)
            rs, rf = base(g.ref_seg), base(g.ref_filter)
            merge_runs(rs + off, rf + off, n, -1, rs + doff, rf + doff, d, -1, False, 0, 0,
                       base(segs), base(filters))
        segs.flags.writeable = False
        filters.flags.writeable = False
        return segs, filters

    def runs(self, Py_ssize_t entry):
        """``entry``'s list as it lies: (segment ids, filters) of its main run, followed, for
        a long list with a delta run, by (segment ids, filters) of that run. Read-only views,
        each run sorted by filter, both of one version of the list. Candidate selection reads
        a long list so, without merging it (``refs``)."""
        self._check_entry(entry)
        cdef _Generation g = self.g
        cdef int64_t main = g.er[entry], delta = self._delta(g, entry)
        cdef Py_ssize_t off = main >> LEN_BITS, n = main & LEN_MASK
        cdef Py_ssize_t doff = delta >> LEN_BITS, d = delta & LEN_MASK
        if d == 0:
            return (_run_view(g.ref_seg, off, n), _run_view(g.ref_filter, off, n))
        return (_run_view(g.ref_seg, off, n), _run_view(g.ref_filter, off, n),
                _run_view(g.ref_seg, doff, d), _run_view(g.ref_filter, doff, d))

    def list_len(self, Py_ssize_t entry) -> int:
        self._check_entry(entry)
        return self._len(self.g, entry)

    def longest_list(self) -> int:
        """The length of the longest posting list (0 with no entry), for statistics."""
        cdef _Generation g = self.g
        cdef Py_ssize_t e
        cdef int64_t n = 0
        for e in range(self.n_entries):
            n = max(n, self._len(g, e))
        return n

    def key_of(self, Py_ssize_t entry) -> int:
        self._check_entry(entry)
        return self.g.ek[entry]

    def flags(self, Py_ssize_t entry) -> int:
        self._check_entry(entry)
        return self.g.ef[entry]

    def remat_pending(self, Py_ssize_t entry) -> bool:
        """Whether ``entry`` is a pruned entry whose rematerialization has not run yet."""
        self._check_entry(entry)
        return (self.g.ef[entry] & F_REMAT) != 0

    # -- writes (serialized by the caller) ----------------------------------------------------
    def set_flags(self, Py_ssize_t entry, int flags):
        self._check_entry(entry)
        if not 0 <= flags <= 0xFF:
            raise ValueError(f"flags must be in [0, 255], got {flags}")
        self.g.ef[entry] = <uint8_t>flags

    def make_visible(self, entries):
        """Publish several private entries in one step (no thread switch can split it)."""
        cdef int64_t[::1] ev = np.ascontiguousarray(entries, dtype=np.int64)
        cdef _Generation g = self.g
        cdef Py_ssize_t i
        for i in range(ev.shape[0]):
            self._check_entry(ev[i])
        for i in range(ev.shape[0]):
            g.ef[ev[i]] |= 1

    def add_entry(self, uint64_t key, int flags=0) -> int:
        """Create an empty entry for ``key`` (which must be absent) and return its id."""
        if self._find(self.g, key) >= 0:
            raise KeyError(f"routing key {key} already has an entry")
        if self.n_entries >= MAX_ENTRIES:
            raise OverflowError(f"the routing table holds at most {MAX_ENTRIES} entries")
        if (10 * (self.n_entries + 1) > 7 * self.g.s.shape[0]
                or self.n_entries == self.g.ek.shape[0]):
            self._grow_entries()
        cdef _Generation g = self.g
        cdef Py_ssize_t e = self.n_entries
        g.ek[e] = key  # written before the slot that makes it reachable
        g.er[e] = 0
        g.ef[e] = <uint8_t>flags
        cdef Py_ssize_t mask = g.s.shape[0] - 1
        cdef Py_ssize_t i = <Py_ssize_t>(_mix(key) & mask)
        while g.s[i] != EMPTY:
            i = (i + 1) & mask
        g.s[i] = <uint32_t>e
        self.n_entries = e + 1
        return e

    def publish(self, Py_ssize_t entry, segs, filters):
        """Replace ``entry``'s list with (segs, filters): 1-D uint64 arrays of one length, at
        most ``max_list``, the filters ascending (the list's order) and the segment ids unique
        (copied: any layout is taken)."""
        self._check_entry(entry)
        for name, a in (("segs", segs), ("filters", filters)):
            if not (isinstance(a, np.ndarray) and a.dtype.kind == "u" and a.itemsize == 8
                    and a.ndim == 1):
                raise TypeError(f"{name} must be a 1-D uint64 array")
        cdef uint64_t[::1] sv = np.require(segs, np.uint64, ["C_CONTIGUOUS", "ALIGNED"])
        cdef uint64_t[::1] fv = np.require(filters, np.uint64, ["C_CONTIGUOUS", "ALIGNED"])
        cdef Py_ssize_t n = sv.shape[0], i
        if fv.shape[0] != n:
            raise ValueError("segs and filters must have the same length")
        if n > self._max_list:
            raise ValueError(f"posting list of {n} references exceeds the limit {self._max_list}")
        for i in range(1, n):
            if fv[i] < fv[i - 1]:
                raise ValueError("filters must be ascending")
        if len(np.unique(segs)) != n:
            raise ValueError("segs must hold unique segment ids")
        cdef Py_ssize_t old = self._len(self.g, entry)
        if self.arena_used + n > self.g.ref_seg.shape[0]:
            self._grow_arena(n)
        cdef _Generation g = self.g
        cdef uint64_t[::1] rs = g.ref_seg
        cdef uint64_t[::1] rf = g.ref_filter
        cdef Py_ssize_t off = self.arena_used
        for i in range(n):
            rs[off + i] = sv[i]
            rf[off + i] = fv[i]
        self.arena_used = off + n
        g.er[entry] = packed(off, n)
        g.deltas.pop(entry, None)
        self.live_refs += n - old
        for i in range(n):
            self._listed(sv[i])

    def update_member(self, Py_ssize_t entry, uint64_t seg, uint64_t filt) -> bool:
        """If ``seg`` is on ``entry``'s list: give it filter ``filt`` (publishing a re-sorted
        copy only when the filter changed) and return True; else change nothing, return False."""
        self._check_entry(entry)
        return self._update(entry, seg, filt) != 0

    cdef inline void _listed(self, uint64_t seg) noexcept:
        if seg > self._top_seg:
            self._top_seg = seg

    cdef bint _fresh(self, uint64_t seg) except -1:
        """Whether ``seg`` is above every listed segment id, so on no list."""
        if not self._top_known:
            # the arena's used part holds every listed id (and superseded ones: still a bound)
            self._top_seg = self.g.ref_seg[:self.arena_used].max() if self.arena_used else 0
            self._top_known = True
        return seg > self._top_seg

    cdef int _update(self, Py_ssize_t entry, uint64_t seg, uint64_t filt) except -1:
        cdef _Generation g = self.g
        cdef int64_t main = g.er[entry], delta = self._delta(g, entry)
        cdef Py_ssize_t off = main >> LEN_BITS, n = main & LEN_MASK
        cdef Py_ssize_t doff = delta >> LEN_BITS, d = delta & LEN_MASK, i
        cdef uint64_t[::1] rs = g.ref_seg
        cdef uint64_t[::1] rf = g.ref_filter
        for i in range(d):  # the latest additions first: an extension re-places a recent one
            if rs[doff + i] == seg:
                if rf[doff + i] != filt:
                    self._rewrite(entry, -1, i, seg, filt)
                return 1
        for i in range(n):
            if rs[off + i] == seg:
                if rf[off + i] != filt:
                    self._rewrite(entry, i, -1, seg, filt)
                return 1
        return 0

    def add_member(self, Py_ssize_t entry, uint64_t seg, uint64_t filt):
        """Publish ``entry``'s list with (seg, filt) inserted after the filters <= ``filt``."""
        self._check_entry(entry)
        self._rewrite(entry, -1, -1, seg, filt)

    def walk_points(self, Points points not None, ids, filters, uint64_t seg, Py_ssize_t i,
                    Py_ssize_t prev, bint outside_build=False, Py_ssize_t root=-1,
                    bint blocked=False):
        """Algorithm 2's placement walk of segment ``seg`` (block IDs ``ids``, ``points.count``
        of them) over the routing points and placement rules of ``points``, from point ``i``,
        ``prev`` the last retained entry (-1: none yet). ``filters``: ``points.filters(ids)``,
        the segment's filter at each point. The points' ranges were checked once, when
        ``points`` was built for every segment of its length. The walk refreshes existing
        members, prunes, and adds the segment to existing entries, and stops where the caller
        must act: returns (j, prev, entry, parent, blocked) with ``entry`` -1 when point j's
        key has no entry (``parent``: the entry enabling it, or -1), or the entry that just
        gained the member and crossed tau or the pruning threshold. j == ``points.n``: the
        walk is done. The caller passes ``blocked`` back when it resumes the walk.

        Once the walk has retained an entry whose rematerialization is queued (other than
        ``root``, the entry a rematerialization build is re-placing), it is ``blocked``: it
        creates no entry for the rest of the segment, like below a pruned one, but still
        joins the entries that exist. That rematerialization re-places the segment below the
        entry together with every older member, so no entry is ever created, and published,
        holding some of the segments with its key but not the others.

        ``outside_build``: the walk places a new or extended segment, not a member of a
        back-fill or rematerialization build. A missing entry whose enabling entry is not
        being back-filled is then created here instead of returned (-1), since outside
        builds such an entry is never private; it is made visible once its list holds the
        segment, so no match finds it empty.
        """
        cdef cnp.ndarray a = points.checked(ids, "ids", points.count)
        cdef cnp.ndarray f = points.checked(filters, "filters", points.n)
        if i < 0 or not -1 <= prev < self.n_entries or not -1 <= root < self.n_entries:
            raise ValueError(f"point {i}, previous entry {prev} or root {root} out of range")
        return self._walk(<const uint64_t*>cnp.PyArray_DATA(a), points.offsets_p,
                          points.parents_p, points.refinable_p,
                          <const uint64_t*>cnp.PyArray_DATA(f), points.n, &points.rules, seg,
                          i, prev, outside_build, root, blocked)

    cdef tuple _walk(self, const uint64_t* ids, const int64_t* offsets, const int64_t* parents,
                     const uint8_t* refinable, const uint64_t* filters, Py_ssize_t n,
                     const WalkRules* rules, uint64_t seg, Py_ssize_t i, Py_ssize_t prev,
                     bint outside_build, Py_ssize_t root, bint blocked):
        """The walk of ``walk_points``, its arguments checked (every offset and parent a
        block of ``ids``)."""
        cdef Py_ssize_t e, parent, m
        cdef uint8_t fl
        cdef bint created
        cdef _Generation g
        cdef bint pruning = rules.pruning, refinement = rules.refinement
        cdef Py_ssize_t threshold = rules.threshold, tau = rules.tau
        # A new segment is on no list: no member to refresh. Decided before the walk lists it
        # (a resumed walk finds it listed and searches, as for an extension).
        cdef bint fresh = self._fresh(seg)
        while i < n:
            g = self.g
            if prev >= 0 and prev != root and g.ef[prev] & F_REMAT:
                blocked = True
            parent = -1
            if parents[i] >= 0:
                parent = self._find(g, ids[parents[i]])
                if parent < 0 or not g.ef[parent] & (F_REFINED | F_REFINING):
                    i += 1
                    continue
            e = self._find(g, ids[offsets[i]])
            if e >= 0 and not fresh and self._update(e, seg, filters[i]):
                prev = e
                i += 1
                continue
            created = e < 0
            if created:
                # Pruning and a queued rematerialization only keep the walk from creating an
                # entry: an existing one must list every segment with its key, since a match
                # routes through the deepest entry it finds.
                if prev >= 0 and pruning and self._len(g, prev) <= threshold:
                    g.ef[prev] |= F_PRUNED
                    i += 1
                    continue
                if blocked:
                    i += 1
                    continue
                if not outside_build or (parent >= 0 and g.ef[parent] & F_REFINING):
                    return i, prev, -1, parent, blocked
                e = self.add_entry(ids[offsets[i]], 0)
            self._rewrite(e, -1, -1, seg, filters[i])  # may grow the arena, releasing the GIL
            g = self.g
            if created:  # visible once its list holds the segment: until then a match
                g.ef[e] |= F_VISIBLE  # routes through the entry above it
            m = self._len(g, e)
            fl = g.ef[e]
            if ((refinable[i] and refinement and m > tau and not fl & (F_REFINED | F_REFINING))
                    or (pruning and fl & F_PRUNED and m > threshold)):
                return i, prev, e, parent, blocked
            prev = e
            i += 1
        return n, prev, -1, -1, blocked

    cdef int _rewrite(self, Py_ssize_t entry, Py_ssize_t drop_main, Py_ssize_t drop_delta,
                      uint64_t seg, uint64_t filt) except -1:
        """Copy-on-write: publish ``entry``'s list without position ``drop_main`` of its main
        run and ``drop_delta`` of its delta run (-1: none), and with (seg, filt) after the
        filters <= ``filt``. The new version is written past the arena's end: the delta run
        alone while the main run is kept and the delta has room (``delta_room``), else both
        runs merged into a new main run. An addition to a full list is skipped (the class
        docstring)."""
        cdef _Generation g = self.g
        cdef Py_ssize_t n = g.er[entry] & LEN_MASK, d = self._delta(g, entry) & LEN_MASK
        cdef Py_ssize_t d_new = d - (drop_delta >= 0) + 1
        cdef bint to_delta = drop_main < 0 and d_new <= delta_room(n)
        cdef Py_ssize_t m = d_new if to_delta else n - (drop_main >= 0) + d_new
        if drop_main < 0 and drop_delta < 0 and n + d + 1 > self._max_list:
            self.refs_skipped += 1  # a full list: the segment is not listed here
            return 0
        if self.arena_used + m > g.ref_seg.shape[0]:
            self._grow_arena(m)
            g = self.g  # growth may have moved the runs (keeping their order and lengths)
        cdef int64_t main = g.er[entry], delta = self._delta(g, entry)
        cdef Py_ssize_t off = main >> LEN_BITS, doff = delta >> LEN_BITS, dst = self.arena_used
        cdef uint64_t* rs = base(g.ref_seg)
        cdef uint64_t* rf = base(g.ref_filter)
        if to_delta:
            merge_runs(NULL, NULL, 0, -1, rs + doff, rf + doff, d, drop_delta, True, seg, filt,
                       rs + dst, rf + dst)
            g.deltas[entry] = packed(dst, m)
        else:
            merge_runs(rs + off, rf + off, n, drop_main, rs + doff, rf + doff, d, drop_delta,
                       True, seg, filt, rs + dst, rf + dst)
            g.er[entry] = packed(dst, m)
            if d:
                del g.deltas[entry]
        self.arena_used = dst + m
        self.live_refs += self._len(g, entry) - n - d
        self._listed(seg)
        return 0

    # -- growth and compaction: build a new generation, then swap it in ------------------------
    def _grow_entries(self):
        """Room for one more entry: larger entry arrays when they are full, a larger table
        when its load would pass 0.7. Both are new arrays, so old generations stay intact."""
        g = self.g
        m = self.n_entries
        ek, er, ef = g.entry_key, g.entry_ref, g.entry_flags
        if m == ek.shape[0]:
            n = max(16, m * 3 // 2)
            ek, er, ef = np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros(n, np.uint8)
            ek[:m] = g.entry_key[:m]
            er[:m] = g.entry_ref[:m]
            ef[:m] = g.entry_flags[:m]
        cap = g.slots.shape[0]
        while 7 * cap < 10 * (m + 1):
            cap *= 2
        slots = _build_table(ek[:m], cap) if cap != g.slots.shape[0] else g.slots.copy()
        self.g = _Generation(slots, ek, er, ef, g.ref_seg, g.ref_filter, g.deltas)

    def _grow_arena(self, Py_ssize_t need):
        g = self.g
        if 2 * self.arena_used > 3 * self.live_refs + 256:
            self._compact(need)
            return
        size = max(g.ref_seg.shape[0] * 3 // 2, self.arena_used + need + 64)
        rs = np.zeros(size, np.uint64)
        rf = np.zeros(size, np.uint64)
        rs[:self.arena_used] = g.ref_seg[:self.arena_used]
        rf[:self.arena_used] = g.ref_filter[:self.arena_used]
        self.g = _Generation(g.slots, g.entry_key, g.entry_ref, g.entry_flags, rs, rf, g.deltas)

    def _compact(self, Py_ssize_t need):
        """Drop superseded list versions: copy the live runs into fresh arrays, each run as it
        is (a caller may hold a position in one)."""
        g = self.g
        cdef Py_ssize_t m = self.n_entries
        size = max(64, (self.live_refs + need) * 5 // 4)
        rs_new = np.zeros(size, np.uint64)
        rf_new = np.zeros(size, np.uint64)
        er_new = g.entry_ref.copy()
        cdef uint64_t[::1] rs = rs_new
        cdef uint64_t[::1] rf = rf_new
        cdef uint64_t[::1] old_s = g.ref_seg
        cdef uint64_t[::1] old_f = g.ref_filter
        cdef int64_t[::1] er = er_new
        cdef Py_ssize_t off = 0, e
        with nogil:
            for e in range(m):
                er[e] = _copy_run(er[e], old_s, old_f, rs, rf, &off)
        cdef dict deltas = {}
        for e, run in g.deltas.items():
            deltas[e] = _copy_run(run, old_s, old_f, rs, rf, &off)
        self.arena_used = off
        self.g = _Generation(g.slots, g.entry_key, er_new, g.entry_flags, rs_new, rf_new, deltas)

    # -- whole-directory views, for statistics and snapshots -----------------------------------
    def entry_flags(self):
        """The flags of every entry, in entry order (a read-only view, no copy)."""
        flags = self.g.entry_flags[:self.n_entries]
        flags.flags.writeable = False
        return flags

    def nbytes(self) -> int:
        """Bytes held by the directory's arrays (table, entries, arena); the delta runs'
        positions (a few long lists') are not counted."""
        g = self.g
        return int(g.slots.nbytes + g.entry_key.nbytes + g.entry_ref.nbytes
                   + g.entry_flags.nbytes + g.ref_seg.nbytes + g.ref_filter.nbytes)

    def export(self):
        """Compact arrays of the whole directory: (entry keys, flags, list lengths, segs, filters).

        Lists appear in entry order, each as one sorted run (``refs``), so the arrays are all
        a snapshot needs.
        """
        cdef _Generation g = self.g
        cdef Py_ssize_t m = self.n_entries, e, o = 0
        lengths = np.empty(m, np.uint32)
        cdef uint32_t[::1] lens = lengths
        cdef int64_t main, delta
        for e in range(m):
            lens[e] = <uint32_t>self._len(g, e)
        total = int(lengths.sum(dtype=np.int64))
        segs, filters = np.empty(total, np.uint64), np.empty(total, np.uint64)
        cdef uint64_t* rs = base(g.ref_seg)
        cdef uint64_t* rf = base(g.ref_filter)
        cdef uint64_t* out_s = base(segs)
        cdef uint64_t* out_f = base(filters)
        for e in range(m):
            main, delta = g.er[e], self._delta(g, e)
            o += merge_runs(rs + (main >> LEN_BITS), rf + (main >> LEN_BITS), main & LEN_MASK,
                            -1, rs + (delta >> LEN_BITS), rf + (delta >> LEN_BITS),
                            delta & LEN_MASK, -1, False, 0, 0, out_s + o, out_f + o)
        return g.entry_key[:m].copy(), g.entry_flags[:m].copy(), lengths, segs, filters

    def table_slots(self):
        """The open-addressing table as a uint32 copy: the entry id in each slot, EMPTY_SLOT
        where empty. With ``export()``'s arrays it restores the table without one insertion
        per entry (``from_arrays(..., slots=...)``)."""
        return self.g.slots.copy()

    @classmethod
    def from_arrays(cls, entry_key, entry_flags, lengths, segs, filters, slots=None):
        """A table over ``export()``'s arrays. The posting-list arena (``segs``, ``filters``:
        nearly all of a snapshot's bytes) is adopted without a copy when it is C-contiguous,
        writable and of native dtype, as a snapshot's read buffer is; the first list write
        that needs room moves it into growable arrays. Entry arrays are copied with a quarter
        of headroom. The hash table is ``slots`` (``table_slots()`` of the same table), checked
        and copied in one pass, when given; else it is built by inserting every entry."""
        m = len(entry_key)
        if len(entry_flags) != m or len(lengths) != m:
            raise ValueError(f"{m} entry keys, {len(entry_flags)} flags and {len(lengths)} "
                             f"lengths")
        n = max(m + m // 4, 16)
        ek = np.zeros(n, np.uint64)
        ef = np.zeros(n, np.uint8)
        er = np.zeros(n, np.int64)
        ek[:m] = entry_key
        ef[:m] = entry_flags
        lens = np.asarray(lengths, dtype=np.int64)
        if m and (lens.min() < 0 or lens.max() > MAX_LIST):
            raise ValueError("posting-list lengths out of range")
        ends = np.cumsum(lens)
        total = int(ends[m - 1]) if m else 0
        er[:m] = ((ends - lens) << LEN_BITS) | lens
        rs = _adopt(segs, np.uint64)
        rf = _adopt(filters, np.uint64)
        if rs.shape[0] != total or rf.shape[0] != total:
            raise ValueError(f"lists hold {total} references, got {rs.shape[0]} segment ids "
                             f"and {rf.shape[0]} filters")
        _check_sorted(rf, lens)
        cap = 16
        while 7 * cap < 10 * n:
            cap *= 2
        slots = _build_table(ek[:m], cap) if slots is None else _copy_slots(slots, m)
        cdef RoutingTable t = cls(16)
        t.g = _Generation(slots, ek, er, ef, rs, rf, {})
        t.n_entries = m
        t.arena_used = total
        t.live_refs = total
        t._top_known = False
        return t


cdef int64_t _copy_run(int64_t run, const uint64_t[::1] old_s, const uint64_t[::1] old_f,
                       uint64_t[::1] rs, uint64_t[::1] rf, Py_ssize_t* off) noexcept nogil:
    """Copy the run ``run`` (packed offset and length) of the old arrays to ``off[0]`` of the
    new ones; return its new packed position and advance ``off[0]`` past it."""
    cdef Py_ssize_t o = run >> LEN_BITS, n = run & LEN_MASK, i
    for i in range(n):
        rs[off[0] + i] = old_s[o + i]
        rf[off[0] + i] = old_f[o + i]
    run = packed(off[0], n)
    off[0] += n
    return run


def _adopt(a, dtype):
    """``a`` itself when it is a C-contiguous, writable, aligned array of native ``dtype``;
    else a copy that is."""
    return np.require(a, dtype, ["C_CONTIGUOUS", "WRITEABLE", "ALIGNED"])


def _check_sorted(const uint64_t[::1] filters, const int64_t[::1] lengths):
    """ValueError unless each list (``lengths`` of them, one after the other in
    ``filters``) is sorted by filter, as candidate selection needs."""
    cdef Py_ssize_t e, j, off = 0, bad = -1
    with nogil:
        for e in range(lengths.shape[0]):
            for j in range(off + 1, off + lengths[e]):
                if filters[j] < filters[j - 1]:
                    bad = e
                    break
            if bad >= 0:
                break
            off += lengths[e]
    if bad >= 0:
        raise ValueError(f"the posting list of entry {bad} is not sorted by filter")


def _copy_slots(slots, Py_ssize_t entries):
    """A copy of ``table_slots()``'s array, made in the pass that checks its shape: a
    power-of-two capacity with room for ``entries``, every slot empty or an entry id below
    ``entries``, each entry in one slot. Where in its probe sequence each entry sits is not
    checked: that would cost what building the table does, which saving it avoids."""
    cdef const uint32_t[::1] src = np.ascontiguousarray(slots, dtype=np.uint32)
    cdef Py_ssize_t cap = src.shape[0], i, used = 0, bad = 0, twice = 0
    if cap < 16 or cap & (cap - 1) or 10 * entries > 7 * cap:
        raise ValueError(f"table of {cap} slots cannot hold {entries} entries")
    out = np.empty(cap, np.uint32)
    seen = np.zeros(entries, np.uint8)
    cdef uint32_t[::1] o = out
    cdef uint8_t[::1] sn = seen
    cdef uint32_t v
    with nogil:
        for i in range(cap):
            v = src[i]
            o[i] = v
            if v != EMPTY:
                if v >= entries:
                    bad += 1
                elif sn[v]:
                    twice += 1
                else:
                    sn[v] = 1
                    used += 1
    if bad or twice or used != entries:
        raise ValueError(f"table slots name {used} entries of {entries} ({bad} out of range, "
                         f"{twice} named twice)")
    return out


def _build_table(entry_key, Py_ssize_t cap):
    """The slots of an open-addressing table of capacity ``cap`` for the given entry keys."""
    slots = np.full(cap, EMPTY, np.uint32)
    cdef uint32_t[::1] s = slots
    cdef const uint64_t[::1] ek = np.ascontiguousarray(entry_key, dtype=np.uint64)
    cdef Py_ssize_t mask = cap - 1, e, i
    with nogil:
        for e in range(ek.shape[0]):
            i = <Py_ssize_t>(_mix(ek[e]) & mask)
            while s[i] != EMPTY:
                i = (i + 1) & mask
            s[i] = <uint32_t>e
    return slots
