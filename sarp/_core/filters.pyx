"""Packed region filters and Algorithm 1 (docs/design.md section 2).

A filter packs N fields of b bits (N*b = 64) into one uint64, most significant field first;
field i hashes the block IDs of region i = [p+(i-1)*stride, p+i*stride). Posting lists keep
filters sorted as unsigned integers, so "the top k fields equal the query's" is one contiguous
range [F_min(k), F_max(k)], found by binary search.
"""

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint64_t

from sarp._core.aligned cimport check_aligned
from sarp._core.filters cimport (
    Selection,
    best,
    check_layout,
    exists,
    leading_fields,
    pack,
    selection_init,
    selection_next,
    top_mask,
)


cdef inline const uint64_t* data(const uint64_t[::1] a) noexcept nogil:
    return &a[0] if a.shape[0] else NULL


cdef const uint64_t* aligned_data(const uint64_t[::1] a, str name) except? NULL:
    """``data(a)``, once ``a`` is known to be aligned (sarp/_core/aligned.pxd)."""
    check_aligned(data(a), 8, name)
    return data(a)


cdef int check_span(Py_ssize_t n, Py_ssize_t end, Py_ssize_t stride) except -1:
    if stride < 1:
        raise ValueError(f"stride must be positive, got {stride}")
    if end < 0 or end > n:
        raise ValueError(f"end must be in [0, {n}] (the length of block_ids), got {end}")
    return 0


def region_filter(
    const uint64_t[::1] block_ids not None,
    Py_ssize_t p,
    Py_ssize_t end,
    int n_fields=8,
    int bits=8,
    Py_ssize_t stride=2,
):
    """The packed filter at routing point ``p`` from the blocks at positions [p, end).

    Field i (1-based) is XXH64 of the IDs present in [p+(i-1)*stride, p+i*stride), masked to
    ``bits`` bits; a region with no block present is 0. Blocks at or past ``end`` (and past
    p + n_fields*stride) are not used.
    """
    check_layout(n_fields, bits)
    check_span(block_ids.shape[0], end, stride)
    if p < 0 or p > end:
        raise ValueError(f"p must be in [0, end={end}], got {p}")
    cdef uint64_t f
    f = pack(aligned_data(block_ids, "block_ids"), p, end, n_fields, bits, stride)
    return f


def filters_at(
    const uint64_t[::1] block_ids not None,
    const int64_t[::1] positions not None,
    Py_ssize_t end,
    int n_fields=8,
    int bits=8,
    Py_ssize_t stride=2,
):
    """``region_filter`` at each of ``positions`` (uint64 array, one filter per position)."""
    check_layout(n_fields, bits)
    check_span(block_ids.shape[0], end, stride)
    cdef Py_ssize_t n = positions.shape[0], i, bad = -1
    cdef const uint64_t* ids = aligned_data(block_ids, "block_ids")
    check_aligned(&positions[0] if n else NULL, 8, "positions")
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] f = out
    for i in range(n):
        if positions[i] < 0 or positions[i] > end:
            bad = i
            break
        f[i] = pack(ids, <Py_ssize_t>positions[i], end, n_fields, bits, stride)
    if bad >= 0:
        raise ValueError(f"positions[{bad}] = {positions[bad]} is outside [0, end={end}]")
    return out


def filter_bounds(uint64_t fq, int k, int n_fields=8, int bits=8):
    """(F_min, F_max): the filters whose top ``k`` fields equal those of ``fq``."""
    check_layout(n_fields, bits)
    if k < 0 or k > n_fields:
        raise ValueError(f"k must be in [0, {n_fields}], got {k}")
    cdef uint64_t mask = top_mask(k, bits)
    return fq & mask, (fq & mask) | ~mask


def exists_match(const uint64_t[::1] filters not None, uint64_t fq, int k, int n_fields=8, int bits=8):
    """Algorithm 1 ExistsMatch: does some filter of the sorted list share fq's top k fields?"""
    check_layout(n_fields, bits)
    if k < 0 or k > n_fields:
        raise ValueError(f"k must be in [0, {n_fields}], got {k}")
    cdef bint found
    found = exists(aligned_data(filters, "filters"), filters.shape[0], fq, k, bits)
    return found


def best_fields(const uint64_t[::1] filters not None, uint64_t fq, int n_fields=8, int bits=8):
    """k*: the most leading fields of ``fq`` any filter of the sorted list shares; -1 if empty.

    L* = k* * stride blocks.
    """
    check_layout(n_fields, bits)
    cdef int k = best(aligned_data(filters, "filters"), filters.shape[0], fq, n_fields, bits)
    return k


def matched_fields(uint64_t a, uint64_t b, int n_fields=8, int bits=8):
    """How many leading fields ``a`` and ``b`` have equal."""
    check_layout(n_fields, bits)
    return leading_fields(a, b, n_fields, bits)


def candidate_order(
    const uint64_t[::1] filters not None, uint64_t fq, Py_ssize_t limit, int n_fields=8, int bits=8,
    const uint64_t[::1] segs=None,
):
    """Indexes into the sorted list in Algorithm 1's selection order, and their matched fields.

    First every filter sharing k* leading fields with ``fq``, then those sharing exactly k*-1,
    and so on down to 0; at most ``limit`` (< 0: all). Within a level, the largest segment id
    of ``segs`` (the list's segment ids, unique) first, or ascending index without ``segs``.
    This is the order the window kernel (sarp._core.window) retrieves candidates in.
    """
    check_layout(n_fields, bits)
    cdef Py_ssize_t n = filters.shape[0]
    if segs is not None and segs.shape[0] != n:
        raise ValueError(f"segs must have one id per filter ({n}), got {segs.shape[0]}")
    cdef Py_ssize_t total = n if limit < 0 or limit > n else limit
    order = np.empty(total, dtype=np.int64)
    matched = np.empty(total, dtype=np.int32)
    cdef int64_t[::1] idx = order
    cdef int32_t[::1] fields = matched
    cdef Selection sel
    cdef Py_ssize_t out = 0, i
    cdef int k = 0
    cdef const uint64_t* ids = aligned_data(segs, "segs") if segs is not None else NULL
    selection_init(&sel, aligned_data(filters, "filters"), ids, n, NULL, NULL, 0, fq, n_fields,
                   bits, True)
    while out < total:
        i = selection_next(&sel, &k)
        if i < 0:  # the selection ran out before every filter was taken: ids repeat
            raise ValueError("segs must hold unique segment ids")
        idx[out] = i
        fields[out] = k
        out += 1
    return order, matched
