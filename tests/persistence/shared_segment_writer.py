"""Writer subprocess for ``test_shared_segments``: insert B builds on segments of insert A,
which has stored and placed them but is held before it returns.

usage: shared_segment_writer.py BACKEND PATH DURABILITY
Thread A inserts a three-window sequence and is held (forever) at its first use of the
journal lock after it has released its window lock: where an insert appends its journal
record if it appends it after placement. Insert B shares A's first window, so it matches A's
segment and writes only its own windows. Prints ``ack`` once B is acknowledged (under
``group``, after the flush that follows it). Runs until killed.
"""

import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import sarp  # noqa: E402
from tests.persistence.workload import CONFIG, metadata  # noqa: E402

WINDOW_TOKENS = CONFIG["segment_blocks"] * CONFIG["block_size"]


def sequences() -> tuple[np.ndarray, np.ndarray]:
    """(A, B): A is three fresh windows; B shares A's first window, then diverges."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 30000, 3 * WINDOW_TOKENS)
    return a, np.concatenate((a[:WINDOW_TOKENS], rng.integers(0, 30000, 2 * WINDOW_TOKENS)))


class Released:
    """A window lock that notes when thread A releases it."""

    def __init__(self, lock: threading.Lock, done: threading.Event):
        self.lock, self.done = lock, done

    def acquire(self) -> bool:
        return self.lock.acquire()

    def release(self) -> None:
        self.lock.release()
        if threading.current_thread().name == "A":
            self.done.set()


class HoldA:
    """The journal lock: thread A stops at its first use after its window lock is released."""

    def __init__(self, lock: threading.Lock, released: threading.Event, held: threading.Event):
        self.lock, self.released, self.held = lock, released, held

    def __enter__(self) -> None:
        if threading.current_thread().name == "A" and self.released.is_set():
            self.held.set()
            while True:
                time.sleep(1)
        self.lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.lock.__exit__(*exc)


def main() -> None:
    backend, path, durability = sys.argv[1:4]
    index = sarp.open(path, backend=backend, durability=durability, memory_budget=8 << 20,
                      **CONFIG)
    a, b = sequences()
    released, held = threading.Event(), threading.Event()
    window_lock = index._window_lock

    def released_window_lock(first: int) -> Any:
        return Released(window_lock(first), released)

    index._window_lock = released_window_lock  # type: ignore[assignment, method-assign]
    index._journal_lock = HoldA(index._journal_lock, released, held)  # type: ignore[assignment]

    def insert_a() -> None:
        index.insert(tokens=a, metadata=metadata(sarp.block_ids(a, CONFIG["block_size"])))
        held.set()  # A returned without being held: it journaled before releasing its lock

    threading.Thread(target=insert_a, name="A", daemon=True).start()
    held.wait()
    index.insert(tokens=b, metadata=metadata(sarp.block_ids(b, CONFIG["block_size"])))
    if durability == "group":
        index.flush()
    print("ack", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
