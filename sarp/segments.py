"""The segment store: columnar segment records of up to S blocks, kept in a record store.

Each segment holds the block IDs and block metadata of up to S consecutive blocks of one
sequence, starting at a window boundary (a multiple of S). Segment ids are allocated
monotonically and are the record store's keys. Records are encoded by the Cython codec
(docs/segment_format.txt); a record that fails its checks raises a CorruptionError subclass.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from sarp._core.segment_codec import (
    Segment,
    append_blocks,
    copy_prefix,
    decode_segment,
    encode_segment,
)
from sarp._core.write_clock import WriteClock
from sarp.errors import CorruptionError

if TYPE_CHECKING:
    from storage_backends import RecordStore

#: the newest segment writes a snapshot names for recovery to check (``SegmentStore.probes``)
PROBES = 8


def join_rows(parts: Iterable[np.ndarray]) -> bytearray:
    """The bytes of C-contiguous arrays ``parts`` (rows of block metadata), concatenated.

    Copied with the GIL held: ``np.concatenate`` releases it for arrays of this size, and
    under request threads each release costs a thread switch (``sarp/_core/gil.pxd``).
    """
    return bytearray().join(parts)


class SegmentStore:
    """Reads and writes segment records; allocates segment ids."""

    def __init__(self, store: RecordStore, meta_width: int, segment_blocks: int,
                 next_id: int = 0):
        self.store = store
        self.meta_width = meta_width
        self.segment_blocks = segment_blocks
        self._next_id = next_id
        self._alloc_lock = threading.Lock()
        #: segment writes, begun and registered (see ``sarp.matched_prefix``)
        self.writes = WriteClock()
        #: extensions stored so far: the only writes that change a stored record
        self.extensions = 0
        self._newest: deque[tuple[int, int]] = deque(maxlen=PROBES)
        self._highest = (-1, 0)  # (segment id, block count) of the highest id stored

    @property
    def next_id(self) -> int:
        """The id the next new segment gets (persisted by snapshots and the journal)."""
        return self._next_id

    def allocate(self) -> int:
        """A new segment id, the next in order; thread-safe, and never handed out twice."""
        with self._alloc_lock:
            sid = self._next_id
            self._next_id += 1
            return sid

    def advance_past(self, segment_id: int) -> None:
        """Make sure ids at or below ``segment_id`` are never allocated again."""
        with self._alloc_lock:
            self._next_id = max(self._next_id, segment_id + 1)

    def read(self, segment_id: int) -> Segment | None:
        """The decoded segment (zero-copy views of the record), or None if it is absent."""
        sid = int(segment_id)
        raw = self.store.get(sid)
        return None if raw is None else self._decode(sid, raw)

    def read_many(self, segment_ids: list[int]) -> list[Segment | None]:
        """``read`` of each id, in order, as one batch of the record store."""
        return [None if raw is None else self._decode(sid, raw)
                for sid, raw in zip(segment_ids, self.store.get_many(segment_ids),
                                    strict=True)]

    def _decode(self, key: int, raw: bytes) -> Segment:
        """The segment record ``raw`` stored under ``key``, decoded and checked against both:
        a record that passes its checksum but names another id or metadata width (another
        index's, or one put under the wrong key) raises CorruptionError, never served, and
        never extended under an id the allocator hands out again. So does one that no insert
        of this index writes: no block, more than a window's, or a start off a window
        boundary (a bug's, or another configuration's)."""
        seg = decode_segment(raw)
        if seg.segment_id != key or seg.meta_width != self.meta_width:
            raise CorruptionError(
                f"segment record under key {key} names segment {seg.segment_id} with "
                f"{seg.meta_width}-byte metadata; this index stores segment {key} with "
                f"{self.meta_width}-byte metadata (a record of another index, or misplaced)")
        S = self.segment_blocks
        if not 0 < seg.block_count <= S or seg.start % S:
            raise CorruptionError(
                f"segment record under key {key} holds {seg.block_count} blocks from block "
                f"{seg.start}; this index's segments hold 1 to {S} blocks from a multiple of "
                f"{S}")
        return seg

    def encode_new(self, start: int, block_ids: np.ndarray,
                   metadata: np.ndarray) -> tuple[Segment, bytes]:
        """(segment, record) of a new segment under a newly allocated id, not yet stored."""
        return self._encode(self.allocate(), start, block_ids, metadata)

    def encode_copy(self, seg: Segment, keep: int, block_ids: np.ndarray,
                    metadata: np.ndarray) -> tuple[Segment, bytes]:
        """(segment, record) of a new segment under a newly allocated id, not yet stored, at
        ``seg``'s start: its first ``keep`` blocks, then ``block_ids`` with ``metadata``."""
        raw = copy_prefix(seg.record, keep, self.allocate(), seg.start, block_ids, metadata)
        return decode_segment(raw), raw

    def encode_extended(self, seg: Segment, block_ids: np.ndarray,
                        metadata: np.ndarray) -> tuple[Segment, bytes]:
        """(segment, record) of ``seg`` with blocks appended, not yet stored."""
        raw = append_blocks(seg.record, block_ids, metadata)
        return decode_segment(raw), raw

    def put_all(self, records: list[tuple[Segment, bytes]], extensions: int = 0) -> None:
        """Store (segment, record) pairs in one batch, ``extensions`` of them extended
        records; counted once stored, before they are registered (see ``HeldSegments``)."""
        self.store.put_many([(seg.segment_id, raw) for seg, raw in records])
        with self._alloc_lock:
            self.extensions += extensions
            self._note([seg for seg, _ in records])

    def note_stored(self, segs: Iterable[Segment]) -> None:
        """Count ``segs``, found in the store by recovery or a rebuild, as its newest writes."""
        with self._alloc_lock:
            self._note(segs)

    def _note(self, segs: Iterable[Segment]) -> None:
        highest = self._highest
        for seg in segs:
            row = (seg.segment_id, seg.block_count)
            self._newest.append(row)
            if row > highest:
                highest = row
        self._highest = highest

    def probes(self) -> np.ndarray:
        """(segment id, block count) rows, uint64, of the ``PROBES`` newest segment writes
        and of the highest id stored, each id once with its largest count, newest last.

        Every one was stored before this call returned, so a snapshot that makes the store
        durable after taking them names records the store must keep: recovery checks it
        still holds each, at least that long (``recovery.check_probes``). They are where
        damage after a crash strikes (docs/durability.md, "Damage after a crash"): the end of
        flashlog's WAL, odirect's last slots and newest copies."""
        with self._alloc_lock:
            rows = [self._highest, *self._newest] if self._highest[0] >= 0 else []
        longest: dict[int, int] = {}
        for sid, count in rows:
            longest[sid] = max(count, longest.pop(sid, 0))  # re-inserted: newest last
        return np.array(list(longest.items()), dtype=np.uint64).reshape(-1, 2)

    def _encode(self, sid: int, start: int, block_ids: np.ndarray,
                metadata: np.ndarray) -> tuple[Segment, bytes]:
        raw = encode_segment(sid, start, block_ids, metadata, self.meta_width)
        return decode_segment(raw), raw

    def scan(self) -> Iterator[Segment]:
        """Every stored segment in id order (the slow rebuild path)."""
        for key, raw in self.store.scan():
            yield self._decode(key, raw)


class HeldSegments:
    """The segments one request has read or written, so that its insert and the jobs that
    insert triggers (rematerialization, back-fill) need not read them again.

    A stored record changes only when an extension rewrites it (segment ids are never reused),
    and the segment store counts extensions once stored. A copy taken after this holder was
    made is therefore current while that count has not moved. Lookups are made where the
    writers that could move it are held off or registered after: the insert under the window's
    lock, the jobs under the directory lock (an extension counted after a job's check is
    registered after the job, replacing what the job placed). Once the count moves, every
    lookup misses and reads the store.
    """

    __slots__ = ("_segments", "_since", "_held", "_window")

    def __init__(self, segments: SegmentStore):
        self._segments = segments
        self._since = segments.extensions  # taken before anything is read into the holder
        self._held: dict[int, Segment] = {}
        self._window = -1  # the window ``record`` holds segments of

    def current(self) -> bool:
        """Whether no extension has been stored since this holder was made."""
        return self._segments.extensions == self._since

    def add(self, segs: Iterable[Segment]) -> None:
        """Hold segments read or written (stored) since this holder was made."""
        for seg in segs:
            self._held[seg.segment_id] = seg

    def record(self, segment_id: int) -> Segment | None:
        """``SegmentStore.read`` for a match, holding what it reads in its latest window only:
        a match reads window by window, and the insert after it writes from the window the
        match stopped in, so earlier windows' segments would only take memory."""
        seg = self._segments.read(segment_id)
        if seg is not None:
            if seg.start != self._window:
                self._held.clear()
                self._window = seg.start
            self._held[segment_id] = seg
        return seg

    def read(self, segment_id: int) -> Segment | None:
        """``SegmentStore.read``, from the holder when it holds a current copy: ``read_many``
        of one id, without building its lists (an insert's match reads one at a time)."""
        if self.current():
            seg = self._held.get(segment_id)
            if seg is not None:
                return seg
        seg = self._segments.read(segment_id)
        if seg is not None:
            self._held[segment_id] = seg
        return seg

    def read_many(self, segment_ids: list[int]) -> list[Segment | None]:
        """``SegmentStore.read_many``; only the segments not held are read, in one batch."""
        fresh = self.current()
        missing = [sid for sid in segment_ids if not (fresh and sid in self._held)]
        read = dict(zip(missing, self._segments.read_many(missing), strict=True)) if missing else {}
        self.add(seg for seg in read.values() if seg is not None)
        return [read[sid] if sid in read else self._held[sid] for sid in segment_ids]
