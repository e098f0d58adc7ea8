import numpy as np
import numpy.typing as npt

def region_filter(
    block_ids: npt.NDArray[np.uint64],
    p: int,
    end: int,
    n_fields: int = 8,
    bits: int = 8,
    stride: int = 2,
) -> int:
    """The packed filter at routing point ``p`` from the blocks at positions [p, end)."""

def filters_at(
    block_ids: npt.NDArray[np.uint64],
    positions: npt.NDArray[np.int64],
    end: int,
    n_fields: int = 8,
    bits: int = 8,
    stride: int = 2,
) -> npt.NDArray[np.uint64]:
    """``region_filter`` at each of ``positions``."""

def filter_bounds(fq: int, k: int, n_fields: int = 8, bits: int = 8) -> tuple[int, int]:
    """(F_min, F_max): the filters whose top ``k`` fields equal those of ``fq``."""

def exists_match(
    filters: npt.NDArray[np.uint64], fq: int, k: int, n_fields: int = 8, bits: int = 8
) -> bool:
    """Algorithm 1 ExistsMatch on a sorted filter list."""

def best_fields(filters: npt.NDArray[np.uint64], fq: int, n_fields: int = 8, bits: int = 8) -> int:
    """The most leading fields of ``fq`` any filter of the sorted list shares; -1 if empty."""

def matched_fields(a: int, b: int, n_fields: int = 8, bits: int = 8) -> int:
    """How many leading fields ``a`` and ``b`` have equal."""

def candidate_order(
    filters: npt.NDArray[np.uint64],
    fq: int,
    limit: int,
    n_fields: int = 8,
    bits: int = 8,
    segs: npt.NDArray[np.uint64] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """Indexes into the sorted list in Algorithm 1's selection order, and their matched fields."""
