"""An index directory rewritten as the formats before index ids wrote it (sarp.json format 2,
snapshot version 2, journal version 3 or 2), snapshots as the versions before store probes,
and journals as the versions before block counts and record flags, for the tests that read those
formats; and the record flags of a current journal."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from sarp import journal, snapshot
from sarp._core.hashing import xxh64
from storage_backends.io import FileIO

#: bytes the index id adds to the snapshot and journal headers, after their first 32
ID_BYTES = 8
#: offset of the synced field in a journal record's payload
SYNCED_AT = journal.PAYLOAD_HEADER.size - 4


def downgrade(path: Path, journal_version: int = 3) -> None:
    """Rewrite the index at ``path`` in the formats without an index id, its journals in
    ``journal_version`` (``journal_as_version``)."""
    cfg_file = path / "sarp.json"
    cfg = json.loads(cfg_file.read_text())["config"]
    checksum = f"{xxh64(json.dumps(cfg, sort_keys=True).encode()):016x}"
    cfg_file.write_text(json.dumps({"format": 2, "config": cfg, "checksum": checksum},
                                   indent=1, sort_keys=True))
    for _, p in snapshot.candidates(path):
        p.write_bytes(snapshot_as_version(p.read_bytes(), 2))
    for _, p in journal.files(path):
        journal_as_version(p, journal_version)


def journal_as_version(path: Path, version: int) -> None:
    """Rewrite journal ``path`` (the current format) in format ``version``, 2 to 6: records
    without flags (before 7), without block counts (before 6), a header without flags (before
    5) and without the index id (before 4). The synced fields name the same records' ends in
    the shorter file (version 2: none, its padding is 0); the bytes from a record that fails
    its checksum on are kept as they are."""
    raw = path.read_bytes()
    out = bytearray(raw[:journal.HEADERS[version].size])
    flags = struct.unpack_from("<I", raw, 12)[0] if version >= 5 else 0
    struct.pack_into("<II", out, 8, version, flags)
    off = journal.FILE_HEADER.size
    moved = {off: len(out), 0: 0}  # where each record end of the file went
    while off + journal.RECORD_HEADER.size <= len(raw):
        length, flags, digest = journal.RECORD_HEADER.unpack_from(raw, off)
        start = off + journal.RECORD_HEADER.size
        payload = bytearray(raw[start:start + length])
        if len(payload) != length or xxh64(bytes(payload), flags) != digest:
            break
        count, synced = struct.unpack_from("<II", payload, SYNCED_AT - 4)
        if version < journal.HAS_COUNTS:
            del payload[journal.PAYLOAD_HEADER.size + 8 * count:]
        struct.pack_into("<I", payload, SYNCED_AT,
                         0 if version == 2 else moved[8 * synced] // 8)
        out += journal.RECORD_HEADER.pack(len(payload), 0, xxh64(bytes(payload)))
        out += payload
        off = start + length
        moved[off] = len(out)
    path.write_bytes(bytes(out + raw[off:]))


def record_flags(path: Path) -> list[int]:
    """The flags of each record of journal ``path`` (format 7; 0 in the versions before)."""
    raw = path.read_bytes()
    return [journal.RECORD_HEADER.unpack_from(raw, off)[1]
            for off in journal.read(FileIO(), path, last=True).offsets[:-1]]


def snapshot_as_version(raw: bytes, version: int) -> bytes:
    """The snapshot ``raw`` (the current version) as ``version`` 3 (without its store probes,
    the last header field and the rows after the hash table) or 2 (without the index id too)."""
    probes = struct.unpack_from("<Q", raw, snapshot.HEADER.size - 8)[0]
    body = bytearray(raw[:snapshot.HEADER.size - 8] + raw[snapshot.HEADER.size:-8 - 16 * probes])
    if version == 2:
        del body[32:32 + ID_BYTES]
    struct.pack_into("<II", body, 8, version, snapshot.HEADERS[version].size)
    return bytes(body) + struct.pack("<Q", xxh64(bytes(body)))
