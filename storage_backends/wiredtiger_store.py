"""The ``wiredtiger`` engine: one WiredTiger table (uint64 key, raw bytes value) with logging.

Durability comes from WiredTiger's write-ahead log: ``sync`` commits every write batch with
``sync=on``; ``group`` commits without syncing and ``flush()`` syncs the log; ``none`` never
syncs before ``close()``. WiredTiger's checkpoint server checkpoints every ``checkpoint_seconds``
or ``checkpoint_log_bytes`` of log, so recovery replays a bounded log; ``close()`` checkpoints.

WiredTiger sessions and cursors are single-threaded, so each thread gets its own pair (created
on first use, reclaimed once the thread has ended, all closed by ``close()``, which waits
for the calls other threads are making: ``RecordStore.close``).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import wiredtiger
from wiredtiger import stat

from sarp.checks import check_int
from sarp.errors import CorruptionError, StoreError
from storage_backends.base import RecordStore

TABLE = "table:records"
FILE = "file:records.wt"  # the table's file, whose metadata holds its page sizes
MIN_CACHE = 1 << 20  # WiredTiger refuses a smaller cache_size
SESSION_MAX = 1000
RECORD_OVERHEAD = 128  # cache bytes an update costs beyond its key and value (estimate)
ROLLBACK_RETRIES = 12  # for one record: pauses of 1 ms doubling up to ROLLBACK_PAUSE_MAX
ROLLBACK_PAUSE_MAX = 0.1
# Small caches (the budget is ~10% of the data) stall under the default 20% dirty trigger:
# application threads then evict page by page and roll transactions back. Let dirty data take
# half the cache before application threads help, and keep each transaction to 2% of it.
EVICTION = "eviction_dirty_trigger=50,eviction_updates_trigger=40"
TXN_CACHE_FRACTION = 50
# Leaf page size in KiB, by key pattern. Random keys (block hashes) in a cache far smaller than
# the table: nearly every put and get of a missing page reads one leaf page and evicts a dirty
# one, so small pages (4 KB, as RocksDB's blocks) move the least; at WiredTiger's default of
# 32 KB such a put moves a whole page each way. Dense keys (segment ids, appended in order and
# rewritten while recent): recent records share pages, so WiredTiger's 32 KB keeps more of them
# per cached byte.
LEAF_PAGE_KB = 4
DENSE_LEAF_PAGE_KB = 32
MAX_LEAF_PAGE_KB = 512 << 10  # WiredTiger's limit, 512 MB
# WiredTiger creates (and zero-fills) a log file at every open; at the default 100 MB that costs
# about 0.1-0.3 s and 200 MB of disk, more than the rest of SARP's recovery. 4 MB files open in
# about 10 ms; recovery still replays only the log since the last checkpoint.
LOG_FILE_MAX = "4MB"
# WiredTiger stops a connection that reads damaged data (a block failing its checksum): this call
# and every later one fail with WT_PANIC. By default it then aborts the process, which would
# take the server embedding the index down with it; corruption_abort=false makes it return.
NO_ABORT = "debug_mode=(corruption_abort=false)"
PANIC = wiredtiger.wiredtiger_strerror(wiredtiger.WT_PANIC)
# WiredTiger statistics reported by stats(), as wt_<name>.
STATS = ("cache_bytes_inuse", "cache_bytes_max", "cache_pages_inuse", "cache_read",
         "cache_write", "cache_bytes_read", "block_read", "block_write", "block_byte_read",
         "block_byte_write", "log_sync", "checkpoints_total_succeed")


F = TypeVar("F", bound=Callable[..., Any])


def _damage_checked(method: F) -> F:
    """``method`` of the store with WiredTiger's panic raised as CorruptionError."""
    @functools.wraps(method)
    def run(self: WiredTigerStore, *args: Any) -> Any:
        try:
            return method(self, *args)
        except wiredtiger.WiredTigerError as exc:
            if PANIC not in str(exc):
                raise
            raise self._damage(exc) from exc
    return run  # type: ignore[return-value]


class _Handle:
    """One thread's session and cursor on the records table."""

    def __init__(self, conn: Any, thread: threading.Thread):
        self.thread = thread
        self.session = conn.open_session()
        self.cursor = self.session.open_cursor(TABLE)


