"""The SARP index: ``sarp.open(path, backend=...)`` creates an index or reopens the one there.

An index directory holds ``sarp.json`` (format and configuration) and ``store/`` (the record
store of segment records). Matches run without locks: they read published posting lists
(copy-on-write) and immutable segment records. Inserts and background jobs that change the
routing directory are serialized by one writer lock.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from sarp.background import Worker
from sarp.block_ids import as_block_ids, block_ids
from sarp.config import Config, config_from_kwargs, dumps, loads
from sarp.errors import IndexClosedError
from sarp.insertion import insert as insert_path
from sarp.matching import COUNTERS, MatchResult
from sarp.matching import match as match_path
from sarp.routing import Build, Events, RoutingDirectory
from sarp.segments import SegmentStore
from storage_backends import RecordStore, open_store

CONFIG_FILE = "sarp.json"
STORE_DIR = "store"


def _write_atomically(path: Path, text: str) -> None:
    """Temporary file, fsync, rename, fsync of the directory."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Index:
    """A SARP index over one record store. Use ``sarp.open`` to get one."""

    def __init__(self, path: Path, config: Config, store: RecordStore, background: bool):
        self.path = path
        self.config = config
        self.store = store
        self.segments = SegmentStore(store, config.meta_width)
        self.directory = RoutingDirectory(config)
        self._lock = threading.RLock()
        self._worker = Worker(enabled=background)
        self._closed = False
        self._counters = {f"match_{k}": 0 for k in COUNTERS}
        self._counters.update(matches=0, inserts=0, matched_blocks=0, queried_blocks=0,
                              segments_written=0, segments_extended=0, blocks_written=0,
                              indexed_blocks=0)
        self._counter_lock = threading.Lock()

    # -- public API ----------------------------------------------------------------------
    def match(self, tokens: Any = None, *, block_ids: Any = None, namespace: bytes | None = None,
              max_retrieval: int | None = None) -> MatchResult:
        """The longest verified prefix of the sequence that the index holds."""
        self._check_open()
        q = self._query_ids(tokens, block_ids, namespace)
        mr = self._max_retrieval(max_retrieval)
        result = match_path(self.config, self.directory, self.segments, q, mr)
        with self._counter_lock:
            self._counters["matches"] += 1
            self._counters["matched_blocks"] += result.num_blocks
            self._counters["queried_blocks"] += len(q)
            for k, v in result.stats.items():
                self._counters[f"match_{k}"] += v
        return result

    def insert(self, tokens: Any = None, *, metadata: Any = None, block_ids: Any = None,
               namespace: bytes | None = None) -> dict[str, int]:
        """Register a processed sequence with one metadata record per full block.

        ``metadata=None`` stores zeroed records. Returns the insertion's counters.
        """
        self._check_open()
        q = self._query_ids(tokens, block_ids, namespace)
        meta = self._metadata_rows(metadata, len(q))
        if len(q) == 0:
            return {}
        jobs: list[Events] = []
        with self._lock:
            def on_write(seg: Any) -> None:
                jobs.append(self.directory.place(seg.segment_id, seg.start, seg.block_ids))

            st = insert_path(self.config, self.directory, self.segments, q, meta,
                             self.config.max_retrieval, on_write)
        for ev in jobs:
            self._schedule(ev)
        with self._counter_lock:
            self._counters["inserts"] += 1
            for k in ("segments_written", "segments_extended", "blocks_written"):
                self._counters[k] += st[k]
            self._counters["indexed_blocks"] += st["new_blocks"]
        return st

    def drain(self) -> None:
        """Wait until background refinement and rematerialization have finished."""
        self._worker.drain()

    def stats(self) -> dict[str, Any]:
        """Aggregated query counters, routing-directory size and the store's statistics."""
        with self._counter_lock:
            out: dict[str, Any] = dict(self._counters)
        out.update(self.directory.stats())
        out["segments"] = self.segments.next_id
        blocks = out["indexed_blocks"]
        out["routing_bytes_per_block"] = out["routing_bytes"] / blocks if blocks else 0.0
        out["store"] = self.store.stats()
        return out

    def close(self) -> None:
        """Finish background work, persist, and release the store."""
        if self._closed:
            return
        try:
            self._worker.close()
        finally:
            self._closed = True
            self.store.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background work -----------------------------------------------------------------
    def _schedule(self, events: Events) -> None:
        for root in events.refine:
            self._worker.submit(lambda r=root: self._backfill(r))
        for root in events.remat:
            self._worker.submit(lambda r=root: self._rematerialize(r))

    def _backfill(self, root: int) -> None:
        """Refinement: register every member of ``root`` at the point below it, then publish."""
        d = self.directory
        build = d.backfills[root]
        members = d.table.refs(root)[0].copy()
        segs = [self.segments.read(int(s)) for s in members]
        events = Events()
        with self._lock:
            for seg in segs:
                d.backfill_member(build, seg.segment_id, seg.block_ids, events)
            d.publish(build)
        self._schedule(events)

    def _rematerialize(self, root: int) -> None:
        """Pruning undone: re-place every member of ``root`` privately, then publish at once."""
        d = self.directory
        build = Build("remat", root)
        events = Events()
        with self._lock:
            for sid in d.table.refs(root)[0].copy():
                seg = self.segments.read(int(sid))
                ev = d.place(seg.segment_id, seg.start, seg.block_ids, build)
                events.refine += ev.refine
                events.remat += ev.remat
            d.publish(build)
        self._schedule(events)

    # -- recovery ------------------------------------------------------------------------
    def _rebuild_from_segments(self) -> None:
        """The slow path: re-register every stored segment in id order."""
        blocks = 0
        for seg in self.segments.scan():
            self.segments.advance_past(seg.segment_id)
            blocks += seg.block_count
            with self._lock:
                self._schedule(self.directory.place(seg.segment_id, seg.start, seg.block_ids))
        self._worker.drain()
        self._counters["indexed_blocks"] = blocks

    # -- argument checks -----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise IndexClosedError(f"index at {str(self.path)!r} is closed")

    def _query_ids(self, tokens: Any, ids: Any, namespace: bytes | None) -> np.ndarray:
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
        if not isinstance(metadata, np.ndarray) or metadata.dtype != dtype:
            got = metadata.dtype if isinstance(metadata, np.ndarray) else type(metadata).__name__
            raise TypeError(f"metadata must be a numpy array of dtype {dtype}, got {got}")
        if metadata.ndim != 1 or len(metadata) != n:
            raise ValueError(f"metadata must have one record per full block ({n}), "
                             f"got shape {metadata.shape}")
        return np.ascontiguousarray(metadata).view(np.uint8).reshape(n, dtype.itemsize)

    def _max_retrieval(self, value: int | None) -> int:
        if value is None:
            return self.config.max_retrieval
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"max_retrieval must be a non-negative integer, got {value!r}")
        return value


def open(path: str | os.PathLike, backend: str = "wiredtiger", *, memory_budget: int = 64 << 20,
         durability: str = "sync", direct_io: bool = True, background: bool = True,
         store_options: dict[str, Any] | None = None, **config: Any) -> Index:
    """Create an index at ``path``, or reopen the one there.

    ``config`` takes the paper's parameters (see ``sarp.config.Config``); on reopen, a given
    parameter that conflicts with the stored configuration raises ``ConfigMismatchError``
    (except ``max_retrieval``, which only changes how queries search).
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise ValueError(f"path {str(root)!r} is a file, not an index directory")
    wanted = config_from_kwargs(config)
    cfg_file = root / CONFIG_FILE
    existing = cfg_file.exists()
    if existing:
        cfg = wanted.merged_with_stored(loads(cfg_file.read_text()), set(config))
    else:
        cfg = wanted
    store = open_store(backend, root / STORE_DIR, memory_budget=memory_budget,
                       durability=durability, direct_io=direct_io, **(store_options or {}))
    try:
        if not existing:
            _write_atomically(cfg_file, dumps(cfg))
        index = Index(root, cfg, store, background)
        if existing:
            index._rebuild_from_segments()
    except BaseException:
        store.close()
        raise
    return index
