"""The matching path (paper 4.1; docs/design.md section 3): a query matched window by window.

The windows run in compiled code (``sarp._core.window.WindowMatcher``): approximate routing,
pre-retrieval filtering, retrieval and post-retrieval verification, calling back into Python
only to read a segment from the store. Candidates are retrieved level by level (matched filter
fields, descending) and newest segment first within a level; retrieval stops once the verified
match reaches the best remaining potential, the window's end, or MaxRetrieval. Nothing is
returned that verification did not confirm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sarp._core.segment_codec import Segment
from sarp._core.window import COUNTERS, WindowMatcher
from sarp.config import Config
from sarp.routing import RoutingDirectory
from sarp.segments import SegmentStore, join_rows

__all__ = ["COUNTERS", "MatchResult", "match", "matcher"]


@dataclass
class MatchResult:
    """The matched prefix: its blocks' IDs and metadata in token order, and query counters."""

    num_blocks: int
    num_tokens: int
    block_ids: np.ndarray
    metadata: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)


#: reads a segment by id: ``SegmentStore.read``, or a ``HeldSegments``' read or record, which
#: also keep what they read
Reader = Callable[[int], Segment | None]


def matcher(cfg: Config, directory: RoutingDirectory, segments: SegmentStore, q: np.ndarray,
            max_retrieval: int, read: Reader | None = None) -> WindowMatcher:
    """The per-window matcher of query ``q`` (block IDs); ``max_retrieval`` 0 is unbounded.
    ``read``: how it reads a segment (by default from the store)."""
    return WindowMatcher(directory.table, read or segments.read, q, cfg.segment_blocks,
                         directory.probe_offsets, n_fields=cfg.filter_fields,
                         bits=cfg.field_bits, stride=cfg.stride, filtering=cfg.filtering,
                         max_retrieval=max_retrieval,
                         unbounded_at=directory.table.remat_pending)


def match(cfg: Config, directory: RoutingDirectory, segments: SegmentStore, q: np.ndarray,
          max_retrieval: int, read: Reader | None = None
          ) -> tuple[MatchResult, tuple[int, int, Any] | None]:
    """Match ``q`` window by window while each window matches to its end.

    Returns the result and, when the match stopped inside a window on a stored segment (where
    it diverges from ``q``, or at the end of ``q``), that window's (start, verified end,
    segment): the tail an insert may reuse (``sarp.matched_prefix``). ``read``: as for
    ``matcher``.
    """
    m = matcher(cfg, directory, segments, q, max_retrieval, read)
    pos, parts, tail = m.prefix()
    metadata = np.frombuffer(join_rows(parts), cfg.metadata_dtype)  # a new buffer: no copy
    return MatchResult(pos, pos * cfg.block_size, q[:pos].copy(), metadata, m.stats()), tail
