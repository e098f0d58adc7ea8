# The uint64 arrays the compiled loops read through a uint64_t* (the window loop, placement):
# one check of type and layout, and of alignment through sarp/_core/aligned.pxd.

cimport numpy as cnp

from sarp._core.aligned cimport check_aligned


cdef inline cnp.ndarray u64_array(object x, str name):
    """``x`` (no copy) if it is a 1-D C-contiguous native uint64 ndarray, else TypeError;
    ValueError unless aligned: the loops read it through a ``uint64_t*``."""
    if not cnp.PyArray_Check(x):
        raise TypeError(f"{name} must be a numpy uint64 array, got {type(x).__name__}")
    cdef cnp.ndarray a = <cnp.ndarray>x
    if not (cnp.PyArray_ISUNSIGNED(a) and cnp.PyArray_ITEMSIZE(a) == 8
            and cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_NDIM(a) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(a)):
        raise TypeError(f"{name} must be a 1-D C-contiguous uint64 array, got dtype {a.dtype} "
                        f"and shape {(<object>a).shape}")
    check_aligned(cnp.PyArray_DATA(a), 8, name)
    return a
