"""Throughput against request threads (paper 6.7): each thread replays a disjoint share of
the sessions on one shared index."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sarp.bench.designs import Design, Setup
from sarp.bench.progress import Progress
from sarp.bench.replay import Prepared, replay_threads

#: designs the scaling table covers (when selected): SARP and the SSD-backed baselines
SCALING_DESIGNS = ("sarp", "ssd-blockhash", "segment-hash", "segment-radix",
                   "segment-radix-capped")


def scaling(p: Prepared, design: Design, setup: Setup, counts: list[int], workdir: Path,
            progress: Progress) -> list[dict[str, Any]]:
    """One row per thread count: throughput and speedup over the one-thread row."""
    rows = []
    for threads in counts:
        path = workdir / f"threads-{design.name}-{threads}"
        progress.note(f"{p.name} {design.name} {setup.backend}: {threads} thread(s)")
        index = design.open(path, setup)
        try:
            done, wall = replay_threads(index, p, threads)
        finally:
            index.close()
        shutil.rmtree(path, ignore_errors=True)
        rows.append({"workload": p.name, "design": design.name, "backend": setup.backend,
                     "threads": threads, "requests": done,
                     "throughput_rps": done / wall if wall > 0 else None})
    base = next((r["throughput_rps"] for r in rows if r["threads"] == 1), None)
    for r in rows:
        r["speedup"] = r["throughput_rps"] / base if base and r["throughput_rps"] else None
    return rows
