"""RocksDB specifics: damage that RocksDB's block checksums find is a CorruptionError."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sarp.errors import CorruptionError

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
