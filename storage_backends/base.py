"""The record-store interface: one durable keyspace of uint64 keys to bytes values.

Every engine (memory, wiredtiger, rocksdb, flashlog, odirect) subclasses ``RecordStore`` and
implements the ``_``-prefixed primitives; argument checks, closed-store checks, the logical
counters of ``stats()`` and the context-manager protocol live here, once.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from sarp._core.calls import Calls
from sarp.checks import check_bool, check_int, check_iterable, check_path
from sarp.errors import CorruptionError, StoreClosedError, StoreError, StoreKindError
from storage_backends.io import LOCK_FILE, File, FileIO
from storage_backends.write_stop import WriteStop

S = TypeVar("S", bound="RecordStore")

DURABILITY_MODES = ("sync", "group", "none")
MAX_KEY = (1 << 64) - 1
#: the largest memory budget a store takes: 10 TiB, WiredTiger's largest cache
MAX_MEMORY_BUDGET = 10 << 40
KIND_FILE = "STORE_KIND"
SCAN_CHUNK = 1024


def check_key(key: object, name: str = "key") -> int:
    """Return ``key`` as an int in [0, 2**64), or raise naming the argument (an int in range,
    the common case on every store call, is taken at once)."""
    if type(key) is int and 0 <= key <= MAX_KEY:
        return key
    return check_int(key, name, 0, MAX_KEY)


def check_io(io: object) -> FileIO:
    """The ``io`` option of the file-based engines: a FileIO, or None for the default one."""
    if io is None:
        return FileIO()
    if not isinstance(io, FileIO):
        raise TypeError(f"io must be a storage_backends.io.FileIO, got {io!r}")
    return io


def check_keys(keys: object) -> list[int]:
    """``keys`` (an iterable of integers, not a string) as a list of checked keys."""
    return [check_key(k, "keys") for k in check_iterable(keys, "keys", "an iterable of integers")]


#: what a put takes as a value; it is stored, and read back, as bytes
Value = bytes | bytearray | memoryview


def check_pairs(pairs: object) -> list[tuple[int, bytes]]:
    """``pairs`` (an iterable of (key, value) pairs) as a list of checked pairs."""
    out = []
    if type(pairs) is not list:  # a list, as the index passes, needs no check
        pairs = check_iterable(pairs, "pairs", "an iterable of (key, value) pairs", (Mapping,))
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"pairs must hold (key, value) pairs, got {type(pair).__name__} "
                            f"{str(pair)[:40]}")
        out.append((check_key(pair[0]), check_value(pair[1])))
    return out


#: how an engine with a repair tool (``storage_backends.SALVAGE``) names the way out of damage
SALVAGE_HINT = ("storage_backends.salvage(path) repairs it, keeping the records it can read "
                "(for an index's store: sarp rebuild INDEX --salvage)")


def check_value(value: object, name: str = "value") -> bytes:
    """Return ``value`` as bytes; accepts bytes, bytearray and memoryview."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, bytearray or memoryview, got {type(value).__name__}")


def check_store_args(memory_budget: object, durability: object, direct_io: object) -> int:
    """The options every engine takes, checked by name before anything is opened; returns
    ``memory_budget`` as an int."""
    if not isinstance(durability, str) or durability not in DURABILITY_MODES:
        raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
    budget = check_int(memory_budget, "memory_budget", 1, MAX_MEMORY_BUDGET)
    check_bool(direct_io, "direct_io")
    return budget


def stored_kind(path: str | Path) -> str | None:
    """The kind of the store at ``path`` (its ``STORE_KIND`` marker), or None if there is none."""
    marker = Path(path) / KIND_FILE
    if not marker.is_file():
        return None
    try:
        return marker.read_bytes().decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise CorruptionError(f"{str(marker)!r} is damaged: {exc}") from exc


