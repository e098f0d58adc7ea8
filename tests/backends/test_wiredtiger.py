"""The wiredtiger engine's table configuration."""

from pathlib import Path

import wiredtiger

from storage_backends.wiredtiger_store import TABLE, WiredTigerStore


def table_config(home: Path) -> str:
    conn = wiredtiger.wiredtiger_open(str(home), "")
    try:
        cursor = conn.open_session().open_cursor("metadata:")
        cursor.set_key("file:" + TABLE.split(":")[1] + ".wt")
        cursor.search()
        return cursor.get_value()
    finally:
        conn.close()


def test_table_uses_4kb_leaf_pages(tmp_path: Path) -> None:
    store = WiredTigerStore(tmp_path / "s", 1 << 20, "sync")
    store.put_many([(k, bytes(3000)) for k in range(100)])  # values over half a leaf page
    store.close()
    assert "leaf_page_max=4KB" in table_config(tmp_path / "s" / "wt")
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync") as store:
        assert store.get_many(list(range(100))) == [bytes(3000)] * 100
