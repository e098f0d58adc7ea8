import numpy as np
import numpy.typing as npt

def namespace_seed(namespace: bytes | bytearray | memoryview) -> int:
    """The chain's starting value: XXH64 of the namespace bytes, seed 0."""

def chain_block_ids(
    tokens: npt.NDArray[np.uint32], block_size: int, seed: int
) -> npt.NDArray[np.uint64]:
    """Chained XXH64 IDs of the full blocks of ``tokens``, starting from ``seed``."""
