"""Closing an object while other threads call it (shared by the store and index tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def close_under_calls(close: Callable[[], None], worker: Callable[[int], None], threads: int,
                      progress: Callable[[], int], at_least: int,
                      closed: type[Exception]) -> None:
    """Run ``worker(t)`` on ``threads`` threads; once ``progress()`` reaches ``at_least``, call
    ``close`` on two threads at once. A worker may end by raising ``closed`` (its call came
    after close() began). Fails if a worker raises anything else, or if a worker or a close
    never returns."""
    started = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        started.wait()
        try:
            worker(t)
        except closed:
            pass
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    started.wait()
    while progress() < at_least:
        # a worker that failed (or all that ended) would leave this loop waiting forever
        assert not errors, errors[0]
        assert any(th.is_alive() for th in pool), "the workers ended before the close"
        time.sleep(0.001)
    closers = [threading.Thread(target=close) for _ in range(2)]
    for th in closers:
        th.start()
    for th in closers + pool:
        th.join(60)
    assert not any(th.is_alive() for th in closers + pool), "close or a call never returned"
    assert not errors, errors[0]
