"""The wiredtiger engine's leaf page size: by key pattern, fixed at creation."""

from pathlib import Path

import pytest

from storage_backends import open_store
from storage_backends.wiredtiger_store import (
    DENSE_LEAF_PAGE_KB,
    LEAF_PAGE_KB,
    WiredTigerStore,
    _leaf_page_kb,
)


def test_page_size_follows_the_key_pattern(tmp_path: Path) -> None:
    with open_store("wiredtiger", tmp_path / "sparse", 1 << 20, "sync") as store:
        assert store.stats()["leaf_page_kb"] == LEAF_PAGE_KB == 4
    with open_store("wiredtiger", tmp_path / "dense", 1 << 20, "sync", dense_keys=True) as store:
        assert store.stats()["leaf_page_kb"] == DENSE_LEAF_PAGE_KB == 32


def test_an_existing_table_keeps_its_page_size_and_records(tmp_path: Path) -> None:
    values = [(k, bytes([k % 251]) * 3000) for k in range(100)]  # over half a 4 KB page
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=8) as store:
        store.put_many(values)
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=64) as store:
        assert store.leaf_page_kb == 8
        assert store.get_many(list(range(100))) == [v for _, v in values]


@pytest.mark.parametrize("bad", [0, 6, -4, 1 << 30])
def test_bad_page_size_is_named(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ValueError, match="leaf_page_kb"):
        WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=bad)
    with pytest.raises(TypeError, match="leaf_page_kb"):
        WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb="4KB")
    assert not (tmp_path / "s").exists()


def test_metadata_sizes_parse() -> None:
    assert _leaf_page_kb("key_format=Q,leaf_page_max=32KB,leaf_value_max=0") == 32
    assert _leaf_page_kb("leaf_page_max=1MB") == 1024
    assert _leaf_page_kb("a=1,leaf_page_max=8192") == 8
