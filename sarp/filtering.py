"""Pre-retrieval candidate filtering (paper 4.3, Algorithm 1).

Orders the candidates of a posting list by filter-derived match potential and bounds how far
each can match, so that at most MaxRetrieval segments are retrieved per window and retrieval
stops once a verified match reaches the best remaining potential.
"""

from __future__ import annotations

import numpy as np

from sarp._core.filters import candidate_order
from sarp.config import Config


def select(cfg: Config, filters: np.ndarray, fq: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate indexes in retrieval order and their matched leading fields.

    Without filtering (the design-breakdown variant) the list order is kept and every
    candidate counts as matching all fields.
    """
    if cfg.filtering:
        return candidate_order(filters, fq, limit, cfg.filter_fields, cfg.field_bits)
    n = len(filters) if limit < 0 else min(limit, len(filters))
    return np.arange(n, dtype=np.int64), np.full(n, cfg.filter_fields, dtype=np.int32)


def potential_end(cfg: Config, p: int, k: int, we: int) -> int:
    """The furthest position (exclusive) a candidate with ``k`` matching fields at ``p`` can reach.

    A first mismatch in field k+1 proves divergence before that region ends; a candidate that
    matches every field may continue to the window end (pruned points route through p).
    """
    if k >= cfg.filter_fields:
        return we
    return min(we, p + (k + 1) * cfg.stride - 1)
