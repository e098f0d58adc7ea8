"""The insertion path (paper 4.1; docs/design.md section 4).

For each window of the new sequence the matching path finds the stored segment with the
longest shared prefix; the sequence then extends that segment in place (the shared prefix
reaches the segment's end), copies the shared prefix into a new segment (it diverges inside
the segment), or starts a new segment (nothing shared). After an extension or a divergence
every later window is new: the best stored segment ends, or departs from the sequence, inside
this window, so no stored sequence shares the sequence's prefix into the next window (a
candidate that MaxRetrieval left unread could, and then costs a redundant copy, never a
wrong match). Metadata already stored for the prefix an insert verified is kept: the first
writer wins there. Past it, the insert writes the caller's records; so where MaxRetrieval
left a longer stored match unread, a block can hold two records, the first writer's and this
caller's, and a match returns the record of the copy it reaches. Both name blocks their
writers stored. The same holds where a bounded re-match (``_from_tail``) leaves unread a
segment that shares more but diverges inside the window (one that may end where it stops
matching is read, and extended). With max_retrieval=0 every
insert finds the longest stored match.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from sarp._core.segment_codec import Segment
from sarp._core.verify import common_prefix
from sarp.config import Config
from sarp.matched_prefix import Tail
from sarp.matching import COUNTERS, matcher
from sarp.routing import RoutingDirectory
from sarp.segments import HeldSegments, SegmentStore

#: called with the written segments (decoded), in order, once they are stored, and the number
#: of blocks they add to the index: registers them
OnWrite = Callable[[list, int], None]
#: the lock of the window whose first block ID is given (see ``insert``)
WindowLock = Callable[[int], threading.Lock]


_ZEROED = {**dict.fromkeys(COUNTERS, 0), "segments_written": 0, "segments_extended": 0,
           "blocks_written": 0, "new_blocks": 0}


def insert_stats() -> dict[str, int]:
    """The counters an insert returns, zeroed: the matching path's (``COUNTERS``, for the
    windows it matched) and what it wrote."""
    return _ZEROED.copy()


def insert(cfg: Config, directory: RoutingDirectory, segments: SegmentStore, q: np.ndarray,
           meta: np.ndarray, max_retrieval: int, on_write: OnWrite,
           window_lock: WindowLock | None = None, known: int = 0, settled: bool = False,
           tail: Tail | None = None, held: HeldSegments | None = None) -> dict[str, int]:
    """Insert block IDs ``q`` with metadata rows ``meta`` (uint8, shape (n, width)).

    ``known``: blocks at the start of ``q`` already verified as stored (the prefix this
    thread's last match verified, ``sarp.matched_prefix``). Whole windows inside it are
    stored for good (segments only grow), so they are skipped without a read. ``settled``:
    no write overlapped that match (``MatchedPrefix.settled``); if one may have, the skipped
    windows' locks are passed through first (see the loop).
    ``tail``: where that match stopped inside the next window; its segment is taken for that
    window without a read, as the answer or as the match to beat (``_from_tail``).
    ``held``: segments this request already holds (``sarp.segments.HeldSegments``), which
    the insert's matches read through.

    Written segments are stored in one batch at the end and then passed to ``on_write`` in
    window order: the first window written (an extension, a copy or a new segment) makes
    every later window new, so no window is matched after a write and one batch covers them.

    ``window_lock(q[ws])`` is held from the match of window ws until what it decided for that
    window is stored and registered. Every insert that could extend or copy a segment starting
    at ws shares that segment's first block ID, so it waits, then matches what this one wrote:
    no extension is overwritten by another. One window lock is held at a time.
    """
    st = insert_stats()
    m = None  # the window matcher of q, made when the first window is matched
    S = cfg.segment_blocks
    n = len(q)
    pending: list = []  # (segment, record) encoded but not yet stored
    pending_new = 0  # blocks the pending segments add to the index
    locked: list[threading.Lock] = []  # the window lock held now, if any

    def release() -> None:
        if locked:
            locked.pop().release()

    diverged = False
    found_end, stored = 0, None
    first = known // S * S
    if first and window_lock is not None and not settled:
        # The match may have read segments of an insert still registering them, and the
        # windows after them: that insert holds the lock of the first window it wrote, one of
        # those skipped here. Pass through their locks, so that this insert matches what that
        # one wrote instead of writing it again.
        for ws in range(0, first, S):
            with window_lock(int(q[ws])):
                pass
    try:
        for ws in range(first, n, S):
            we = min(ws + S, n)
            if not diverged:
                release()  # the previous window was found stored whole
                if window_lock is not None:
                    locked.append(window_lock(int(q[ws])))
                    locked[0].acquire()
                known_here = None
                if tail is not None and tail.window == ws and tail.current():
                    known_here, decided = _from_tail(tail, q, we)
                if known_here is not None and decided:
                    found = known_here
                else:
                    if m is None:
                        m = matcher(cfg, directory, segments, q, max_retrieval,
                                    held.read if held is not None else None)
                    # a re-match under a bound reads only what could spare the write
                    found = m.match(ws, known_here, whole=known_here is not None
                                    and max_retrieval > 0)
                found_end, stored = found
            if diverged or stored is None or found_end == ws:
                pending.append(segments.encode_new(ws, q[ws:we], meta[ws:we]))
                pending_new += we - ws
                diverged = True
            else:
                stored_end = ws + stored.block_count
                if found_end == stored_end and we > stored_end:
                    pending.append(segments.encode_extended(stored, q[stored_end:we],
                                                            meta[stored_end:we]))
                    st["segments_extended"] += 1
                    st["blocks_written"] += we - stored_end
                    pending_new += we - stored_end
                    diverged = True  # nothing stored goes past the segment's end: the rest
                    continue  # is new, written with this window under its lock
                if found_end >= we:
                    continue  # the window is already stored
                pending.append(segments.encode_copy(stored, found_end - ws, q[found_end:we],
                                                    meta[found_end:we]))
                pending_new += we - found_end
                diverged = True
            st["segments_written"] += 1
            st["blocks_written"] += pending[-1][0].block_count
        if pending:
            with segments.writes.writing():  # until registered: matches started now see no tail
                segments.put_all(pending, extensions=st["segments_extended"])
                on_write([seg for seg, _ in pending], pending_new)
            st["new_blocks"] += pending_new
    finally:
        release()
    if m is not None:
        st.update(m.stats())
    return st


def _from_tail(tail: Tail, q: np.ndarray, we: int) -> tuple[tuple[int, Segment], bool]:
    """((end, segment) of the window [tail.window, we) of ``q`` from its thread's last match,
    whether that is the window's answer).

    Called under the window's lock once ``tail.current()`` holds: no segment write has begun
    since the match started, so its segment is current. It is verified against ``q`` past the
    match's end in memory. It is the window's answer when the match ended where the stored
    blocks diverged from its query (no segment shares more), or when it shares all of ``q`` it
    can: to the window's end or its own. Otherwise a tied segment might share more of ``q``,
    so the window is matched again with this as the match to beat: only candidates that could
    share more are read. Under a MaxRetrieval bound, only those that could hold ``q`` to the
    window's end or end where they stop matching it (which the insert extends): the others
    would leave the window to be written as a copy all the same, changing only whose records
    its shared blocks carry, for a read.
    """
    seg = tail.result
    stop = min(we, tail.window + seg.block_count)
    end = tail.end + common_prefix(q, tail.end, seg.block_ids, tail.end - tail.window,
                                   stop - tail.end)
    return (end, seg), end == stop or tail.decided
