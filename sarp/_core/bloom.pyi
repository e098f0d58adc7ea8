import numpy as np
import numpy.typing as npt

K: int
SEED: int

def build(hashes: npt.NDArray[np.uint64], nwords: int) -> npt.NDArray[np.uint64]:
    """The ``nwords`` filter words of a page holding the keys of filter hashes ``hashes``."""

def newest_hit(
    words: npt.NDArray[np.uint64], pages: npt.NDArray[np.uint32], before: int, h: int
) -> int:
    """The largest page index below ``before`` whose filter may hold the key of filter hash
    ``h``, or -1."""
