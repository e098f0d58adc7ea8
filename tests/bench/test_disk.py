"""The benchmarks' disk helpers: copies of an index keep its files' holes."""

import os
from pathlib import Path

from sarp.bench.disk import copy_tree

MIB = 1 << 20


def _sparse_file(path: Path, parts: list[tuple[int, bytes]], size: int) -> None:
    with open(path, "wb") as f:
        for offset, data in parts:
            f.seek(offset)
            f.write(data)
        f.truncate(size)


def test_a_copy_keeps_the_bytes_the_holes_and_the_layout_of_the_tree(tmp_path):
    src = tmp_path / "src"
    (src / "store").mkdir(parents=True)
    parts = [(0, b"a" * 5000), (3 * MIB, os.urandom(MIB + 17)), (9 * MIB, b"z")]
    _sparse_file(src / "store" / "slots.dat", parts, 16 * MIB)  # ends with a hole
    _sparse_file(src / "HEADER", [(0, b"header")], 6)
    (src / "empty").write_bytes(b"")
    copy_tree(src, tmp_path / "dst")
    for name in ("store/slots.dat", "HEADER", "empty"):
        a, b = src / name, tmp_path / "dst" / name
        assert a.read_bytes() == b.read_bytes(), name
        assert b.stat().st_size == a.stat().st_size
    copied = (tmp_path / "dst" / "store" / "slots.dat").stat()
    # the data written, in whole file-system blocks, and not the 16 MiB of the file's size
    assert copied.st_blocks * 512 <= 4 * MIB
    assert copied.st_blocks <= (src / "store" / "slots.dat").stat().st_blocks + 16
