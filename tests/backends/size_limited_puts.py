"""Subprocess for the failed-write tests of the engines that do their own I/O.

    python size_limited_puts.py KIND PATH LIMIT

Opens a ``sync`` store of KIND, limits every file the process writes to LIMIT bytes
(RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past the limit fails with EFBIG as a full
file system fails it), and puts records of 2,000 bytes until three puts have failed. Then it
lifts the limit, tries one put more and closes the store. Prints one JSON object: the keys
acknowledged, each error (its type and message), and ``writes_stopped`` after the first
failed put and after the put tried without the limit.
"""

from __future__ import annotations

import json
import resource
import signal
import sys

from sarp.errors import StoreError
from storage_backends import open_store


def value(key: int) -> bytes:
    """The value put under ``key``, which the reopened store must read back if acknowledged."""
    return bytes([key % 251]) * 2000


def main() -> None:
    kind, path, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(kind, path, memory_budget=1 << 20, durability="sync", direct_io=False)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    acked: list[int] = []
    errors: list[list[str]] = []
    stopped: list[bool] = []
    for key in range(5000):
        try:
            store.put(key, value(key))
            acked.append(key)
        except (OSError, StoreError) as e:
            errors.append([type(e).__name__, str(e)])
            if len(errors) == 1:
                stopped.append(store.stats()["writes_stopped"])
            if len(errors) == 3:
                break
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    try:
        store.put(10**6, value(0))
        acked.append(10**6)
    except (OSError, StoreError) as e:
        errors.append([type(e).__name__, str(e)])
    stopped.append(store.stats()["writes_stopped"])
    try:
        store.close()
    except StoreError as e:
        errors.append([type(e).__name__, str(e)])
    print(json.dumps({"acked": acked, "errors": errors, "writes_stopped": stopped}))


if __name__ == "__main__":
    main()
