"""Small checksummed files replaced atomically (flashlog's MANIFEST, odirect's HEADER).

Layout: 8-byte magic, u32 payload length, payload, u64 XXH64 of everything before it.
Writing goes to ``<name>.tmp``, is fsynced, renamed over ``<name>`` and the directory fsynced,
so a crash leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import struct
from pathlib import Path

from sarp._core.hashing import xxh64
from sarp.errors import BadLengthError, BadMagicError, ChecksumError
from storage_backends.io import FileIO

_HEAD = struct.Struct("<8sI")


def write_superblock(io: FileIO, path: Path, magic: bytes, payload: bytes) -> None:
    """Durably replace ``path`` by a superblock holding ``payload``."""
    body = _HEAD.pack(magic, len(payload)) + payload
    io.publish(path, body + struct.pack("<Q", xxh64(body)))


def read_superblock(io: FileIO, path: Path, magic: bytes) -> bytes:
    """The payload of the superblock at ``path``; raises a CorruptionError if it fails a check."""
    data = io.read_whole(path)
    if len(data) < _HEAD.size + 8:
        raise BadLengthError(f"{path.name}: {len(data)} bytes is too short for a superblock")
    found, n = _HEAD.unpack_from(data)
    if found != magic:
        raise BadMagicError(f"{path.name}: magic {found!r}, expected {magic!r}")
    if len(data) != _HEAD.size + n + 8:
        raise BadLengthError(f"{path.name}: {len(data)} bytes, header says {_HEAD.size + n + 8}")
    (stored,) = struct.unpack_from("<Q", data, _HEAD.size + n)
    if stored != xxh64(memoryview(data)[:_HEAD.size + n]):
        raise ChecksumError(f"{path.name}: checksum mismatch")
    return bytes(data[_HEAD.size:_HEAD.size + n])
