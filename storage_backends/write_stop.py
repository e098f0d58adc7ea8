"""Stopping writes after a failed sync, for a record store and for the index's journal.

Linux reports a failed fsync once and may drop the pages it could not write; a later fsync that
succeeds does not write them again. A write acknowledged after that could depend on lost data
(a record after a hole in a log), so none is: after a ``SyncFailedError`` every later write
raises WritesStoppedError, naming the failed sync. A write that fails by itself (a full disk)
stops nothing: it acknowledged nothing, and the engines and the journal write again from where
it failed. An engine raises ``SyncFailedError`` for such a write too where it cannot undo it: an
odirect write over a version not yet synced, or one whose undoing failed (docs/durability.md,
"Failed writes").
"""

from __future__ import annotations

from collections.abc import Callable

from sarp.errors import SyncFailedError, WritesStoppedError


class WriteStop:
    """Runs writes until a sync fails, then refuses them."""

    def __init__(self, what: Callable[[], str], remedy: str):
        self._what = what  # names the store or file in the error
        self._remedy = remedy  # what lifts the stop
        self.failure: SyncFailedError | None = None

    def check(self) -> None:
        """Raise WritesStoppedError if a sync failed earlier."""
        if self.failure is not None:
            raise WritesStoppedError(
                f"{self._what()} takes no more writes: an earlier sync failed "
                f"({self.failure}); {self._remedy}") from self.failure

    def run(self, write: Callable[[], None]) -> None:
        """``write()`` unless writes have stopped; a SyncFailedError from it stops them.

        A sync that failed on another thread while ``write()`` ran raises here too: that
        write's own sync may have come after the failed one, so it is not acknowledged.
        """
        self.check()
        try:
            write()
        except SyncFailedError as e:
            self.record(e)
            raise
        self.check()

    def record(self, failure: SyncFailedError) -> None:
        """Stop writes after ``failure`` (the first failure recorded is the one named)."""
        if self.failure is None:
            self.failure = failure
