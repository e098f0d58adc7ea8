"""Throughput against request threads (paper 6.7): each thread replays a disjoint share of
the sessions on one shared index."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from sarp.bench.designs import Design, Setup
from sarp.bench.progress import Progress
from sarp.bench.replay import Prepared, replay_threads

#: designs the scaling table covers (when selected): SARP and the SSD-backed baselines
SCALING_DESIGNS = ("sarp", "ssd-blockhash", "segment-hash", "segment-radix",
                   "segment-radix-capped")


def scaling(p: Prepared, design: Design, setup: Setup, counts: list[int], workdir: Path,
            progress: Progress, repeat: int = 1) -> list[dict[str, Any]]:
    """One row per thread count: the median throughput of ``repeat`` replays (the counts
    interleaved: repetition r of each before r + 1 of any) and its speedup over the one-thread
    row's median."""
    rates: dict[int, list[float]] = {threads: [] for threads in counts}
    done: dict[int, int] = {}
    for rep in range(repeat):
        for threads in counts:
            path = workdir / f"threads-{design.name}-{threads}"
            progress.note(f"{p.name} {design.name} {setup.backend}: {threads} thread(s), "
                          f"repetition {rep + 1} of {repeat}")
            index = design.open(path, setup)
            try:
                done[threads], wall = replay_threads(index, p, threads)
            finally:
                index.close()
            shutil.rmtree(path, ignore_errors=True)
            if wall > 0:
                rates[threads].append(done[threads] / wall)
    rps = {t: float(np.median(rates[t])) if rates[t] else None for t in counts}
    base = rps.get(1)
    rows = []
    for t in counts:
        r = rps[t]
        rows.append({"workload": p.name, "design": design.name, "backend": setup.backend,
                     "threads": t, "requests": done[t], "throughput_rps": r,
                     "speedup": r / base if r and base else None})
    return rows