def claim_directory(path: str | Path, kind: str, io: FileIO | None = None) -> File:
    """Create or check the store directory ``path`` and its kind marker, and lock it
    (``FileIO.lock``); returns the lock, held until it is closed.

    A path that is a file, or a directory holding another kind's store (or foreign files),
    raises ``StoreKindError`` and is left untouched. The marker is published whole
    (``FileIO.publish``) under the lock, after the checks are made again there, so that of
    two opens creating a store at once one creates it and the other raises
    ``StoreLockedError`` (or ``StoreKindError``, for a store of another kind); the entries of
    the directories it creates are made durable too (their parents synced, the outermost
    first). The lock file, and a marker's temporary file left by a crash, do not count as
    foreign files.
    """
    p = Path(path)
    _check_claim(p, kind)
    io = io or FileIO()
    missing = io.make_dirs(p)
    lock = io.lock(p, f"{kind} store")
    try:
        if not _check_claim(p, kind):
            io.publish(p / KIND_FILE, (kind + "\n").encode())
        for d in reversed(missing):  # each new directory's entry, from the outermost
            io.fsync_dir(d.parent)
    except BaseException:
        lock.close()
        raise
    return lock


def _check_claim(p: Path, kind: str) -> bool:
    """Whether ``p`` holds a store of ``kind`` (False: none yet); StoreKindError for a file,
    another kind's store or foreign files. The directory is listed before the marker is
    read: the marker is published before any file of the store it names is made."""
    if p.exists() and not p.is_dir():
        raise StoreKindError(f"path {str(p)!r} is a file, not a store directory")
    names = {c.name for c in p.iterdir()} if p.exists() else set()
    found = stored_kind(p)
    if found is not None:
        if found != kind:
            raise StoreKindError(f"path {str(p)!r} holds a {found!r} store, not {kind!r}")
        return True
    if names - {KIND_FILE + ".tmp", LOCK_FILE}:
        raise StoreKindError(f"path {str(p)!r} is not empty and holds no store")
    return False


