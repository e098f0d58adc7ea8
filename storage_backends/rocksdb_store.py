"""The ``rocksdb`` engine: RocksDB through rocksdict, in raw (bytes) mode with the WAL on.

Keys are stored big-endian in 8 bytes so RocksDB's byte order is ascending key order.
``sync`` writes every batch with a synced WAL write; ``group`` writes without syncing and
``flush()`` syncs the WAL; ``none`` never syncs before ``close()`` (which flushes the memtables).
The memory budget is split in half: block cache (index and filter blocks included) and
memtables (two write buffers of a quarter each). Index and filters are partitioned (two-level),
with the top level pinned: with a small cache a whole-file index block would be evicted by data
blocks and read again, megabytes at a time, by nearly every get.

WAL recovery tolerates a torn tail only (``tolerate_corrupted_tail_records``): a record cut
short at the end of a log, as a crash leaves it, is dropped; a record that fails its checksum
is damage, and the open raises CorruptionError instead of replaying the log up to it and
dropping the rest (RocksDB's default, ``point_in_time``). Damage found by the open or a read
is raised as CorruptionError, any other engine failure (of those, a write, a flush or the
close) as StoreError, both naming the store. After a failed write RocksDB refuses every later
write until the store is reopened (``stats()["writes_stopped"]``).

A store still open when the interpreter exits is closed then (``_close_at_exit``): a daemon
thread that is inside a RocksDB call when the interpreter finalizes aborts the process, as
the binding cannot unwind it. The close waits for such calls, and later ones raise
StoreClosedError.
"""

from __future__ import annotations

import atexit
import contextlib
import struct
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBRecoveryMode,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from sarp.errors import CorruptionError, StoreError
from storage_backends.base import SALVAGE_HINT, RecordStore
from storage_backends.io import FileIO

_KEY = struct.Struct(">Q")
T = TypeVar("T")
MIN_BUFFER = 64 << 10
# Integer RocksDB properties reported by stats(), as rocksdb_<name with underscores>.
PROPERTIES = ("block-cache-usage", "block-cache-capacity", "cur-size-all-mem-tables",
              "estimate-num-keys", "total-sst-files-size", "num-files-at-level0",
              "num-running-compactions")


#: write buffers (memtables) a store keeps at most: one filling while one is flushed
WRITE_BUFFERS = 2


