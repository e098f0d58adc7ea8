"""The page log of flashlog: append-only pages, each with the Bloom filter of its keys.

A page is a header block (filter, block fences) and data blocks carrying the page's records,
sorted by key hash, as one stream: a record that fits in a block never crosses a block
boundary; a record larger than a block continues over the next blocks. DRAM keeps, per
instance, the chain of its pages' filters and places, plus one 16-bit fence per block (the top
hash bits of the record covering the block's first byte), so a lookup reads only the blocks the
key can be in. Format: docs/flashlog_format.txt.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sarp.errors import ChecksumError, CorruptionError, UnsupportedVersionError
from storage_backends import bloom
from storage_backends.blockframe import SEAL, intact, seal
from storage_backends.io import FileIO, aligned_buffer

PAGE_MAGIC = 0x47504C46  # b"FLPG" little-endian
PAGE_VERSION = 2
EXACT = 1  # page flag: every record's fence is the fence of one of the page's data blocks
_PAGE = struct.Struct("<IBBHIIII")  # magic, version, flags, instance, records, blocks, words,
#                                     record bytes
_FIRST = struct.Struct("<H")  # data block prefix: area offset of the first record starting in it
NO_START = 0xFFFF  # ... or this: the whole block continues a record begun in an earlier block
REC = struct.Struct("<BQI")  # type, key, value length; then the value
PUT, TOMBSTONE, BATCH_END = 1, 2, 3
MAX_PAGE_KEYS = 1024
_EXACT_BIT = 1 << 31
#: log numbers are below this, so that a block's checksum seed (``PageLog._seed``) keeps bit 63
#: clear: every WAL block's seed sets it (``flashlog_wal._seed``)
LOG_NUMBER_LIMIT = 1 << 23


def fence(h: int) -> int:
    """The 16-bit fence of a key hash: pages sort records by hash, fences compare these bits."""
    return h >> 48


def _grow(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` with room for ``need`` rows: 1/32 growth slack, so DRAM stays close to what is
    used while appends stay amortised O(1)."""
    out = np.zeros((need + need // 32 + 1, *a.shape[1:]), dtype=a.dtype)
    out[:len(a)] = a
    return out


class Chain:
    """DRAM state of one instance: per page (oldest first) its filter and where it lies.

    12 bytes per page: first filter word, start block, and filter bits (low 16 bits) | blocks
    (bits 16..30) | exact flag (bit 31).
    """

    def __init__(self) -> None:
        self.n = 0
        self.meta = np.zeros((0, 3), dtype=np.uint32)
        self.words = np.zeros(0, dtype=np.uint64)
        self.nwords = 0

    def add(self, words: np.ndarray, start: int, nblocks: int, exact: bool) -> None:
        """Append a page: its filter ``words``, start block, block count and exact flag."""
        if self.n == len(self.meta):
            self.meta = _grow(self.meta, self.n + 1)
        need = self.nwords + len(words)
        if need > len(self.words):
            self.words = _grow(self.words, need)
        self.words[self.nwords:need] = words
        self.meta[self.n] = (self.nwords, start,
                             64 * len(words) | nblocks << 16 | (_EXACT_BIT if exact else 0))
        self.nwords = need
        self.n += 1

    def hits(self, fh: int) -> Iterator[int]:
        """Pages whose filter may hold the key of filter hash ``fh``, newest first, found one
        at a time (a lookup usually stops at the first)."""
        j = bloom.newest_hit(self.words, self.meta, self.n, fh)
        while j >= 0:
            yield j
            j = bloom.newest_hit(self.words, self.meta, j, fh)

    def cut(self, end: int) -> None:
        """Drop the pages from log block ``end`` on: the newest ones (a batch undone)."""
        while self.n and self.meta[self.n - 1, 1] >= end:
            self.n -= 1
            self.nwords = int(self.meta[self.n, 0])

    def page(self, j: int) -> tuple[int, int, bool]:
        """(start block, blocks, exact) of page ``j``."""
        _, start, packed = self.meta[j].tolist()
        return start, (packed >> 16) & 0x7FFF, bool(packed & _EXACT_BIT)

    def nbytes(self) -> int:
        """Bytes of DRAM the chain's arrays take (allocated, growth slack included)."""
        return self.meta.nbytes + self.words.nbytes


class PageLog:
    """One log file and the DRAM chains of its pages. Not thread-safe: the store locks."""

    def __init__(self, io: FileIO, path: Path, number: int, block: int, direct: bool,
                 instances: int):
        self.path = path
        self.number = number
        self.block = block
        self.payload = block - SEAL
        self.area = self.payload - _FIRST.size  # record bytes of a data block
        # the largest record a page can hold: its fences must fit in the header block
        self.max_record = (self.payload - _PAGE.size - 8) // 2 * self.area
        self.file = io.open(path, direct=direct)
        self.chains = [Chain() for _ in range(instances)]
        self.fences = np.zeros(0, dtype=np.uint16)
        self._fence_view = memoryview(self.fences)
        self.end = 0  # blocks in the log
        self.records = 0
        self.record_bytes = 0
        self._rbuf = aligned_buffer(64 * block)

    def _seed(self, blk: int) -> int:
        return (self.number << 40) | blk

    # -- appending ---------------------------------------------------------------------------
    def _layout(self, encoded: list[tuple[int, bytes]]) -> tuple[bytearray, list[int], list[int]]:
        """Place the sorted ``encoded`` = [(hash, record)] over data blocks: (stream of the
        blocks' record areas, first-start offset and fence of each data block)."""
        a = self.area
        stream = bytearray()
        starts: list[int] = []
        for _, e in encoded:
            room = a - len(stream) % a
            if len(e) > room and (len(e) <= a or room < REC.size):
                stream += bytes(room)  # starts the next block; type 0 pads this one
            starts.append(len(stream))
            stream += e
        nblk = -(-len(stream) // a)
        stream += bytes(nblk * a - len(stream))
        firsts = [NO_START] * nblk
        for s in reversed(starts):
            firsts[s // a] = s % a
        fences = []
        j = 0
        for i in range(nblk):  # the record covering the block's first byte
            while j + 1 < len(starts) and starts[j + 1] <= i * a:
                j += 1
            fences.append(fence(encoded[j][0]))
        return stream, firsts, fences

    def append(self, inst: int, recs: list[tuple[int, int, int, bytes]]) -> None:
        """Append ``recs`` = [(hash, key, type, value)] of instance ``inst`` as one page (or as
        two, if the header block cannot hold the filter and fences of one)."""
        recs = sorted(recs)
        encoded = [(h, REC.pack(t, k, len(v)) + v) for h, k, t, v in recs]
        stream, firsts, fences = self._layout(encoded)
        fence_set = set(fences)
        exact = all(fence(h) in fence_set for h, _ in encoded)
        words = bloom.build(
            np.array([bloom.filter_hash(k.to_bytes(8, "little")) for _, k, _, _ in recs],
                     dtype=np.uint64), bloom.words_for(len(recs), exact))
        ndata = len(firsts)
        if _PAGE.size + 8 * len(words) + 2 * ndata > self.payload:
            if len(recs) == 1:
                raise ValueError(f"a record of {len(encoded[0][1])} bytes does not fit in a "
                                 f"flashlog page (at most {self.max_record})")
            half = len(recs) // 2
            self.append(inst, recs[:half])
            self.append(inst, recs[half:])
            return
        nblocks = 1 + ndata
        rec_bytes = sum(len(e) for _, e in encoded)
        buf = aligned_buffer(nblocks * self.block)
        head = _PAGE.pack(PAGE_MAGIC, PAGE_VERSION, EXACT if exact else 0, inst, len(recs),
                          nblocks, len(words), rec_bytes) + words.tobytes() + \
            np.asarray(fences, dtype=np.uint16).tobytes()
        buf[:len(head)] = head
        seal(buf, 0, self.block, self._seed(self.end))
        a = self.area
        for i in range(ndata):
            off = (i + 1) * self.block
            _FIRST.pack_into(buf, off, firsts[i])
            buf[off + _FIRST.size:off + self.payload] = stream[i * a:(i + 1) * a]
            seal(buf, off, self.block, self._seed(self.end + 1 + i))
        self.file.pwrite(buf, self.end * self.block)
        self._register(inst, words, self.end, nblocks, exact, fences, len(recs), rec_bytes)

    def _register(self, inst: int, words: np.ndarray, start: int, nblocks: int, exact: bool,
                  fences: Any, nrecs: int, rec_bytes: int) -> None:
        if start + nblocks > len(self.fences):
            self.fences = _grow(self.fences, start + nblocks)
            self._fence_view = memoryview(self.fences)
        self.fences[start] = 0
        self.fences[start + 1:start + nblocks] = fences
        self.chains[inst].add(words, start, nblocks, exact)
        self.end = start + nblocks
        self.records += nrecs
        self.record_bytes += rec_bytes

    def cut(self, end: int, records: int, record_bytes: int) -> None:
        """Drop the pages from block ``end`` on (a batch undone; ``records`` and
        ``record_bytes`` are the counts without them) and cut the file there, synced: the
        open reads every whole page past the synced part of the log, so one left past the
        end, or brought back by a power cut, would come back as the newest of its keys."""
        for chain in self.chains:
            chain.cut(end)
        self.end, self.records, self.record_bytes = end, records, record_bytes
        if self.file.size() > end * self.block:
            self.file.truncate(end * self.block)
            self.file.fdatasync()

    # -- reading -----------------------------------------------------------------------------
    def find(self, inst: int, h: int, fh: int, key: int) -> tuple[int, bytes] | None:
        """(type, value) of the newest record of ``key`` (hash ``h``, filter hash ``fh``) in
        the log, or None."""
        chain = self.chains[inst]
        for j in chain.hits(fh):
            found = self._find_in_page(chain, j, h, key)
            if found is not None:
                return found
        return None

    def may_contain(self, inst: int, h: int, fh: int) -> bool:
        """Whether the log may hold a record of the key, judged in DRAM (filters, fences)."""
        chain = self.chains[inst]
        return any(self._fence_range(chain, j, h) is not None for j in chain.hits(fh))

    def _fence_range(self, chain: Chain, j: int, h: int) -> tuple[int, int] | None:
        """(first block, block count) of page ``j`` that can hold a record of hash ``h``, or
        None if its fences rule the key out."""
        start, nb, exact = chain.page(j)
        f = fence(h)
        base = start + 1  # the page's first data block; bisect is cheaper than numpy here
        lo = bisect_left(self._fence_view, f, base, start + nb)  # first fence >= f
        hi = bisect_right(self._fence_view, f, lo, start + nb)  # first fence > f
        if hi == base or (exact and hi == lo):
            return None
        first = max(lo - 1, base)
        return first, (hi - 1 if hi > lo else first) - first + 1

    def _find_in_page(self, chain: Chain, j: int, h: int, key: int) -> tuple[int, bytes] | None:
        blocks = self._fence_range(chain, j, h)
        if blocks is None:
            return None
        blk, n = blocks
        stream, begin = self._areas(self._read_blocks(blk, n), n)
        for pos, t, k, size in self._walk(stream, begin):
            if pos + REC.size + size > len(stream):
                # another key's large record may go on past the blocks this key can be in;
                # this key's own, or any record at the page's end, may not
                start, nb, _ = chain.page(j)
                if k == key or blk + n == start + nb:
                    raise CorruptionError(f"{self.path.name}: record at block {blk} runs past "
                                          "the blocks its fences allow")
                return None
            if k == key:
                return t, bytes(memoryview(stream)[pos + REC.size:pos + REC.size + size])
        return None

    def _areas(self, buf: Any, n: int) -> tuple[bytearray, int]:
        """The record areas of ``n`` data blocks read into ``buf``, laid end to end, and the
        position in them of the first record starting in those blocks (-1 if none does)."""
        view = memoryview(buf)
        stream = bytearray()
        begin = -1
        for i in range(n):
            off = i * self.block
            (first,) = _FIRST.unpack_from(buf, off)
            if begin < 0 and first != NO_START:
                if first >= self.area:
                    raise CorruptionError(f"{self.path.name}: bad first-record offset")
                begin = i * self.area + first
            stream += view[off + _FIRST.size:off + self.payload]
        return stream, begin

    def _walk(self, stream: Any, pos: int) -> Iterator[tuple[int, int, int, int]]:
        """(position, type, key, value length) of each record of ``stream`` (block areas laid
        end to end) from ``pos``, a record start. The last one yielded may run past the end."""
        if pos < 0:
            return
        a = self.area
        unpack = REC.unpack_from
        end = len(stream)
        while pos < end:
            room = a - pos % a
            if room < REC.size or stream[pos] == 0:
                pos += room  # padding to the end of the block
                continue
            t, k, n = unpack(stream, pos)
            size = REC.size + n
            if t not in (PUT, TOMBSTONE) or (size <= a and size > room):
                raise CorruptionError(f"{self.path.name}: bad record in a page")
            yield pos, t, k, n
            pos += size

    def _read_blocks(self, blk: int, n: int) -> Any:
        """Read and check ``n`` blocks from block ``blk``."""
        size = n * self.block
        buf = self._rbuf if size <= len(self._rbuf) else aligned_buffer(size)
        view = memoryview(buf)[:size]
        if self.file.pread(view, blk * self.block) < size:
            raise CorruptionError(f"{self.path.name}: blocks {blk}..{blk + n - 1} are cut short")
        for i in range(n):
            if not intact(buf, i * self.block, self.block, self._seed(blk + i)):
                raise ChecksumError(f"{self.path.name}: block {blk + i} fails its checksum")
        return buf

    def page_records(self, inst: int, j: int) -> list[tuple[int, int, bytes]]:
        """Every (key, type, value) of page ``j`` of instance ``inst`` (reads the whole page)."""
        start, nb, _ = self.chains[inst].page(j)
        stream, begin = self._areas(self._read_blocks(start + 1, nb - 1), nb - 1)
        out = []
        for pos, t, k, n in self._walk(stream, begin):
            if pos + REC.size + n > len(stream):
                raise CorruptionError(f"{self.path.name}: page at block {start} ends inside "
                                      "a record")
            out.append((k, t, bytes(stream[pos + REC.size:pos + REC.size + n])))
        return out

    def newest(self, inst: int) -> dict[int, tuple[int, bytes]]:
        """key -> (type, value) of the newest record of every key of ``inst`` in the log."""
        out: dict[int, tuple[int, bytes]] = {}
        for j in range(self.chains[inst].n - 1, -1, -1):
            for k, t, v in self.page_records(inst, j):
                out.setdefault(k, (t, v))
        return out

    # -- recovery ----------------------------------------------------------------------------
    def recover(self, synced: int) -> None:
        """Rebuild the chains from the page headers; the first ``synced`` blocks were synced.

        A damaged page inside the synced part, or a log that ends before it, is corruption;
        past it, a damaged or cut page is the torn tail of the last run (its records are still
        in the WAL) and is cut off.
        """
        total = self.file.size() // self.block
        blk = 0
        head = aligned_buffer(self.block)
        while blk < total:
            page = self._read_header(head, blk, total)
            if page is not None and blk >= synced:
                try:
                    self._read_blocks(blk + 1, page[3] - 1)
                except CorruptionError:
                    page = None
            if page is None:
                if blk < synced:
                    raise CorruptionError(f"{self.path.name}: page at block {blk} fails its "
                                          "checks")
                break
            flags, inst, nrecs, nblocks, words, fences, rec_bytes = page
            self._register(inst, words, blk, nblocks, bool(flags & EXACT), fences, nrecs,
                           rec_bytes)
            blk += nblocks
        if blk < synced:
            raise CorruptionError(f"{self.path.name}: ends at block {blk}, but its first "
                                  f"{synced} blocks were synced")
        if blk * self.block < self.file.size():
            self.file.truncate(blk * self.block)
        self.end = blk

    def _read_header(self, head: Any, blk: int, total: int) -> tuple[Any, ...] | None:
        if self.file.pread(head, blk * self.block) < self.block:
            return None
        if not intact(head, 0, self.block, self._seed(blk)):
            return None
        magic, version, flags, inst, nrecs, nblocks, nwords, rec_bytes = _PAGE.unpack_from(head)
        if magic == PAGE_MAGIC and version != PAGE_VERSION:
            raise UnsupportedVersionError(f"{self.path.name}: page at block {blk} has format "
                                          f"version {version}; this build reads {PAGE_VERSION}")
        if (magic != PAGE_MAGIC or nblocks < 2 or blk + nblocks > total
                or inst >= len(self.chains)
                or _PAGE.size + 8 * nwords + 2 * (nblocks - 1) > self.payload):
            return None
        words = np.frombuffer(head, np.uint64, nwords, _PAGE.size).copy()
        fences = np.frombuffer(head, np.uint16, nblocks - 1, _PAGE.size + 8 * nwords).copy()
        return flags, inst, nrecs, nblocks, words, fences, rec_bytes

    def dram_bytes(self) -> int:
        """Bytes of DRAM state: filters, page places and fences (allocated, not just used)."""
        return self.fences.nbytes + sum(c.nbytes() for c in self.chains)

    def close(self) -> None:
        """Close the log file; no sync: the store syncs the log before it relies on it."""
        self.file.close()
