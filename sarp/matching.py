"""The matching path (paper 4.1; DESIGN.md section 3), one query window at a time.

For window w: approximate routing (deepest routing point first), pre-retrieval filtering,
retrieval and post-retrieval verification of the selected segments. Nothing is returned that
verification did not confirm: block IDs are compared from the window start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sarp._core.verify import common_prefix
from sarp.config import Config
from sarp.filtering import potential_end, select
from sarp.routing import RoutingDirectory
from sarp.segments import SegmentStore

COUNTERS = ("windows", "routing_probes", "candidates_before", "candidates_after",
            "segments_retrieved", "blocks_verified")


@dataclass
class MatchResult:
    """The matched prefix: its blocks' IDs and metadata in token order, and query counters."""

    num_blocks: int
    num_tokens: int
    block_ids: np.ndarray
    metadata: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class WindowMatch:
    end: int  # exclusive end of the verified match (== window start when nothing matched)
    segment: Any  # the decoded segment that verified it, or None


def match_window(cfg: Config, directory: RoutingDirectory, segments: SegmentStore,
                 q: np.ndarray, ws: int, max_retrieval: int, st: dict[str, int]) -> WindowMatch:
    """The longest verified match of ``q`` in the window starting at ``ws``."""
    n = len(q)
    we = min(ws + cfg.segment_blocks, n)
    st["windows"] += 1
    entry, p, probes = directory.route(q, ws, we)
    st["routing_probes"] += probes
    if entry < 0:
        return WindowMatch(ws, None)
    segs, filters = directory.table.refs(entry)
    st["candidates_before"] += len(segs)
    fq = directory.filter_at(q, p, we)
    order, fields = select(cfg, filters, fq, max_retrieval if max_retrieval > 0 else -1)
    if len(fields):
        st["candidates_after"] += int(np.count_nonzero(fields == fields[0]))
    best = WindowMatch(ws, None)
    for idx, k in zip(order.tolist(), fields.tolist(), strict=True):
        if best.end >= potential_end(cfg, p, k, we):
            break
        seg = segments.read(int(segs[idx]))
        st["segments_retrieved"] += 1
        if seg is None or seg.start != ws:
            continue
        length = common_prefix(q, ws, seg.block_ids, 0, we - ws)
        st["blocks_verified"] += length
        if ws + length > best.end:
            best = WindowMatch(ws + length, seg)
            if best.end >= we:
                break
    return best


def match(cfg: Config, directory: RoutingDirectory, segments: SegmentStore, q: np.ndarray,
          max_retrieval: int) -> MatchResult:
    """Match ``q`` window by window while each window matches to its end."""
    st = dict.fromkeys(COUNTERS, 0)
    n = len(q)
    pos = 0
    parts = []
    while pos < n:
        w = match_window(cfg, directory, segments, q, pos, max_retrieval, st)
        if w.segment is None or w.end == pos:
            break
        parts.append(w.segment.metadata[: w.end - pos])
        full = w.end == pos + cfg.segment_blocks
        pos = w.end
        if not full:
            break
    dtype = cfg.metadata_dtype
    meta = (np.concatenate(parts) if parts else np.zeros((0, cfg.meta_width), np.uint8))
    metadata = np.ascontiguousarray(meta).view(dtype).reshape(-1)
    return MatchResult(pos, pos * cfg.block_size, q[:pos].copy(), metadata, st)
