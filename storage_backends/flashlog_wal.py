"""The write-ahead log of flashlog: every put and delete, in order, until its page is synced.

A WAL file is a header block and checksummed blocks carrying a byte stream of records
(``flashlog_log.REC``); each ``put_many`` or delete ends with a BATCH_END record, and recovery
applies whole batches only. A commit writes the pending stream as new blocks and never rewrites
a block, so a torn commit cannot damage what an earlier commit made durable.
"""

from __future__ import annotations

import struct
from pathlib import Path

from sarp.errors import CorruptionError
from storage_backends.blockframe import SEAL, intact, seal
from storage_backends.flashlog_log import BATCH_END, PUT, REC, TOMBSTONE
from storage_backends.io import FileIO, aligned_buffer

WAL_MAGIC = 0x4C574C46  # b"FLWL" little-endian
WAL_VERSION = 2
# magic, version, WAL number, log number, synced log blocks, garbage estimate
_HEAD = struct.Struct("<IB3xQQQQ")
#: a block's head, by version: the stream bytes it holds; from version 2 also the blocks of
#: this WAL that the last good sync covered when it was written (saturating at 2^32 - 1)
_BLOCK_HEAD = {1: struct.Struct("<H"), 2: struct.Struct("<HI")}
_SYNCED_MAX = (1 << 32) - 1
#: WAL numbers are below this: a block's checksum seed (``_seed``) must fit in 64 bits
NUMBER_LIMIT = 1 << 24
SPILL = 64 << 10  # pending bytes written out (without sync) in group and none modes


class WalHeader:
    """What a WAL file says about the log at the moment the WAL was started."""

    def __init__(self, number: int, log_number: int, synced_blocks: int, garbage: int):
        self.number = number
        self.log_number = log_number
        self.synced_blocks = synced_blocks
        self.garbage = garbage


def wal_path(directory: Path, number: int) -> Path:
    """The path of WAL file ``number`` in ``directory``."""
    return directory / f"wal.{number}"


def _capacity(block: int, version: int) -> int:
    """The stream bytes a block of ``block`` bytes holds in WAL format ``version``."""
    return block - SEAL - _BLOCK_HEAD[version].size


def _seed(number: int, blk: int) -> int:
    """Checksum seed of block ``blk`` of WAL ``number`` (apart from every log block's)."""
    return (1 << 63) | (number << 40) | blk