class RecordStore(ABC):
    """A durable uint64 -> bytes keyspace. Thread-safe: many threads may call it at once.

    durability: ``sync`` (put returns after the write is durable), ``group`` (writes are durable
    after the next ``flush()``), ``none`` (no sync is ever forced before ``close()``; ``flush()``
    only hands writes to the operating system; ``close()`` still persists everything).
    See docs/durability.md for what each engine guarantees.

    ``persistent`` is False for an engine whose contents do not survive ``close()`` (memory).
    ``DENSE_KEYS`` are the open options the engine takes when a caller's keys are small
    integers allocated densely from 0 (``open_store(dense_keys=True)``): odirect then addresses
    records by key, WiredTiger uses larger pages.
    """

    kind: str = ""
    persistent: bool = True
    DENSE_KEYS: dict[str, Any] = {}
    #: files under the store's directory (glob patterns) that hold no record once the store
    #: is closed cleanly: preallocated write-ahead logs, the engine's text log
    LOG_FILES: tuple[str, ...] = ()

    def __init__(self, path: str | Path, memory_budget: int, durability: str, direct_io: bool):
        self.memory_budget = check_store_args(memory_budget, durability, direct_io)
        self.path = check_path(path)
        self.durability = durability
        self.direct_io = direct_io
        self._calls = Calls(lambda: StoreClosedError(
            f"{self.kind} store at {str(self.path)!r} is closed"))
        self._lock_file: File | None = None  # held from ``_claim`` to ``close()``
        #: files whose failed sync ``_claim`` redid (``FileIO.redo_failed_syncs``)
        self.redone_files = 0
        self._stop = WriteStop(lambda: f"{self.kind} store at {str(self.path)!r}",
                               "reopen it to recover")
        #: ``absent_after_crash()``: set by an engine's open that scans after a crash
        self._absent: npt.NDArray[np.uint64] = np.empty(0, np.uint64)
        self._counter_lock = threading.Lock()
        self._counters = dict.fromkeys(
            ("logical_reads", "logical_writes", "logical_deletes", "bytes_read", "bytes_written",
             "syncs"), 0)
        #: why the engine itself refuses writes until the store is reopened (WiredTiger after
        #: a panic, RocksDB after a failed write), None while it takes them
        self._engine_stop: str | None = None

    # -- the public interface -------------------------------------------------------------
    def put(self, key: int, value: Value) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        self.put_many([(key, value)])

    def put_many(self, pairs: Iterable[tuple[int, Value]]) -> None:
        """Store several records as one batch (atomic where the engine supports it)."""
        checked = check_pairs(pairs)
        if not checked:
            self._check_open()
            self._stop.check()  # an empty batch is refused as any write is
            return
        self._run_write(lambda: self._put_many(checked))
        nbytes = 0
        for _, v in checked:
            nbytes += len(v)
        self._count("logical_writes", len(checked), "bytes_written", nbytes)

    def get(self, key: int) -> bytes | None:
        """The value stored under ``key``, or None."""
        return self._get_counted([check_key(key)])[0]

    def get_many(self, keys: Iterable[int]) -> list[bytes | None]:
        """Values for ``keys`` in order, None for each missing key."""
        return self._get_counted(check_keys(keys))

    def delete(self, key: int) -> None:
        """Remove ``key``; deleting a missing key is not an error."""
        key = check_key(key)
        self._run_write(lambda: self._delete(key))
        self._count("logical_deletes", 1)

    def absent_after_crash(self) -> npt.NDArray[np.uint64]:
        """Keys, ascending, that this store's open scanned after a crash and found holding no
        version at all (a deleted key is not listed: its deletion is a version). A record
        made durable before the crash must not be among them, so a caller that knows which
        keys it made durable can tell damage from a key never written (SARP's recovery
        checks the segments its snapshot names). Empty where the open scanned nothing
        (odirect after a clean close, or in sparse mode) or the engine does not scan its
        records after a crash."""
        return self._absent

    def scan(self) -> Iterator[tuple[int, bytes]]:
        """Every live record, in ascending key order (used by rebuild and tests).

        Writes made while a scan runs may or may not show in it: memory, odirect and the flash
        log scan what was stored when the scan started; WiredTiger and RocksDB read in chunks
        of keys, and show a write past the chunks already read. A record stored before the
        scan and not changed during it is always returned.
        A scan continued after ``close()`` raises StoreClosedError; the engine is not touched.
        Starting the scan is a call ``close()`` waits for (some engines read everything then).
        """
        with self._calls:
            rows = self._scan()
        return self._checked_scan(rows)

    def _checked_scan(self, rows: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
        while True:
            with self._calls:  # the engine is asked for more only while open
                row = next(rows, None)
            if row is None:
                return
            yield row

    def flush(self, durable: bool = False) -> None:
        """Make every earlier write durable (the group-commit point for ``group``).

        Under ``none`` it forces nothing to the device unless ``durable``: writes then survive
        a crash of this process but not a power loss. ``durable`` syncs in every mode, under
        ``sync`` too, whose writes are each durable but whose store may hold unsynced writes
        of an earlier session in another mode or killed: a snapshot of the index, and its
        journal's proof, need the segments they name on the device.
        """
        check_bool(durable, "durable")
        sync = self.durability == "group" or durable
        self._run_write(lambda: self._flush(sync))

    def close(self) -> None:
        """Persist everything and release the engine and the directory lock; later calls
        raise StoreClosedError. Waits for calls running on other threads; closing a closed
        store does nothing. If the engine fails to close, the store is closed all the same
        (its lock released) and the error raised. A store whose writes stopped (``_run_write``)
        closes its files without writing: reopening recovers it as after a crash."""
        self._release(self._close if self._stop.failure is None else self._abandon)

    def abandon(self) -> None:
        """Close as a crash would leave the store: release the engine and the directory lock
        without what a clean close writes, so that the next open repairs it as after a crash.
        For a caller that found damage the store's open reported (``absent_after_crash``):
        the next open finds it again, where a clean close would record the store as whole."""
        self._release(self._abandon)

    def _release(self, close: Callable[[], None]) -> None:
        """End the store with ``close`` (the engine's clean close, or ``_abandon``), once."""
        if not self._calls.begin_close():
            return
        try:
            close()
        finally:
            try:
                if self._lock_file is not None:
                    self._lock_file.close()
            finally:
                self._calls.end_close()

    def stats(self) -> dict[str, Any]:
        """Logical counters (exact) plus what the engine can tell about itself;
        ``writes_stopped``: whether writes are refused until the store is reopened: a failed
        sync stopped them (``_run_write``), or the engine stopped them by its own rule."""
        with self._counter_lock:
            out: dict[str, Any] = dict(self._counters)
        out.update(kind=self.kind, durability=self.durability, direct_io=self.direct_io,
                   writes_stopped=(self._stop.failure is not None
                                   or self._engine_stop is not None))
        try:
            with self._calls:
                out.update(self._engine_stats())
        except StoreClosedError:
            pass  # a closed store reports its logical counters only
        except (StoreError, CorruptionError):
            if self._engine_stop is None:
                raise
            # so does a store whose engine stopped and answers no call (WiredTiger's panic)
        return out

    @property
    def closed(self) -> bool:
        return not self._calls.open

    def __enter__(self: S) -> S:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers for engines ----------------------------------------------------------------
    @contextmanager
    def _claim(self, io: FileIO | None = None) -> Iterator[None]:
        """Create or check the store directory (``claim_directory``) and lock it until
        ``close()`` (``FileIO.lock``): two open handles would each write the store's files
        from their own state. Files whose sync failed in an earlier session are made durable
        as they read now before the engine reads them (``FileIO.redo_failed_syncs``). The
        body opens the engine; if it raises, the lock is released."""
        io = io or FileIO()
        self._lock_file = claim_directory(self.path, self.kind, io)
        try:
            self.redone_files = io.redo_failed_syncs(self.path)
            yield
        except BaseException:
            self._lock_file.close()
            raise

    def _engine_home(self, name: str) -> Path:
        """The directory ``name`` in the store directory where an engine that does its own
        I/O (WiredTiger, RocksDB) keeps its files; made here, with its entry made durable:
        the engine syncs the files it makes in its home, not the home's own entry."""
        home = self.path / name
        io = FileIO()
        if io.make_dirs(home):
            io.fsync_dir(self.path)
        return home

    def _get_counted(self, keys: list[int]) -> list[bytes | None]:
        """The engine's values for checked ``keys``, counted as logical reads."""
        with self._calls:
            values = self._get_many(keys)
        nbytes = 0
        for v in values:
            if v is not None:
                nbytes += len(v)
        self._count("logical_reads", len(keys), "bytes_read", nbytes)
        return values

    def _run_write(self, op: Callable[[], None]) -> None:
        """Run the engine's write ``op`` (a put, delete or flush) as a call on the open store.
        A failed sync in it stops writes (``storage_backends.write_stop``) until the store is
        reopened, which recovers it as after a crash; reads go on."""
        with self._calls:
            self._stop.run(op)

    def _check_open(self) -> None:
        if not self._calls.open:
            raise self._calls.closed_error()

    def _count(self, name: str, n: int, bytes_name: str = "", nbytes: int = 0) -> None:
        """Add ``n`` to the counter ``name`` and, if given, ``nbytes`` to ``bytes_name``."""
        with self._counter_lock:
            self._counters[name] += n
            if bytes_name:
                self._counters[bytes_name] += nbytes

    def _scan_chunks(
        self, read_chunk: Callable[[int, int], list[tuple[int, bytes]]]
    ) -> Iterator[tuple[int, bytes]]:
        """Ascending scan built from ``read_chunk(first_key, limit)`` calls.

        No engine cursor is held between yields, so the caller may read or write the store
        while scanning (``scan()`` stops a scan of a closed store before it reads again).
        """
        start = 0
        while True:
            rows = read_chunk(start, SCAN_CHUNK)
            yield from rows
            if len(rows) < SCAN_CHUNK or rows[-1][0] == MAX_KEY:
                return
            start = rows[-1][0] + 1

    # -- what each engine implements ----------------------------------------------------------
    @abstractmethod
    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None: ...

    @abstractmethod
    def _get_many(self, keys: list[int]) -> list[bytes | None]: ...

    @abstractmethod
    def _delete(self, key: int) -> None: ...

    @abstractmethod
    def _scan(self) -> Iterator[tuple[int, bytes]]: ...

    @abstractmethod
    def _flush(self, sync: bool) -> None:
        """Hand every earlier write to the device (``sync``: and wait until it is durable)."""

    @abstractmethod
    def _close(self) -> None: ...

    def _abandon(self) -> None:
        """Close after writes stopped: release the engine without writing what a clean close
        writes. Engines whose clean close marks files as consistent override it."""
        self._close()

    def _engine_stats(self) -> dict[str, Any]:
        return {}
