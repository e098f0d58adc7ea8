"""odirect specifics: dense and sparse keys, the header, slot reuse, the value limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarp.errors import ConfigMismatchError
from storage_backends import open_store
from storage_backends.odirect import ODirectStore

SEGMENT_RECORD = 32 + 64 * 8 + 64 * 16 + 8


def _open(path: Path, **options: object) -> ODirectStore:
    store = open_store("odirect", path, durability="group", **options)  # type: ignore[arg-type]
    assert isinstance(store, ODirectStore)
    return store


def test_default_slot_fits_a_segment_record_in_one_block(tmp_path: Path) -> None:
    with _open(tmp_path / "s") as s:
        st = s.stats()
        assert st["max_value_size"] >= SEGMENT_RECORD
        assert st["slot_bytes"] == 2 * 4096
        s.put(1, b"x" * SEGMENT_RECORD)
        assert s.get(1) == b"x" * SEGMENT_RECORD


def test_value_too_large(tmp_path: Path) -> None:
    with _open(tmp_path / "s", max_value_size=100) as s:
        with pytest.raises(ValueError, match="value"):
            s.put_many([(1, b"a"), (2, b"b" * 101)])
        assert s.get(1) is None


def test_dense_keys_are_slots(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path, key_mode="dense") as s:
        s.put_many([(k, bytes([k]) * 10) for k in range(50)])
        s.delete(7)
        assert s.stats()["slots"] == 50
        with pytest.raises(ValueError, match="key"):
            s.put(1 << 41, b"x")
        # the key space ends where the slot file would pass 16 TiB; a batch reaching past it
        # is refused whole
        limit = (1 << 44) // s.stats()["slot_bytes"]
        with pytest.raises(ValueError, match=f"key {limit} is beyond the dense key space"):
            s.put_many([(60, b"early"), (limit, b"x")])
        assert s.get(60) is None
    with _open(path) as s:
        assert s.stats()["key_mode"] == "dense"
        assert s.get(7) is None and s.get(8) == bytes([8]) * 10
        assert [k for k, _ in s.scan()] == [k for k in range(50) if k != 7]


def test_header_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _open(path, key_mode="dense").close()
    with pytest.raises(ConfigMismatchError):
        _open(path, key_mode="sparse")
    with pytest.raises(ConfigMismatchError):
        _open(path, max_value_size=10)


def test_sparse_free_slots_are_reused_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as s:
        s.put_many([(k << 40, b"v") for k in range(10)])
        s.delete(3 << 40)
        s.delete(5 << 40)
    with _open(path) as s:
        assert s.stats()["free_slots"] == 2
        s.put_many([(1, b"a"), (2, b"b"), (3, b"c")])
        assert s.stats()["slots"] == 11
        assert s.get_many([1, 2, 3, 4 << 40, 5 << 40]) == [b"a", b"b", b"c", b"v", None]


def test_rewrites_alternate_versions(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as s:
        for i in range(5):
            s.put(9, b"%d" % i * 100)
        assert s.stats()["slots"] == 1
    with _open(path) as s:
        assert s.get(9) == b"4" * 100


def test_dense_keys_hint_selects_dense_mode(tmp_path: Path) -> None:
    with _open(tmp_path / "s", dense_keys=True) as s:
        assert s.stats()["key_mode"] == "dense"
        assert s.stats()["dram_bytes"] == 0
        s.put_many([(k, b"v") for k in range(20)])
        assert s.stats()["dram_bytes"] == 3  # one newest-copy bit per slot
