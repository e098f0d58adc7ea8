"""Storage-backend microbenchmark: random get latency and put throughput per engine.

    python bench/backends.py --records 100000 --out DIR [--sizes 1536 4096] [--repeats 3]

For each value size and record count, every persistent engine whose module imports is loaded
with that many records (random keys, put_many batches), reopened, and measured: single random
gets (mean and p99 latency) and single random overwrites (throughput, group durability with a
flush at the end). Each engine runs with direct I/O and a memory budget of 10% of the data
size, and buffered (direct_io=False) for contrast. The physical reference is os.preadv of the
same sizes at random aligned offsets of a file opened with O_DIRECT on the same file system,
sampled right after each repeat of every engine's gets: "x raw preadv" is the median over the
repeats of engine mean / raw mean of the same moment, robust to the machine's drift. Each
measurement is repeated and the median reported. Results go to DIR/backends.json and a
markdown table to stdout and DIR/backends.md. See docs/backends_benchmark.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import mmap
import os
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sarp.bench.cli import arg_type, out_directory, positive_count
from sarp.bench.disk import drop_page_cache
from storage_backends import KINDS, open_store

PAGE = mmap.PAGESIZE
LOAD_BATCH = 1000


def sized_options(kind: str, size: int) -> dict[str, Any]:
    """Open options an engine needs for values of ``size`` bytes (odirect sizes its slots at
    creation, for the largest value)."""
    return {"max_value_size": size} if kind == "odirect" else {}


def available_kinds() -> list[str]:
    """Persistent kinds whose engine module imports (new engines join by being importable)."""
    kinds = []
    for kind, (module, cls) in KINDS.items():
        try:
            engine = getattr(importlib.import_module(module), cls)
        except ImportError:
            continue
        if engine.persistent:
            kinds.append(kind)
    return kinds


_POOL = random.Random(0).randbytes(2 << 20)


def value_of(key: int, size: int) -> bytes:
    """A value of ``size`` bytes: its key, then random bytes at an offset chosen by the key.
    Cheap to build and checkable, and incompressible, so no engine gains by compressing."""
    off = key % (len(_POOL) - size)
    return (key.to_bytes(8, "little") + _POOL[off:off + size])[:size]


def latency_summary(samples_ns: list[int]) -> tuple[float, float]:
    """(mean, p99) in microseconds."""
    ordered = sorted(samples_ns)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return statistics.fmean(ordered) / 1e3, p99 / 1e3


class RawReference:
    """The physical reference: O_DIRECT ``os.preadv`` of ``size`` bytes (rounded up to pages)
    at random page-aligned offsets of a file of the data size, on the file system under test.
    Sampled beside every engine's reads, so each ratio compares reads of the same moment."""

    def __init__(self, size: int, records: int, workdir: Path):
        self.length = -(-size // PAGE) * PAGE
        file_size = max(-(-records * size // PAGE) * PAGE, 64 * self.length)
        self.path = workdir / f"raw-{size}-{records}.bin"
        self.disk_bytes = file_size
        self._slots = file_size // PAGE - self.length // PAGE
        self._rng = random.Random(size)
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_TRUNC | os.O_DIRECT, 0o600)
        self._buf = mmap.mmap(-1, self.length)  # page-aligned, as O_DIRECT needs
        chunk = mmap.mmap(-1, 8 << 20)
        chunk.write(os.urandom(len(chunk)))  # real data: a sparse file would not touch the disk
        for off in range(0, file_size, len(chunk)):
            os.pwritev(self._fd, [memoryview(chunk)[:min(len(chunk), file_size - off)]], off)
        os.fsync(self._fd)
        chunk.close()

    def sample(self, reads: int) -> tuple[float, float]:
        """(mean, p99) microseconds of ``reads`` random reads."""
        samples = []
        for _ in range(reads):
            off = self._rng.randrange(self._slots + 1) * PAGE
            t = time.perf_counter_ns()
            os.preadv(self._fd, [self._buf], off)
            samples.append(time.perf_counter_ns() - t)
        return latency_summary(samples)

    def row(self, size: int, records: int, args: Any) -> dict[str, Any]:
        """The reference's own row: ``args.repeats`` samples, medians."""
        means, p99s = zip(*(self.sample(args.reads) for _ in range(args.repeats)), strict=True)
        return {"engine": "raw preadv", "direct_io": True, "value_size": size,
                "records": records, "memory_budget": 0, "disk_bytes": self.disk_bytes,
                "load_records_per_s": None, "get_mean_us": statistics.median(means),
                "get_p99_us": statistics.median(p99s), "put_ops_per_s": None,
                "repeats": args.repeats, "read_bytes": self.length, "raw_mean_us": None,
                "get_vs_raw": 1.0}

    def close(self) -> None:
        os.close(self._fd)
        self._buf.close()
        self.path.unlink()


def bench_engine(kind: str, direct_io: bool, size: int, records: int, args: Any,
                 workdir: Path, raw: RawReference) -> dict[str, Any]:
    """Load, reopen, then measure gets and puts of one engine configuration."""
    path = workdir / f"{kind}-{size}-{records}-{'direct' if direct_io else 'buffered'}"
    shutil.rmtree(path, ignore_errors=True)
    try:
        return _bench_engine(kind, direct_io, size, records, args, path, raw)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _bench_engine(kind: str, direct_io: bool, size: int, records: int, args: Any,
                  path: Path, raw: RawReference) -> dict[str, Any]:
    budget = max(1 << 20, records * size // 10)
    rng = random.Random(records * 7 + size)
    keys = rng.sample(range(1 << 62), records)
    opts = {"memory_budget": budget, "direct_io": direct_io, **sized_options(kind, size)}
    t0 = time.perf_counter()
    with open_store(kind, path, durability="group", **opts) as store:
        for i in range(0, records, LOAD_BATCH):
            store.put_many((k, value_of(k, size)) for k in keys[i:i + LOAD_BATCH])
        store.flush()
    load_s = time.perf_counter() - t0
    drop_page_cache(path)
    means, p99s, put_rates, raw_means = [], [], [], []
    with open_store(kind, path, durability="group", **opts) as store:
        for _ in range(args.repeats):
            samples = []
            for k in rng.choices(keys, k=args.reads):
                t = time.perf_counter_ns()
                v = store.get(k)
                samples.append(time.perf_counter_ns() - t)
                if v != value_of(k, size):
                    raise AssertionError(f"{kind}: wrong value for key {k}")
            mean, p99 = latency_summary(samples)
            means.append(mean)
            p99s.append(p99)
            raw_means.append(raw.sample(args.reads)[0])
            batch = rng.choices(keys, k=args.puts)
            t = time.perf_counter()
            for k in batch:
                store.put(k, value_of(k, size))
            store.flush()
            put_rates.append(len(batch) / (time.perf_counter() - t))
        engine_stats = store.stats()
    disk = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"engine": kind, "direct_io": direct_io, "value_size": size, "records": records,
            "memory_budget": budget, "disk_bytes": disk, "load_records_per_s": records / load_s,
            "get_mean_us": statistics.median(means), "get_p99_us": statistics.median(p99s),
            "put_ops_per_s": statistics.median(put_rates), "repeats": args.repeats,
            "raw_mean_us": statistics.median(raw_means),
            "get_vs_raw": statistics.median(m / r for m, r in zip(means, raw_means, strict=True)),
            "stats": engine_stats}


def markdown(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table."""
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    lines = ["| engine | I/O | value | records | budget MiB | load rec/s | get mean us "
             "| get p99 us | x raw preadv | put ops/s | DRAM B/key |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dram = r.get("stats", {}).get("dram_bytes")
        lines.append(
            f"| {r['engine']} | {'direct' if r['direct_io'] else 'buffered'} | {r['value_size']} "
            f"| {r['records']} | {r['memory_budget'] / (1 << 20):.1f} "
            f"| {num(r['load_records_per_s'], ',.0f')} | {r['get_mean_us']:.1f} "
            f"| {r['get_p99_us']:.1f} | {r['get_vs_raw']:.2f} | {num(r['put_ops_per_s'], ',.0f')} "
            f"| {num(None if dram is None else dram / r['records'], '.2f')} |")
    return "\n".join(lines)


def _size(text: str) -> int:
    """A value size: a positive integer below the random pool ``value_of`` draws from."""
    size = positive_count(text)
    if size >= len(_POOL):
        raise ValueError(f"{text!r} is not below {len(_POOL)} bytes")
    return size


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = arg_type(positive_count)
    parser.add_argument("--records", type=positive, nargs="+", default=[100_000],
                        help="record counts (default 100000)")
    parser.add_argument("--sizes", type=arg_type(_size), nargs="+", default=[1536, 4096],
                        help="value sizes in bytes (default 1536 4096)")
    parser.add_argument("--engines", nargs="+", choices=KINDS, default=None, metavar="KIND",
                        help=f"kinds to run, from {', '.join(KINDS)} (default: every "
                             "persistent kind that imports)")
    parser.add_argument("--buffered", action=argparse.BooleanOptionalAction, default=True,
                        help="also run each engine with direct_io=False")
    parser.add_argument("--reads", type=positive, default=20_000,
                        help="gets per repeat (default 20000)")
    parser.add_argument("--puts", type=positive, default=5_000,
                        help="puts per repeat (default 5000)")
    parser.add_argument("--repeats", type=positive, default=3,
                        help="repeats of each measurement, medians reported (default 3)")
    parser.add_argument("--out", type=out_directory, required=True)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where stores are built (default: OUT/work); must allow O_DIRECT")
    args = parser.parse_args(argv)
    workdir = args.workdir or args.out / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    engines = args.engines or available_kinds()
    modes = [True, False] if args.buffered else [True]
    rows = []
    for records in args.records:
        for size in args.sizes:
            need = records * size * 2
            free = shutil.disk_usage(workdir).free
            if need > free:
                print(f"skipping {records} x {size} B: needs ~{need >> 20} MiB, {free >> 20} free")
                continue
            raw = RawReference(size, records, workdir)
            try:
                rows.append(raw.row(size, records, args))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
                for kind in engines:
                    for direct_io in modes:
                        try:
                            rows.append(bench_engine(kind, direct_io, size, records, args,
                                                     workdir, raw))
                        except Exception as e:  # an engine that cannot take this size: go on
                            print(f"{kind} (direct_io={direct_io}) {records} x {size} B "
                                  f"failed: {e}")
                            continue
                        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
            finally:
                raw.close()
    (args.out / "backends.json").write_text(json.dumps(rows, indent=1, default=str))
    table = markdown(rows)
    (args.out / "backends.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
