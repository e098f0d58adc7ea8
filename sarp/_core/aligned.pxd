# Alignment of the buffers the kernels read.
#
# A typed memoryview takes any buffer of its item type, also one whose data does not start at
# a multiple of the item size (numpy.frombuffer at an odd offset, a slice of a bytes-like
# object). The kernels read items through typed pointers, and C requires those to be aligned:
# each kernel refuses such a buffer, naming the argument, before it reads.

from libc.stdint cimport uintptr_t


cdef inline int check_aligned(const void* p, size_t size, str name) except -1:
    """ValueError naming ``name`` unless ``p`` (NULL for an empty buffer) is a multiple of
    ``size``."""
    if <uintptr_t>p % size:
        raise ValueError(f"{name} must be aligned to {size} bytes (its data starts at an "
                         f"address that is not a multiple of {size})")
    return 0
