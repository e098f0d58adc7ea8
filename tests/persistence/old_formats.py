"""An index directory rewritten as the formats before index ids wrote it (sarp.json format 2,
snapshot version 2, journal version 3 or 2), and snapshots as the versions before store
probes, for the tests that read those formats."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from sarp import journal, snapshot
from sarp._core.hashing import xxh64

#: bytes the index id adds to the snapshot and journal headers, after their first 32
ID_BYTES = 8
#: offset of the synced field in a journal record's payload
SYNCED_AT = journal.PAYLOAD_HEADER.size - 4


def downgrade(path: Path, journal_version: int = 3) -> None:
    """Rewrite the index at ``path`` in the formats without an index id. Journal records keep
    their synced fields, moved with the shorter header (version 3), or lose them (version 2);
    the bytes from a record that fails its checksum on are kept as they are."""
    cfg_file = path / "sarp.json"
    cfg = json.loads(cfg_file.read_text())["config"]
    checksum = f"{xxh64(json.dumps(cfg, sort_keys=True).encode()):016x}"
    cfg_file.write_text(json.dumps({"format": 2, "config": cfg, "checksum": checksum},
                                   indent=1, sort_keys=True))
    for _, p in snapshot.candidates(path):
        p.write_bytes(snapshot_as_version(p.read_bytes(), 2))
    for _, p in journal.files(path):
        raw = p.read_bytes()
        out = bytearray(raw[:32])
        struct.pack_into("<II", out, 8, journal_version, 0)  # flags came with version 5
        off = journal.FILE_HEADER.size
        while off + journal.RECORD_HEADER.size <= len(raw):
            length, reserved, digest = journal.RECORD_HEADER.unpack_from(raw, off)
            start = off + journal.RECORD_HEADER.size
            payload = bytearray(raw[start:start + length])
            if len(payload) != length or xxh64(bytes(payload)) != digest:
                break
            synced = struct.unpack_from("<I", payload, SYNCED_AT)[0]
            struct.pack_into("<I", payload, SYNCED_AT,
                             0 if journal_version == 2 else synced - ID_BYTES // 8)
            out += journal.RECORD_HEADER.pack(length, reserved, xxh64(bytes(payload))) + payload
            off = start + length
        p.write_bytes(bytes(out + raw[off:]))


def snapshot_as_version(raw: bytes, version: int) -> bytes:
    """The snapshot ``raw`` (the current version) as ``version`` 3 (without its store probes,
    the last header field and the rows after the hash table) or 2 (without the index id too)."""
    probes = struct.unpack_from("<Q", raw, snapshot.HEADER.size - 8)[0]
    body = bytearray(raw[:snapshot.HEADER.size - 8] + raw[snapshot.HEADER.size:-8 - 16 * probes])
    if version == 2:
        del body[32:32 + ID_BYTES]
    struct.pack_into("<II", body, 8, version, snapshot.HEADERS[version].size)
    return bytes(body) + struct.pack("<Q", xxh64(bytes(body)))


def set_journal_version(path: Path, version: int) -> None:
    """Give journal ``path`` another format version of the same layout (4 and 5 differ only
    in what their syncs prove, and in the header's flags, which 4 lacks)."""
    raw = bytearray(path.read_bytes())
    struct.pack_into("<II", raw, 8, version, 0)
    path.write_bytes(bytes(raw))
