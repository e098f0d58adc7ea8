"""odirect specifics: dense and sparse keys, the header, slot reuse, the value limit, the
extents that let a batch write side-by-side versions with one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarp.errors import ConfigMismatchError, CorruptionError, UnsupportedVersionError
from storage_backends import odirect, odirect_files, open_store
from storage_backends.io import FileIO
from storage_backends.odirect import EXTENT_SLOTS, ODirectStore
from storage_backends.superblock import read_superblock, write_superblock

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


def test_large_values_open_with_a_scan_of_bounded_memory(tmp_path: Path) -> None:
    """A store of 4 MiB values has 512 MiB extents: an open that scans it (sparse keys) reads
    slot by slot, not an extent at a time; the limit is refused by name past 64 MiB."""
    path = tmp_path / "s"
    with pytest.raises(ValueError, match="max_value_size"):
        _open(path, max_value_size=odirect_files.MAX_VALUE_SIZE + 1)
    big = {k: bytes([k]) * (4 << 20) for k in (3, 9)}
    with _open(path, key_mode="sparse", max_value_size=4 << 20) as s:
        s.put_many(big.items())
    with _open(path) as s:
        assert s.stats()["max_value_size"] == 4 << 20
        assert s.get_many([3, 9, 4]) == [big[3], big[9], None]


def test_dense_keys_are_slots(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path, key_mode="dense") as s:
        s.put_many([(k, bytes([k]) * 10) for k in range(50)])
        s.delete(7)
        assert s.stats()["slots"] == EXTENT_SLOTS  # the store counts whole extents
        with pytest.raises(ValueError, match="key"):
            s.put(1 << 41, b"x")
        # the key space ends with the last whole extent below ext4's largest file (16 TiB
        # less a block); a batch reaching past it is refused whole
        extent_bytes = EXTENT_SLOTS * s.stats()["slot_bytes"]
        limit = ((1 << 44) - (1 << 12)) // extent_bytes * EXTENT_SLOTS
        with pytest.raises(ValueError, match=f"key {limit} is beyond the dense key space"):
            s.put_many([(60, b"early"), (limit, b"x")])
        assert s.get(60) is None
        # the largest key's copy 1 ends inside the largest file (writing it would leave a
        # 16 TiB file for every later open to scan)
        assert s._offset(limit - 1, 1) + s.stats()["slot_bytes"] // 2 <= (1 << 44) - (1 << 12)
        # no key there is stored: a get finds none and a delete does nothing, as for any
        # missing key
        assert s.get(limit) is None and s.get_many([8, 1 << 60]) == [bytes([8]) * 10, None]
        s.delete(1 << 60)
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
        # the two deleted slots and the extent's slots never written
        assert s.stats()["free_slots"] == EXTENT_SLOTS - 8
        s.put_many([(1, b"a"), (2, b"b"), (3, b"c")])
        assert s.stats()["slots"] == EXTENT_SLOTS
        assert s.stats()["free_slots"] == EXTENT_SLOTS - 11
        assert s.get_many([1, 2, 3, 4 << 40, 5 << 40]) == [b"a", b"b", b"c", b"v", None]


def test_rewrites_alternate_versions(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path) as s:
        for i in range(5):
            s.put(9, b"%d" % i * 100)
        assert s.stats()["slots"] == EXTENT_SLOTS
    with _open(path) as s:
        assert s.get(9) == b"4" * 100


def test_dense_keys_hint_selects_dense_mode(tmp_path: Path) -> None:
    with _open(tmp_path / "s", dense_keys=True) as s:
        assert s.stats()["key_mode"] == "dense"
        assert s.stats()["dram_bytes"] == 0
        s.put_many([(k, b"v") for k in range(20)])
        assert s.stats()["dram_bytes"] > 3  # with the slots written since the last sync
        s.flush()
        assert s.stats()["dram_bytes"] == 3  # one newest-copy bit per slot


def _writes(s: ODirectStore) -> int:
    return int(s.stats()["io"]["writes"])


@pytest.mark.parametrize("key_mode", ["dense", "sparse"])
def test_a_batch_writes_each_run_of_side_by_side_versions_with_one_call(
        tmp_path: Path, key_mode: str) -> None:
    """New keys of a batch take consecutive slots, whose first versions lie side by side:
    one write call per extent they fall in. Rewriting them all again is one call per extent
    too (every slot's other copy); the values read back, also after a reopen."""
    path = tmp_path / "s"
    k = EXTENT_SLOTS
    keys = list(range(10)) if key_mode == "dense" else [(i + 1) << 40 for i in range(10)]
    with _open(path, key_mode=key_mode) as s:
        s.put(3 * k, b"elsewhere")  # dense: the region's first write names it in DIRTY first
        before = _writes(s)
        s.put_many([(key, b"first %d" % key) for key in keys])
        assert _writes(s) - before == 1
        before = _writes(s)
        s.put_many([(key, b"second %d" % key) for key in keys])
        assert _writes(s) - before == 1
        if key_mode == "dense":  # slots k-3 .. k+2 straddle two extents: two runs
            before = _writes(s)
            s.put_many([(key, b"edge") for key in range(k - 3, k + 3)])
            assert _writes(s) - before == 2
        before = _writes(s)
        s.put_many([(keys[0], b"a"), (keys[5], b"b")])  # not side by side: a call each
        assert _writes(s) - before == 2
        expect = {key: b"second %d" % key for key in keys} | {keys[0]: b"a", keys[5]: b"b"}
        assert s.get_many(keys) == [expect[key] for key in keys]
    with _open(path) as s:
        assert s.get_many(keys) == [expect[key] for key in keys]


def test_a_key_twice_in_one_batch_keeps_the_later_value(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with _open(path, key_mode="dense") as s:
        s.put(3, b"old")
        s.put_many([(3, b"one"), (4, b"x"), (3, b"two")])
        assert s.get_many([3, 4]) == [b"two", b"x"]
    with _open(path) as s:
        assert s.get_many([3, 4]) == [b"two", b"x"]
        assert dict(s.scan()) == {3: b"two", 4: b"x"}


def test_a_clean_reopen_loads_the_saved_bits_without_reading_the_slots(tmp_path: Path) -> None:
    path = tmp_path / "s"
    keys = [0, 5, 2 * EXTENT_SLOTS + 1]  # the last extent's slots mostly never written
    with _open(path, key_mode="dense") as s:
        s.put_many([(key, b"v") for key in keys])
    with _open(path) as s:
        assert s.stats()["io"]["bytes_read"] < 4096  # HEADER and COPIES only
        assert s.get_many(keys) == [b"v"] * 3


def test_a_store_of_the_layout_before_extents_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _open(path, key_mode="dense").close()
    io = FileIO()
    payload = read_superblock(io, path / "HEADER", odirect_files.HEADER_MAGIC)
    write_superblock(io, path / "HEADER", b"SARPODH2", payload)
    with pytest.raises(UnsupportedVersionError, match="older slot layout"):
        _open(path)


@pytest.mark.parametrize("field, value, fault", [
    (0, 2, "key mode 2"),
    (1, 1000, "block size 1000"),
    (1, 2048, "block size 2048"),
    (3, 4096 * 3, "version bytes"),
    (2, odirect_files.MAX_VALUE_SIZE + 1, "version bytes"),
    (4, 0, "extent of 0 slots"),
])
def test_a_header_whose_layout_no_build_writes_is_corruption(tmp_path: Path, field: int,
                                                             value: int, fault: str) -> None:
    """A HEADER that passes its checksum but names a layout no build writes (a bug's, or a
    foreign writer's) is refused at open, naming the field, and no file is changed."""
    path = tmp_path / "s"
    with _open(path, key_mode="dense") as s:
        s.put(1, b"v")
    io = FileIO()
    header, magic = odirect_files.HEADER, odirect_files.HEADER_MAGIC
    fields = list(header.unpack(read_superblock(io, path / "HEADER", magic)))
    fields[field] = value
    write_superblock(io, path / "HEADER", magic, header.pack(*fields))
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.raises(CorruptionError, match=f"HEADER: .*{fault}"):
        _open(path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before


# slot by slot (an extent is larger than a read); one extent per read; three, then the last;
# the whole file in one read
@pytest.mark.parametrize("scan_bytes", [1, EXTENT_SLOTS * 2 * 4096, 3 * EXTENT_SLOTS * 2 * 4096,
                                        8 << 20])
def test_a_scan_across_reads_of_whole_extents_finds_every_newest_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scan_bytes: int) -> None:
    """A sparse store rebuilds its slot table by scanning at open; the scan reads whole extents
    at a time (slot by slot where an extent is larger than a read), and each slot's two copies
    lie in different halves of its extent."""
    monkeypatch.setattr(odirect, "SCAN_BYTES", scan_bytes)
    path = tmp_path / "s"
    keys = [1000 + 7 * i for i in range(3 * EXTENT_SLOTS + 5)]  # four extents
    with _open(path, key_mode="sparse") as s:
        s.put_many([(k, b"first %d" % k) for k in keys])
        s.put_many([(k, b"second %d" % k) for k in keys[::3]])  # newest in copy 1
        for k in keys[1::5]:
            s.delete(k)
    want = {k: (b"second %d" if i % 3 == 0 else b"first %d") % k
            for i, k in enumerate(keys) if i % 5 != 1}
    with _open(path) as s:
        assert s.stats()["slots"] == 4 * EXTENT_SLOTS
        assert dict(s.scan()) == want
        assert all(s.get(k) == v for k, v in want.items())
        assert all(s.get(k) is None for k in keys[1::5])
        s.put(5, b"new")  # takes a slot freed by a delete: the file does not grow
        assert s.stats()["slots"] == 4 * EXTENT_SLOTS and s.get(5) == b"new"


def test_slots_written_between_syncs_are_bounded(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The store remembers the slots written since the last sync (a rewrite takes the same
    copy again); under ``none`` nothing syncs before close, so past UNSYNCED_LIMIT slots a
    write syncs by itself and the memory stays bounded."""
    monkeypatch.setattr(odirect, "UNSYNCED_LIMIT", 100)
    store = open_store("odirect", tmp_path / "s", durability="none", key_mode="dense")
    with store as s:
        for first in range(0, 1000, 50):
            s.put_many([(k, b"v") for k in range(first, first + 50)])
        assert s.stats()["syncs"] == 10
        assert s.get_many(list(range(1000))) == [b"v"] * 1000
