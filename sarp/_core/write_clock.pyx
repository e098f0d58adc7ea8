"""The write clock of ``sarp.matched_prefix``: counts the writes that change what a match can
find, begun and ended, so a thread can tell that none began since it took a stamp and that
none was in flight then.

Taken and moved a few times per request, so it is compiled: each method reads or updates C
fields without running Python code, which the GIL makes atomic against every other thread,
so no lock is taken. (A build without the GIL would need one.)
"""


cdef class WriteClock:
    """``with clock.writing():`` around each write; ``stamp``/``unchanged`` around a match."""

    cdef Py_ssize_t _begun, _ended

    def writing(self):
        """Use as ``with clock.writing():`` around a write, from before its first store write
        until it is registered."""
        return self

    def __enter__(self):
        self._begun += 1

    def __exit__(self, exc_type, exc, tb):
        self._ended += 1

    def stamp(self):
        """The writes begun so far, or None while one is in flight (nothing can be relied
        on)."""
        return self._begun if self._begun == self._ended else None

    def unchanged(self, stamp):
        """Whether no write has begun since ``stamp`` was taken."""
        return stamp is not None and self._begun == stamp
