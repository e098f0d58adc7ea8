# The packed-filter primitives and Algorithm 1's candidate selection, shared (cimported) by
# filters.pyx, window.pyx and routing_table.pyx. The primitives work on raw pointers and run
# without the GIL; check_layout checks the filter layout the callers are given.

from libc.stdint cimport uint64_t


cdef extern from "xxh64.h" nogil:
    uint64_t sarp_xxh64_u64s(const uint64_t* v, size_t n, uint64_t seed)


cdef inline int check_layout(int n_fields, int bits) except -1:
    """ValueError unless a filter of ``n_fields`` fields of ``bits`` bits fills 64 bits (the
    layout every kernel that packs or compares filters takes)."""
    if bits < 1 or bits > 32:
        raise ValueError(f"bits must be in 1..32, got {bits}")
    if n_fields * bits != 64:
        raise ValueError(f"n_fields * bits must be 64, got n_fields={n_fields}, bits={bits}")
    return 0


cdef inline uint64_t top_mask(int k, int bits) noexcept nogil:
    """Mask of the top k*bits bits."""
    if k == 0:
        return 0
    return (~<uint64_t>0) << (64 - k * bits)


cdef inline Py_ssize_t lower_bound(const uint64_t* a, Py_ssize_t n, uint64_t x) noexcept nogil:
    """First index i with a[i] >= x in the sorted a[0:n]."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t upper_bound(const uint64_t* a, Py_ssize_t n, uint64_t x) noexcept nogil:
    """First index i with a[i] > x in the sorted a[0:n]."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline bint exists(const uint64_t* filters, Py_ssize_t n, uint64_t fq, int k,
                        int bits) noexcept nogil:
    """Algorithm 1 ExistsMatch: some filter lies in [F_min(k), F_max(k)]."""
    cdef uint64_t mask = top_mask(k, bits)
    cdef uint64_t fmin = fq & mask
    cdef Py_ssize_t i = lower_bound(filters, n, fmin)
    return i < n and filters[i] <= (fmin | ~mask)


cdef inline int best(const uint64_t* filters, Py_ssize_t n, uint64_t fq, int n_fields,
                     int bits) noexcept nogil:
    """Largest k in [0, n_fields] with exists(k), or -1 for an empty list (binary search on k)."""
    if n == 0:
        return -1
    cdef int lo = 0, hi = n_fields, mid
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if exists(filters, n, fq, mid, bits):
            lo = mid
        else:
            hi = mid - 1
    return lo


cdef inline int leading_fields(uint64_t a, uint64_t b, int n_fields, int bits) noexcept nogil:
    cdef uint64_t x = a ^ b
    cdef int i
    for i in range(n_fields):
        if x >> (64 - (i + 1) * bits) != 0:
            return i
    return n_fields


cdef inline uint64_t pack(const uint64_t* ids, Py_ssize_t p, Py_ssize_t end, int n_fields,
                          int bits, Py_ssize_t stride) noexcept nogil:
    """The packed filter at ``p`` from the blocks ids[p:end] (regions past end are 0)."""
    cdef uint64_t mask = (<uint64_t>1 << bits) - 1
    cdef uint64_t f = 0
    cdef Py_ssize_t lo, hi
    cdef int i
    if stride > end:  # field 1 holds every block before end (0 <= p <= end): same filter,
        stride = end  # and no overflow below
    if end > p + n_fields * stride:
        end = p + n_fields * stride
    for i in range(n_fields):
        lo = p + i * stride
        if lo >= end:
            break
        hi = lo + stride if lo + stride < end else end
        f |= (sarp_xxh64_u64s(&ids[lo], <size_t>(hi - lo), 0) & mask) << (64 - (i + 1) * bits)
    return f


# -- Algorithm 1's selection order, produced one candidate at a time ----------------------------
#
# Level k holds the candidates whose filter shares exactly k leading fields with the query's:
# the range [F_min(k), F_max(k)] of the sorted list minus level k+1's range. Levels are visited
# from k* down; within a level the candidate with the largest segment id (the newest segment)
# comes first. Without segment ids (segs == NULL), ascending list index. Segment ids are unique
# within a list, so "the largest id below the last one taken" walks a level without a buffer:
# O(level size) per candidate, nothing next to the segment read that follows each one.
#
# A list may come as two sorted runs (a long posting list's main and delta runs,
# routing_table.pyx): each level is then a range of each run, and a candidate's index counts
# run 0's entries first. The order is the one the two runs merged into one list would give,
# since it depends on the filters and segment ids only.

