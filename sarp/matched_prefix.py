"""The prefix a thread's last match verified, so that its next insert need not verify it again.

Serving systems match a request's context, then insert context plus output. Nothing an index
stores is ever removed, so the blocks a match verified stay stored: an insert of a sequence
that starts with them may take them as known and begin after them, instead of reading the
same segments (or per-block entries) a second time. The memory is per thread and per index,
and only ever holds what that index itself verified.
"""

from __future__ import annotations

import threading

import numpy as np


class MatchedPrefix:
    """Per thread, the block IDs of the last verified match."""

    def __init__(self) -> None:
        self._local = threading.local()

    def remember(self, ids: np.ndarray) -> None:
        """Record ``ids``, the block IDs a match of this thread just verified as stored."""
        self._local.ids = ids

    def known(self, q: np.ndarray) -> int:
        """How many leading blocks of ``q`` this thread's last match verified as stored."""
        ids = getattr(self._local, "ids", None)
        if ids is None or len(ids) == 0 or len(ids) > len(q):
            return 0
        return len(ids) if np.array_equal(q[:len(ids)], ids) else 0
