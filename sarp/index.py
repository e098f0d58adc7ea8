"""The SARP index: the object ``sarp.open(path, backend=...)`` returns (sarp/opening.py).

An index directory holds ``sarp.json`` (format, configuration, index id), ``store/`` (the
record store of segment records), routing snapshots ``snapshot-N.snap`` and insert journals
``journal-N.log`` (journal N: the inserts after snapshot N).

Concurrency (docs/architecture.md, "Threads"): matches take no directory lock; they read
posting lists that are published whole (copy-on-write) and segment records that are written
whole. Inserts take no index-wide lock: a window of an insert is matched, written and
registered under the lock of its first block ID (one of ``WINDOW_LOCKS`` stripes), so two
inserts race on a segment only if they share its prefix, and then one waits; registering in the
routing directory takes the directory lock for the in-memory update only; the journal lock
orders journal records; close() waits for the calls running on other threads. Back-fills,
rematerializations and snapshot exports take the directory lock.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import storage_backends
from sarp import journal, recovery, snapshot
from sarp._core.calls import Calls
from sarp._core.hashing import xxh64
from sarp.background import Worker
from sarp.block_ids import as_block_ids, block_ids
from sarp.checks import check_int
from sarp.config import Config, digest_text, dumps, new_index_id
from sarp.errors import CorruptionError, IndexClosedError, RecoveryError, SyncFailedError
from sarp.insertion import insert as insert_path
from sarp.insertion import insert_stats
from sarp.matched_prefix import MatchedPrefix
from sarp.matching import COUNTERS, MatchResult
from sarp.matching import match as match_path
from sarp.routing import Build, Events, RoutingDirectory
from sarp.segments import HeldSegments, SegmentStore
from storage_backends.io import FileIO

CONFIG_FILE = "sarp.json"
STORE_DIR = "store"
#: the index counter of each match counter
MATCH_COUNTER = {k: f"match_{k}" for k in COUNTERS}
#: the counters an insert adds from its result
INSERT_COUNTERS = ("segments_written", "segments_extended", "blocks_written")
#: stripes of the per-window insert locks (a window's first block ID picks its stripe)
WINDOW_LOCKS = 64


def _call(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a call on an open index: it raises IndexClosedError once ``close()`` has
    begun, and ``close()`` waits for it to return."""
    @functools.wraps(method)
    def run(self: Index, *args: Any, **kwargs: Any) -> Any:
        with self._calls:
            return method(self, *args, **kwargs)
    return run


