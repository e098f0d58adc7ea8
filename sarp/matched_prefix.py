"""What a thread's last match verified, so that its next insert need not verify it again.

Serving systems match a request's context, then insert context plus output. Nothing an index
stores is ever removed, so the blocks a match verified stay stored: an insert of a sequence
that starts with them may take them as known and begin after them, instead of reading the
same segments (or per-block entries) a second time.

The match also stops somewhere: inside a window, where the query diverges from what is
stored. What it found there (the design's ``Tail``) is still the answer for that window when
the insert's sequence starts with the whole matched query, no write has begun since the
match started (``WriteClock``, in sarp/_core/write_clock.pyx), and the match searched the
window as the insert would (a design remembers no tail of a match under a tighter bound than
its inserts'): then the insert takes it instead of reading the window again.

The match may also leave the segments it read in the window where it stopped (a design's
``held``, for SARP ``sarp.segments.HeldSegments``): the next insert takes them, so that it and
the jobs it triggers need not read them again.

The memory is per thread and per index, and only ever holds what that index itself verified.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from sarp._core.verify import common_prefix
from sarp._core.write_clock import WriteClock


@dataclass(slots=True)
class Tail:
    """Where a match stopped inside a window: the window's first block, the verified end, the
    design's result for that window (for SARP, the segment found there), and whether the match
    ended before its query did (``decided``: the stored blocks diverge from the query there)."""

    window: int
    end: int
    result: Any
    decided: bool
    stamp: int | None
    clock: WriteClock

    def current(self) -> bool:
        """Whether the result still holds: no write has begun since the match started. Check
        it where concurrent writers of the window are held off (SARP: under its window lock)."""
        return self.clock.unchanged(self.stamp)


@dataclass(slots=True)
class _Last:
    query: np.ndarray  # a copy of the matched query
    verified: int  # blocks of it the match verified
    settled: bool  # no write overlapped the match
    tail: Tail | None
    held: Any  # what the match read, for the next insert (``take_held``)


class MatchedPrefix:
    """Per thread, the last match's query, its verified prefix and where it stopped."""

    def __init__(self, clock: WriteClock | None = None) -> None:
        self.clock = clock or WriteClock()
        self._local = threading.local()

    def stamp(self) -> int | None:
        """Take before a match reads anything; pass to ``remember``."""
        return self.clock.stamp()

    def remember(self, q: np.ndarray, verified: int, stamp: int | None = None,
                 tail: tuple[int, int, Any] | None = None, held: Any = None) -> None:
        """Record a match of ``q`` that verified its first ``verified`` blocks and, if ``tail``
        (window, end, result) is given, stopped at ``end`` inside that window. ``stamp``: taken
        before the match began; None (a write was in flight) keeps no tail. ``held``: what
        the match read, for the next insert."""
        t = None
        if tail is not None and stamp is not None:
            t = Tail(*tail, tail[1] < len(q), stamp, self.clock)
        self._local.last = _Last(q.copy(), verified, self.clock.unchanged(stamp), t, held)

    def settled(self) -> bool:
        """Whether no write overlapped this thread's last match: none was in flight when it
        began, and none began before it ended (``remember`` is called as it ends). Then every
        segment it verified was registered before it began."""
        last = getattr(self._local, "last", None)
        return last is not None and last.settled

    def take_held(self) -> Any:
        """What this thread's last match read (``remember``'s ``held``), once: the first
        insert after the match takes it, so that a run of inserts does not accumulate it."""
        last = getattr(self._local, "last", None)
        if last is None:
            return None
        held, last.held = last.held, None
        return held

    def recall(self, q: np.ndarray) -> tuple[int, Tail | None]:
        """(leading blocks of ``q`` this thread's last match verified, its tail if ``q`` starts
        with the whole matched query, else None)."""
        last = getattr(self._local, "last", None)
        if last is None:
            return 0, None
        m, v = last.query, last.verified
        if last.tail is not None and len(m) <= len(q) and common_prefix(q, 0, m, 0) == len(m):
            return v, last.tail
        if v and v <= len(q) and common_prefix(q, 0, m, 0, v) == v:
            return v, None
        return 0, None
