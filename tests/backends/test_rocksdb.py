"""RocksDB specifics: damage that RocksDB's block checksums find is a CorruptionError, and
salvage (RepairDB) keeps the intact table files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import storage_backends
from sarp.errors import CorruptionError, StoreLockedError

from .conftest import ENGINES

pytestmark = pytest.mark.skipif(not isinstance(ENGINES.get("rocksdb"), type),
                                reason="rocksdb is not installed")


def test_damaged_table_file_raises_corruption_on_get_and_scan(open_kind: Any,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = open_kind("rocksdb", path, durability="sync")
    values = {k: os.urandom(200) for k in range(5000)}
    store.put_many(list(values.items()))
    store.close()
    tables = sorted(path.rglob("*.sst"))
    assert tables, "close() left no table file to damage"
    raw = bytearray(tables[0].read_bytes())
    for off in range(1000, len(raw) // 2, 997):
        raw[off] ^= 0x55
    tables[0].write_bytes(bytes(raw))
    again = open_kind("rocksdb", path, durability="sync")
    with pytest.raises(CorruptionError, match="Corruption"):
        again.get_many(list(values))
    with pytest.raises(CorruptionError, match="Corruption"):
        list(again.scan())


def test_salvage_keeps_the_intact_table_files_and_drops_the_damaged_one(open_kind: Any,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "s"
    batches = [{k: os.urandom(200) for k in range(b * 1000, b * 1000 + 1000)} for b in range(3)]
    for batch in batches:  # each close writes one table file: three, too few to compact
        store = open_kind("rocksdb", path, durability="sync")
        store.put_many(list(batch.items()))
        store.close()
    needle = batches[2][2500]
    tables = [t for t in sorted(path.rglob("*.sst")) if needle in t.read_bytes()]
    assert len(tables) == 1 and len(list(path.rglob("*.sst"))) == 3
    raw = bytearray(tables[0].read_bytes())
    raw[raw.find(needle) + 7] ^= 0x55
    tables[0].write_bytes(bytes(raw))
    store = open_kind("rocksdb", path, durability="sync")
    with pytest.raises(CorruptionError, match="block checksum"):
        store.get(2500)
    with pytest.raises(StoreLockedError):
        storage_backends.salvage(path)
    store.close()
    assert storage_backends.salvage(path) == "rocksdb"
    assert [p.name for p in (path / "db" / "lost").rglob("*.sst")] == [tables[0].name]
    again = open_kind("rocksdb", path, durability="sync")
    kept = {**batches[0], **batches[1]}
    assert dict(again.scan()) == kept  # the damaged file's records are gone, the rest intact
    assert again.get_many(list(batches[2])) == [None] * 1000
