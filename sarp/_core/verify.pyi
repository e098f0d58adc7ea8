import numpy as np
import numpy.typing as npt

def common_prefix(
    a: npt.NDArray[np.uint64],
    a_off: int,
    b: npt.NDArray[np.uint64],
    b_off: int,
    limit: int = -1,
) -> int:
    """Count of consecutive equal positions of ``a`` from ``a_off`` and ``b`` from ``b_off``."""
