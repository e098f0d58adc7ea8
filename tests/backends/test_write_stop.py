"""The rule of storage_backends/write_stop.py: a failed sync stops writes, on every thread."""

from __future__ import annotations

import errno
import threading

import pytest

from sarp.errors import SyncFailedError, WritesStoppedError
from storage_backends.write_stop import WriteStop


def _failed_sync() -> None:
    raise SyncFailedError(errno.EIO, "sync of x failed")


def test_a_failed_sync_stops_later_writes_and_a_full_disk_does_not() -> None:
    stop = WriteStop(lambda: "the thing", "reopen it")
    done: list[int] = []

    def full_disk() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        stop.run(full_disk)
    stop.run(lambda: done.append(1))
    with pytest.raises(SyncFailedError):
        stop.run(_failed_sync)
    with pytest.raises(WritesStoppedError,
                       match=r"the thing takes no more writes: .*sync of x failed.*; reopen it"):
        stop.run(lambda: done.append(2))
    assert done == [1]


def test_a_write_running_while_a_sync_fails_on_another_thread_is_not_acknowledged() -> None:
    """Its own sync may have come after the failed one (and rely on pages that one lost)."""
    stop = WriteStop(lambda: "the thing", "reopen it")
    started, release = threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def slow_write() -> None:
        started.set()
        release.wait(10)

    def writer() -> None:
        try:
            stop.run(slow_write)
            outcome.append(None)
        except BaseException as e:  # the outcome is what the test checks
            outcome.append(e)

    t = threading.Thread(target=writer)
    t.start()
    assert started.wait(10)
    with pytest.raises(SyncFailedError):
        stop.run(_failed_sync)
    release.set()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], WritesStoppedError)
