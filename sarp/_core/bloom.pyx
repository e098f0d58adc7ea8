"""Per-page Bloom filters of flashlog: building a page's filter and finding, in a chain of pages,
the newest one whose filter may hold a key.

A key is given by ``h``, the XXH64 of its eight little-endian bytes with seed ``SEED``. Its K
probes are bits ``(h >> 32) + i * ((h & 0xFFFFFFFF) | 1)`` modulo the page's bit count, for
i < K (double hashing; the sum never exceeds 64 bits). Format: docs/flashlog_format.txt.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport uint32_t, uint64_t

from sarp._core.aligned cimport check_aligned

cnp.import_array()

cdef int _K = 11
K = _K  # probes per key
SEED = 0x5EED  # XXH64 seed of the filter hash (the page hash uses seed 0)


cdef inline bint _may_hold(const uint64_t* words, uint64_t nbits, uint64_t h) noexcept nogil:
    cdef uint64_t a = h >> 32, b = <uint64_t>(<uint32_t>h) | 1, pos
    cdef int i
    for i in range(_K):
        pos = (a + b * <uint64_t>i) % nbits
        if not (words[pos >> 6] >> (pos & 63)) & 1:
            return False
    return True


def build(const uint64_t[::1] hashes not None, Py_ssize_t nwords):
    """The ``nwords`` filter words of a page holding the keys of filter hashes ``hashes``."""
    if nwords <= 0:
        raise ValueError(f"nwords must be positive, got {nwords}")
    check_aligned(&hashes[0] if hashes.shape[0] else NULL, 8, "hashes")
    out = np.zeros(nwords, dtype=np.uint64)
    cdef uint64_t[::1] w = out
    cdef uint64_t nbits = <uint64_t>nwords * 64, h, a, b, pos
    cdef Py_ssize_t j
    cdef int i
    with nogil:
        for j in range(hashes.shape[0]):
            h = hashes[j]
            a = h >> 32
            b = <uint64_t>(<uint32_t>h) | 1
            for i in range(_K):
                pos = (a + b * <uint64_t>i) % nbits
                w[pos >> 6] |= (<uint64_t>1) << (pos & 63)
    return out


def newest_hit(const uint64_t[::1] words not None, const uint32_t[:, ::1] pages not None,
               Py_ssize_t before, uint64_t h) -> int:
    """The largest page index below ``before`` whose filter may hold the key of filter hash
    ``h``, or -1. Page j's filter is ``pages[j, 2] & 0xFFFF`` bits from word ``pages[j, 0]``
    of ``words`` (flashlog's chain layout)."""
    if pages.shape[1] < 3:
        raise ValueError(f"pages must have at least 3 columns, got {pages.shape[1]}")
    if before > pages.shape[0]:
        raise ValueError(f"before ({before}) exceeds the {pages.shape[0]} pages given")
    check_aligned(&words[0] if words.shape[0] else NULL, 8, "words")
    check_aligned(&pages[0, 0] if pages.shape[0] else NULL, 4, "pages")
    cdef Py_ssize_t j = before - 1
    cdef uint64_t base, nbits
    cdef Py_ssize_t nw = words.shape[0]
    while j >= 0:
        base = pages[j, 0]
        nbits = pages[j, 2] & 0xFFFF
        if nbits == 0 or base + (nbits + 63) // 64 > <uint64_t>nw:
            raise ValueError(f"page {j}'s filter lies outside the words given")
        if _may_hold(&words[base], nbits, h):
            return j
        j -= 1
    return -1
