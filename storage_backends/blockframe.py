"""Checksummed blocks: the last 8 bytes of every flashlog block are the XXH64 of the rest.

The seed names the block (file number and block index), so a block read from the wrong place
or left over from another file fails its check just like a damaged one.
"""

from __future__ import annotations

import struct
from typing import Any

from sarp._core.hashing import xxh64

SEAL = 8
_U64 = struct.Struct("<Q")


def seal(buf: Any, off: int, size: int, seed: int) -> None:
    """Write the checksum of ``buf[off:off+size-8]`` into the block's last 8 bytes."""
    end = off + size - SEAL
    _U64.pack_into(buf, end, xxh64(memoryview(buf)[off:end], seed))


def intact(buf: Any, off: int, size: int, seed: int) -> bool:
    """Whether the block at ``buf[off:off+size]`` carries the checksum of its contents."""
    end = off + size - SEAL
    return _U64.unpack_from(buf, end)[0] == xxh64(memoryview(buf)[off:end], seed)