class Wal:
    """An open WAL being appended to. Not thread-safe: the store locks."""

    def __init__(self, io: FileIO, directory: Path, header: WalHeader, block: int,
                 direct: bool, initial: bytes):
        """Create WAL ``header.number`` holding ``initial`` (a stream of whole batches), synced
        and renamed into place, so that it replaces the previous WAL atomically."""
        self.io = io
        self.header = header
        self.block = block
        self.version = WAL_VERSION
        self.cap = _capacity(block, self.version)
        self.path = wal_path(directory, header.number)
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.file = io.open(tmp, direct=direct)
        try:
            self.file.truncate(0)
            head = aligned_buffer(block)
            head[:_HEAD.size] = _HEAD.pack(WAL_MAGIC, self.version, header.number,
                                           header.log_number, header.synced_blocks,
                                           header.garbage)
            seal(head, 0, block, _seed(self.header.number, 0))
            self.file.pwrite(head, 0)
            self.next = 1
            # blocks the last good sync covered, the header's included: the file is renamed into
            # place only after the sync below, so once it is seen, that sync covers the header
            # and the initial blocks
            self.synced = 1 + -(-len(initial) // self.cap)
            self.pending = bytearray(initial)
            self._write(whole_only=False)
            self.file.fdatasync()
            io.rename(tmp, self.path)
            io.fsync_dir(directory)
        except BaseException:
            self.file.close()
            raise
        self.dirty = False

    def append(self, record: bytes) -> None:
        """Add ``record`` to the pending stream in memory; nothing is written until commit."""
        self.pending += record

    def size(self) -> int:
        """The WAL's size in bytes: the blocks written plus the stream still pending."""
        return self.next * self.block + len(self.pending)

    def _write(self, whole_only: bool) -> None:
        """Write the pending stream as new blocks (only full ones if ``whole_only``)."""
        n = len(self.pending) // self.cap if whole_only else -(-len(self.pending) // self.cap)
        if n == 0:
            return
        buf = aligned_buffer(n * self.block)
        head = _BLOCK_HEAD[self.version]
        fields = () if self.version == 1 else (min(self.synced, _SYNCED_MAX),)
        for i in range(n):
            part = self.pending[i * self.cap:(i + 1) * self.cap]
            off = i * self.block
            head.pack_into(buf, off, len(part), *fields)
            buf[off + head.size:off + head.size + len(part)] = part
            seal(buf, off, self.block, _seed(self.header.number, self.next + i))
        self.file.pwrite(buf, self.next * self.block)
        self.next += n
        del self.pending[:n * self.cap]
        self.dirty = True

    def spill(self) -> None:
        """Hand large pending streams to the file (no sync), bounding the memory they use."""
        if len(self.pending) >= SPILL:
            self._write(whole_only=True)

    def commit(self, sync: bool) -> bool:
        """Write everything pending; fdatasync if ``sync``. Returns whether it synced."""
        self._write(whole_only=False)
        if sync and self.dirty:
            self.file.fdatasync()
            self.dirty = False
            self.synced = self.next
            return True
        return False

    def cut(self, mark: int) -> None:
        """Drop the pending stream from byte ``mark`` on (a batch undone), and cut off the
        file, synced, any blocks a failed write left past the written ones: a later, shorter
        write would be followed by them, and the open would read them as its continuation."""
        del self.pending[mark:]
        if self.file.size() > self.next * self.block:
            self.file.truncate(self.next * self.block)
            self.file.fdatasync()
            self.dirty = False
            self.synced = self.next

    def close(self) -> None:
        """Close the file without writing or syncing: commit first to keep what is pending."""
        self.file.close()


def read_wal(io: FileIO, path: Path,
             block: int) -> tuple[WalHeader, list[list[tuple]], int]:
    """The header, the complete batches and the count of valid blocks of the WAL at ``path``.

    The stream ends at the first block that fails its checksum. A valid block after it whose
    head shows that a sync covered the damaged one (version 1: any valid block after it)
    means a damaged block inside the durable part, which raises CorruptionError. Otherwise
    the blocks from the damaged one on were never synced (written behind a group commit,
    then lost out of order by a power cut): a torn tail, dropped.
    """
    data = io.read_whole(path)
    (magic, version, number, log_number, synced, garbage) = _HEAD.unpack_from(data) \
        if len(data) >= block else (0, 0, 0, 0, 0, 0)
    # the number picks the seed the header is checked with: its range is checked first
    if (magic != WAL_MAGIC or version not in _BLOCK_HEAD or number >= NUMBER_LIMIT
            or not intact(data, 0, block, _seed(number, 0))):
        raise CorruptionError(f"{path.name}: bad WAL header")
    if path.name != wal_path(path.parent, number).name:
        raise CorruptionError(f"{path.name}: its header names wal.{number} (a WAL copied or "
                              "renamed)")
    head = _BLOCK_HEAD[version]
    header = WalHeader(number, log_number, synced, garbage)
    nblocks = len(data) // block
    stream = bytearray()
    blk = 1
    while blk < nblocks and intact(data, blk * block, block, _seed(number, blk)):
        off = blk * block
        used = head.unpack_from(data, off)[0]
        if used > _capacity(block, version):
            raise CorruptionError(f"{path.name}: block {blk} says it holds {used} bytes, more "
                                  "than a block's stream holds")
        stream += data[off + head.size:off + head.size + used]
        blk += 1
    for later in range(blk + 1, nblocks):
        off = later * block
        if intact(data, off, block, _seed(number, later)) and (
                version == 1 or head.unpack_from(data, off)[1] > blk):
            raise CorruptionError(f"{path.name}: block {blk} is damaged inside the log")
    return header, _batches(stream, path.name), blk


def _batches(stream: bytearray, name: str) -> list[list[tuple]]:
    """Split a record stream into complete batches of (type, key, value). The stream is of
    checksummed blocks only, so a record type no writer gives is damage, never a torn tail."""
    batches: list[list[tuple]] = []
    batch: list[tuple] = []
    pos = 0
    while pos + REC.size <= len(stream):
        t, k, n = REC.unpack_from(stream, pos)
        if t not in (PUT, TOMBSTONE, BATCH_END):
            raise CorruptionError(f"{name}: a record of type {t} at byte {pos} of the stream")
        if pos + REC.size + n > len(stream):
            break
        if t == BATCH_END:
            batches.append(batch)
            batch = []
        else:
            batch.append((t, k, bytes(stream[pos + REC.size:pos + REC.size + n])))
        pos += REC.size + n
    return batches