cdef struct Run:
    const uint64_t* filters  # sorted
    const uint64_t* segs
    Py_ssize_t n
    Py_ssize_t lo, hi, inner_lo, inner_hi  # level k = [lo, inner_lo) + [inner_hi, hi)


cdef struct Selection:
    Run runs[2]
    uint64_t fq
    int bits
    int k  # the current level; below k_min: exhausted
    int k_min  # the last level (n_fields without filtering: one level of everything)
    bint started  # a candidate of level k was taken ...
    uint64_t last  # ... and this was its key


cdef inline void level_range(Selection* s) noexcept nogil:
    cdef uint64_t mask = top_mask(s.k, s.bits)
    cdef int r
    for r in range(2):
        s.runs[r].lo = lower_bound(s.runs[r].filters, s.runs[r].n, s.fq & mask)
        s.runs[r].hi = upper_bound(s.runs[r].filters, s.runs[r].n, (s.fq & mask) | ~mask)


cdef inline Py_ssize_t selection_init(Selection* s, const uint64_t* filters, const uint64_t* segs,
                                      Py_ssize_t n, const uint64_t* filters2,
                                      const uint64_t* segs2, Py_ssize_t n2, uint64_t fq,
                                      int n_fields, int bits, bint filtering) noexcept nogil:
    """Start the walk over a list of ``n`` references and, when ``n2``, a second run of it;
    returns the size of the first level (the candidates sharing k* fields)."""
    s.runs[0].filters, s.runs[0].segs, s.runs[0].n = filters, segs, n
    s.runs[1].filters, s.runs[1].segs, s.runs[1].n = filters2, segs2, n2
    s.fq, s.bits = fq, bits
    s.started = False
    s.last = 0
    cdef int r
    for r in range(2):
        s.runs[r].lo = s.runs[r].hi = s.runs[r].inner_lo = s.runs[r].inner_hi = 0
    if n + n2 == 0:
        s.k, s.k_min = -1, 0
        return 0
    if not filtering:
        s.k = s.k_min = n_fields
        s.runs[0].hi, s.runs[1].hi = n, n2
        return n + n2
    s.k = max(best(filters, n, fq, n_fields, bits), best(filters2, n2, fq, n_fields, bits))
    s.k_min = 0
    level_range(s)
    for r in range(2):
        s.runs[r].inner_lo = s.runs[r].inner_hi = s.runs[r].lo
    return s.runs[0].hi - s.runs[0].lo + s.runs[1].hi - s.runs[1].lo


cdef inline uint64_t selection_key(const Selection* s, int r, Py_ssize_t i) noexcept nogil:
    if s.runs[r].segs != NULL:
        return s.runs[r].segs[i]
    return <uint64_t>(s.runs[0].n + s.runs[1].n - 1 - (i + r * s.runs[0].n))


cdef inline Py_ssize_t newest_in(const Selection* s, int r, Py_ssize_t a, Py_ssize_t b,
                                 Py_ssize_t found, uint64_t* top) noexcept nogil:
    """The untaken candidate of [a, b) of run ``r`` with the largest key, if above ``found``'s
    (``top``); as an index that counts run 0 first."""
    cdef Py_ssize_t i
    cdef uint64_t key
    for i in range(a, b):
        key = selection_key(s, r, i)
        if (not s.started or key < s.last) and (found < 0 or key > top[0]):
            found = i + r * s.runs[0].n
            top[0] = key
    return found


cdef inline Py_ssize_t selection_next(Selection* s, int* k) noexcept nogil:
    """The next candidate's index (its level in ``k``), or -1 when none is left."""
    cdef Py_ssize_t found
    cdef uint64_t top = 0
    cdef int r
    while s.k >= s.k_min:
        found = -1
        for r in range(2):
            found = newest_in(s, r, s.runs[r].lo, s.runs[r].inner_lo, found, &top)
            found = newest_in(s, r, s.runs[r].inner_hi, s.runs[r].hi, found, &top)
        if found >= 0:
            s.started = True
            s.last = top
            k[0] = s.k
            return found
        s.k -= 1
        if s.k >= s.k_min:
            for r in range(2):
                s.runs[r].inner_lo, s.runs[r].inner_hi = s.runs[r].lo, s.runs[r].hi
            level_range(s)
            s.started = False
    return -1
