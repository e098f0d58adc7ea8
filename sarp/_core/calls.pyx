"""The calls running on an open object (an index or a record store), so that ``close()``
waits for them instead of closing files and engine sessions under them.

States: open -> closing (new calls refused, running ones finish) -> closed. A second
``close()`` waits until the first has finished, so every ``close()`` returns on a closed object.

Entered and left twice per request of an index (its call and each store call), so both are
compiled: each reads and updates C fields without running Python code, which the GIL makes
atomic against every other thread, and takes the condition's lock only to wake a waiting
``close()``. (A build without the GIL would need the lock on both paths.)
"""

import threading

cdef enum:
    OPEN, CLOSING, CLOSED


cdef class Calls:
    """``with calls:`` around each call; ``begin_close()``/``end_close()`` around close."""

    cdef Py_ssize_t _running
    cdef int _state
    cdef object _cv
    cdef readonly object closed_error

    def __init__(self, closed_error):
        self._cv = threading.Condition(threading.Lock())
        self._running = 0
        self._state = OPEN
        self.closed_error = closed_error

    @property
    def open(self):
        """Whether new calls are accepted (False once a ``close()`` has begun)."""
        return self._state == OPEN

    def __enter__(self):
        """Start a call; raises ``closed_error()`` once closing has begun."""
        if self._state != OPEN:
            raise self.closed_error()
        self._running += 1

    def __exit__(self, exc_type, exc, tb):
        """End the call; the last one to end wakes a ``close()`` that waits for it."""
        self._running -= 1
        if not self._running and self._state != OPEN:
            with self._cv:
                self._cv.notify_all()

    def begin_close(self):
        """Refuse new calls and wait for the running ones. False if another ``close()`` began
        first: this one has then waited until that one ended, and has nothing to do."""
        with self._cv:
            if self._state != OPEN:
                self._cv.wait_for(self._closed)
                return False
            self._state = CLOSING
            self._cv.wait_for(self._idle)
            return True

    def end_close(self):
        """The close has finished (or failed): the object stays closed."""
        with self._cv:
            self._state = CLOSED
            self._cv.notify_all()

    def _closed(self):
        return self._state == CLOSED

    def _idle(self):
        return not self._running
