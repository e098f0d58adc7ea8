"""``flashlog``: a BloomStore-style log of pages on flash (after Lu, Nam and Du, MSST 2012).

Keys are split by hash into independent instances. Each instance buffers records in RAM until a
page fills, then appends the page with a Bloom filter of its keys; DRAM holds only the filter
chains and 16-bit block fences, no per-key index. Every write goes to a WAL first (synced per
durability mode). A compactor rewrites the live records into a new log when garbage exceeds
them. Formats: docs/flashlog_format.txt; guarantees: docs/durability.md.
"""

from __future__ import annotations

import errno
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sarp._core.hashing import xxh64
from sarp.checks import check_int
from sarp.errors import (
    BadLengthError,
    ConfigMismatchError,
    CorruptionError,
    StoreError,
    SyncFailedError,
)
from storage_backends import bloom
from storage_backends.base import RecordStore, check_io
from storage_backends.flashlog_log import (
    BATCH_END,
    LOG_NUMBER_LIMIT,
    MAX_PAGE_KEYS,
    PUT,
    REC,
    TOMBSTONE,
    PageLog,
)
from storage_backends.flashlog_wal import NUMBER_LIMIT as WAL_NUMBER_LIMIT
from storage_backends.flashlog_wal import Wal, WalHeader, read_wal, wal_path
from storage_backends.io import FileIO, block_size, is_block_size
from storage_backends.superblock import read_superblock, write_superblock

MANIFEST_MAGIC = b"SARPFLM1"
# instances, block size, log number, its synced blocks, WAL number and blocks at a clean close
_MANIFEST = struct.Struct("<IIQQQQ")
#: instances of a new store, unless half its memory budget cannot hold a page buffer of
#: MIN_PAGE_BLOCKS blocks for each: then as many as it can, at least one
DEFAULT_INSTANCES = 64
MAX_INSTANCES = 1 << 16
# Pages are sized by the memory budget: half of it holds one full page buffer per instance
# (buffers fill in turn, so on average they hold a quarter), up to this many blocks. Larger
# pages mean shorter chains (fewer filter probes and false positives per lookup) and less DRAM
# per key for the per-page state.
MAX_PAGE_BLOCKS = 1024
MIN_PAGE_BLOCKS = 4  # whatever the budget: the page buffers hold at least this much
COMPACT_FLOOR = 4 << 20  # no compaction below this many record bytes in the log
_END = REC.pack(BATCH_END, 0, 0)
#: the page-buffer changes of a batch, oldest first, to undo it (``FlashLogStore._batch``):
#: (instance, key, the key's entry before) per record applied, (instance, None, the buffer)
#: per page flushed
_Undo = list[tuple[int, int | None, Any]]


