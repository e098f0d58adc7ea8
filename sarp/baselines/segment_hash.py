"""Segment-Hash (paper 6.1): segments keyed by the chained block ID at their end, computed
from the query, with retries at halved segment sizes down to one block.

Scheme. Within each window [wS, wS + L) of a sequence (L <= S, S a power of two), the
record store holds, for every size k in S, S/2, ..., 1, the segments of k blocks at window
offsets 0, 2k, 4k, ... that fit in L: [j*2k, j*2k + k). A segment's key is XXH64 of its last
block's chained ID, seeded with k (so segments of different sizes ending at the same block do
not collide); its value is the segment record of sarp's codec (start = its first block's
position). A match descends the sizes of each window: from offset 0 it probes size S, and on
a hit advances by S; on a miss (or a segment that does not fit the query) it halves the size,
always probing the segment that starts at the matched end. The segments probed are exactly
those stored, so the descent finds the longest stored prefix of the window exactly, with at
most log2(S) + 1 reads. Every hit is verified (start, size and block IDs equal to the query)
before it counts, so a colliding key never yields a false match. Matching continues into the
next window only when a window matched to its end.

An insert first runs the same descent (these are the fallback and verification reads the
paper mentions; windows its thread's match verified are skipped, and the window where that
match stopped takes the match's descent if no insert has begun since), then writes, in one
``put_many``, the segments that end past the matched prefix; their blocks inside the stored
prefix take the stored metadata (first writer wins).
Each block is stored about log2(S) / 2 + 1 times: the space cost of this design.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sarp._core.hashing import xxh64
from sarp._core.segment_codec import decode_segment, encode_segment
from sarp._core.verify import common_prefix
from sarp.baselines.base import BaselineIndex, Matched
from sarp.baselines.settings import Settings
from sarp.matched_prefix import Tail
from storage_backends import RecordStore


def segment_key(end_id: int, size: int) -> int:
    """The record key of the ``size``-block segment whose last block has ID ``end_id``."""
    return xxh64(end_id.to_bytes(8, "little"), size)


def segment_offsets(length: int, top: int) -> Iterator[tuple[int, int]]:
    """(window offset, size) of the segments stored for a window of ``length`` blocks."""
    k = top
    while k >= 1:
        yield from ((a, k) for a in range(0, length - k + 1, 2 * k))
        k //= 2


class SegmentHash(BaselineIndex):
    """Query-computed segment keys with halving retries; no in-DRAM state."""

    store: RecordStore  # this design always has one
    design = "segment_hash"

    @classmethod
    def _check_settings(cls, settings: Settings) -> None:
        s = settings.segment_blocks
        if s & (s - 1):
            raise ValueError(f"segment_blocks must be a power of two for {cls.design}, got {s}")

    def _descend(self, q: np.ndarray, ws: int,
                 st: dict[str, int]) -> tuple[int, list[np.ndarray]]:
        """(end of the longest stored prefix of the window at ``ws``, its metadata pieces)."""
        S = self.settings.segment_blocks
        we = min(ws + S, len(q))
        pos, k, parts, first = ws, S, [], True
        while k >= 1:
            if pos + k <= we:
                raw = self.store.get(segment_key(int(q[pos + k - 1]), k))
                st["store_reads"] += 1
                st["fallback_reads"] += 0 if first else 1
                first = False
                seg = None if raw is None else decode_segment(raw)
                if (seg is not None and seg.start == pos and seg.block_count == k
                        and common_prefix(q, pos, seg.block_ids, 0, k) == k):
                    parts.append(seg.metadata)
                    pos += k
            k //= 2
        return pos, parts

    def _match(self, q: np.ndarray) -> Matched:
        st = {"store_reads": 0, "fallback_reads": 0}
        S = self.settings.segment_blocks
        out: list[bytes] = []
        tail = None
        for ws in range(0, len(q), S):
            end, parts = self._descend(q, ws, st)
            out.extend(p.tobytes() for p in parts)
            if end < ws + S:
                # The descent settles the window where the query diverged from every stored
                # sequence (end < len(q)): all of them lack block ``end``. A window shorter than
                # S matched to its end is descended again by a longer query, at larger sizes.
                tail = (ws, end, parts) if ws + S <= len(q) or end < len(q) else None
                break
        return b"".join(out), st, tail

    def _insert(self, q: np.ndarray, rows: np.ndarray, known: int,
                tail: Tail | None) -> dict[str, int]:
        st = {"store_reads": 0, "fallback_reads": 0}
        S, width = self.settings.segment_blocks, self.settings.meta_width
        pairs = []
        diverged = False
        for ws in range(known // S * S, len(q), S):  # whole known windows are stored
            we = min(ws + S, len(q))
            if diverged:
                end, parts = ws, []
            elif tail is not None and tail.window == ws:  # the match's descent still holds
                end, parts = tail.end, tail.result
            else:
                end, parts = self._descend(q, ws, st)
            if end == we:
                continue
            diverged = True
            meta = np.concatenate([*parts, rows[end:we]]) if parts else rows[ws:we]
            for a, k in segment_offsets(we - ws, S):
                if ws + a + k > end:
                    key = segment_key(int(q[ws + a + k - 1]), k)
                    pairs.append((key, encode_segment(key, ws + a, q[ws + a:ws + a + k],
                                                      meta[a:a + k], width)))
        self.store.put_many(pairs)
        st["store_writes"] = len(pairs)
        return st

    def _entries(self) -> None:
        return None
