"""Chained block IDs: one 64-bit ID per full block of tokens (docs/block_ids_format.txt).

The ID of block i hashes its tokens with the previous block's ID as the seed, so it names the
whole prefix up to and including block i; that makes a routing key prefix-causal.
"""

import numpy as np

from libc.stdint cimport uint32_t, uint64_t

from sarp._core.aligned cimport check_aligned
from sarp._core.gil cimport RELEASE_GIL_BYTES


cdef extern from "xxh64.h" nogil:
    uint64_t sarp_xxh64(const void* p, size_t n, uint64_t seed)
    uint64_t sarp_xxh64_u32s(const uint32_t* v, size_t n, uint64_t seed)


def namespace_seed(const unsigned char[::1] namespace not None):
    """The chain's starting value h_{-1}: XXH64 of the namespace bytes, seed 0."""
    cdef Py_ssize_t n = namespace.shape[0]
    if n == 0:
        return sarp_xxh64(NULL, 0, 0)
    return sarp_xxh64(&namespace[0], <size_t>n, 0)


cdef void _chain(const uint32_t* tokens, Py_ssize_t count, Py_ssize_t block_size, uint64_t h,
                 uint64_t* ids) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(count):
        h = sarp_xxh64_u32s(&tokens[i * block_size], <size_t>block_size, h)
        ids[i] = h


def chain_block_ids(const uint32_t[::1] tokens not None, Py_ssize_t block_size, uint64_t seed):
    """Block IDs of the full blocks of ``tokens`` (uint64, one per block), chained from ``seed``.

    h_i = XXH64(little-endian bytes of block i's tokens, seed=h_{i-1}), h_{-1} = ``seed``.
    A trailing partial block gets no ID.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    cdef Py_ssize_t count = tokens.shape[0] // block_size
    check_aligned(&tokens[0] if tokens.shape[0] else NULL, 4, "tokens")
    out = np.empty(count, dtype=np.uint64)
    if count == 0:
        return out
    cdef uint64_t[::1] ids = out
    if count * block_size * 4 >= RELEASE_GIL_BYTES:
        with nogil:
            _chain(&tokens[0], count, block_size, seed, &ids[0])
    else:
        _chain(&tokens[0], count, block_size, seed, &ids[0])
    return out
