"""What every baseline index shares: open/close, argument checks, MatchResult building, stats.

A design subclasses ``BaselineIndex`` and implements ``_match`` and ``_insert`` over the
checked arguments (block IDs as a uint64 array, metadata as (n, width) uint8 rows), and
``_recover``/``_snapshot`` when it keeps state of its own beside the record store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from sarp.baselines.settings import Settings, resolve
from sarp.block_ids import as_block_ids
from sarp.errors import IndexClosedError
from sarp.matched_prefix import MatchedPrefix, Tail
from sarp.matching import MatchResult
from storage_backends import RecordStore, open_store
from storage_backends.io import FileIO

STORE_DIR = "store"
RECOVERY_STAGES = ("snapshot_load_s", "deserialize_s", "rebuild_s", "bytes_read")

T = TypeVar("T", bound="BaselineIndex")
#: what a design's match returns: metadata bytes, counters, and where it stopped (or None)
Matched = tuple[bytes, dict[str, int], tuple[int, int, Any] | None]


class BaselineIndex(ABC):
    """A baseline prefix index with the SARP index's API (sarp/index.py)."""

    design: ClassVar[str] = ""
    #: whether the design keeps its entries in a record store under ``path/store``
    uses_store: ClassVar[bool] = True
    #: whether that store's keys are ids allocated densely from 0 (``open_store(dense_keys=)``)
    dense_keys: ClassVar[bool] = False
    #: whether match changes in-memory state (so it must not run beside another operation)
    serial_match: ClassVar[bool] = False
    #: design-specific open() options, stored in Settings
    options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def open(cls: type[T], path: str | Path, backend: str | None = None,
             memory_budget: int = 64 << 20, durability: str = "sync", direct_io: bool = True,
             block_size: int | None = None, segment_blocks: int | None = None,
             metadata_dtype: Any = None, **options: Any) -> T:
        """Open the index at ``path``, creating it if absent; None arguments take the stored
        values (or the defaults of a new index). The recovery report is in ``idx.recovery``;
        its ``seconds`` time the whole open, the settings' read included, as SARP's do."""
        started = time.perf_counter()
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            raise TypeError(f"{cls.__name__}.open() got unknown option(s): {', '.join(unknown)}")
        path = Path(path)
        settings = resolve(path, cls.design, dict(
            backend=backend, block_size=block_size, segment_blocks=segment_blocks,
            metadata_dtype=metadata_dtype, **options), cls._check_settings)
        store_args = dict(memory_budget=memory_budget, durability=durability,
                          direct_io=direct_io)
        return cls(path, settings, store_args, started)

    def __init__(self, path: Path, settings: Settings, store_args: dict[str, Any],
                 started: float):
        """``started``: the ``time.perf_counter()`` at which ``open`` began."""
        self.path = path
        self.io = FileIO()  # the design's own files (snapshots, markers)
        self.settings = settings
        self._store_args = store_args
        self._lock = threading.RLock()
        self._closed = False
        self._totals = {"matches": 0, "inserts": 0, "store_reads": 0, "store_writes": 0}
        self._matched = MatchedPrefix()
        self.store: RecordStore | None = (self._open_store(STORE_DIR, dense_keys=self.dense_keys)
                                            if self.uses_store else None)
        report = dict.fromkeys(RECOVERY_STAGES, 0)
        try:
            report.update(self._recover())
        except BaseException:
            self._close_stores()
            raise
        self.recovery: dict[str, Any] = {"seconds": time.perf_counter() - started, **report}

    # -- the public API -----------------------------------------------------------------------
    def insert(self, block_ids: Any, metadata: np.ndarray) -> dict[str, int]:
        """Index ``block_ids`` with one ``metadata`` record per block; blocks already stored
        keep their first metadata. Returns the insert's counters."""
        q = as_block_ids(block_ids)
        rows = self._check_metadata(metadata, len(q))
        with self._lock:
            self._check_open()
            known, tail = self._matched.recall(q)
            if tail is not None and not tail.current():  # checked under the insert lock
                tail = None
            with self._matched.clock.writing():
                st = self._insert(q, rows, known, tail)
            self._account("inserts", st)
        return st

    def match(self, block_ids: Any) -> MatchResult:
        """The longest indexed prefix of ``block_ids``, its metadata, and the match's counters
        (``store_reads``: logical record-store reads this match issued)."""
        q = as_block_ids(block_ids)
        with self._lock if self.serial_match else contextlib.nullcontext():
            self._check_open()
            stamp = self._matched.stamp()
            meta, st, tail = self._match(q)
            self._account("matches", st)
        n = len(meta) // self.settings.meta_width
        rows = np.frombuffer(meta, dtype=self.settings.metadata_dtype, count=n).copy()
        self._matched.remember(q, n, stamp, tail)
        return MatchResult(n, n * self.settings.block_size, q[:n].copy(), rows, st)

    def snapshot(self) -> dict[str, Any]:
        """Make the current state durable; returns bytes written and seconds taken."""
        with self._lock:
            self._check_open()
            t0 = time.perf_counter()
            written = self._snapshot()
            return {"bytes_written": written, "seconds": time.perf_counter() - t0}

    def stats(self) -> dict[str, Any]:
        """In-DRAM state (``dram_bytes``), entries, cumulative counters and store stats."""
        with self._lock:
            self._check_open()
            out: dict[str, Any] = {"design": self.design, "dram_bytes": self._dram_bytes(),
                                   "entries": self._entries(), **self._totals}
            if self.store is not None:
                out["store"] = self.store.stats()
            out.update(self._extra_stats())
            return out

    def close(self) -> None:
        """Persist what the design persists on close, then release the stores."""
        with self._lock:
            if self._closed:
                return
            try:
                self._on_close()
            finally:
                self._closed = True
                self._close_stores()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (set even if persisting on close failed)."""
        return self._closed

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what designs implement -----------------------------------------------------------------
    @abstractmethod
    def _match(self, q: np.ndarray) -> Matched:
        """(metadata bytes of the matched prefix, counters with ``store_reads``, and the
        window where the match stopped as (start, end, result), or None)."""

    @abstractmethod
    def _insert(self, q: np.ndarray, rows: np.ndarray, known: int,
                tail: Tail | None) -> dict[str, int]:
        """Index ``q`` with metadata ``rows`` ((n, width) uint8); returns counters. The first
        ``known`` blocks were verified as stored by this thread's last match, and ``tail`` (if
        not None) is still what that match found where it stopped (``sarp.matched_prefix``);
        a design may skip them."""

    @abstractmethod
    def _entries(self) -> int | None:
        """Entries of the design's in-DRAM state; None when it keeps none."""

    @classmethod
    def _check_settings(cls, settings: Settings) -> None:
        """Raise ValueError for settings the design cannot work with (before anything is
        written)."""
        return None

    def _recover(self) -> dict[str, Any]:
        """Restore in-DRAM state at open; returns the RECOVERY_STAGES it measured."""
        return {}

    def _snapshot(self) -> int:
        """Persist state; returns bytes written. By default the store is flushed."""
        if self.store is not None:
            self.store.flush(durable=True)
        return 0

    def _on_close(self) -> None:
        """Called once by close() before the stores are closed."""
        return None

    def _dram_bytes(self) -> int:
        return 0

    def _extra_stats(self) -> dict[str, Any]:
        return {}

    # -- helpers for designs ----------------------------------------------------------------------
    def _open_store(self, name: str, **overrides: Any) -> RecordStore:
        """Open the record store ``path/name`` with the index's store arguments, some replaced
        by ``overrides``."""
        return open_store(self.settings.backend, self.path / name,
                          **{**self._store_args, **overrides})

    def _stores(self) -> list[RecordStore]:
        """Every store the design opened (closed by close())."""
        return [self.store] if self.store is not None else []

    def _close_stores(self) -> None:
        for store in self._stores():
            store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IndexClosedError(f"{self.design} index at {str(self.path)!r} is closed")

    def _check_metadata(self, metadata: object, n: int) -> np.ndarray:
        dtype = self.settings.metadata_dtype
        if not isinstance(metadata, np.ndarray):
            raise TypeError(f"metadata must be a numpy array of dtype {dtype}, "
                            f"got {type(metadata).__name__}")
        if metadata.dtype != dtype:
            raise TypeError(f"metadata must have dtype {dtype}, got {metadata.dtype}")
        if metadata.shape != (n,):
            raise ValueError(f"metadata must hold one record per block: shape ({n},) "
                             f"expected, got {metadata.shape}")
        return np.ascontiguousarray(metadata).view(np.uint8).reshape(n, dtype.itemsize)

    def _account(self, op: str, st: dict[str, int]) -> None:
        st.setdefault("store_reads", 0)
        st.setdefault("store_writes", 0)
        self._totals[op] += 1
        self._totals["store_reads"] += st["store_reads"]
        self._totals["store_writes"] += st["store_writes"]


