"""The compiled call tracker (sarp/_core/calls.pyx): close waits for running calls, refuses
new ones, and a second close waits for the first."""

from __future__ import annotations

import threading

import pytest

from sarp._core.calls import Calls


class Closed(Exception):
    pass


def test_calls_are_refused_once_close_begins() -> None:
    calls = Calls(lambda: Closed("closed"))
    assert calls.open
    with calls:
        pass
    assert calls.begin_close()
    assert not calls.open
    with pytest.raises(Closed):
        with calls:
            pass
    calls.end_close()
    with pytest.raises(Closed):
        calls.__enter__()


def test_close_waits_for_a_running_call_also_one_that_raises() -> None:
    calls = Calls(lambda: Closed("closed"))
    inside, leave, closed = threading.Event(), threading.Event(), threading.Event()

    def call() -> None:
        with pytest.raises(KeyError), calls:
            inside.set()
            leave.wait()
            raise KeyError("the call fails")

    def close() -> None:
        assert calls.begin_close()
        closed.set()
        calls.end_close()

    worker = threading.Thread(target=call)
    worker.start()
    inside.wait()
    closer = threading.Thread(target=close)
    closer.start()
    assert not closed.wait(0.2)  # the call is still running
    leave.set()
    assert closed.wait(10)
    worker.join()
    closer.join()


def test_a_second_close_waits_for_the_first_to_end() -> None:
    calls = Calls(lambda: Closed("closed"))
    assert calls.begin_close()
    second: list[bool] = []
    t = threading.Thread(target=lambda: second.append(calls.begin_close()))
    t.start()
    t.join(0.2)
    assert t.is_alive()  # still waiting: the first close has not ended
    calls.end_close()
    t.join(10)
    assert second == [False]
