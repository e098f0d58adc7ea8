"""The page log of flashlog: append-only pages, each with the Bloom filter of its keys.

A page is a header block (filter, block fences) and data blocks of records sorted by key hash.
DRAM keeps, per instance, the chain of its pages' filters and places, plus one 16-bit fence per
data block (the top hash bits of the first record in it), so a lookup reads only the block the
key can be in. Format: docs/flashlog_format.txt.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sarp.errors import ChecksumError, CorruptionError
from storage_backends import bloom
from storage_backends.blockframe import SEAL, intact, seal
from storage_backends.io import FileIO, aligned_buffer

PAGE_MAGIC = 0x47504C46  # b"FLPG" little-endian
PAGE_VERSION = 1
LARGE = 1  # page flag: one record spread over all data blocks
_PAGE = struct.Struct("<IBBHIIII")  # magic, version, flags, instance, records, blocks, words,
#                                     record bytes
REC = struct.Struct("<BQI")  # type, key, value length; then the value
PUT, TOMBSTONE, BATCH_END = 1, 2, 3
MAX_PAGE_KEYS = 1024
_LARGE_BIT = 1 << 31


def fence(h: int) -> int:
    """The 16-bit fence of a key hash: pages sort records by hash, fences compare these bits."""
    return h >> 48


class Chain:
    """DRAM state of one instance: per page (oldest first) its filter and where it lies."""

    def __init__(self) -> None:
        self.n = 0
        self.meta = np.zeros((4, 4), dtype=np.uint32)  # first word, bits, start block, blocks
        self.words = np.zeros(4, dtype=np.uint64)
        self.nwords = 0

    def add(self, words: np.ndarray, start: int, nblocks: int, large: bool) -> None:
        if self.n == len(self.meta):
            self.meta = np.resize(self.meta, (len(self.meta) * 5 // 4 + 4, 4))
        while self.nwords + len(words) > len(self.words):
            self.words = np.resize(self.words, len(self.words) * 5 // 4 + 64)
        self.words[self.nwords:self.nwords + len(words)] = words
        self.meta[self.n] = (self.nwords, 64 * len(words), start,
                             nblocks | (_LARGE_BIT if large else 0))
        self.nwords += len(words)
        self.n += 1

    def hits(self, probe: np.ndarray) -> np.ndarray:
        """Pages whose filter may hold the key, newest first."""
        m = self.meta[:self.n]
        return bloom.chain_hits(self.words, m[:, 0], m[:, 1], probe)[::-1]

    def page(self, j: int) -> tuple[int, int, bool]:
        """(start block, blocks, large) of page ``j``."""
        _, _, start, nb = self.meta[j].tolist()
        return start, nb & ~_LARGE_BIT, bool(nb & _LARGE_BIT)

    def nbytes(self) -> int:
        return self.meta.nbytes + self.words.nbytes


class PageLog:
    """One log file and the DRAM chains of its pages. Not thread-safe: the store locks."""

    def __init__(self, io: FileIO, path: Path, number: int, block: int, direct: bool,
                 instances: int):
        self.path = path
        self.number = number
        self.block = block
        self.payload = block - SEAL
        self.file = io.open(path, direct=direct)
        self.chains = [Chain() for _ in range(instances)]
        self.fences = np.zeros(1024, dtype=np.uint16)
        self.end = 0  # blocks in the log
        self.records = 0
        self.record_bytes = 0
        self._rbuf = aligned_buffer(64 * block)

    def _seed(self, blk: int) -> int:
        return (self.number << 40) | blk

    # -- appending ---------------------------------------------------------------------------
    def append(self, inst: int, recs: list[tuple[int, int, int, bytes]]) -> None:
        """Append one page of ``recs`` = [(hash, key, type, value)] of instance ``inst``.

        A single record larger than a block payload makes a large page; otherwise no record
        crosses a block boundary.
        """
        encoded = [(h, REC.pack(t, k, len(v)) + v) for h, k, t, v in sorted(recs)]
        large = len(encoded) == 1 and len(encoded[0][1]) > self.payload
        if large:
            data = encoded[0][1]
            blocks = [data[i:i + self.payload] for i in range(0, len(data), self.payload)]
            fences = [fence(encoded[0][0])] * len(blocks)
        else:
            blocks, fences = [], []
            for h, e in encoded:
                if not blocks or len(blocks[-1]) + len(e) > self.payload:
                    blocks.append(bytearray())
                    fences.append(fence(h))
                blocks[-1] += e
        words = bloom.build([bloom.probes(k.to_bytes(8, "little")) for _, k, _, _ in recs],
                            bloom.words_for(len(recs)))
        nblocks = 1 + len(blocks)
        rec_bytes = sum(len(e) for _, e in encoded)
        head = _PAGE.pack(PAGE_MAGIC, PAGE_VERSION, LARGE if large else 0, inst, len(recs),
                          nblocks, len(words), rec_bytes) + words.tobytes() + \
            np.asarray(fences, dtype=np.uint16).tobytes()
        assert len(head) <= self.payload, "page header overflows its block"
        buf = aligned_buffer(nblocks * self.block)
        for i, part in enumerate([head, *blocks]):
            off = i * self.block
            buf[off:off + len(part)] = part
            seal(buf, off, self.block, self._seed(self.end + i))
        self.file.pwrite(buf, self.end * self.block)
        self._register(inst, words, self.end, nblocks, large, fences, len(recs), rec_bytes)

    def _register(self, inst: int, words: np.ndarray, start: int, nblocks: int, large: bool,
                  fences: Any, nrecs: int, rec_bytes: int) -> None:
        while start + nblocks > len(self.fences):
            self.fences = np.resize(self.fences, len(self.fences) * 5 // 4 + nblocks)
        self.fences[start] = 0
        self.fences[start + 1:start + nblocks] = fences
        self.chains[inst].add(words, start, nblocks, large)
        self.end = start + nblocks
        self.records += nrecs
        self.record_bytes += rec_bytes

    # -- reading -----------------------------------------------------------------------------
    def find(self, inst: int, h: int, probe: np.ndarray, key: int) -> tuple[int, bytes] | None:
        """(type, value) of the newest record of ``key`` in the log, or None."""
        chain = self.chains[inst]
        if chain.n == 0:
            return None
        for j in chain.hits(probe).tolist():
            found = self._find_in_page(chain, j, h, key)
            if found is not None:
                return found
        return None

    def may_contain(self, inst: int, probe: np.ndarray) -> bool:
        chain = self.chains[inst]
        return chain.n > 0 and len(chain.hits(probe)) > 0

    def _find_in_page(self, chain: Chain, j: int, h: int, key: int) -> tuple[int, bytes] | None:
        start, nb, large = chain.page(j)
        fences = self.fences[start + 1:start + nb]
        f = fence(h)
        if large:
            if fences[0] != f:
                return None
            first, last = 0, nb - 2
        else:  # the blocks whose fence range can hold f
            lo = int(np.searchsorted(fences, f, "left"))
            hi = int(np.searchsorted(fences, f, "right"))
            if hi == 0:
                return None
            first = max(lo - 1, 0)
            last = hi - 1 if hi > lo else first
        buf = self._read_blocks(start + 1 + first, last - first + 1)
        if large:
            return self._parse_large(buf, nb - 1, key)
        for b in range(last - first + 1):
            found = self._find_in_block(buf, b * self.block, key)
            if found is not None:
                return found
        return None

    def _find_in_block(self, buf: Any, off: int, key: int) -> tuple[int, bytes] | None:
        """The record of ``key`` in one block, copying out only that one."""
        for pos, t, k, n in self._walk(buf, off):
            if k == key:
                return t, buf[pos + REC.size:pos + REC.size + n]
        return None

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

    def _walk(self, buf: Any, off: int) -> Iterator[tuple[int, int, int, int]]:
        """(position, type, key, length) of each record of the block at ``buf[off:]``."""
        pos, end = off, off + self.payload
        unpack = REC.unpack_from
        while pos + REC.size <= end:
            t, k, n = unpack(buf, pos)
            if t == 0:
                return
            if t not in (PUT, TOMBSTONE) or pos + REC.size + n > end:
                raise CorruptionError(f"{self.path.name}: bad record at byte {pos} of a block")
            yield pos, t, k, n
            pos += REC.size + n

    def _block_records(self, buf: Any, off: int) -> list[tuple[int, int, bytes]]:
        return [(k, t, bytes(buf[p + REC.size:p + REC.size + n]))
                for p, t, k, n in self._walk(buf, off)]

    def _parse_large(self, buf: Any, ndata: int, key: int | None) -> tuple[int, bytes] | None:
        data = b"".join(buf[i * self.block:i * self.block + self.payload] for i in range(ndata))
        t, k, n = REC.unpack_from(data, 0)
        if t not in (PUT, TOMBSTONE) or REC.size + n > len(data):
            raise CorruptionError(f"{self.path.name}: bad large record")
        if key is not None and k != key:
            return None
        return t, data[REC.size:REC.size + n]

    def page_records(self, inst: int, j: int) -> list[tuple[int, int, bytes]]:
        """Every (key, type, value) of page ``j`` of instance ``inst`` (reads the whole page)."""
        start, nb, large = self.chains[inst].page(j)
        buf = self._read_blocks(start + 1, nb - 1)
        if large:
            t, v = self._parse_large(buf, nb - 1, None)  # type: ignore[misc]
            return [(REC.unpack_from(buf, 0)[1], t, v)]
        return [r for b in range(nb - 1) for r in self._block_records(buf, b * self.block)]

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

        A damaged page inside the synced part is corruption; past it, a damaged or cut page is
        the torn tail of the last run (its records are still in the WAL) and is cut off.
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
            self._register(inst, words, blk, nblocks, bool(flags & LARGE), fences, nrecs,
                           rec_bytes)
            blk += nblocks
        if blk * self.block < self.file.size():
            self.file.truncate(blk * self.block)
        self.end = blk

    def _read_header(self, head: Any, blk: int, total: int) -> tuple[Any, ...] | None:
        if self.file.pread(head, blk * self.block) < self.block:
            return None
        if not intact(head, 0, self.block, self._seed(blk)):
            return None
        magic, version, flags, inst, nrecs, nblocks, nwords, rec_bytes = _PAGE.unpack_from(head)
        if (magic != PAGE_MAGIC or version != PAGE_VERSION or nblocks < 2
                or blk + nblocks > total or inst >= len(self.chains)):
            return None
        words = np.frombuffer(head, np.uint64, nwords, _PAGE.size).copy()
        fences = np.frombuffer(head, np.uint16, nblocks - 1, _PAGE.size + 8 * nwords).copy()
        return flags, inst, nrecs, nblocks, words, fences, rec_bytes

    def dram_bytes(self) -> int:
        """Bytes of DRAM state: filters, page places and fences (allocated, not just used)."""
        return self.fences.nbytes + sum(c.nbytes() for c in self.chains)

    def close(self) -> None:
        self.file.close()
