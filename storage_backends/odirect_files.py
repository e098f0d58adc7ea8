"""odirect's small files beside slots.dat, each a superblock (storage_backends/superblock.py).

HEADER holds the slot layout, the clean flag and the next sequence number; COPIES the
newest-copy bits saved at a clean close or a checkpoint; DIRTY the regions written since that
checkpoint (the write-intent list). This module encodes and decodes them and refuses what no
build writes; what a missing or stale file means is the store's to decide
(storage_backends/odirect.py). Format: docs/odirect_format.txt.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sarp._core.slot_versions import VERSION_OVERHEAD
from sarp.errors import BadLengthError, BadMagicError, CorruptionError, UnsupportedVersionError
from storage_backends.io import FileIO, is_block_size, round_up
from storage_backends.superblock import read_superblock, write_superblock

HEADER_MAGIC = b"SARPODH4"
#: HEADER of the builds before the write-intent list: read, and rewritten as HEADER_MAGIC
#: (which those builds refuse: they would write regions that DIRTY does not name)
PREVIOUS_HEADER_MAGIC = b"SARPODH3"
#: the magic of the layout before extents (each slot's two copies side by side)
OLD_HEADER_MAGICS = (b"SARPODH2",)
# key_mode, block size, max_value_size, version bytes, extent slots, clean, next sequence number
HEADER = struct.Struct("<BIIIIBQ")
COPIES_MAGIC = b"SARPODC3"
# next sequence number, slots, bytes of slots.dat; then the newest-copy bitmap
COPIES = struct.Struct("<QQQ")
DIRTY_MAGIC = b"SARPODD1"
# checkpoint (the next sequence number of its COPIES), slots per region, regions; then the
# regions written since that checkpoint, u64 each
DIRTY = struct.Struct("<QQQ")
KEY_MODES = ("dense", "sparse")
#: the largest max_value_size (64 MiB): a slot's two copies are read and written whole
MAX_VALUE_SIZE = 1 << 26


class Layout(NamedTuple):
    """Where a store's slots lie in slots.dat (HEADER's fields but the clean flag and the
    next sequence number)."""

    sparse: bool  # key mode: sparse keys map to slots through a table, dense keys are slots
    block: int  # the block size B, the unit of every read and write
    max_value: int  # the largest value M
    vbytes: int  # the bytes of one version of a slot: round_up(M + VERSION_OVERHEAD, B)
    extent: int  # slots per extent


def new_layout(sparse: bool, block: int, max_value: int | None, extent: int) -> Layout:
    """The layout of a new store; ``max_value`` None takes what one block holds."""
    mvs = block - VERSION_OVERHEAD if max_value is None else max_value
    return Layout(sparse, block, mvs, round_up(mvs + VERSION_OVERHEAD, block), extent)


def read_header(io: FileIO, path: Path) -> tuple[Layout, bool, int]:
    """(layout, clean flag, next sequence number) of the HEADER at ``path``. Raises
    CorruptionError for a HEADER that fails its checks or names a layout no build writes,
    UnsupportedVersionError for one of the layout before extents. A HEADER of the previous
    magic is read as this one (the store rewrites it)."""
    try:
        payload = read_superblock(io, path, HEADER_MAGIC)
    except BadMagicError:
        magic = bytes(io.read_whole(path)[:8])
        if magic in OLD_HEADER_MAGICS:
            raise UnsupportedVersionError(
                f"{str(path.parent)!r}: an odirect store of an older slot layout (before "
                "extents); this version cannot read it") from None
        if magic != PREVIOUS_HEADER_MAGIC:
            raise
        payload = read_superblock(io, path, magic)
    if len(payload) != HEADER.size:
        raise BadLengthError(f"HEADER: payload of {len(payload)} bytes, expected {HEADER.size}")
    mode, blk, mvs, vbytes, extent, clean, next_seq = HEADER.unpack(payload)
    _check_layout(mode, blk, mvs, vbytes, extent)
    return Layout(mode == 1, blk, mvs, vbytes, extent), bool(clean), next_seq


def write_header(io: FileIO, path: Path, layout: Layout, clean: bool, next_seq: int) -> None:
    """Durably replace the HEADER at ``path``."""
    payload = HEADER.pack(int(layout.sparse), layout.block, layout.max_value, layout.vbytes,
                          layout.extent, int(clean), next_seq)
    write_superblock(io, path, HEADER_MAGIC, payload)


def _check_layout(mode: int, blk: int, mvs: int, vbytes: int, extent: int) -> None:
    """Refuse (CorruptionError) a HEADER whose checksum holds but whose layout no build
    writes: a bug's or a foreign writer's, which would otherwise misplace every slot."""
    faults = []
    if mode >= len(KEY_MODES):
        faults.append(f"key mode {mode}")
    if not is_block_size(blk):
        faults.append(f"block size {blk}")
    elif not mvs <= MAX_VALUE_SIZE or vbytes != round_up(mvs + VERSION_OVERHEAD, blk):
        faults.append(f"{vbytes} version bytes for values of {mvs}")
    if extent < 1:
        faults.append(f"extent of {extent} slots")
    if faults:
        raise CorruptionError(f"HEADER: {', '.join(faults)}: a layout no build writes")


class Copies(NamedTuple):
    """COPIES: the newest-copy bits and the state of the file they were saved in."""

    seq: int  # the next sequence number then: every version below it was durable
    slots: int  # the slots the bits cover
    size: int  # the bytes of slots.dat then (the store never shortens it)
    bits: bytes  # bit s set: copy 1 of slot s holds the newest version


def bits_bytes(slots: int) -> int:
    """The bytes of the newest-copy bits of ``slots`` slots, one bit each."""
    return -(-slots // 8)


def read_copies(io: FileIO, path: Path) -> Copies | None:
    """The COPIES at ``path``; None if it is missing, damaged, or its bits do not cover its
    slots (the store then reads the slots themselves)."""
    payload = _optional(io, path, COPIES_MAGIC, COPIES)
    if payload is None:
        return None
    seq, slots, size = COPIES.unpack_from(payload)
    bits = payload[COPIES.size:]
    return Copies(seq, slots, size, bits) if len(bits) == bits_bytes(slots) else None


def write_copies(io: FileIO, path: Path, copies: Copies) -> None:
    """Durably replace the COPIES at ``path``; its bits are padded to cover its slots."""
    bits = copies.bits.ljust(bits_bytes(copies.slots), b"\0")
    write_superblock(io, path, COPIES_MAGIC, COPIES.pack(*copies[:3]) + bits)


def read_dirty(io: FileIO, path: Path) -> tuple[int, int, set[int]] | None:
    """(checkpoint sequence number, slots per region, regions) of the DIRTY at ``path``; None
    if it is missing or damaged."""
    payload = _optional(io, path, DIRTY_MAGIC, DIRTY)
    if payload is None:
        return None
    seq, region, count = DIRTY.unpack_from(payload)
    if len(payload) != DIRTY.size + 8 * count:
        return None
    return seq, region, set(np.frombuffer(payload, "<u8", count, DIRTY.size).tolist())


def write_dirty(io: FileIO, path: Path, seq: int, region: int, regions: set[int]) -> None:
    """Durably name ``regions`` (of ``region`` slots each) in the DIRTY at ``path`` as written
    since the checkpoint whose COPIES has the next sequence number ``seq``."""
    rows = np.array(sorted(regions), "<u8").tobytes()
    write_superblock(io, path, DIRTY_MAGIC, DIRTY.pack(seq, region, len(regions)) + rows)


def _optional(io: FileIO, path: Path, magic: bytes, head: struct.Struct) -> bytes | None:
    """The payload of a file the store can do without (COPIES, DIRTY), if it is there, passes
    its checks and holds its fixed fields ``head``; else None."""
    try:
        payload = read_superblock(io, path, magic)
    except (OSError, CorruptionError):
        return None
    return payload if len(payload) >= head.size else None