def memory_sizes(memory_budget: int) -> tuple[int, int]:
    """(block cache, each write buffer) in bytes for ``memory_budget``: half and a quarter of
    it, each at least ``MIN_BUFFER``, so a store keeps more than its budget below 4 x that."""
    return max(MIN_BUFFER, memory_budget // 2), max(MIN_BUFFER, memory_budget // 4)


#: the stores open now, which ``_close_at_exit`` closes
_OPEN: weakref.WeakSet[RocksDBStore] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close the stores left open, before the interpreter finalizes (module docstring);
    an error of such a close has no caller left to take it."""
    for store in list(_OPEN):
        with contextlib.suppress(Exception):
            store.close()


class RocksDBStore(RecordStore):
    """A ``RecordStore`` on a RocksDB database."""

    kind = "rocksdb"
    #: RocksDB's text log (its write-ahead logs, ``*.log``, are flushed by a clean close)
    LOG_FILES = ("db/LOG", "db/LOG.old.*")

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20,
                 durability: str = "sync", direct_io: bool = True):
        super().__init__(path, memory_budget, durability, direct_io)
        with self._claim():
            opts = Options(raw_mode=True)
            opts.create_if_missing(True)
            cache_bytes, buffer_bytes = memory_sizes(self.memory_budget)
            self._cache = Cache(cache_bytes)
            table = BlockBasedOptions()
            table.set_block_cache(self._cache)
            table.set_cache_index_and_filter_blocks(True)
            table.set_bloom_filter(10, False)
            table.set_index_type(BlockBasedIndexType.two_level_index_search())
            table.set_partition_filters(True)
            table.set_pin_top_level_index_and_filter(True)
            table.set_pin_l0_filter_and_index_blocks_in_cache(True)
            opts.set_block_based_table_factory(table)
            opts.set_write_buffer_size(buffer_bytes)
            opts.set_max_write_buffer_number(WRITE_BUFFERS)
            opts.set_max_background_jobs(2)
            opts.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
            if self.direct_io:
                opts.set_use_direct_reads(True)
                opts.set_use_direct_io_for_flush_and_compaction(True)
            self._write_opts = WriteOptions()
            self._write_opts.sync = durability == "sync"
            self._check_current()
            home = self._engine_home("db")
            # Naming the default column family's options keeps them on reopen: without it
            # rocksdict takes them from the OPTIONS file, which cannot hold the block cache
            # (8 MiB default).
            self._db = self._engine(lambda: Rdict(str(home), opts,
                                                  column_families={"default": opts}),
                                    opening=True)
        _OPEN.add(self)

    def _check_current(self) -> None:
        """Without ``db/CURRENT`` RocksDB would create a new database and delete the table
        files as obsolete: with table files there, that is damage, not a new store."""
        db = self.path / "db"
        if not (db / "CURRENT").exists() and any(db.glob("*.sst")):
            raise CorruptionError(f"rocksdb store at {str(self.path)!r}: Corruption: "
                                  f"{str(db / 'CURRENT')!r} is missing but table files remain; "
                                  f"{SALVAGE_HINT}")

    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in pairs:
            batch.put(_KEY.pack(key), value)
        self._write(lambda: self._db.write(batch, self._write_opts))
        self._count_sync()

    def _delete(self, key: int) -> None:
        self._write(lambda: self._db.delete(_KEY.pack(key), self._write_opts))
        self._count_sync()

    def _engine(self, call: Callable[[], T], opening: bool = False) -> T:
        """``call()`` of the engine, its failure raised as the package's (``_damage``; the
        open's with ``opening``)."""
        try:
            return call()
        except Exception as exc:  # the binding raises plain Exception with RocksDB's status
            raise self._damage(exc, opening) from exc

    def _write(self, call: Callable[[], None]) -> None:
        """The engine's write (a batch, a delete, a WAL flush). After a failed one RocksDB
        refuses every later write until the store is reopened, which ``stats()`` reports as
        ``writes_stopped``; a write that succeeds shows it took writes again."""
        try:
            self._engine(call)
        except StoreError as exc:
            self._engine_stop = str(exc)
            raise
        self._engine_stop = None

    def _count_sync(self) -> None:
        if self.durability == "sync":
            self._count("syncs", 1)

    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        return cast("list[bytes | None]",
                    self._engine(lambda: self._db.get([_KEY.pack(k) for k in keys])))

    def _damage(self, exc: Exception, opening: bool = False) -> CorruptionError | StoreError:
        """RocksDB's "Corruption: ..." status as CorruptionError, any other as StoreError.
        ``opening``: a file the open needs (MANIFEST, a table file) is missing, which RocksDB
        reports as an I/O error, is damage too."""
        where = f"rocksdb store at {str(self.path)!r}"
        msg = str(exc)
        if msg.startswith("Corruption") or opening and "No such file or directory" in msg:
            return CorruptionError(f"{where}: {msg}" + (f"; {SALVAGE_HINT}" if opening else ""))
        return StoreError(f"{where}{' cannot open' if opening else ''}: {msg}")

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        return self._scan_chunks(self._read_chunk)

    def _read_chunk(self, first: int, limit: int) -> list[tuple[int, bytes]]:
        it = self._db.iter()
        rows: list[tuple[int, bytes]] = []
        it.seek(_KEY.pack(first))
        while it.valid() and len(rows) < limit:
            rows.append((_KEY.unpack(it.key())[0], it.value()))
            it.next()
        self._engine(it.status)  # an iterator stops early on an error: raise it
        del it  # a live iterator would keep the database open after close()
        return rows

    def _flush(self, sync: bool) -> None:
        self._write(lambda: self._db.flush_wal(sync))
        if sync:
            self._count("syncs", 1)

    def _close(self) -> None:
        _OPEN.discard(self)
        self._engine(self._db.close)

    def _engine_stats(self) -> dict[str, Any]:
        return self._engine(lambda: {
            "rocksdb_" + p.replace("-", "_"): self._db.property_int_value("rocksdb." + p)
            for p in PROPERTIES})


def salvage(path: str | Path) -> None:
    """Repair the rocksdb store at ``path`` after a read found damage (``CorruptionError``):
    RocksDB's repair (RepairDB) reads every table file whole and rewrites the manifest from
    those it can read. A table file with a damaged block is moved to ``db/lost/`` with all its
    records, and an older version of a record in an intact file may come back in place of a
    lost newer one. The store must not be open elsewhere (its lock is taken)."""
    lock = FileIO().lock(Path(path), "rocksdb store")
    try:
        Rdict.repair(str(Path(path) / "db"), Options(raw_mode=True))
    finally:
        lock.close()
