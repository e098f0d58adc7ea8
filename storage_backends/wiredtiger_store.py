"""The ``wiredtiger`` engine: one WiredTiger table (uint64 key, raw bytes value) with logging.

Durability comes from WiredTiger's write-ahead log: ``sync`` commits every write batch with
``sync=on``; ``group`` commits without syncing and ``flush()`` syncs the log; ``none`` never
syncs before ``close()``. WiredTiger's checkpoint server checkpoints every ``checkpoint_seconds``
or ``checkpoint_log_bytes`` of log, so recovery replays a bounded log; ``close()`` checkpoints.

WiredTiger sessions and cursors are single-threaded, so each call takes a pair that no other
call is using, and gives it back when it returns (``_on_handle``): the pairs number the most
calls made at once, whatever threads make them, and ``close()`` closes them all once the calls
other threads are making have returned (``RecordStore.close``).

Damage is raised as CorruptionError naming the store: a block that fails its checksum (WiredTiger
stops the connection: WT_PANIC), a table file the open cannot read (``_open_table``), metadata
WiredTiger asks to salvage (WT_TRY_SALVAGE) and a damaged log file header
(``_check_log_headers``). WiredTiger's recovery cuts the log at the first record that fails its
checksum and goes on without an error; no configuration makes it refuse (docs/durability.md).
A write that fails (a full disk) raises OSError; when WiredTiger stops the connection for it,
the panic is raised as StoreError (``_stopped``), and reopening recovers the store.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import resource
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import wiredtiger
from wiredtiger import stat

from sarp.checks import check_int
from sarp.errors import CorruptionError, StoreError
from storage_backends.base import SALVAGE_HINT, RecordStore
from storage_backends.io import FileIO

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
# WiredTiger stops a connection that reads damaged data (a block failing its checksum) or
# fails to write its log or a checkpoint (a full disk): this call and every later one fail with
# WT_PANIC. A diagnostic (Debug) build then aborts the process, which would take the server
# embedding the index down with it (install.sh builds Release); corruption_abort=false makes
# such a build return on damage too.
NO_ABORT = "debug_mode=(corruption_abort=false)"
PANIC = wiredtiger.wiredtiger_strerror(wiredtiger.WT_PANIC)
# The OS errors WiredTiger passes up as their strerror text, raised as OSError: a full disk or
# quota, a file past its size limit, a device error, a read-only file system.
OS_FAILURES = {os.strerror(code): code
               for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS)}
# A panic on a file system with less free space than this is reported as a failed write.
FULL_BELOW = 64 << 20
# What opening the table raises, without stopping the connection, for a file it cannot read as
# the table's (not a WiredTiger file, shorter than its checkpoint says) or cannot find. Both are
# damage there; elsewhere WT_ERROR is not (a connection out of sessions raises it too).
TABLE_DAMAGE = (wiredtiger.wiredtiger_strerror(wiredtiger.WT_ERROR), os.strerror(errno.ENOENT))
# What wiredtiger_open raises for damaged metadata (WiredTiger.wt) or history store.
TRY_SALVAGE = wiredtiger.wiredtiger_strerror(wiredtiger.WT_TRY_SALVAGE)
# A log file (WiredTigerLog.N) opens with a header record: length and checksum (CRC32C of the
# record with the checksum zeroed), flags, mem_len, then the log's magic number. WiredTiger
# writes and syncs it before the file takes its name, so a crash cannot tear it.
LOG_RECORD = struct.Struct("<II")
LOG_MAGIC = struct.Struct("<I")
LOG_MAGIC_AT = 16
LOG_MAGIC_VALUE = 0x101064
LOG_HEADER_MAX = 64 << 10
# WiredTiger statistics reported by stats(), as wt_<name>.
STATS = ("cache_bytes_inuse", "cache_bytes_max", "cache_pages_inuse", "cache_read",
         "cache_write", "cache_bytes_read", "block_read", "block_write", "block_byte_read",
         "block_byte_write", "log_sync", "checkpoints_total_succeed")


F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


def cache_size(memory_budget: int) -> int:
    """WiredTiger's cache for ``memory_budget``: all of it, and at least ``MIN_CACHE``."""
    return max(MIN_CACHE, memory_budget)


def build() -> str:
    """WiredTiger's version and build kind, which the benchmark records: a diagnostic (Debug)
    build runs at -Og with assertions, so its figures are not a released engine's."""
    kind = "diagnostic build" if wiredtiger.diagnostic_build() else "release build"
    return f"{wiredtiger.wiredtiger_version()[0]}, {kind}"


