"""SARP's compiled kernels (Cython): block IDs, packed filters, the segment codec, verification."""
