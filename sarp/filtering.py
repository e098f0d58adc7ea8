"""Pre-retrieval candidate filtering (paper 4.3, Algorithm 1): the selection policy.

The window kernel (``sarp._core.window``) runs this policy one candidate at a time; ``select``
and ``potential_end`` give the same order and bounds for a whole posting list, to inspect it.

- Level k: the candidates whose filter shares exactly k leading fields with the query filter
  (k* = the most any candidate shares, found by binary search on k). Levels go in decreasing k:
  a candidate first mismatching in field k+1 can match at most to p + (k+1)*stride - 1, one
  matching all N fields up to the window end (pruned points route through p).
- Within a level: newest segment (largest segment id) first. Every candidate of a level has the
  same potential, so this order only decides which of them MaxRetrieval reaches first; it was
  chosen because ties are the common case (identical filters at a pruned entry, whose filter
  covers only the first L_max blocks of the window) and the newest of them, the most recent
  branch from the shared prefix, is the one that verifies longest on agent traces
  (docs/architecture.md).
- Stop once the verified match reaches the next candidate's potential, the window's end, or
  MaxRetrieval retrievals. With MaxRetrieval unbounded the result is the exact longest match.

Without filtering (the design-breakdown variant) every candidate is one level matching all
fields, still newest first.
"""

from __future__ import annotations

import numpy as np

from sarp._core.filters import candidate_order
from sarp.config import Config


def select(cfg: Config, segs: np.ndarray, filters: np.ndarray, fq: int,
           limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Indexes into a posting list (segment ids ``segs``, sorted ``filters``) in retrieval
    order, and their matched leading fields; at most ``limit`` (< 0: all)."""
    if cfg.filtering:
        return candidate_order(filters, fq, limit, cfg.filter_fields, cfg.field_bits, segs)
    order = np.argsort(segs, kind="stable")[::-1]
    order = order if limit < 0 else order[:limit]
    return order.astype(np.int64), np.full(len(order), cfg.filter_fields, dtype=np.int32)


def potential_end(cfg: Config, p: int, k: int, we: int) -> int:
    """The furthest position (exclusive) a candidate with ``k`` matching fields at ``p`` can
    reach in the window ending at ``we``.

    A first mismatch in field k+1 proves divergence before that region ends; a candidate that
    matches every field may continue to the window end (pruned points route through p).
    """
    if k >= cfg.filter_fields:
        return we
    return min(we, p + (k + 1) * cfg.stride - 1)