def _engine_checked(method: F) -> F:
    """``method`` of the store with WiredTiger's errors raised as the store's: an OS error
    (``OS_FAILURES``) as OSError, a panic as ``_stopped`` gives it."""
    @functools.wraps(method)
    def run(self: WiredTigerStore, *args: Any) -> Any:
        try:
            return method(self, *args)
        except wiredtiger.WiredTigerError as exc:
            code = OS_FAILURES.get(str(exc))
            if code is not None:
                self._os_failure = str(exc)
                raise OSError(code, f"wiredtiger store at {str(self.path)!r}: {exc}") from exc
            if PANIC not in str(exc):
                raise
            raise self._stopped(exc) from exc
    return run  # type: ignore[return-value]


def _on_handle(method: Callable[Concatenate[WiredTigerStore, _Handle, P], R],
               ) -> Callable[Concatenate[WiredTigerStore, P], R]:
    """``method(self, handle, *args)`` of the store, with a handle no other call is using
    (``_take``), given back when it returns."""
    @functools.wraps(method)
    def run(self: WiredTigerStore, *args: P.args, **kwargs: P.kwargs) -> R:
        h = self._take()
        try:
            return method(self, h, *args, **kwargs)
        finally:
            self._idle.append(h)  # atomic under the GIL, as list.pop in _take
    return run


class _Handle:
    """A session and a cursor on the records table (``open_table(session)``), used by one
    call at a time."""

    def __init__(self, conn: Any, open_table: Callable[[Any], Any]):
        self.session = conn.open_session()
        try:
            self.cursor = open_table(self.session)
        except BaseException:
            self.session.close()
            raise


