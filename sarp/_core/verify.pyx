"""Post-retrieval verification: how far a stored segment's block IDs agree with the query's.

Called once per retrieved candidate on the matching path, so the call itself is kept lean: a
uint64 ndarray is read through its data pointer without building a memoryview.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport uint64_t

cnp.import_array()


cdef cnp.ndarray as_u64(object x, str name):
    """``x`` as a 1-D C-contiguous aligned native uint64 array (no copy); else TypeError
    (dtype) or ValueError (shape, layout, alignment) naming ``name``."""
    cdef cnp.ndarray arr = x if cnp.PyArray_Check(x) else np.asarray(x)
    if not (cnp.PyArray_ISUNSIGNED(arr) and cnp.PyArray_ITEMSIZE(arr) == 8
            and cnp.PyArray_ISNOTSWAPPED(arr)):
        raise TypeError(f"{name} must be a uint64 array, got dtype {arr.dtype}")
    if cnp.PyArray_NDIM(arr) != 1 or not cnp.PyArray_IS_C_CONTIGUOUS(arr):
        raise ValueError(f"{name} must be 1-D and C-contiguous, got shape {(<object>arr).shape}")
    if not cnp.PyArray_ISALIGNED(arr):  # read through a uint64_t*, which must be aligned
        raise ValueError(f"{name} must be aligned (its data is not at a multiple of 8 bytes)")
    return arr


def common_prefix(a, Py_ssize_t a_off, b, Py_ssize_t b_off, Py_ssize_t limit=-1):
    """Count of consecutive i with a[a_off+i] == b[b_off+i], stopping at the first difference,
    the end of either array, or ``limit`` positions (limit < 0: no limit)."""
    cdef cnp.ndarray arr_a = as_u64(a, "a")
    cdef cnp.ndarray arr_b = as_u64(b, "b")
    cdef Py_ssize_t na = cnp.PyArray_DIM(arr_a, 0), nb = cnp.PyArray_DIM(arr_b, 0)
    if a_off < 0 or a_off > na:
        raise ValueError(f"a_off must be in [0, {na}], got {a_off}")
    if b_off < 0 or b_off > nb:
        raise ValueError(f"b_off must be in [0, {nb}], got {b_off}")
    cdef Py_ssize_t n = na - a_off if na - a_off < nb - b_off else nb - b_off
    if 0 <= limit < n:
        n = limit
    cdef const uint64_t* pa = <const uint64_t*>cnp.PyArray_DATA(arr_a) + a_off
    cdef const uint64_t* pb = <const uint64_t*>cnp.PyArray_DATA(arr_b) + b_off
    cdef Py_ssize_t i = 0
    while i < n and pa[i] == pb[i]:
        i += 1
    return i
