"""odirect's small files (storage_backends/odirect_files.py): each reads back as written, and a
file that passes its checksum but does not hold together is refused (HEADER) or not used
(COPIES, DIRTY: the store then scans its slots)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarp.errors import BadLengthError
from storage_backends import odirect_files as files
from storage_backends.io import FileIO
from storage_backends.superblock import write_superblock


def test_each_file_reads_back_as_written(tmp_path: Path) -> None:
    io = FileIO()
    layout = files.new_layout(False, 4096, None, 64)
    assert layout == files.Layout(False, 4096, 4060, 4096, 64)
    files.write_header(io, tmp_path / "HEADER", layout, True, 77)
    assert files.read_header(io, tmp_path / "HEADER") == (layout, True, 77)
    files.write_copies(io, tmp_path / "COPIES", files.Copies(9, 20, 8192, b"\x05"))
    assert files.read_copies(io, tmp_path / "COPIES") == files.Copies(9, 20, 8192,
                                                                      b"\x05\x00\x00")
    files.write_dirty(io, tmp_path / "DIRTY", 9, 64, {7, 3})
    assert files.read_dirty(io, tmp_path / "DIRTY") == (9, 64, {3, 7})


def test_a_header_of_another_length_is_refused(tmp_path: Path) -> None:
    payload = bytes(files.HEADER.size + 1)
    write_superblock(FileIO(), tmp_path / "HEADER", files.HEADER_MAGIC, payload)
    with pytest.raises(BadLengthError, match="HEADER: payload of 27 bytes"):
        files.read_header(FileIO(), tmp_path / "HEADER")


@pytest.mark.parametrize("payload", [
    files.COPIES.pack(9, 20, 0) + b"\x00\x00",  # 20 slots need 3 bytes of bits
    files.COPIES.pack(9, 20, 0)[:-1],
])
def test_copies_whose_bits_do_not_cover_their_slots_are_not_used(tmp_path: Path,
                                                                  payload: bytes) -> None:
    write_superblock(FileIO(), tmp_path / "COPIES", files.COPIES_MAGIC, payload)
    assert files.read_copies(FileIO(), tmp_path / "COPIES") is None


@pytest.mark.parametrize("payload", [
    files.DIRTY.pack(9, 64, 2) + bytes(8),  # two regions named, one given
    files.DIRTY.pack(9, 64, 0) + bytes(8),
    files.DIRTY.pack(9, 64, 0)[:-1],
])
def test_dirty_whose_count_disagrees_is_not_used(tmp_path: Path, payload: bytes) -> None:
    write_superblock(FileIO(), tmp_path / "DIRTY", files.DIRTY_MAGIC, payload)
    assert files.read_dirty(FileIO(), tmp_path / "DIRTY") is None


def test_missing_or_damaged_dirty_or_copies_are_not_used(tmp_path: Path) -> None:
    io = FileIO()
    assert files.read_copies(io, tmp_path / "COPIES") is None
    assert files.read_dirty(io, tmp_path / "DIRTY") is None
    files.write_dirty(io, tmp_path / "DIRTY", 1, 64, {1})
    data = bytearray((tmp_path / "DIRTY").read_bytes())
    data[14] ^= 1
    (tmp_path / "DIRTY").write_bytes(bytes(data))
    assert files.read_dirty(io, tmp_path / "DIRTY") is None