class WiredTigerStore(RecordStore):
    """A ``RecordStore`` on a WiredTiger table (key_format=Q, value_format=u)."""

    kind = "wiredtiger"
    #: its log files, preallocated: a clean close checkpoints every record into the table
    LOG_FILES = ("wt/WiredTigerLog.*", "wt/WiredTigerPreplog.*")
    DENSE_KEYS = {"leaf_page_kb": DENSE_LEAF_PAGE_KB}
    _SALVAGING = False  # the open of ``salvage``: see ``_SalvageStore``

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20,
                 durability: str = "sync", direct_io: bool = True,
                 checkpoint_seconds: int = 60, checkpoint_log_bytes: int = 64 << 20,
                 leaf_page_kb: int = LEAF_PAGE_KB):
        """``leaf_page_kb`` (a multiple of 4) applies when the table is created; an existing
        table keeps its own (``stats()["leaf_page_kb"]``)."""
        checkpoint_seconds = check_int(checkpoint_seconds, "checkpoint_seconds", 0, 100_000)
        checkpoint_log_bytes = check_int(checkpoint_log_bytes, "checkpoint_log_bytes", 0, 2 << 30)
        leaf_page_kb = check_int(leaf_page_kb, "leaf_page_kb", 4, MAX_LEAF_PAGE_KB)
        if leaf_page_kb % 4:
            raise ValueError(f"leaf_page_kb must be a multiple of 4 in [4, {MAX_LEAF_PAGE_KB}], "
                             f"got {leaf_page_kb}")
        super().__init__(path, memory_budget, durability, direct_io)
        self._os_failure: str | None = None  # the last OS error a call raised
        self._panic: StoreError | CorruptionError | None = None  # the first panic's error
        with self._claim():
            home = self._engine_home("wt")
            self._cache_size = cache_size(self.memory_budget)
            self._txn_bytes = max(16 << 10, self._cache_size // TXN_CACHE_FRACTION)
            config = (f"create,cache_size={self._cache_size},session_max={SESSION_MAX},"
                      f"log=(enabled=true,remove=true,file_max={LOG_FILE_MAX}),"
                      f"statistics=(fast),{EVICTION},"
                      f"checkpoint=(wait={checkpoint_seconds},log_size={checkpoint_log_bytes}),"
                      f"{NO_ABORT}")
            if self.direct_io:
                config += ",direct_io=[data,checkpoint]"
            if self._SALVAGING:
                config += ",salvage=true"  # WiredTiger's salvage of its metadata and logs
            else:
                self._check_log_headers(home)
            try:
                self._conn = self._connect(home, config)
            except wiredtiger.WiredTigerError as e:  # any but a panic (CorruptionError)
                if TRY_SALVAGE in str(e):
                    raise CorruptionError(
                        f"wiredtiger store at {str(self.path)!r}: WiredTiger found its metadata "
                        f"damaged ({e}); its report on stderr names the file; {SALVAGE_HINT}") \
                        from e
                raise StoreError(f"cannot open WiredTiger at {str(home)!r} ({config}): {e}") \
                    from e
            self._handles: list[_Handle] = []  # every handle, closed by close()
            self._idle: list[_Handle] = []  # the handles no call is using
            self._handles_lock = threading.Lock()
            try:
                self.leaf_page_kb = self._setup(leaf_page_kb)
            except BaseException:
                try:
                    self._conn.close()
                except wiredtiger.WiredTigerError:
                    pass  # stopped by a panic, which the setup raised
                raise

    def _check_log_headers(self, home: Path) -> None:
        """Raise CorruptionError for a log file whose header record fails its checks.

        A crash cannot tear a header (LOG_RECORD), but WiredTiger's recovery reads a damaged
        one as the torn end of the log: it drops the log from there without an error, with
        every record committed since the last checkpoint, and the table itself if it was
        created since (it then moves ``records.wt`` aside and creates an empty table)."""
        io = FileIO()
        for log in sorted(home.glob("WiredTigerLog.*")):
            fault = _log_header_fault(bytes(io.read_whole(log, LOG_HEADER_MAX)))
            if fault is not None:
                raise CorruptionError(
                    f"wiredtiger store at {str(self.path)!r}: the header of log file "
                    f"{str(log)!r} is damaged ({fault}), and WiredTiger's recovery would drop "
                    f"the records logged since the last checkpoint without an error; "
                    f"{SALVAGE_HINT}, without those records")

    @_engine_checked
    def _connect(self, home: Path, config: str) -> Any:
        return wiredtiger.wiredtiger_open(str(home), config)

    def _open_table(self, session: Any) -> Any:
        """A cursor on the records table. Opening the table reads its file's descriptor and
        checkpoint: a file WiredTiger cannot read there, or cannot find, is CorruptionError
        (``TABLE_DAMAGE``); WiredTiger's report on stderr names the fault."""
        try:
            return session.open_cursor(TABLE)
        except wiredtiger.WiredTigerError as exc:
            if str(exc) not in TABLE_DAMAGE:
                raise
            raise CorruptionError(
                f"wiredtiger store at {str(self.path)!r}: WiredTiger cannot read the table "
                f"file {FILE.removeprefix('file:')} ({exc}): it is damaged or missing; its "
                f"report on stderr names the fault; {SALVAGE_HINT}") from exc

    @_engine_checked
    def _setup(self, leaf_page_kb: int) -> int:
        """Create the table if it is new and open it, so that a table file WiredTiger cannot
        read is found by the open (``_open_table``), not by the first read (salvage reads it
        itself). Returns the table's leaf page size in KiB."""
        setup = self._conn.open_session()
        setup.create(TABLE, f"key_format=Q,value_format=u,leaf_page_max={leaf_page_kb}KB")
        if not self._SALVAGING:
            self._open_table(setup).close()
        meta = setup.open_cursor("metadata:")
        meta.set_key(FILE)
        meta.search()
        size = _leaf_page_kb(meta.get_value())
        setup.close()
        return size

    @_engine_checked
    def _salvage(self) -> None:
        """Salvage the table, also a file whose descriptor block is damaged (``force``); a
        table file that is gone leaves no block to keep: the table is created again, empty."""
        session = self._conn.open_session()
        try:
            try:
                session.salvage(TABLE, "force=true")
            except wiredtiger.WiredTigerError as exc:
                if str(exc) != os.strerror(errno.ENOENT):
                    raise
                session.drop(TABLE, "force=true")
                session.create(TABLE, f"key_format=Q,value_format=u,"
                                      f"leaf_page_max={self.leaf_page_kb}KB")
        finally:
            session.close()

    def _stopped(self, exc: Exception) -> StoreError | CorruptionError:
        """WiredTiger's panic, after which every call on this store fails and the store takes
        no more writes (``stats()["writes_stopped"]``). The first panic's cause (``_panic``)
        is given for every later call too: the file system's state may have changed since."""
        if self._panic is None:
            self._panic = self._panic_cause(exc)
            self._engine_stop = str(self._panic)
        return type(self._panic)(str(self._panic))

    def _panic_cause(self, exc: Exception) -> StoreError | CorruptionError:
        """After an OS error of this store, on a file system all but full or under a file
        size limit, WiredTiger stopped on a failed write: StoreError, and reopening recovers
        the store as after a crash. Otherwise it found damaged data: CorruptionError. Its
        report went to stderr."""
        cause = self._os_failure
        if cause is None:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            try:
                st = os.statvfs(self.path)
                free = st.f_bavail * st.f_frsize
            except OSError:
                free = FULL_BELOW
            if free < FULL_BELOW:
                cause = f"{free} bytes free on its file system"
            elif limit != resource.RLIM_INFINITY:
                cause = f"a file size limit of {limit} bytes is set"
        if cause is not None:
            return StoreError(
                f"wiredtiger store at {str(self.path)!r}: WiredTiger stopped after a write "
                f"failed ({cause}; {exc}); every later call on this store fails: close it, "
                f"make room and reopen it, which recovers it as after a crash")
        return CorruptionError(
            f"wiredtiger store at {str(self.path)!r}: WiredTiger found damaged data and "
            f"stopped ({exc}); its report on stderr names the file and block, and every later "
            f"call on this store fails")

    def _take(self) -> _Handle:
        """An idle handle, or a new one: WiredTiger allows ``SESSION_MAX`` sessions, so as
        many calls at once."""
        try:
            return self._idle.pop()
        except IndexError:
            pass
        with self._handles_lock:
            if len(self._handles) >= SESSION_MAX - 1:  # one short of WiredTiger's limit
                raise StoreError(f"wiredtiger store at {str(self.path)!r}: more than "
                                 f"{SESSION_MAX - 1} calls at once")
            h = _Handle(self._conn, self._open_table)
            self._handles.append(h)
        return h

    def _write(self, h: _Handle, ops: list[tuple[int, bytes | None]]) -> None:
        """Apply puts (and removes, value None) in transactions of about ``_txn_bytes``.

        A batch larger than that is committed in several transactions, so it is atomic only
        up to that size; under ``sync`` it is still durable as a whole when put_many returns.
        """
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
            self._count("syncs", 1)

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

    @_engine_checked
    @_on_handle
    def _put_many(self, h: _Handle, pairs: list[tuple[int, bytes]]) -> None:
        self._write(h, pairs)  # type: ignore[arg-type]

    @_engine_checked
    @_on_handle
    def _delete(self, h: _Handle, key: int) -> None:
        self._write(h, [(key, None)])

    @_engine_checked
    @_on_handle
    def _get_many(self, h: _Handle, keys: list[int]) -> list[bytes | None]:
        c = h.cursor
        out: list[bytes | None] = []
        for key in keys:
            c.set_key(key)
            out.append(c.get_value() if c.search() == 0 else None)
        c.reset()
        return out

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        return self._scan_chunks(self._read_chunk)

    @_engine_checked
    @_on_handle
    def _read_chunk(self, h: _Handle, first: int, limit: int) -> list[tuple[int, bytes]]:
        c = h.cursor
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

    @_engine_checked
    @_on_handle
    def _flush(self, h: _Handle, sync: bool) -> None:
        h.session.log_flush("sync=on" if sync else "sync=off")  # off: to the OS
        if sync:
            self._count("syncs", 1)

    @_engine_checked
    def _close(self) -> None:
        with self._handles_lock:
            handles, self._handles, self._idle = self._handles, [], []
        try:
            for h in handles:
                h.session.close()
        finally:
            self._conn.close()  # takes a final checkpoint (after a panic: only frees it)

    @_engine_checked
    @_on_handle
    def _engine_stats(self, h: _Handle) -> dict[str, Any]:
        cursor = h.session.open_cursor("statistics:")
        try:
            out: dict[str, Any] = {f"wt_{name}": cursor[getattr(stat.conn, name)][2]
                                   for name in STATS}
        finally:
            cursor.close()
        out["leaf_page_kb"] = self.leaf_page_kb
        return out


def salvage(path: str | Path, **options: Any) -> None:
    """Rebuild the table of the wiredtiger store at ``path`` from its blocks that pass their
    checksums (WiredTiger's salvage), after a read found damage (``CorruptionError``).

    Records on damaged blocks are lost, and an older version of a record may come back in
    place of a lost newer one. ``options``: the store's open options, checked before the
    repair starts. The store must not be open elsewhere (its lock is taken)."""
    with _SalvageStore(path, direct_io=False, **options) as store:
        store._salvage()


class _SalvageStore(WiredTigerStore):
    """The store opened by ``salvage``: WiredTiger salvages damaged metadata and logs as it
    opens (``salvage=true``; a damaged log is cut where the damage starts), the log headers
    are not checked and the table is not read until its salvage."""

    _SALVAGING = True


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), WiredTiger's checksum; for the short log header only."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _log_header_fault(head: bytes) -> str | None:
    """What is wrong with the header record at the start of a log file, or None."""
    if len(head) < LOG_MAGIC_AT + LOG_MAGIC.size:
        return f"the file holds {len(head)} bytes, less than a header"
    length, checksum = LOG_RECORD.unpack_from(head)
    if not LOG_MAGIC_AT + LOG_MAGIC.size <= length <= len(head):
        return f"record length {length}"
    record = head[:4] + bytes(4) + head[8:length]
    if _crc32c(record) != checksum:
        return "checksum mismatch"
    if LOG_MAGIC.unpack_from(head, LOG_MAGIC_AT)[0] != LOG_MAGIC_VALUE:
        return "bad magic number"
    return None


def _leaf_page_kb(file_config: str) -> int:
    """The leaf page size, in KiB, that a table file's metadata records."""
    m = re.search(r"(?:^|,)leaf_page_max=(\d+)([KMG]?)B?(?:,|$)", file_config)
    if m is None:
        raise StoreError(f"WiredTiger metadata of {FILE} has no leaf_page_max")
    size = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    return size >> 10
