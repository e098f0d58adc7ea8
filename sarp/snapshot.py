"""Routing-directory snapshots (paper Section 5; docs/snapshot_format.txt).

A snapshot is the routing directory's flat arrays written as they are (its hash table
included), behind a header and followed by an XXH64 checksum, so recovery is one sequential
read, with no insertion per entry and no copy of the posting lists. It is
published atomically: temporary file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sarp._core.hashing import xxh64
from sarp.errors import BadLengthError, BadMagicError, ChecksumError, UnsupportedVersionError
from sarp.files import Numbered
from storage_backends.io import FileIO

MAGIC = b"SARPSNAP"
VERSION = 4
# magic, version, header length, seq, config digest, index id, next segment id, indexed
# blocks, entries, references, hash-table slots, store probes
HEADER = struct.Struct("<8sIIQQQQQQQQQ")
#: the header of each version read: 3 lacks the store probes, 2 the index id too
HEADERS = {2: struct.Struct("<8sIIQQQQQQQ"), 3: struct.Struct("<8sIIQQQQQQQQ"), VERSION: HEADER}
FILES = Numbered("snapshot-", ".snap")


@dataclass
class SnapshotState:
    """What a snapshot holds: the directory's arrays and the allocator state."""

    seq: int
    config_digest: int
    index_id: int  # the index's id (sarp.json); 0 for an index without one, and in version 2
    next_segment_id: int
    indexed_blocks: int
    entry_keys: np.ndarray  # uint64
    entry_flags: np.ndarray  # uint8
    list_lengths: np.ndarray  # uint32
    ref_segments: np.ndarray  # uint64
    ref_filters: np.ndarray  # uint64
    table_slots: np.ndarray  # uint32: the entry in each hash-table slot, EMPTY_SLOT where empty
    #: uint64 (segment id, block count) rows: newest segment writes, durable before the
    #: snapshot was published, that recovery checks the store still holds (none before 4)
    probes: np.ndarray


def _le(a: np.ndarray, dtype: str) -> bytes:
    """The bytes of ``a`` as ``dtype`` (converted only when it is not that already)."""
    return a.astype(dtype, copy=False).tobytes()


def _pad8(raw: bytes) -> bytes:
    return raw + b"\0" * (-len(raw) % 8)


def encode(s: SnapshotState) -> bytes:
    """The snapshot file bytes of ``s``: header, arrays padded to 8 bytes, XXH64 checksum."""
    n, r, c = len(s.entry_keys), len(s.ref_segments), len(s.table_slots)
    head = HEADER.pack(MAGIC, VERSION, HEADER.size, s.seq, s.config_digest, s.index_id,
                       s.next_segment_id, s.indexed_blocks, n, r, c, len(s.probes))
    body = b"".join((head, _le(s.entry_keys, "<u8"), _pad8(_le(s.entry_flags, "u1")),
                     _pad8(_le(s.list_lengths, "<u4")), _le(s.ref_segments, "<u8"),
                     _le(s.ref_filters, "<u8"), _pad8(_le(s.table_slots, "<u4")),
                     _le(s.probes, "<u8")))
    return body + struct.pack("<Q", xxh64(body))


def decode(raw: bytes | memoryview, name: str) -> SnapshotState:
    """Parse and verify a snapshot; every fault raises a CorruptionError naming the file."""
    if len(raw) < 16:
        raise BadLengthError(f"{name}: {len(raw)} bytes is shorter than a snapshot header")
    magic, version, hlen = struct.unpack_from("<8sII", raw)
    if magic != MAGIC:
        raise BadMagicError(f"{name}: not a snapshot (magic {magic!r})")
    header = HEADERS.get(version)
    if header is None or hlen != header.size:
        raise UnsupportedVersionError(f"{name}: snapshot format version {version}, "
                                      f"reads {' or '.join(map(str, HEADERS))}")
    if len(raw) < header.size + 8:
        raise BadLengthError(f"{name}: {len(raw)} bytes is shorter than a snapshot header")
    fields = header.unpack_from(raw)[3:]
    if version == 2:  # no index id: 0
        fields = (*fields[:2], 0, *fields[2:])
    seq, digest, owner, next_id, blocks, n, r, c, *more = fields
    p = more[0] if more else 0
    sizes = (8 * n, 8 * -(-n // 8), 8 * -(-4 * n // 8), 8 * r, 8 * r, 8 * -(-4 * c // 8),
             16 * p)
    if len(raw) != header.size + sum(sizes) + 8:
        raise BadLengthError(f"{name}: {len(raw)} bytes, header says "
                             f"{header.size + sum(sizes) + 8} (truncated or extended)")
    (stored,) = struct.unpack_from("<Q", raw, len(raw) - 8)
    if xxh64(memoryview(raw)[:-8]) != stored:
        raise ChecksumError(f"{name}: checksum mismatch")
    off = header.size
    arrays = []
    for size, dtype, count in zip(sizes, ("<u8", "u1", "<u4", "<u8", "<u8", "<u4", "<u8"),
                                  (n, n, n, r, r, c, 2 * p), strict=True):
        arrays.append(np.frombuffer(raw, dtype, count, off))
        off += size
    arrays[-1] = arrays[-1].reshape(p, 2)
    return SnapshotState(seq, digest, owner, next_id, blocks, *arrays)


def write(io: FileIO, directory: Path, state: SnapshotState) -> tuple[Path, int]:
    """Publish ``state`` as snapshot ``state.seq``; returns its path and size in bytes."""
    raw = encode(state)
    final = directory / FILES.name(state.seq)
    io.publish(final, raw)
    return final, len(raw)


@dataclass
class Loaded:
    """A loaded snapshot: its state, file, size in bytes and the read and decode times (s)."""

    state: SnapshotState
    path: Path
    bytes_read: int
    load_s: float
    deserialize_s: float


def load(io: FileIO, path: Path, direct: bool) -> Loaded:
    """Read and verify one snapshot file in one sequential pass from the disk (O_DIRECT if
    ``direct``, the store's setting), into a buffer of its own (``FileIO.read_private``):
    the directory adopts its posting lists where they were read
    (``RoutingTable.from_arrays``) until the first insert copies them."""
    t0 = time.perf_counter()
    raw = io.read_private(path, direct)
    t1 = time.perf_counter()
    state = decode(memoryview(raw), path.name)
    return Loaded(state, path, len(raw), t1 - t0, time.perf_counter() - t1)


def candidates(directory: Path) -> list[tuple[int, Path]]:
    """(seq, path) of the snapshot files in ``directory``, newest first."""
    return FILES.files(directory)[::-1]
