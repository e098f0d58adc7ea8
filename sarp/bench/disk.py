"""The disk under the benchmarks: its sequential O_DIRECT read bandwidth (the physical
reference for recovery), dropping files from the page cache so that reads reach it, and
copies of an index that keep its files' holes."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

from storage_backends.io import aligned_buffer

CHUNK = 1 << 20  # bytes per read (a multiple of any logical block size)
MIN_BYTES = 8 << 20


def sequential_read(directory: Path, nbytes: int, repeat: int = 3) -> dict[str, float]:
    """Write a file of about ``nbytes`` (at least 8 MiB) in ``directory``, then read it back
    sequentially with O_DIRECT ``repeat`` times: {"bytes", "seconds", "mb_per_s"} of the
    median read. Raises OSError where the file system refuses O_DIRECT."""
    size = max(MIN_BYTES, -(-nbytes // CHUNK) * CHUNK)
    path = directory / "seqread.bin"
    block = os.urandom(CHUNK)
    try:
        with open(path, "wb") as f:
            for _ in range(size // CHUNK):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        reads = sorted(_read_direct(path, size) for _ in range(repeat))
    finally:
        path.unlink(missing_ok=True)
    seconds, offset = reads[len(reads) // 2]
    return {"bytes": offset, "seconds": seconds, "mb_per_s": offset / seconds / 1e6}


def _read_direct(path: Path, size: int) -> tuple[float, int]:
    """(seconds, bytes) of one sequential O_DIRECT read of ``path`` in CHUNK-sized reads."""
    buf = aligned_buffer(CHUNK)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        t0 = time.perf_counter()
        offset = 0
        while offset < size:
            got = os.preadv(fd, [buf], offset)
            if got <= 0:
                break
            offset += got
        return time.perf_counter() - t0, offset
    finally:
        os.close(fd)
        buf.close()


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to drop the cached pages of every file under ``path`` (or of ``path``),
    so the next read of them comes from the disk, as after a machine restart."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages are not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the directory ``src`` to ``dst`` (which must not exist), keeping each file's
    holes: a copy takes the space, and the reads, of the original. odirect's slot file holds
    holes where no copy of an extent's slots was written yet, and a scan reads those faster
    than written zeros."""
    shutil.copytree(src, dst, copy_function=_copy_sparse)


def _copy_sparse(src: str, dst: str) -> str:
    """Copy file ``src`` to ``dst``: its data ranges (SEEK_DATA, SEEK_HOLE), then its size."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        i, o = fin.fileno(), fout.fileno()
        size = os.fstat(i).st_size
        off = 0
        while off < size:
            try:
                off = os.lseek(i, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                break  # only a hole is left
            end = os.lseek(i, off, os.SEEK_HOLE)
            while off < end:
                n = os.copy_file_range(i, o, end - off, off, off)
                if n == 0:
                    raise OSError(errno.EIO, f"{src!r} ended while copied")
                off += n
        os.ftruncate(o, size)
    shutil.copystat(src, dst)
    return dst
