"""Where SARP's background work runs: replay workloads with refinement, rematerialization and
snapshots run on the inserting thread (the default) and on a worker thread (``background=True``),
repetitions interleaved, and print the medians of throughput and insert latency of each.

    python bench/worker_thread.py trace/magagent synthetic/codeact --backends memory,rocksdb

SARP is opened as ``sarp-bench run`` opens it: direct I/O, durability ``group`` and 10% of
SSD-BlockHash's store size as the memory budget (``store_budget``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sarp.bench.backends import check_backend
from sarp.bench.catalog import WORKLOADS, load_workload
from sarp.bench.cli import arg_type, checked_workload, comma_list, positive_count
from sarp.bench.designs import Setup, sarp_variant
from sarp.bench.replay import Prepared, prepare, replay, store_budget

MODES = {"inline": False, "worker": True}


def measure(p: Prepared, backend: str, background: bool, work: Path) -> dict[str, float]:
    """One replay of ``p`` on a new index: requests/s, mean and p99 insert latency (us)."""
    design = sarp_variant("sarp", "SARP", background=background)
    index = design.open(work / "index", Setup(backend, store_budget(p), "group", True))
    try:
        t = replay(index, p)
    finally:
        index.close()
    us = t.insert_ns / 1e3
    return {"rps": t.completed / t.wall_s, "insert_mean_us": float(us.mean()),
            "insert_p99_us": float(np.percentile(us, 99))}


def compare(name: str, backend: str, repeat: int) -> dict[str, dict[str, float]]:
    """Median of each figure per mode, over ``repeat`` interleaved repetitions."""
    p = prepare(name, load_workload(name))
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(repeat):
        for mode, background in MODES.items():
            with tempfile.TemporaryDirectory() as tmp:
                runs[mode].append(measure(p, backend, background, Path(tmp)))
    return {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="+", type=arg_type(checked_workload),
                    help=f"from {', '.join(WORKLOADS)}, mooncake:PATH")
    ap.add_argument("--backends", default=["memory"], type=comma_list(check_backend),
                    help="comma-separated record-store kinds (default memory)")
    ap.add_argument("--repeat", type=arg_type(positive_count), default=7,
                    help="interleaved repetitions per mode (default 7)")
    args = ap.parse_args(argv)
    print("| workload | backend | inline req/s | worker req/s | inline / worker "
          "| insert mean us inline / worker | insert p99 us inline / worker |")
    print("|---|---|---|---|---|---|---|")
    for name in args.workloads:
        for backend in args.backends:
            r = compare(name, backend, args.repeat)
            a, b = r["inline"], r["worker"]
            print(f"| {name} | {backend} | {a['rps']:.0f} | {b['rps']:.0f} "
                  f"| {a['rps'] / b['rps']:.2f} "
                  f"| {a['insert_mean_us']:.0f} / {b['insert_mean_us']:.0f} "
                  f"| {a['insert_p99_us']:.0f} / {b['insert_p99_us']:.0f} |")


if __name__ == "__main__":
    main()
