"""The insert journal (docs/journal_format.txt): the segments inserts wrote or extended since
a snapshot, so that recovery re-reads and re-registers exactly those.

Journal N holds the inserts after snapshot N (journal 0: after the index was created). An
insert appends one record per batch of segments it stores, after they are in the store and
before they are placed in the routing directory; records are made durable by the next sync:
before each insert returns under ``sync``, at ``flush()`` and close under ``group`` and
``none``. Each sync makes the segment store durable first, so that it proves the records it
covers, segments too (format 5); each record names its segments' block counts, so that the
proof covers their length (format 6). Appended records are kept in memory and written at the
next sync (a group commit), or once ``WRITE_BEHIND`` bytes wait, so an insert between
durable points costs no system call. A sync writes its records after the store is durable and
flags the last one (``STORE_DURABLE``, format 7): read back whole, it proves the segments of
every record up to it, even where no later record shows the journal's own sync.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sarp._core.hashing import xxh64
from sarp.errors import RecoveryError, SyncFailedError, WritesStoppedError
from sarp.files import Numbered
from storage_backends.io import File, FileIO
from storage_backends.write_stop import WriteStop

MAGIC = b"SARPJRNL"
VERSION = 7
# magic, version, flags (reserved before format 5), snapshot seq, the number of the record
# appended before the first, the index id (sarp.json)
FILE_HEADER = struct.Struct("<8sIIQQQ")
_HEADER_BEFORE_IDS = struct.Struct("<8sIIQQ")  # the same without the index id
#: the header of each version read: 3 lacks the index id; 2 also lacks the synced field of
#: the records (its padding is 0 there); 4 has the header of 5, whose syncs also prove the
#: segments of the records they cover durable (``PROVES_SEGMENTS``); 6 adds the block counts;
#: 7 the record flags
HEADERS = {2: _HEADER_BEFORE_IDS, 3: _HEADER_BEFORE_IDS, 4: FILE_HEADER, 5: FILE_HEADER,
           6: FILE_HEADER, VERSION: FILE_HEADER}
#: the first version where every sync follows a durable flush of the segment store
PROVES_SEGMENTS = 5
#: the first version whose records carry the synced field (padding, 0, in version 2)
HAS_SYNCED = 3
#: the first version whose records name their segments' block counts
HAS_COUNTS = 6
#: the first version whose records carry flags (``STORE_DURABLE``), in the record header's
#: field that was reserved, as the seed of the payload's checksum
HAS_FLAGS = 7
#: record flag (format 7): the segment store was made durable after every record before this
#: one was appended, and before this one was written (the last record of a journal sync)
STORE_DURABLE = 1
#: header flag (format 5, in the field that was reserved): the journal before this one was
#: synced whole, the store first, before this one was started (a snapshot's journal switch)
PREVIOUS_SYNCED = 1
# payload length, flags (reserved, 0, before format 7), XXH64 of the payload seeded with the flags
RECORD_HEADER = struct.Struct("<IIQ")
# record seq, next segment id, new blocks, count, the journal bytes / 8 the last good sync
# covered when the record was appended (saturating)
PAYLOAD_HEADER = struct.Struct("<QQQII")
SYNCED_MAX = (1 << 32) - 1
FILES = Numbered("journal-", ".log")
#: appended record bytes held in memory before they are written without waiting for a sync
WRITE_BEHIND = 64 << 10


@dataclass
class Record:
    """One journal record: the segments an insert batch stored, the blocks it newly indexed
    and the next segment id, which recovery re-applies."""

    record_seq: int
    next_segment_id: int
    new_blocks: int
    segment_ids: list[int]
    #: the block count of each segment as the batch stored it; None in a record of a version
    #: before ``HAS_COUNTS``
    block_counts: list[int] | None = None


def encode_record(r: Record, synced: int = 0, version: int = VERSION) -> bytes:
    """The on-disk bytes of ``r`` in journal format ``version``: record header (length, XXH64
    of the payload) and payload. ``synced``: the bytes of the journal the last good sync
    covered (a multiple of 8)."""
    n = len(r.segment_ids)
    counts: list[int] = []
    if version >= HAS_COUNTS:
        if r.block_counts is None or len(r.block_counts) != n:
            raise ValueError("block_counts must name one count per segment id")
        counts = r.block_counts
    synced_field = min(synced // 8, SYNCED_MAX) if version >= HAS_SYNCED else 0
    payload = PAYLOAD_HEADER.pack(r.record_seq, r.next_segment_id, r.new_blocks, n,
                                  synced_field)
    payload += _body(n, version).pack(*r.segment_ids, *counts)
    return RECORD_HEADER.pack(len(payload), 0, xxh64(payload)) + payload


def _padding(count: int, version: int) -> int:
    """The zero bytes that end a payload of ``count`` segments on an 8-byte boundary."""
    return 4 * (count % 2) if version >= HAS_COUNTS else 0


@functools.lru_cache(maxsize=256)
def _body(count: int, version: int) -> struct.Struct:
    """The layout of a record's payload after its header, for ``count`` segments in journal
    format ``version``: the segment ids, then (format 6) their block counts and padding."""
    counts = f"{count}I" if version >= HAS_COUNTS else ""
    return struct.Struct(f"<{count}Q{counts}{_padding(count, version)}x")


class JournalWriter:
    """Appends records to one journal file; ``sync`` makes every appended record durable.

    A sync that fails stops the journal (``write_stop``): every later ``append`` and ``sync``
    raises WritesStoppedError. The index passes the stop on to the journals it starts after
    it, so it takes no insert until reopened. A write that fails (a full disk) keeps its
    records queued, and the next sync writes them again.
    """

    def __init__(self, io: FileIO, path: Path, snapshot_seq: int, last_record: int,
                 stop: WriteStop | None = None, *, index_id: int, fresh: bool = False,
                 before_sync: Callable[[], None] | None = None, previous_synced: bool = False):
        """Open journal ``path``, whose last record is number ``last_record``; if missing (or
        ``fresh``: a file there is replaced), it is created, whole or not at all, for index
        ``index_id`` with its first record to follow that one: numbering runs on across
        journals, empty ones too.

        ``before_sync`` makes the segments of every appended record durable (the segment
        store's durable flush); each sync calls it first, so that a sync proves the records it
        covers whole, segments too (format 5), then writes the records still in memory, the
        last one flagged ``STORE_DURABLE`` (format 7). An existing file's records are proven
        by this writer's first sync, which is made even if nothing is appended. ``previous_synced``:
        the journal before this one was synced whole, store first (``PREVIOUS_SYNCED``)."""
        self.io = io
        self.path = path
        created = fresh or not path.exists()
        if created:
            flags = PREVIOUS_SYNCED if previous_synced else 0
            io.publish(path, FILE_HEADER.pack(MAGIC, VERSION, flags, snapshot_seq, last_record,
                                              index_id))
        #: the format the records are appended in: an existing file's own
        self.version = VERSION if created else version_of(io, path)
        self._file: File = io.open(path, direct=False, create=False)
        self._offset = self._file.size()
        self._synced = self._offset  # where a failed sync cuts the file back to (``close``)
        #: the end of what the last good sync of this writer covered, segments first: what
        #: appended records name as synced (0 in an existing file until the first sync)
        self._proven = self._offset if created else 0
        self._before_sync = before_sync
        self._pending = bytearray()  # appended, not yet written
        self._last = -1  # where the last appended record starts in ``_pending`` (-1: none)
        #: numbers of the last record appended and of the last one the last good sync covers
        self._appended_seq = self._synced_seq = last_record
        self.stop = stop or WriteStop(
            lambda: "the index's journal",  # the failure names the journal it struck
            "the index takes no insert until reopened; snapshot() or close() persists it")

    def append(self, record: Record) -> None:
        """Queue ``record`` in memory; the records before it are written once ``WRITE_BEHIND``
        bytes wait (it stays queued, for the next sync to flag), all are durable at sync."""
        self.stop.check()
        self._last = len(self._pending)
        self._pending += encode_record(record, self._proven, self.version)
        self._appended_seq = record.record_seq
        if len(self._pending) >= WRITE_BEHIND:
            self.stop.run(lambda: self._write_pending(keep_last=True))

    def sync(self) -> None:
        """Write the queued records and fdatasync the file, so every appended record is durable."""
        self.stop.run(self._sync)

    @property
    def last_record(self) -> int:
        """The number of the last record the journal holds (once cut back, the last synced)."""
        return self._appended_seq

    @property
    def unsynced(self) -> bool:
        """Whether the file holds records that no good sync of this writer covered."""
        return self._offset > self._proven

    def _sync(self) -> None:
        if self._pending or self.unsynced:
            if self._before_sync is not None:
                self._before_sync()
                self._flag_last()
            self._write_pending()
            self._file.fdatasync()
            self._synced = self._proven = self._offset
        self._synced_seq = self._appended_seq

    def _flag_last(self) -> None:
        """Flag the last queued record ``STORE_DURABLE`` (format 7): every record appended so
        far has its segments durable, and it is not written yet. Appends wait for the sync
        (the caller's journal lock), so none comes between."""
        if self.version < HAS_FLAGS or self._last < 0:
            return
        start = self._last + RECORD_HEADER.size
        length = RECORD_HEADER.unpack_from(self._pending, self._last)[0]
        RECORD_HEADER.pack_into(self._pending, self._last, length, STORE_DURABLE,
                                xxh64(self._pending[start:start + length], STORE_DURABLE))

    def _write_pending(self, keep_last: bool = False) -> None:
        """Write the queued records (``keep_last``: all but the last one appended)."""
        end = self._last if keep_last else len(self._pending)
        if end > 0:
            self._file.pwrite(bytes(self._pending[:end]), self._offset)
            self._offset += end
            del self._pending[:end]
            self._last = 0 if keep_last else -1

    def close(self, covered: bool = False) -> None:
        """Sync every appended record, then close the file.

        A journal whose sync failed (here or before) is cut back to its last good sync
        instead, so that recovery finds it whole and may replay a newer journal after it. The
        records past the cut may be lost: unless ``covered`` (a snapshot is about to persist
        them), the error is raised. A write that fails here (a full disk) is raised with the
        file left open: what it holds stays, and a later close may write the rest.
        """
        try:
            self.sync()
        except (SyncFailedError, WritesStoppedError):
            lost = self._offset + len(self._pending) > self._synced
            self._file.truncate(self._synced)
            self._file.fsync()
            self._file.close()
            self._appended_seq = self._synced_seq
            if lost and not covered:
                raise
            return
        self._file.close()


@dataclass
class Replay:
    """What ``read`` found in a journal file: its complete records, its size and the torn tail."""

    records: list[Record]
    after_record: int  # the number of the record appended before its first one
    bytes_read: int
    torn_tail: int  # bytes after the last complete record (a write cut by a crash)
    #: where each record starts, then where the last one ends
    offsets: list[int] = field(default_factory=list)
    #: how many records, from the first, a sync is known to have covered, their segments
    #: durable first (formats 5 to 7: up to the furthest synced field; 0 before)
    proven: int = 0
    #: how many records, from the first, lie up to the last one flagged ``STORE_DURABLE``
    #: (format 7): their segments were durable before it was written
    flagged: int = 0
    #: whether its header says that the journal before it was synced whole, store first
    previous_synced: bool = False
    version: int = VERSION  # its format version


def read(io: FileIO, path: Path, last: bool, index_id: int | None = None) -> Replay:
    """Every complete record of journal ``path`` (its header must hold the number its name
    does and, unless None, index id ``index_id``).

    An incomplete or damaged record that no sync is known to have covered is a torn tail (a
    crash while appending, or writes not yet synced that reached the device out of order):
    it and what follows are dropped, and the file is cut back to its last complete record
    before it. In a journal that is not the newest, or where a later record shows that a sync
    covered it, damage raises ``RecoveryError``.
    """
    raw = bytes(io.read_whole(path))
    size = len(raw)
    after, version, flags = _header(raw, path.name, FILES.seq(path), index_id)
    records = list(_records(raw, path.name, version))
    offsets = [HEADERS[version].size] + [end for _, _, end, _ in records]
    torn = size - offsets[-1]
    if torn:
        if not last:
            raise RecoveryError(f"{path.name}: damaged record at offset {offsets[-1]} in a "
                                "journal that a newer one follows")
        f = io.open(path, direct=False, create=False)
        try:
            f.truncate(offsets[-1])
            f.fsync()
        finally:
            f.close()
    synced = max((s for _, s, _, _ in records), default=0)
    proven = sum(end <= synced for _, _, end, _ in records) if version >= PROVES_SEGMENTS else 0
    flagged = max((k + 1 for k, (*_, f) in enumerate(records) if f & STORE_DURABLE), default=0)
    return Replay([r for r, _, _, _ in records], after, size, torn, offsets, proven, flagged,
                  bool(flags & PREVIOUS_SYNCED), version)


def rewrite(io: FileIO, path: Path, start: int, records: list[Record], version: int) -> None:
    """Replace the records of journal ``path`` (of format ``version``) from offset ``start``
    on by ``records``, at once (a new file is published in its place). They name no synced
    bytes: they prove nothing until a later sync of the file."""
    head = bytes(io.read_whole(path, start))
    io.publish(path, head + b"".join(encode_record(r, 0, version) for r in records))


def version_of(io: FileIO, path: Path) -> int:
    """The format version of journal ``path``, its header checked as ``read`` does (any
    index id)."""
    return _header(bytes(io.read_whole(path, FILE_HEADER.size)), path.name, FILES.seq(path),
                   None)[1]


def last_record(io: FileIO, path: Path) -> int:
    """The number of the last valid record of journal ``path``, or its R when it holds none;
    read without cutting anything. Raises RecoveryError if the file is not a readable journal."""
    raw = bytes(io.read_whole(path))
    last, version, _ = _header(raw, path.name, FILES.seq(path), None)
    for rec, _, _, _ in _records(raw, path.name, version):
        last = rec.record_seq
    return last


def holds_no_record(io: FileIO, path: Path) -> bool:
    """Whether ``path`` is a journal header alone (of any index), as a creation cut short
    leaves it."""
    raw = bytes(io.read_whole(path))
    try:
        _, version, _ = _header(raw, path.name, FILES.seq(path), None)
    except RecoveryError:
        return False
    return len(raw) == HEADERS[version].size


def _header(raw: bytes, name: str, seq: int | None,
            index_id: int | None) -> tuple[int, int, int]:
    """(R, format version, flags) of the journal file ``raw``, its header checked: it must be
    journal ``seq`` of index ``index_id`` (unless None; 0 in versions before 4)."""
    if len(raw) < _HEADER_BEFORE_IDS.size:
        raise RecoveryError(f"{name}: {len(raw)} bytes is shorter than a journal header")
    magic, version = struct.unpack_from("<8sI", raw)
    if magic != MAGIC or version not in HEADERS:
        raise RecoveryError(f"{name}: not a journal of format version "
                            f"{' or '.join(map(str, HEADERS))}")
    header = HEADERS[version]
    if len(raw) < header.size:
        raise RecoveryError(f"{name}: {len(raw)} bytes is shorter than a journal header")
    _, _, flags, n, after, *rest = header.unpack_from(raw)
    known = PREVIOUS_SYNCED if version >= PROVES_SEGMENTS else 0
    if flags & ~known or n != seq:
        raise RecoveryError(f"{name}: damaged header (journal {n}, flags {flags})")
    owner = rest[0] if rest else 0
    if index_id is not None and owner != index_id:
        raise RecoveryError(f"{name}: a journal of another index (index id {owner:016x}, "
                            f"this index {index_id:016x}); run `sarp rebuild`")
    return after, version, flags


def _records(raw: bytes, name: str,
             version: int) -> Iterator[tuple[Record, int, int, int]]:
    """(record, its synced field in bytes, end offset, its flags) of each valid record until
    the first damaged or incomplete one.

    Damage that a later valid record shows was synced (formats 3 to 7: its synced field
    reaches past the damage; format 2: any later valid record) is not a torn tail: it raises
    RecoveryError. (A later record flagged ``STORE_DURABLE`` does not show that: it may have
    reached the device while unsynced records before it did not.)
    """
    off = HEADERS[version].size
    while off + RECORD_HEADER.size <= len(raw):
        length, flags, digest = RECORD_HEADER.unpack_from(raw, off)
        start = off + RECORD_HEADER.size
        payload = raw[start:start + length]
        if not _valid(version, flags, length, digest, payload):
            synced = _synced_after(raw, start, version)
            if synced is not None and (version < HAS_SYNCED or synced > off):
                raise RecoveryError(
                    f"{name}: damaged record at offset {off}, which a sync covered (a valid "
                    f"record follows); run `sarp rebuild` to rebuild from the segments")
            return
        if length < PAYLOAD_HEADER.size:
            raise RecoveryError(f"{name}: record at offset {off} has a bad segment count")
        seq, next_id, blocks, n, synced = PAYLOAD_HEADER.unpack_from(payload)
        body = _body(n, version) if 8 * n <= length else None  # each id takes 8 bytes
        if (body is None or length != PAYLOAD_HEADER.size + body.size
                or any(payload[length - _padding(n, version):])):
            raise RecoveryError(f"{name}: record at offset {off} has a bad segment count")
        fields = body.unpack_from(payload, PAYLOAD_HEADER.size)
        ids, counts = list(fields[:n]), list(fields[n:]) if version >= HAS_COUNTS else None
        if ids and max(ids) >= next_id:  # ids are allocated before their record is written
            raise RecoveryError(f"{name}: record at offset {off} names segment {max(ids)}, "
                                f"not below its next segment id {next_id}")
        off = start + length
        yield Record(seq, next_id, blocks, ids, counts), 8 * synced, off, flags


def _valid(version: int, flags: int, length: int, digest: int, payload: bytes) -> bool:
    """Whether a record's header (its ``flags``, ``length`` and ``digest``) and ``payload``
    (the bytes its length spans, as far as the file holds them) are whole: known flags (none
    before format 7), the whole payload and its checksum, seeded with the flags."""
    known = STORE_DURABLE if version >= HAS_FLAGS else 0
    return (not flags & ~known and len(payload) == length
            and xxh64(payload, flags) == digest)


def _synced_after(raw: bytes, pos: int, version: int) -> int | None:
    """The most journal bytes that the synced fields of the complete, checksummed records
    starting at 8-byte boundaries after ``pos`` name; None if there is no such record."""
    most = None
    for off in range(pos + (-pos % 8), len(raw) - RECORD_HEADER.size, 8):
        length, flags, digest = RECORD_HEADER.unpack_from(raw, off)
        start = off + RECORD_HEADER.size
        if (length >= PAYLOAD_HEADER.size
                and _valid(version, flags, length, digest, raw[start:start + length])):
            synced = 8 * PAYLOAD_HEADER.unpack_from(raw, start)[4]
            most = synced if most is None else max(most, synced)
    return most


def files(directory: Path) -> list[tuple[int, Path]]:
    """(seq, path) of the journals in ``directory``, oldest first."""
    return FILES.files(directory)