class WiredTigerStore(RecordStore):
    """A ``RecordStore`` on a WiredTiger table (key_format=Q, value_format=u)."""

    kind = "wiredtiger"
    DENSE_KEYS = {"leaf_page_kb": DENSE_LEAF_PAGE_KB}

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20,
                 durability: str = "sync", direct_io: bool = True,
                 checkpoint_seconds: int = 60, checkpoint_log_bytes: int = 64 << 20,
                 leaf_page_kb: int = LEAF_PAGE_KB):
        """``leaf_page_kb`` (a multiple of 4) applies when the table is created; an existing
        table keeps its own (``stats()["leaf_page_kb"]``)."""
        check_int(checkpoint_seconds, "checkpoint_seconds", 0, 100_000)
        check_int(checkpoint_log_bytes, "checkpoint_log_bytes", 0, 2 << 30)
        if check_int(leaf_page_kb, "leaf_page_kb", 4, MAX_LEAF_PAGE_KB) % 4:
            raise ValueError(f"leaf_page_kb must be a multiple of 4 in [4, {MAX_LEAF_PAGE_KB}], "
                             f"got {leaf_page_kb}")
        super().__init__(path, memory_budget, durability, direct_io)
        with self._claim():
            home = self.path / "wt"
            home.mkdir(exist_ok=True)
            self._cache_size = max(MIN_CACHE, memory_budget)
            self._txn_bytes = max(16 << 10, self._cache_size // TXN_CACHE_FRACTION)
            config = (f"create,cache_size={self._cache_size},session_max={SESSION_MAX},"
                      f"log=(enabled=true,remove=true,file_max={LOG_FILE_MAX}),"
                      f"statistics=(fast),{EVICTION},"
                      f"checkpoint=(wait={checkpoint_seconds},log_size={checkpoint_log_bytes}),"
                      f"{NO_ABORT}")
            if self.direct_io:
                config += ",direct_io=[data,checkpoint]"
            try:
                self._conn = self._connect(home, config)
            except wiredtiger.WiredTigerError as e:  # any but a panic (CorruptionError)
                raise StoreError(f"cannot open WiredTiger at {str(home)!r} ({config}): {e}") \
                    from e
            self._local = threading.local()
            self._handles: list[_Handle] = []
            self._handles_lock = threading.Lock()
            try:
                self.leaf_page_kb = self._setup(leaf_page_kb)
            except BaseException:
                try:
                    self._conn.close()
                except wiredtiger.WiredTigerError:
                    pass  # stopped by a panic, which the setup raised
                raise

    @_damage_checked
    def _connect(self, home: Path, config: str) -> Any:
        return wiredtiger.wiredtiger_open(str(home), config)

    @_damage_checked
    def _setup(self, leaf_page_kb: int) -> int:
        """Create the table if it is new; its leaf page size in KiB."""
        setup = self._conn.open_session()
        setup.create(TABLE, f"key_format=Q,value_format=u,leaf_page_max={leaf_page_kb}KB")
        meta = setup.open_cursor("metadata:")
        meta.set_key(FILE)
        meta.search()
        size = _leaf_page_kb(meta.get_value())
        setup.close()
        return size

    @_damage_checked
    def _salvage(self) -> None:
        session = self._conn.open_session()
        try:
            session.salvage(TABLE, None)
        finally:
            session.close()

    def _damage(self, exc: Exception) -> CorruptionError:
        """WiredTiger's panic as CorruptionError: what it found went to stderr."""
        return CorruptionError(
            f"wiredtiger store at {str(self.path)!r}: WiredTiger found damaged data and "
            f"stopped ({exc}); its report on stderr names the file and block, and every later "
            f"call on this store fails")

    def _handle(self) -> _Handle:
        h = getattr(self._local, "handle", None)
        if h is None:
            with self._handles_lock:
                for dead in [d for d in self._handles if not d.thread.is_alive()]:
                    dead.session.close()
                    self._handles.remove(dead)
                h = _Handle(self._conn, threading.current_thread())
                self._handles.append(h)
            self._local.handle = h
        return h

    def _write(self, ops: list[tuple[int, bytes | None]]) -> None:
        """Apply puts (and removes, value None) in transactions of about ``_txn_bytes``.

        A batch larger than that is committed in several transactions, so it is atomic only
        up to that size; under ``sync`` it is still durable as a whole when put_many returns.
        """
        h = self._handle()
        chunks: list[list[tuple[int, bytes | None]]] = [[]]
        size = 0
        for op in ops:
            if size >= self._txn_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(op)
            size += RECORD_OVERHEAD + len(op[1] or b"")
        sync = self.durability == "sync"
        for i, chunk in enumerate(chunks):
            # Syncing the last commit syncs the log up to it, covering the earlier chunks too.
            self._commit(h, chunk, "sync=on" if sync and i == len(chunks) - 1 else None)
        if sync:
            self._count(syncs=1)

    @classmethod
    def _commit(cls, h: _Handle, chunk: list[tuple[int, bytes | None]],
                config: str | None) -> None:
        """One transaction. WiredTiger rolls a transaction back when its cache is too full to
        hold it: a batch is then split in halves (the last one keeps ``config``, whose sync
        covers the first), and a single record is retried after a growing pause."""
        for attempt in range(ROLLBACK_RETRIES):
            h.session.begin_transaction()
            try:
                for key, value in chunk:
                    h.cursor.set_key(key)
                    if value is None:
                        h.cursor.remove()  # WT_NOTFOUND for a missing key is fine
                    else:
                        h.cursor.set_value(value)
                        h.cursor.insert()
            except wiredtiger.WiredTigerRollbackError:
                h.session.rollback_transaction()
                h.cursor.reset()
                if len(chunk) > 1:
                    half = len(chunk) // 2
                    cls._commit(h, chunk[:half], None)
                    cls._commit(h, chunk[half:], config)
                    return
                if attempt == ROLLBACK_RETRIES - 1:
                    raise
                time.sleep(min(ROLLBACK_PAUSE_MAX, 0.001 * 2**attempt))
                continue
            except BaseException:
                h.session.rollback_transaction()
                raise
            h.session.commit_transaction(config)
            h.cursor.reset()  # release the cursor's page before the next transaction
            return

    @_damage_checked
    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None:
        self._write(pairs)  # type: ignore[arg-type]

    @_damage_checked
    def _delete(self, key: int) -> None:
        self._write([(key, None)])

    @_damage_checked
    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        c = self._handle().cursor
        out: list[bytes | None] = []
        for key in keys:
            c.set_key(key)
            out.append(c.get_value() if c.search() == 0 else None)
        c.reset()
        return out

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        return self._scan_chunks(self._read_chunk)

    @_damage_checked
    def _read_chunk(self, first: int, limit: int) -> list[tuple[int, bytes]]:
        c = self._handle().cursor
        rows: list[tuple[int, bytes]] = []
        c.set_key(first)
        found = c.search_near()
        if found == wiredtiger.WT_NOTFOUND:
            return rows
        if found < 0 and c.next() != 0:  # landed before ``first``: step to the next key
            c.reset()
            return rows
        while len(rows) < limit:
            rows.append((c.get_key(), c.get_value()))
            if c.next() != 0:
                break
        c.reset()
        return rows

    @_damage_checked
    def _flush(self, sync: bool) -> None:
        self._handle().session.log_flush("sync=on" if sync else "sync=off")  # off: to the OS
        if sync:
            self._count(syncs=1)

    @_damage_checked
    def _close(self) -> None:
        with self._handles_lock:
            handles, self._handles = self._handles, []
        try:
            for h in handles:
                h.session.close()
        finally:
            self._conn.close()  # takes a final checkpoint (after a panic: only frees it)

    @_damage_checked
    def _engine_stats(self) -> dict[str, Any]:
        cursor = self._handle().session.open_cursor("statistics:")
        try:
            out: dict[str, Any] = {f"wt_{name}": cursor[getattr(stat.conn, name)][2]
                                   for name in STATS}
        finally:
            cursor.close()
        out["leaf_page_kb"] = self.leaf_page_kb
        return out


def salvage(path: str | Path) -> None:
    """Rebuild the table of the wiredtiger store at ``path`` from its blocks that pass their
    checksums (WiredTiger's salvage), after a read found damage (``CorruptionError``).

    Records on damaged blocks are lost, and an older version of a record may come back in
    place of a lost newer one. The store must not be open elsewhere (its lock is taken)."""
    with WiredTigerStore(path, direct_io=False) as store:
        store._salvage()


def _leaf_page_kb(file_config: str) -> int:
    """The leaf page size, in KiB, that a table file's metadata records."""
    m = re.search(r"(?:^|,)leaf_page_max=(\d+)([KMG]?)B?(?:,|$)", file_config)
    if m is None:
        raise StoreError(f"WiredTiger metadata of {FILE} has no leaf_page_max")
    size = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    return size >> 10
