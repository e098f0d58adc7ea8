"""The calls running on an open object (an index or a record store), so that ``close()``
waits for them instead of closing files and engine sessions under them.

States: open -> closing (new calls refused, running ones finish) -> closed. A second
``close()`` waits until the first has finished, so every ``close()`` returns on a closed object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

OPEN, CLOSING, CLOSED = 0, 1, 2


class Calls:
    """``with calls:`` around each call; ``begin_close()``/``end_close()`` around close."""

    def __init__(self, closed_error: Callable[[], Exception]):
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._running = 0
        self._state = OPEN
        self.closed_error = closed_error

    @property
    def open(self) -> bool:
        """Whether new calls are accepted (False once a ``close()`` has begun)."""
        return self._state == OPEN

    def __enter__(self) -> None:
        """Start a call; raises ``closed_error()`` once closing has begun."""
        with self._lock:
            if self._state != OPEN:
                raise self.closed_error()
            self._running += 1

    def __exit__(self, *exc: object) -> None:
        """End the call; the last one to end wakes a ``close()`` that waits for it."""
        with self._lock:
            self._running -= 1
            if not self._running and self._state != OPEN:
                self._cv.notify_all()

    def begin_close(self) -> bool:
        """Refuse new calls and wait for the running ones. False if another ``close()`` began
        first: this one has then waited until that one ended, and has nothing to do."""
        with self._cv:
            if self._state != OPEN:
                self._cv.wait_for(lambda: self._state == CLOSED)
                return False
            self._state = CLOSING
            self._cv.wait_for(lambda: not self._running)
            return True

    def end_close(self) -> None:
        """The close has finished (or failed): the object stays closed."""
        with self._cv:
            self._state = CLOSED
            self._cv.notify_all()
