# When the kernels release the GIL.
#
# Releasing the GIL hands it to a thread waiting for it, and taking it back then waits for that
# thread and costs a thread switch: tens of microseconds, more than a kernel takes on one query
# window or one segment record. So the kernels of every match and insert (the window loop,
# filters, verification, the segment codec) keep the GIL. Chained block IDs and XXH64 release
# it for inputs of at least RELEASE_GIL_BYTES (a long request's tokens, a snapshot); rare bulk
# work (growing the routing table, a flash-log page's Bloom filter) always releases it.
cdef enum:
    RELEASE_GIL_BYTES = 65536
