"""Measuring one (workload, design, backend) row: replay, snapshot, close, reopen; the
repetitions of a row are combined by ``combine`` (the harness interleaves them across designs)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sarp.bench import metrics
from sarp.bench.designs import DRAM_BACKEND, Design, Setup
from sarp.bench.disk import drop_page_cache
from sarp.bench.progress import Progress
from sarp.bench.replay import Prepared, Trace, replay
from storage_backends import store_class

STORE_DIR = "store"  # where SARP and every baseline keep their record store


@dataclass(frozen=True)
class Measured:
    """A row (median over repetitions) and the first repetition's trace."""

    row: dict[str, Any]
    trace: Trace


def dir_bytes(path: Path, leave_out: tuple[str, ...]) -> tuple[int, int]:
    """The sizes of the files under ``path``: all of them, and those matching no glob pattern
    of ``leave_out``."""
    skip = {f for pattern in leave_out for f in path.glob(pattern)}
    every = kept = 0
    for f in path.rglob("*"):
        if f.is_file():
            size = f.stat().st_size
            every += size
            kept += 0 if f in skip else size
    return every, kept


def measure_once(design: Design, setup: Setup, p: Prepared, *, rep: int, workdir: Path,
                 exact: Trace | None, time_limit: float | None,
                 progress: Progress) -> tuple[dict[str, Any], Trace]:
    """One repetition: replay ``p`` on a fresh index, snapshot, close, reopen."""
    backend = setup.backend if design.ssd else DRAM_BACKEND
    path = workdir / f"{design.name}-{setup.backend}-{rep}"
    shutil.rmtree(path, ignore_errors=True)
    index = design.open(path, setup)
    try:
        before = index.stats()
        with progress.bar(len(p.contexts), f"{p.name} {design.name} {backend}") as tick:
            trace = replay(index, p, time_limit, tick)
        stats = index.stats()
        snap = index.snapshot()
    finally:
        index.close()
    row = metrics.new_row(p.name, design.name, backend)
    row.update(memory_budget=setup.memory_budget if design.ssd else None,
               unique_blocks=p.unique_blocks, truncated=trace.completed < len(p.contexts))
    if design.name == "segment-radix-capped":
        row["radix_cap"] = setup.radix_cap
    metrics.timing(row, trace)
    metrics.hit_rate(row, trace, p, exact if design.name != "exact" else trace)
    metrics.reads(row, design.name, trace)
    metrics.request_reads(row, stats, trace)
    metrics.request_io(row, before, stats, trace)
    metrics.state(row, design.name, stats, p)
    _persistence(row, design, setup, path, snap)
    shutil.rmtree(path, ignore_errors=True)
    return row, trace


def combine(reps: list[tuple[dict[str, Any], Trace]]) -> Measured:
    """The repetitions of one row: the medians, and the first repetition's trace."""
    return Measured(metrics.median_row([r for r, _ in reps]), reps[0][1])


def _persistence(row: dict[str, Any], design: Design, setup: Setup, path: Path,
                 snap: dict[str, Any]) -> None:
    """Store size after close, then the recovery report of a reopen from the disk."""
    store: tuple[int, int] | None = None
    if not design.ssd:
        store_reason = "DRAM-only design: no store on disk"
    elif setup.backend == "memory":
        store_reason = "memory backend keeps nothing on disk"
    else:
        store = dir_bytes(path / STORE_DIR, store_class(setup.backend, {}).LOG_FILES)
        store_reason = ""
    recovery, reason = None, ""
    if design.ssd and setup.backend == "memory":
        reason = "memory backend is not persistent"
    else:
        drop_page_cache(path)  # as after a restart, and as in the recovery section
        reopened = design.open(path, setup)
        recovery = dict(reopened.recovery)
        reopened.close()
    metrics.persistence(row, snap, store, store_reason, recovery, reason)