class Index:
    """A SARP index over one record store. Use ``sarp.open`` to get one."""

    def __init__(self, path: Path, config: Config, store: storage_backends.RecordStore, *,
                 index_id: int, background: bool,
                 snapshot_every_inserts: int = 0, snapshot_every_seconds: float = 0.0,
                 snapshot_on_close: bool = True, io: FileIO | None = None):
        self.path = path
        self.config = config
        self.config_digest = xxh64(digest_text(config).encode())
        #: sarp.json's id, carried by every snapshot and journal (0: an index without one)
        self.index_id = index_id
        self.store = store
        self.io = io or FileIO()
        self.segments = SegmentStore(store, config.meta_width, config.segment_blocks)
        self.directory = RoutingDirectory(config)
        self.epoch = 0  # the newest snapshot's sequence number (0: none yet)
        self.record_seq = 0
        self.recovery: dict[str, Any] = {}
        #: numbers of the snapshots recovery found unusable: never kept as the fallback
        self.unusable_snapshots: set[int] = set()
        #: the journal being written; set once recovery (or a rebuild) has opened it
        self._journal: journal.JournalWriter
        self._dir_lock = threading.RLock()  # routing-directory writers
        self._journal_lock = threading.Lock()  # journal records, record_seq, journal switches
        self._window_locks = [threading.Lock() for _ in range(WINDOW_LOCKS)]
        self._snapshot_lock = threading.Lock()
        self._worker = Worker(enabled=background)
        self._calls = Calls(lambda: IndexClosedError(f"index at {str(self.path)!r} is closed"))
        self._every = (snapshot_every_inserts, snapshot_every_seconds)
        self._snapshot_on_close = snapshot_on_close
        self._since_snapshot = 0  # inserts that wrote, for the schedule
        #: the routing directory changed since the newest snapshot (an insert placed segments,
        #: a build was published, recovery replayed or redid work): close takes a snapshot
        self._unsnapshotted = False
        self._last_snapshot = time.monotonic()
        self.counters = dict.fromkeys(MATCH_COUNTER.values(), 0)
        self.counters.update(matches=0, inserts=0, matched_blocks=0, queried_blocks=0,
                             segments_written=0, segments_extended=0, blocks_written=0,
                             indexed_blocks=0, snapshots=0, backfills=0, rematerializations=0)
        self._counter_lock = threading.Lock()
        self._matched = MatchedPrefix(self.segments.writes)

    # -- public API ----------------------------------------------------------------------
    @_call
    def match(self, tokens: Any = None, *, block_ids: Any = None, namespace: bytes | None = None,
              max_retrieval: int | None = None) -> MatchResult:
        """The longest verified prefix of the sequence that the index holds.

        Pass ``tokens`` (chained into block IDs by ``sarp.block_ids``) or ``block_ids`` that
        the serving engine chained the same way: each ID names its whole prefix, so an ID
        repeats only where a prefix does. Unchained IDs that repeat within a sequence route
        many segments to one key; a bounded ``max_retrieval`` then reads only some of them.

        ``max_retrieval``: segment retrievals per query window for this match (0: unbounded;
        by default the index's). It changes only what this match reads: an insert after it
        searches under the index's bound.
        """
        q = self._query_ids(tokens, block_ids, namespace)
        mr = self._max_retrieval(max_retrieval)
        stamp = self._matched.stamp()
        held = HeldSegments(self.segments)
        result, tail = match_path(self.config, self.directory, self.segments, q, mr,
                                  held.record)
        if not self._searches_as_inserts(mr):
            tail = None  # it may have left unread a segment that the insert's search reads
        self._matched.remember(q, result.num_blocks, stamp, tail, held)
        with self._counter_lock:
            c = self.counters
            c["matches"] += 1
            c["matched_blocks"] += result.num_blocks
            c["queried_blocks"] += len(q)
            for k, v in result.stats.items():
                c[MATCH_COUNTER[k]] += v
        return result

    @_call
    def insert(self, tokens: Any = None, *, metadata: Any = None, block_ids: Any = None,
               namespace: bytes | None = None) -> dict[str, int]:
        """Register a processed sequence with one metadata record per full block.

        ``metadata=None`` stores zeroed records. Returns when the insert is acknowledged:
        its segments and journal record are durable in the index's durability mode. Returns
        its counters: the matching path's for the windows it matched (``windows``,
        ``segments_retrieved``, ...), ``segments_written``, ``segments_extended``,
        ``blocks_written`` and ``new_blocks`` (blocks the index did not hold); all zero for
        a sequence shorter than one block.
        """
        q = self._query_ids(tokens, block_ids, namespace)
        meta = self._metadata_rows(metadata, len(q))
        if len(q) == 0:
            st = insert_stats()
            self._count_insert(st)
            return st
        self._journal.stop.check()  # a stopped journal: refused before anything is written
        events = Events()
        place = self.directory.place
        held = self._matched.take_held() or HeldSegments(self.segments)

        def on_write(segs: list[Any], new_blocks: int) -> None:
            with self._dir_lock:
                # Journaled before the segments become visible, under the directory lock
                # (so no snapshot falls between): any insert that matches them and returns
                # first syncs this record with its own (or a flush writes it).
                self._journal_append(segs, new_blocks)
                self._unsnapshotted = True
                for seg in segs:
                    place(seg.segment_id, seg.block_ids, events=events)
                if events.refine or events.remat:
                    held.add(segs)  # for the jobs their placement triggered

        known, tail = self._matched.recall(q)
        st = insert_path(self.config, self.directory, self.segments, q, meta,
                         self.config.max_retrieval, on_write, self._window_lock,
                         known=known, settled=self._matched.settled(), tail=tail, held=held)
        if self.store.durability == "sync":
            # Also when this insert wrote nothing: the segments it matched may belong to an
            # insert that has not returned yet, whose record this sync writes.
            with self._journal_lock:
                self._journal.sync()
        if events.refine or events.remat:
            self._schedule(events, held)
            if self._worker.enabled:
                time.sleep(0)  # let the worker take the GIL and start now, as on a spare core
        self._count_insert(st)
        self._maybe_snapshot(st["blocks_written"] > 0)
        return st

    def _count_insert(self, st: dict[str, int]) -> None:
        with self._counter_lock:
            c = self.counters
            c["inserts"] += 1
            for k in INSERT_COUNTERS:
                c[k] += st[k]

    @_call
    def flush(self) -> None:
        """Make every earlier insert durable, in every durability mode (the group-commit point
        for ``group``): the journal's sync makes the store's writes durable first."""
        with self._journal_lock:
            self._journal.sync()

    def _segments_durable(self) -> None:
        """Make every segment stored so far durable: the first step of each journal sync, so
        that a synced record proves its segments stored (docs/journal_format.txt). Under
        ``sync`` the store made each write durable before it returned."""
        if self.store.durability != "sync":
            self.store.flush(durable=True)

    @_call
    def snapshot(self) -> dict[str, Any]:
        """Write the routing directory as snapshot N+1 and start journal N+1."""
        return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        """``snapshot()``, also for background snapshots and close.

        The arrays are copied and the journal switched under the directory and journal locks
        (so the snapshot and the journal split at one insert); writing the file happens outside
        them, while matches and inserts go on.
        """
        with self._snapshot_lock:
            t0 = time.perf_counter()
            with self._dir_lock, self._journal_lock:
                keys, flags, lengths, segs, filters = self.directory.table.export()
                seq = self.epoch + 1
                state = snapshot.SnapshotState(
                    seq, self.config_digest, self.index_id, self.segments.next_id,
                    self.counters["indexed_blocks"], keys, flags, lengths, segs, filters,
                    self.directory.table.table_slots(), self.segments.probes())
                self._switch_journal(seq)
                self._unsnapshotted = False  # under the directory lock, as every change
                with self._counter_lock:
                    self._since_snapshot = 0
                    self._last_snapshot = time.monotonic()
            try:
                # every segment it names, and every probe, is durable first, in any mode
                self.store.flush(durable=True)
                path, nbytes = snapshot.write(self.io, self.path, state)
            except BaseException:
                with self._dir_lock:  # no snapshot holds the directory: close takes one
                    self._unsnapshotted = True
                raise
            # the fallback stays: the newest older usable snapshot and the journals from it on
            # (a crash between a journal switch and its snapshot leaves a number unused)
            older = [n for n, _ in snapshot.FILES.files(self.path)
                     if n < seq and n not in self.unusable_snapshots]
            self._remove_older_than(max(older, default=0), leftovers_to=seq)
            self._count("snapshots")
            return {"path": str(path), "seq": seq, "bytes": nbytes, "entries": len(keys),
                    "refs": len(segs), "seconds": time.perf_counter() - t0}

    def _switch_journal(self, seq: int) -> None:
        """Close journal N, every record durable, then start journal ``seq`` after it. If the
        new one cannot be created (a full disk), journal N is opened again and takes the
        inserts, so the index goes on; a new file left behind is removed, as its header would
        name a record that journal N's later ones pass.

        A stopped journal is cut back at close to its last good sync: the records past the
        cut are in no journal (the snapshot holds them), so numbering goes on from the cut."""
        old = self._journal
        stop = old.stop  # a stopped journal stops the next one too
        old.close(covered=True)
        self.record_seq = old.last_record
        path = self.path / journal.FILES.name(seq)
        try:
            self._journal = journal.JournalWriter(self.io, path, seq, self.record_seq, stop,
                                                  index_id=self.index_id,
                                                  before_sync=self._segments_durable,
                                                  previous_synced=True)
        except BaseException:
            try:
                self.io.unlink(path)
                self.io.fsync_dir(self.path)
            except SyncFailedError as e:  # the file might outlive a power cut: stop inserts
                stop.record(e)
                raise
            finally:
                self._journal = journal.JournalWriter(self.io, old.path, self.epoch,
                                                      self.record_seq, stop,
                                                      index_id=self.index_id,
                                                      before_sync=self._segments_durable)
            raise
        self.epoch = seq

    @_call
    def drain(self) -> None:
        """Wait until background refinement, rematerialization and snapshots have finished."""
        self._worker.drain()

    @_call
    def stats(self) -> dict[str, Any]:
        """Aggregated query counters, routing-directory size and the store's statistics;
        ``writes_stopped``: whether inserts are refused until the index is reopened: a failed
        sync of the journal or the store stopped them, or the store's engine stopped its own
        writes (WiredTiger and RocksDB, after a failed write)."""
        with self._counter_lock:
            out: dict[str, Any] = dict(self.counters)
        out.update(self.directory.stats())
        out["segments"] = self.segments.next_id
        blocks = out["indexed_blocks"]
        out["routing_bytes_per_block"] = out["routing_bytes"] / blocks if blocks else 0.0
        out["store"] = self.store.stats()
        out["io"] = self.io.stats()
        out["writes_stopped"] = (self._journal.stop.failure is not None
                                 or out["store"]["writes_stopped"])
        return out

    def close(self) -> None:
        """Finish background work, persist, and release the store.

        The closing snapshot (``snapshot_on_close``) is taken when the routing directory
        changed since the newest snapshot: an insert placed segments (one whose journal sync
        failed too), a refinement or rematerialization was published, or this open's
        recovery replayed the journal or redid work; so the next open has none of it to
        redo. Waits for the calls already running on other threads; later calls raise
        IndexClosedError. Closing a closed index does nothing."""
        if not self._calls.begin_close():
            return
        try:
            self._worker.close()
            if self._snapshot_on_close and self._unsnapshotted:
                self._snapshot()
        finally:
            try:
                if hasattr(self, "_journal"):  # not when the open failed before it
                    self._journal.close()
            finally:
                try:
                    self.store.close()
                finally:
                    self._calls.end_close()

    def __enter__(self) -> Index:
        if not self._calls.open:
            raise self._calls.closed_error()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background work -----------------------------------------------------------------
    def _schedule(self, events: Events, held: HeldSegments | None = None) -> None:
        """Submit the jobs of ``events``. Jobs run inline also take ``held``, the segments of
        the insert that triggered them (queued ones do not: they would keep them alive)."""
        if self._worker.enabled:
            held = None
        then = functools.partial(self._schedule, held=held)
        for root in events.refine:
            self._worker.submit(functools.partial(self._backfill, root, then, held))
        for root in events.remat:
            self._worker.submit(functools.partial(self._rematerialize, root, then, held))

    def _run_inline(self, events: Events) -> None:
        """Run the jobs of ``events`` (and those they trigger) now, on this thread."""
        for root in events.refine:
            self._backfill(root, self._run_inline)
        for root in events.remat:
            self._rematerialize(root, self._run_inline)

    def _backfill(self, root: int, then: Callable[[Events], None],
                  held: HeldSegments | None = None) -> None:
        """Refinement: register every member of ``root`` at the point below it, then publish.

        The members are read under the directory lock, as in a rematerialization: a member
        read before the lock could be extended and re-placed in between, and its stale
        filter would then overwrite the current one (a filter that undersells a candidate
        lets a match stop before reading it).
        """
        d = self.directory
        build = d.backfills[root]
        events = Events()
        with self._dir_lock:
            for seg in self._members(root, held):
                d.backfill_member(build, seg.segment_id, seg.block_ids, events)
            d.publish(build)
            self._unsnapshotted = True
        self._count("backfills")
        then(events)

    def _rematerialize(self, root: int, then: Callable[[Events], None],
                       held: HeldSegments | None = None) -> None:
        """Pruning undone: re-place every member of ``root`` privately, then publish at once."""
        d = self.directory
        build = Build("remat", root)
        events = Events()
        with self._dir_lock:
            for seg in self._members(root, held):
                d.place(seg.segment_id, seg.block_ids, build, events)
            d.publish(build)
            self._unsnapshotted = True
        self._count("rematerializations")
        then(events)

    def _members(self, root: int, held: HeldSegments | None = None) -> list[Any]:
        """The segments of entry ``root``'s posting list, read in one batch but for those
        ``held`` holds; a segment the routing directory names but the store lacks is
        corruption, never skipped. Called under the directory lock."""
        ids = self.directory.table.refs(root)[0].tolist()
        segs = (held or self.segments).read_many(ids)
        missing = [sid for sid, seg in zip(ids, segs, strict=True) if seg is None]
        if missing:
            raise CorruptionError(f"segments {missing} of routing entry {root} are missing "
                                  f"from the store at {str(self.store.path)!r}")
        return segs

    def _journal_append(self, segs: list[Any], new_blocks: int) -> None:
        """Append the record of segments just stored, with their block counts, before they
        are placed (the caller holds the directory lock, so records follow the order of
        placement)."""
        with self._journal_lock:
            self.record_seq += 1
            self._journal.append(journal.Record(
                self.record_seq, self.segments.next_id, new_blocks,
                [seg.segment_id for seg in segs], [seg.block_count for seg in segs]))
            self._count("indexed_blocks", new_blocks)  # in the same journal epoch

    def _maybe_snapshot(self, inserted: bool) -> None:
        """Submit a snapshot when the schedule (``_every``) says one is due; without a
        schedule there is nothing to count."""
        every_n, every_s = self._every
        if not (every_n or every_s):
            return
        with self._counter_lock:
            self._since_snapshot += inserted
            due = (every_n and self._since_snapshot >= every_n) or (
                every_s and self._since_snapshot
                and time.monotonic() - self._last_snapshot >= every_s)
            if due:
                self._since_snapshot = 0
                self._last_snapshot = time.monotonic()
        if due:
            self._worker.submit(self._snapshot)

    def _count(self, name: str, n: int = 1) -> None:
        with self._counter_lock:
            self.counters[name] += n

    def _window_lock(self, first_block: int) -> threading.Lock:
        """The insert lock of the window whose first block ID is ``first_block``."""
        return self._window_locks[first_block % WINDOW_LOCKS]

    # -- files ---------------------------------------------------------------------------
    def _start(self, existing: bool) -> None:
        """Recover an existing index, or create the first journal of a new one; then journal
        and register the segments stored past the last journaled one (``roll_forward``)."""
        if existing:
            self.recovery = recovery.recover(self)
        # a new index's first journal is written afresh: one a creation cut short left
        # behind (header only: no insert precedes sarp.json) names no index id yet
        self._journal = journal.JournalWriter(
            self.io, self.path / journal.FILES.name(self.epoch), self.epoch, self.record_seq,
            index_id=self.index_id, fresh=not existing, before_sync=self._segments_durable)
        if existing:
            recovery.roll_forward(self, self.recovery)
            r = self.recovery
            self._unsnapshotted |= bool(r["journal_records"] or r["rolled_forward"]
                                        or r["redone_builds"] or r["faults"])

    def _publish_rebuild(self, stored: Config) -> None:
        """Rebuild from a full segment scan and publish it as a snapshot newer than any file
        there; older snapshots and journals (unusable, or they would not be rebuilding) go.

        An index from before ids (``index_id`` 0) gets one: the new snapshot and journal carry
        it, then sarp.json is written again with ``stored``, the configuration it held, and
        the id; a crash before that leaves files the index refuses, and a rebuild again."""
        upgrade = not self.index_id
        if upgrade:
            self.index_id = new_index_id()
        self.recovery = recovery.rebuild(self)
        # numbering goes on past the journals there, so that if the rebuild stops before its
        # snapshot is published, its journals still follow theirs
        journals = journal.files(self.path)
        self.record_seq = max((_last_record(self.io, p) for _, p in journals), default=0)
        seqs = [s for s, _ in journals]
        seqs += [s for s, _ in snapshot.candidates(self.path)]
        self.epoch = max(seqs, default=0)
        self._journal = journal.JournalWriter(
            self.io, self.path / journal.FILES.name(self.epoch + 1), self.epoch + 1,
            self.record_seq, index_id=self.index_id, before_sync=self._segments_durable)
        self.epoch += 1
        self._snapshot()
        if upgrade:
            self.io.publish(self.path / CONFIG_FILE, dumps(stored, self.index_id).encode())
        self._remove_older_than(self.epoch)

    def _remove_older_than(self, keep_from: float, leftovers_to: float = 0) -> None:
        """Delete the snapshots and journals numbered below ``keep_from`` (``math.inf``: all),
        and the temporary files of those numbered up to ``leftovers_to`` that a publish cut
        short left (only this index, under its snapshot lock, publishes them)."""
        for files in (snapshot.FILES, journal.FILES):
            for seq, p in files.files(self.path):
                if seq < keep_from:
                    self.io.unlink(p)
            for seq, p in files.leftovers(self.path):
                if seq < keep_from or seq <= leftovers_to:
                    self.io.unlink(p)
        self.io.fsync_dir(self.path)

    # -- argument checks -----------------------------------------------------------------
    def _query_ids(self, tokens: Any, ids: Any, namespace: bytes | None) -> np.ndarray:
        if namespace is not None and not isinstance(namespace, bytes):
            raise TypeError(f"namespace must be bytes, got {type(namespace).__name__}")
        if namespace is not None and namespace != self.config.namespace:
            raise ValueError("namespace differs from the index's namespace "
                             f"({namespace!r} != {self.config.namespace!r})")
        if (tokens is None) == (ids is None):
            raise TypeError("pass exactly one of tokens or block_ids")
        if ids is not None:
            return as_block_ids(ids)
        return block_ids(tokens, self.config.block_size, self.config.namespace)

    def _metadata_rows(self, metadata: Any, n: int) -> np.ndarray:
        """Metadata as uint8 rows of the index's width, checked for dtype and length."""
        dtype = self.config.metadata_dtype
        if metadata is None:
            return np.zeros((n, dtype.itemsize), np.uint8)
        if isinstance(metadata, np.ma.MaskedArray):  # its masked records have no value
            raise TypeError("metadata must not be a masked array")
        if not isinstance(metadata, np.ndarray) or metadata.dtype != dtype:
            got = metadata.dtype if isinstance(metadata, np.ndarray) else type(metadata).__name__
            raise TypeError(f"metadata must be a numpy array of dtype {dtype}, got {got}")
        if metadata.ndim != 1 or len(metadata) != n:
            raise ValueError(f"metadata must have one record per full block ({n}), "
                             f"got shape {metadata.shape}")
        return np.frombuffer(np.ascontiguousarray(metadata), np.uint8).reshape(n, dtype.itemsize)

    def _max_retrieval(self, value: int | None) -> int:
        if value is None:
            return self.config.max_retrieval
        return check_int(value, "max_retrieval", 0)

    def _searches_as_inserts(self, max_retrieval: int) -> bool:
        """Whether a match under ``max_retrieval`` reads at least the candidates that an
        insert's match, under the index's bound, reads: then the window where it stopped is
        also the insert's answer (``sarp.matched_prefix``), else the insert matches it again."""
        bound = self.config.max_retrieval
        return max_retrieval == 0 or 0 < bound <= max_retrieval


def _last_record(io: FileIO, path: Path) -> int:
    """``journal.last_record`` of ``path``, 0 for a journal that cannot be read."""
    try:
        return journal.last_record(io, path)
    except (OSError, RecoveryError):
        return 0