def _is_number(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _has_next(number: int, limit: int) -> bool:
    """Whether the WAL or log numbered ``number`` may be followed by another: their numbers
    stay below ``limit`` (docs/flashlog_format.txt, "Numbers")."""
    return number + 1 < limit


class FlashLogStore(RecordStore):
    """Bloom-filtered page log with a WAL; see the module docstring."""

    kind = "flashlog"

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20, durability: str = "sync",
                 direct_io: bool = True, *, instances: int | None = None,
                 io: FileIO | None = None):
        super().__init__(path, memory_budget, durability, direct_io)
        if instances is not None:
            instances = check_int(instances, "instances", 1, MAX_INSTANCES)
        self._io = check_io(io)
        with self._claim(self._io):
            self._lock = threading.RLock()
            self.compactions = 0
            manifest = self._open_manifest(instances)
            self._ninst, self._block, log_no, log_synced, closed_wal, closed_blocks = manifest
            self._page_target = min(MAX_PAGE_BLOCKS, max(
                MIN_PAGE_BLOCKS, self.memory_budget // 2 // self._ninst // self._block)) * (
                self._block - 8)
            self._wal_limit = max(4 << 20, 2 * self._ninst * self._page_target)
            self._buffers: list[dict[int, tuple[int, bytes]]] = [{} for _ in range(self._ninst)]
            self._buffered = [0] * self._ninst
            self._undo: _Undo | None = None  # of the batch being written, if any
            wals = sorted(int(p.name[4:]) for p in self.path.glob("wal.*")
                          if _is_number(p.name[4:]))
            if not wals:  # creation writes MANIFEST after the first WAL
                raise CorruptionError(f"flashlog store at {str(self.path)!r}: MANIFEST but no "
                                      "WAL file")
            header, batches, blocks = read_wal(self._io, wal_path(self.path, wals[-1]), self._block)
            if header.number == closed_wal and blocks < closed_blocks:
                raise CorruptionError(f"wal.{closed_wal}: block {blocks} fails its checks")
            synced = header.synced_blocks if header.log_number == log_no else log_synced
            self._wal: Wal | None = None
            self._log = self._new_log(log_no)
            try:
                self._log.recover(synced)
                self._garbage = header.garbage
                for batch in batches:
                    for t, k, v in batch:
                        self._apply_delete(k) if t == TOMBSTONE else self._apply(k, v)
                # a store at the last WAL number starts no WAL: it keeps that one, replayed
                # again at each open, and takes no writes (_check_numbers)
                if _has_next(header.number, WAL_NUMBER_LIMIT):
                    self._rotate_wal(header.number + 1)
                    for n in wals:
                        self._io.unlink(wal_path(self.path, n))
                    for p in self.path.glob("log.*"):
                        if p != self._log.path:
                            self._io.unlink(p)
            except BaseException:
                self._close_files()
                raise

    # -- files ---------------------------------------------------------------------------------
    def _open_manifest(self, instances: int | None) -> tuple[int, ...]:
        mpath = self.path / "MANIFEST"
        if mpath.exists():
            found = self._read_manifest()
            if instances is not None and instances != found[0]:
                raise ConfigMismatchError(f"instances={instances}, but the store at "
                                          f"{str(self.path)!r} has {found[0]}")
            return found
        block = block_size(self.path)
        self._check_no_store(mpath, block)
        if instances is None:
            instances = min(DEFAULT_INSTANCES,
                            max(1, self.memory_budget // 2 // (MIN_PAGE_BLOCKS * block)))
        manifest = (instances, block, 1, 0, 0, 0)
        self._ninst, self._block = manifest[:2]
        self._new_log(1).close()
        Wal(self._io, self.path, WalHeader(1, 1, 0, 0), manifest[1], self.direct_io, b"").close()
        write_superblock(self._io, mpath, MANIFEST_MAGIC, _MANIFEST.pack(*manifest))
        return manifest

    def _check_no_store(self, mpath: Path, block: int) -> None:
        """Raise CorruptionError if the directory, which has no MANIFEST, holds a store's files.

        Creation writes an empty log.1, then wal.1 (its header block alone), then MANIFEST, so
        a creation cut short leaves at most those two (or wal.1.tmp) and is started again.
        Every later log or WAL file, records in either, or a WAL longer than its header means a
        MANIFEST that was there and is lost: without it, keys would be routed by a guessed
        instance count and records would go missing.
        """
        left = {"log.1": 0, "wal.1": block}  # the bytes a creation cut short leaves at most
        found = sorted(p.name for stem in ("log", "wal") for p in self.path.glob(stem + ".*")
                       if _is_number(p.name[len(stem) + 1:])
                       and p.stat().st_size > left.get(p.name, -1))
        if found:
            raise CorruptionError(f"flashlog store at {str(self.path)!r}: no {mpath.name}, but "
                                  f"{', '.join(found)} hold a store's data")

    def _manifest_log(self) -> int | None:
        """The log number MANIFEST names now, or None if it cannot be read."""
        try:
            return self._read_manifest()[2]
        except (OSError, CorruptionError):
            return None

    def _read_manifest(self) -> tuple[int, ...]:
        """MANIFEST's fields; a checksummed payload of another length, or with an instance
        count or block size no store is created with, is damage too."""
        payload = read_superblock(self._io, self.path / "MANIFEST", MANIFEST_MAGIC)
        if len(payload) != _MANIFEST.size:
            raise BadLengthError(f"MANIFEST: payload of {len(payload)} bytes, expected "
                                 f"{_MANIFEST.size}")
        found = _MANIFEST.unpack(payload)
        ninst, blk = found[:2]
        if not 1 <= ninst <= MAX_INSTANCES or not is_block_size(blk):
            raise CorruptionError(f"MANIFEST: {ninst} instances of {blk}-byte blocks")
        if max(found[2], found[4]) >= WAL_NUMBER_LIMIT:  # log numbers stay below it too
            raise CorruptionError(f"MANIFEST: log {found[2]} and WAL {found[4]}, numbers of "
                                  f"at least {WAL_NUMBER_LIMIT}")
        return found

    def _write_manifest(self, log: PageLog, wal_number: int, wal_blocks: int) -> None:
        write_superblock(self._io, self.path / "MANIFEST", MANIFEST_MAGIC, _MANIFEST.pack(
            self._ninst, self._block, log.number, log.end, wal_number, wal_blocks))

    def _new_log(self, number: int) -> PageLog:
        return PageLog(self._io, self.path / f"log.{number}", number, self._block,
                       self.direct_io, self._ninst)

    def _rotate_wal(self, number: int) -> None:
        """Start WAL ``number`` holding just the buffered records, after syncing the log."""
        self._log.file.fdatasync()
        stream = bytearray()
        for buf in self._buffers:
            for k, (t, v) in buf.items():
                stream += REC.pack(t, k, len(v)) + v
        stream += _END
        old = self._wal
        self._wal = Wal(self._io, self.path, WalHeader(number, self._log.number, self._log.end,
                                                       self._garbage),
                        self._block, self.direct_io, bytes(stream))
        if old is not None:
            old.close()
            self._io.unlink(old.path)

    # -- the write path --------------------------------------------------------------------------
    def _check_numbers(self) -> None:
        """Refuse a write (StoreError) before it writes anything unless the WAL rotation and
        the compaction it may start can take their numbers: the next WAL and log numbers."""
        # no WAL: the store was opened at the last WAL number
        wal = self._wal.header.number if self._wal is not None else WAL_NUMBER_LIMIT - 1
        for what, number, limit in (("WAL", wal, WAL_NUMBER_LIMIT),
                                    ("log", self._log.number, LOG_NUMBER_LIMIT)):
            if not _has_next(number, limit):
                raise StoreError(
                    f"flashlog store at {str(self.path)!r} takes no more writes: its {what} "
                    f"numbers are used up (they stay below {limit}); its records can still be "
                    "read: copy them into a new store (scan() this one, put_many() the records "
                    "into the new one)")

    def _route(self, key: int) -> tuple[bytes, int, int]:
        kb = key.to_bytes(8, "little")
        h = xxh64(kb)
        return kb, h, h % self._ninst

    def _apply(self, key: int, value: bytes, tombstone: bool = False,
               old_size: int = 0) -> None:
        """Put ``value`` (or a tombstone) into its instance's buffer, flushing a full page.

        Garbage accounting: a record shadowing one in the log adds the shadowed size, known
        exactly for deletes (``old_size``) and estimated by the new size for puts.
        """
        kb, h, inst = self._route(key)
        buf = self._buffers[inst]
        size = REC.size + len(value)
        prev = buf.pop(key, None)
        if prev is not None:
            self._buffered[inst] -= REC.size + len(prev[1])
            self._garbage += size if tombstone else 0
        elif tombstone:
            self._garbage += old_size + size
        elif self._log.may_contain(inst, h, bloom.filter_hash(kb)):
            self._garbage += size
        buf[key] = (TOMBSTONE if tombstone else PUT, value)
        self._buffered[inst] += size
        if self._undo is not None:
            self._undo.append((inst, key, prev))
        if self._buffered[inst] >= self._page_target or len(buf) >= MAX_PAGE_KEYS:
            self._flush_instance(inst)

    def _apply_delete(self, key: int) -> bool:
        """Tombstone ``key`` if it holds a value; returns whether it did."""
        found = self._find(key)
        if found is None or found[0] != PUT:
            return False
        self._apply(key, b"", tombstone=True, old_size=REC.size + len(found[1]))
        return True

    def _flush_instance(self, inst: int) -> None:
        buf = self._buffers[inst]
        self._log.append(inst, [(self._route(k)[1], k, t, v) for k, (t, v) in buf.items()])
        self._buffers[inst] = {}  # a new one: an undone batch puts this one back
        self._buffered[inst] = 0
        if self._undo is not None:
            self._undo.append((inst, None, buf))

    @contextmanager
    def _batch(self) -> Iterator[None]:
        """Scope of a put_many or delete, from its first record to its batch end handed to
        the WAL file (``_end_batch``). If the body raises, the batch is undone: the pending
        WAL stream, the page buffers, the pages the batch flushed and the garbage estimate
        go back to where they were, and the log and WAL files are cut back (``PageLog.cut``,
        ``Wal.cut``): a failed write would otherwise leave part of its batch served, and
        the next batch end, or a WAL rotation of the buffers, would make that part durable.
        A failure to cut a file raises SyncFailedError, which stops writes: what the next
        open reads there is then unknown."""
        assert self._wal is not None
        log = self._log
        marks = len(self._wal.pending), self._garbage, log.end, log.records, log.record_bytes
        undo: _Undo = []
        self._undo = undo
        try:
            yield
        except BaseException:
            self._undo_batch(undo, *marks)
            raise
        finally:
            self._undo = None

    def _undo_batch(self, undo: _Undo, pending: int, garbage: int, end: int, records: int,
                    record_bytes: int) -> None:
        """Undo a batch (``_batch``): its buffer changes ``undo``, newest first, then the
        WAL stream, the garbage estimate and the log as they were before it."""
        assert self._wal is not None
        for inst, key, old in reversed(undo):
            if key is None:
                self._buffers[inst] = old
            elif old is None:
                del self._buffers[inst][key]
            else:
                self._buffers[inst][key] = old
        self._buffered = [sum(REC.size + len(v) for _, v in b.values()) for b in self._buffers]
        self._garbage = garbage
        try:
            self._log.cut(end, records, record_bytes)
            self._wal.cut(pending)
        except OSError as e:
            raise SyncFailedError(errno.EIO, "a failed write's batch could not be cut from "
                                             f"the files ({e!r})") from e

    def _end_batch(self) -> None:
        """End the batch in the WAL and hand it to the file: all of it under sync (synced
        by ``_commit``), 64 KiB and more in whole blocks under group and none."""
        assert self._wal is not None
        self._wal.append(_END)
        if self.durability == "sync":
            self._wal.commit(sync=False)
        else:
            self._wal.spill()

    def _commit(self) -> None:
        """After ``_end_batch``: make the batch durable per mode, then rotate or compact if
        due. A failure here raises with the batch applied: it is in the WAL file (a failed
        sync then stops writes), or, for a failed rotation or compaction, committed."""
        assert self._wal is not None
        if self.durability == "sync" and self._wal.commit(sync=True):
            self._count("syncs", 1)
        if 2 * self._garbage > self._log.record_bytes > COMPACT_FLOOR:
            self._compact()
        elif self._wal.size() > self._wal_limit:
            self._rotate_wal(self._wal.header.number + 1)

    # -- compaction ------------------------------------------------------------------------------
    def _compact(self) -> None:
        """Copy the live records into a new log, publish it in MANIFEST, drop the old log.

        Crash-safe: the new log is synced before MANIFEST names it, and the old one is removed
        only after. Buffered records stay in the WAL, which is rotated to the new log; under
        group and none, where they may not be durable yet, the records they replace are copied
        too (``_copy_live``). If the
        copy or MANIFEST's write fails (a full disk, say) and MANIFEST still names the old log,
        the new log is removed and the old one stays the store's. A failed sync (of MANIFEST's
        directory too), or MANIFEST replaced by a call that then failed, leaves it unknown
        which log MANIFEST names after a power cut: both files stay, writes stop (raised as
        SyncFailedError), and the next open finds out. A compaction's log starts empty,
        whatever an earlier one left under its name.
        """
        old = self._log
        new = self._new_log(old.number + 1)
        try:
            new.file.truncate(0)
            self._copy_live(old, new)
            new.file.fdatasync()
            self._write_manifest(new, 0, 0)
        except SyncFailedError:
            new.close()  # which log MANIFEST names after a power cut is unknown: both stay
            raise
        except BaseException as e:
            new.close()
            if self._manifest_log() != old.number:  # replaced, but the call failed after
                raise SyncFailedError(errno.EIO, "compaction: MANIFEST names the new log but "
                                                 f"may not be durable ({e!r})") from e
            self._io.unlink(new.path)
            raise
        self._log = new
        self._garbage = 0
        assert self._wal is not None
        self._rotate_wal(self._wal.header.number + 1)
        old.close()
        self._io.unlink(old.path)
        self.compactions += 1

    def _copy_live(self, old: PageLog, new: PageLog) -> None:
        """Append every live record of ``old`` to ``new`` but, under sync, those a buffered
        write replaces. Under sync every buffered write is in a synced WAL block when a
        compaction starts (``_commit``), and replaces its old record after a power cut too;
        under group and none it may be in none yet, and the old record is the one to serve.
        Once the buffer is written, those copies are garbage that the estimate, restarted at
        0, does not count."""
        replaced = self.durability == "sync"
        for inst in range(self._ninst):
            buf = self._buffers[inst]
            live = [(k, v) for k, (t, v) in old.newest(inst).items()
                    if t == PUT and not (replaced and k in buf)]
            page: list[tuple[int, int, int, bytes]] = []
            size = 0
            for k, v in live:
                page.append((self._route(k)[1], k, PUT, v))
                size += REC.size + len(v)
                if size >= self._page_target or len(page) >= MAX_PAGE_KEYS:
                    new.append(inst, page)
                    page, size = [], 0
            if page:
                new.append(inst, page)

    # -- the record-store primitives ---------------------------------------------------------------
    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None:
        with self._lock:
            for _, v in pairs:
                if REC.size + len(v) > self._log.max_record:
                    raise ValueError(f"flashlog holds values of at most "
                                     f"{self._log.max_record - REC.size} bytes, got {len(v)}")
            self._check_numbers()
            assert self._wal is not None
            with self._batch():
                for k, v in pairs:
                    self._wal.append(REC.pack(PUT, k, len(v)) + v)
                    self._apply(k, v)
                self._end_batch()
            self._commit()

    def _find(self, key: int) -> tuple[int, bytes] | None:
        kb, h, inst = self._route(key)
        found = self._buffers[inst].get(key)
        if found is not None:
            return found
        return self._log.find(inst, h, bloom.filter_hash(kb), key)

    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        out: list[bytes | None] = []
        with self._lock:
            for key in keys:
                found = self._find(key)
                out.append(found[1] if found is not None and found[0] == PUT else None)
        return out

    def _delete(self, key: int) -> None:
        with self._lock:
            self._check_numbers()
            assert self._wal is not None
            with self._batch():
                if not self._apply_delete(key):
                    return
                self._wal.append(REC.pack(TOMBSTONE, key, 0))
                self._end_batch()
            self._commit()

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        with self._lock:
            records = []
            for inst in range(self._ninst):
                newest = self._log.newest(inst)
                newest.update(self._buffers[inst])
                records += [(k, v) for k, (t, v) in newest.items() if t == PUT]
        records.sort()
        return iter(records)

    def _flush(self, sync: bool) -> None:
        with self._lock:  # no WAL (opened at the last WAL number): nothing was written
            if self._wal is not None and self._wal.commit(sync=sync):
                self._count("syncs", 1)

    def _close(self) -> None:
        with self._lock:
            try:  # the last WAL holds what the synced log lacks: it stays, for the next open
                if self._wal is not None and _has_next(self._wal.header.number,
                                                       WAL_NUMBER_LIMIT):
                    self._rotate_wal(self._wal.header.number + 1)  # reopening replays the buffers
                    self._write_manifest(self._log, self._wal.header.number, self._wal.next)
            finally:
                self._close_files()

    def _abandon(self) -> None:
        with self._lock:  # no WAL rotation, no MANIFEST: the next open replays the WAL
            self._close_files()

    def _close_files(self) -> None:
        if self._wal is not None:
            self._wal.close()
        self._log.close()

    def _engine_stats(self) -> dict[str, Any]:
        with self._lock:
            log = self._log
            dram = log.dram_bytes()
            return {
                "instances": self._ninst,
                "page_target_bytes": self._page_target,
                "pages": sum(c.n for c in log.chains),
                "log_bytes": log.end * self._block,
                "log_records": log.records,
                "log_record_bytes": log.record_bytes,
                "garbage_bytes_estimate": self._garbage,
                "buffered_records": sum(len(b) for b in self._buffers),
                "compactions": self.compactions,
                "dram_bytes": dram,
                "dram_bytes_per_key": dram / log.records if log.records else 0.0,
                "direct_io_effective": log.file.direct,
                "io": self._io.stats(),
            }
