"""Do concurrent direct reads finish sooner than the same reads one after another?

A match reads about one segment per window, one window after the other. Where the device
serves reads in parallel, reading the windows' likely segments at once (from threads) would
cut a match's wait to about one read's; where it serves them one at a time, it would not.
This times k random 4 KiB O_DIRECT reads of a file written for the purpose (through the
stores' ``FileIO``), issued one after another and from k threads at once, interleaved, and
prints the median of each and their ratio, for k = 1..4.

    python bench/device_queue.py --dir /path/on/the/device --rounds 400
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sarp.bench.cli import arg_type, positive_count
from storage_backends.io import FileIO, aligned_buffer

BLOCK = 4096
CHUNK = 1 << 20  # the file is written in writes of this size


def _file(io: FileIO, directory: Path, size: int) -> Path:
    """A file of ``size`` random bytes under ``directory``, synced, so reads reach them."""
    path = directory / "device_queue.dat"
    f = io.open(path, direct=True)
    chunk = aligned_buffer(CHUNK)
    try:
        for off in range(0, size, CHUNK):
            chunk[:] = os.urandom(CHUNK)
            f.pwrite(chunk, off)
        f.fdatasync()
    finally:
        f.close()
    return path


def measure(directory: Path, rounds: int, file_mib: int = 256,
            most: int = 4) -> list[tuple[int, float, float]]:
    """(k, median us of k reads in sequence, median us of k reads from k threads) for
    k = 1..``most``, each from ``rounds`` rounds, the two ways interleaved round by round,
    over a file of ``file_mib`` MiB (by default far more than a device cache holds of it)."""
    io = FileIO()
    path = _file(io, directory, file_mib * CHUNK)
    f = io.open(path, direct=True, create=False)
    bufs = [aligned_buffer(BLOCK) for _ in range(most)]
    rng = random.Random(1)
    blocks = file_mib * CHUNK // BLOCK

    def read(i: int) -> int:
        return f.pread(bufs[i], rng.randrange(blocks) * BLOCK)

    out = []
    try:
        with ThreadPoolExecutor(most) as pool:
            for k in range(1, most + 1):
                seq, par = [], []
                for _ in range(rounds):
                    t = time.perf_counter_ns()
                    for i in range(k):
                        read(i)
                    seq.append(time.perf_counter_ns() - t)
                    t = time.perf_counter_ns()
                    list(pool.map(read, range(k)))
                    par.append(time.perf_counter_ns() - t)
                out.append((k, statistics.median(seq) / 1e3, statistics.median(par) / 1e3))
    finally:
        f.close()
        path.unlink()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None,
                    help="a directory on the device to measure (default: the temp directory)")
    ap.add_argument("--rounds", type=arg_type(positive_count), default=400,
                    help="rounds per k and way (default 400)")
    ap.add_argument("--file-mib", type=arg_type(positive_count), default=256,
                    help="size of the file read, in MiB (default 256)")
    a = ap.parse_args(argv)
    if a.dir is not None and not a.dir.is_dir():
        ap.error(f"argument --dir: {str(a.dir)!r} is not a directory")
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        rows = measure(Path(d), a.rounds, a.file_mib)
    print("| reads k | in sequence, median us | from k threads, median us | threads / sequence |")
    print("|---|---|---|---|")
    for k, seq, par in rows:
        print(f"| {k} | {seq:.1f} | {par:.1f} | {par / seq:.2f} |")


if __name__ == "__main__":
    main()
