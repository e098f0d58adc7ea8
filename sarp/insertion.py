"""The insertion path (paper 4.1; DESIGN.md section 4).

For each window of the new sequence the matching path finds the stored segment with the
longest shared prefix; the sequence then extends that segment in place (the shared prefix
reaches the segment's end), copies the shared prefix into a new segment (it diverges inside
the segment), or starts a new segment (nothing shared). After a divergence every later window
is new. Metadata already stored for a block is kept: the first writer of a block prefix wins.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sarp.config import Config
from sarp.matching import COUNTERS, match_window
from sarp.routing import RoutingDirectory
from sarp.segments import SegmentStore

#: called with each written segment (decoded): registers it and journals it
OnWrite = Callable[[object], None]


def insert(cfg: Config, directory: RoutingDirectory, segments: SegmentStore, q: np.ndarray,
           meta: np.ndarray, max_retrieval: int, on_write: OnWrite) -> dict[str, int]:
    """Insert block IDs ``q`` with metadata rows ``meta`` (uint8, shape (n, width))."""
    st = dict.fromkeys(COUNTERS, 0)
    st.update(segments_written=0, segments_extended=0, blocks_written=0, new_blocks=0)
    S = cfg.segment_blocks
    n = len(q)
    diverged = False
    for ws in range(0, n, S):
        we = min(ws + S, n)
        found = None if diverged else match_window(cfg, directory, segments, q, ws,
                                                   max_retrieval, st)
        if found is None or found.segment is None or found.end == ws:
            seg = segments.write_new(ws, q[ws:we], meta[ws:we])
            st["new_blocks"] += we - ws
            diverged = True
        else:
            stored = found.segment
            stored_end = ws + stored.block_count
            if found.end == stored_end and we > stored_end:
                seg = segments.extend(stored, q[stored_end:we], meta[stored_end:we])
                st["segments_extended"] += 1
                st["blocks_written"] += we - stored_end
                st["new_blocks"] += we - stored_end
                on_write(seg)
                continue
            if found.end >= we:
                continue  # the window is already stored
            shared = found.end - ws
            ids = np.concatenate((stored.block_ids[:shared], q[found.end:we]))
            rows = np.concatenate((stored.metadata[:shared], meta[found.end:we]))
            seg = segments.write_new(ws, ids, rows)
            st["new_blocks"] += we - found.end
            diverged = True
        st["segments_written"] += 1
        st["blocks_written"] += seg.block_count
        on_write(seg)
    return st
