"""The ``memory`` engine: a dict behind a lock, for tests and as an upper bound in benchmarks.

Nothing is written except the directory's kind marker: contents live only as long as the
store object, and reopening the same path starts empty. Every durability mode is accepted and
means the same thing (nothing survives ``close()``); ``syncs`` stays 0.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage_backends.base import RecordStore


class MemoryStore(RecordStore):
    """A non-persistent ``RecordStore`` over a Python dict."""

    kind = "memory"
    persistent = False

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20,
                 durability: str = "none", direct_io: bool = False):
        super().__init__(path, memory_budget, durability, direct_io)
        with self._claim():
            self._data: dict[int, bytes] = {}
            self._lock = threading.Lock()

    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None:
        with self._lock:
            self._data.update(pairs)

    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        with self._lock:
            return [self._data.get(k) for k in keys]

    def _delete(self, key: int) -> None:
        with self._lock:
            self._data.pop(key, None)

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        # A sorted snapshot taken when the scan starts; later writes are not seen by it.
        with self._lock:
            snapshot = sorted(self._data.items())

        def read_chunk(first: int, limit: int) -> list[tuple[int, bytes]]:
            i = bisect_left(snapshot, (first,))
            return snapshot[i:i + limit]

        return self._scan_chunks(read_chunk)

    def _flush(self, sync: bool) -> None:
        pass

    def _close(self) -> None:
        with self._lock:
            self._data.clear()

    def _engine_stats(self) -> dict[str, Any]:
        with self._lock:
            return {"records": len(self._data),
                    "value_bytes": sum(len(v) for v in self._data.values())}