#: keys per batched lookup of a block-hash probe
PROBE_BATCH = 64
#: looks up keys in one call (a store's ``get_many``, as RocksDB's MultiGet): values in order,
#: None for each missing key
GetMany = Callable[[list[int]], list[bytes | None]]


def probe_blocks(get_many: GetMany, ids: list[int]) -> tuple[list[bytes], int]:
    """Per-block lookups from the first block until the first miss (vLLM style), batched
    ``PROBE_BATCH`` keys per call. The keys of a batch past its first miss are looked up too
    (a chained ID past a missing one is never stored, so they miss).

    Returns the values found and the number of keys looked up, as the paper counts logical
    reads: every requested key, batched ones and misses included.
    """
    found: list[bytes] = []
    probes = 0
    for at in range(0, len(ids), PROBE_BATCH):
        keys = ids[at:at + PROBE_BATCH]
        probes += len(keys)
        for value in get_many(keys):
            if value is None:
                return found, probes
            found.append(value)
    return found, probes


def match_blocks(get_many: GetMany, q: np.ndarray, counter: str) -> Matched:
    """A block-hash match: probe until the first miss; its tail is the missing block."""
    found, probes = probe_blocks(get_many, q.tolist())
    n = len(found)
    return b"".join(found), {counter: probes}, (n, n, None) if n < len(q) else None


def stored_prefix(get_many: GetMany, ids: list[int], known: int,
                  tail: Tail | None) -> tuple[int, int]:
    """A block-hash insert's probe: (stored prefix, probes), probing from the first block past
    the verified prefix, or not at all when the match's miss there still holds."""
    if tail is not None and tail.window == known:
        return known, 0
    found, probes = probe_blocks(get_many, ids[known:])
    return known + len(found), probes


def split_rows(rows: np.ndarray) -> list[bytes]:
    """One bytes object per metadata row."""
    raw = rows.tobytes()
    w = rows.shape[1]
    return [raw[i:i + w] for i in range(0, len(raw), w)]
