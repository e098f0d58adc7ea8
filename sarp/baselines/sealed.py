"""Sealed blobs: magic, version, length, payload and an XXH64 checksum (docs/baselines_format.txt).

Every byte string a baseline writes for itself (snapshot files, spilled radix nodes, its
settings file) is sealed, so damage is detected on read and never served. Files are
published atomically through the I/O layer (``FileIO.publish``: temp file, fsync, rename,
fsync of the directory).
"""

from __future__ import annotations

import struct

import numpy as np

from sarp._core.hashing import xxh64
from sarp.errors import BadLengthError, BadMagicError, ChecksumError, UnsupportedVersionError

HEADER = struct.Struct("<8sIIQ")  # magic, version, reserved, payload length
CHECKSUM = struct.Struct("<Q")
VERSION = 1


def seal(magic: bytes, payload: bytes) -> bytes:
    """``payload`` framed by a header and followed by the XXH64 of everything before it."""
    body = HEADER.pack(magic, VERSION, 0, len(payload)) + payload
    return body + CHECKSUM.pack(xxh64(body))


def unseal(buf: bytes | memoryview, magic: bytes, name: str) -> memoryview:
    """The payload of a sealed blob after its checks; errors name ``name`` (file or record)."""
    view = memoryview(buf)
    if len(view) < HEADER.size + CHECKSUM.size:
        raise BadLengthError(f"{name}: {len(view)} bytes is shorter than a sealed header")
    found, version, _, length = HEADER.unpack_from(view)
    if found != magic:
        raise BadMagicError(f"{name}: magic {found!r}, expected {magic!r}")
    if version != VERSION:
        raise UnsupportedVersionError(f"{name}: format version {version} is not supported")
    end = HEADER.size + length
    if len(view) != end + CHECKSUM.size:
        raise BadLengthError(f"{name}: {len(view)} bytes, header says {end + CHECKSUM.size}")
    if CHECKSUM.unpack_from(view, end)[0] != xxh64(view[:end]):
        raise ChecksumError(f"{name}: checksum mismatch")
    return view[HEADER.size:end]


class Cursor:
    """Sequential reads of little-endian uint64 columns from a payload, length-checked."""

    def __init__(self, payload: memoryview, name: str):
        self.payload = payload
        self.name = name
        self.pos = 0

    def u64s(self, count: int) -> np.ndarray:
        """The next ``count`` little-endian uint64 values."""
        return self._take(count, 8).view("<u8")

    def rows(self, count: int, width: int) -> np.ndarray:
        """The next ``count`` rows of ``width`` bytes, as a (count, width) uint8 array."""
        return self._take(count, width).reshape(count, width)

    def u64(self) -> int:
        return int(self.u64s(1)[0])

    def _take(self, count: int, itemsize: int) -> np.ndarray:
        size = count * itemsize
        if count < 0 or self.pos + size > len(self.payload):
            raise BadLengthError(f"{self.name}: payload ends before a column of {count} items")
        out = np.frombuffer(self.payload, dtype=np.uint8, count=size, offset=self.pos)
        self.pos += size
        return out

    def done(self) -> None:
        """Raise unless the whole payload was read."""
        if self.pos != len(self.payload):
            raise BadLengthError(f"{self.name}: {len(self.payload) - self.pos} trailing bytes")
