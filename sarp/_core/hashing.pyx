"""XXH64 of a byte string: the hash under block IDs, filter fields and record checksums."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint64_t

from sarp._core.gil cimport RELEASE_GIL_BYTES


cdef extern from "xxh64.h" nogil:
    uint64_t sarp_xxh64(const void* p, size_t n, uint64_t seed)


def xxh64(data, uint64_t seed=0):
    """XXH64 of the bytes of ``data`` (any contiguous buffer) with ``seed``, as an int.

    Equal to ``xxhash.xxh64_intdigest(data, seed)``.
    """
    cdef Py_buffer view
    cdef uint64_t h
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError, ValueError) as exc:
        raise TypeError(f"data must be a contiguous bytes-like object: {exc}") from None
    try:
        if view.len >= RELEASE_GIL_BYTES:
            with nogil:
                h = sarp_xxh64(view.buf, <size_t>view.len, seed)
        else:
            h = sarp_xxh64(view.buf, <size_t>view.len, seed)
    finally:
        PyBuffer_Release(&view)
    return h
