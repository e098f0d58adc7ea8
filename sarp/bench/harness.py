"""The backend-comparison benchmark: workloads x designs x backends (paper Section 6).

Per workload: the exact oracle first (the reference for hit-rate loss), the DRAM-only designs
once, then every SSD-backed design on every backend with direct I/O and the memory budget of
``store_budget``, their repetitions interleaved (repetition r of every design before repetition
r + 1 of any), rows of short replays repeated more (``RunOptions.min_time``). SARP runs before
Segment-Radix (capped) so that the cap can be SARP's routing bytes on the same workload (times
``radix_cap_share``). Then the MaxRetrieval sweep and the thread-scaling table.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sarp
from sarp.bench import metrics
from sarp.bench.backends import engine_builds, unavailable
from sarp.bench.catalog import MooncakeOptions, effective_scale, load_workload
from sarp.bench.designs import BREAKDOWN, DESIGNS, DRAM_BACKEND, Setup
from sarp.bench.measure import combine, measure_once
from sarp.bench.progress import Progress
from sarp.bench.recovery_bench import RECOVERY_DESIGNS, recovery
from sarp.bench.replay import Prepared, Trace, prepare, replay, store_budget
from sarp.bench.scaling import SCALING_DESIGNS, scaling
from sarp.bench.sweep import DEFAULT_BUDGETS, sweep

DIAGNOSTIC_NOTE = ("The {kind} rows ran on {build}: compiled -Og with assertions, not the "
                   "engine as released; install.sh builds it as Release.")
CAP_NOTE = ("Segment-Radix (capped) caps its in-DRAM tree at {share:g}x SARP's routing bytes on "
            "the same workload and backend (--radix-cap-share), each resident node charged its "
            "compact encoding as SARP's directory is its packed arrays; the paper picks the cap "
            "so that its recovery time is comparable to SARP's (0.96-1.96x).")


@dataclass
class RunOptions:
    """What ``sarp-bench run`` measures."""

    workloads: list[str]
    designs: list[str]
    backends: list[str]
    scale: float = 1.0
    repeat: int = 3
    #: after ``repeat`` repetitions, a row whose replays add up to less than ``min_time``
    #: seconds is repeated again (interleaved with the other rows still short), up to
    #: ``max_repeat`` repetitions: a replay of tens of milliseconds is at the mercy of one
    #: noisy moment of the machine, a median over a second of replays much less so
    min_time: float = 0.0
    max_repeat: int = 15
    durability: str = "group"
    time_limit: float | None = None  # seconds per replay; a longer one is cut short
    threads: list[int] = field(default_factory=list)  # empty: no scaling table
    sweep: list[int] = field(default_factory=lambda: list(DEFAULT_BUDGETS))
    breakdown_workloads: list[str] | None = None  # where BREAKDOWN designs run; None: all
    recovery_blocks: list[int] = field(default_factory=list)  # empty: no recovery section
    recovery_workload: str = "trace/magagent"
    recovery_designs: list[str] = field(default_factory=lambda: list(RECOVERY_DESIGNS))
    seed: int = 0
    quick: bool = False
    radix_cap_share: float = 1.0  # Segment-Radix (capped)'s cap over SARP's routing bytes
    mooncake: MooncakeOptions = field(default_factory=MooncakeOptions)  # how traces are read


def run(opts: RunOptions, out: Path, progress: Progress) -> dict[str, Any]:
    """Run the benchmark; index directories live in a temporary folder under ``out``."""
    t0 = time.perf_counter()
    skipped = unavailable(opts.backends)
    backends = [b for b in opts.backends if b not in skipped]
    results: dict[str, Any] = {"meta": _meta(opts, skipped), "rows": [], "threads": [],
                               "sweep": [], "recovery": {}}
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="work-", dir=out) as tmp:
        for name in opts.workloads:
            p = prepare(name, load_workload(name, opts.scale, opts.seed, opts.mooncake))
            progress.note(f"{name}: {len(p.contexts)} requests, {p.unique_blocks} unique blocks")
            results["meta"]["workloads"][name] = {"requests": len(p.contexts),
                                                  "unique_blocks": p.unique_blocks,
                                                  "memory_budget": store_budget(p),
                                                  "scale": effective_scale(name, opts.scale)}
            work = Path(tmp) / name.replace("/", "_").replace(":", "_")
            work.mkdir(parents=True)
            exact = _workload_rows(opts, p, backends, work, progress, results)
            if opts.sweep:
                results["sweep"] += _section(
                    results, f"{name} sweep", sweep, p, exact, opts.sweep,
                    _setup(opts, p, "memory"), work, progress) or []
            if opts.threads:
                caps = results["meta"]["radix_caps"]
                results["threads"] += _section(
                    results, f"{name} threads", _scaling, opts, p, backends, caps, work,
                    progress) or []
            shutil.rmtree(work, ignore_errors=True)
        if opts.recovery_blocks:
            results["recovery"] = _section(
                results, "recovery", _recovery, opts, backends, Path(tmp), progress) or {}
    metrics.space_ratios(results["rows"])
    results["meta"]["seconds"] = time.perf_counter() - t0
    return results


def _section(results: dict[str, Any], name: str, work: Callable[..., Any], *args: Any) -> Any:
    """``work(*args)``, or None when it raises: a section that fails (the sweep, the threads
    table, the recovery section) becomes a note of the report, and the rows measured so far
    stay. Its last argument is the run's ``Progress``."""
    try:
        return work(*args)
    except Exception as exc:
        note = f"{name}: failed ({type(exc).__name__}: {exc}); the run went on without it"
        results["meta"]["notes"].append(note)
        args[-1].note(note)
        return None


def run_sweep(opts: RunOptions, out: Path, progress: Progress) -> dict[str, Any]:
    """Only the MaxRetrieval sweep (and the exact oracle it compares with), per workload."""
    return run(dataclasses.replace(opts, designs=[], backends=[], threads=[],
                                   recovery_blocks=[]), out, progress)


def run_recovery(opts: RunOptions, out: Path, progress: Progress) -> dict[str, Any]:
    """Only the recovery section."""
    return run(dataclasses.replace(opts, workloads=[], sweep=[], threads=[]), out, progress)


def _recovery(opts: RunOptions, backends: list[str], tmp: Path,
              progress: Progress) -> dict[str, Any]:
    """Recovery against size, SARP on the first selected non-memory backend."""
    backend = next((b for b in backends if b != "memory"), None)
    if backend is None:
        return {"rows": [], "notes": ["recovery: n/a, no persistent backend selected"]}
    p = prepare(opts.recovery_workload,
                load_workload(opts.recovery_workload, 1.0, opts.seed, opts.mooncake))
    work = tmp / "recovery"
    work.mkdir(parents=True, exist_ok=True)
    return recovery(p, opts.recovery_blocks, opts.recovery_designs, backend, work,
                    opts.durability, progress, opts.repeat)


def _workload_rows(opts: RunOptions, p: Prepared, backends: list[str], work: Path,
                   progress: Progress, results: dict[str, Any]) -> Trace:
    """Every row of one workload; returns the exact oracle's trace."""
    wanted = [d for d in opts.designs if d not in BREAKDOWN
              or opts.breakdown_workloads is None or p.name in opts.breakdown_workloads]

    def rows(names: list[str], backend: str, exact: Trace | None) -> dict[str, Trace | None]:
        """The rows of ``names`` on ``backend``, repetitions interleaved: repetition r of every
        design runs before repetition r + 1 of any, so a noisy spell of the machine falls on
        all of them alike and the ratios compare runs made side by side. After ``repeat``
        repetitions, the rows still short of ``min_time`` seconds of replay go on, still
        interleaved (``_again``). A design that fails gets an n/a row."""
        reps: dict[str, list] = {n: [] for n in names}
        failed: dict[str, dict[str, Any]] = {}
        cap = None
        rep = 0
        while active := [n for n in names if n not in failed and _again(opts, rep, reps[n])]:
            for name in active:
                if name == "segment-radix-capped":
                    cap = cap or _probe_radix_cap(opts, p, work)
                    results["meta"]["radix_caps"][f"{p.name} {backend}"] = cap
                setup = _setup(opts, p, backend, cap)
                try:
                    reps[name].append(measure_once(
                        DESIGNS[name], setup, p, rep=rep, workdir=work, exact=exact,
                        time_limit=opts.time_limit, progress=progress))
                except Exception as exc:
                    if name == "exact":
                        raise
                    failed[name] = metrics.failed_row(
                        p.name, name, backend if DESIGNS[name].ssd else DRAM_BACKEND, exc)
                    continue
                row, trace = reps[name][-1]
                # SARP's routing bytes after the whole workload (a replay --time-limit cut
                # short holds less: then the probe replays it whole)
                if (name == "sarp" and cap is None and row["routing_bytes"] is not None
                        and trace.completed == len(p.contexts)):
                    cap = _radix_cap(opts, row["routing_bytes"])
            rep += 1
        traces: dict[str, Trace | None] = {}
        for name in names:
            if name in failed:
                row, traces[name] = failed[name], None
            else:
                m = combine(reps[name])
                row, traces[name] = m.row, m.trace
            results["rows"].append(row)
            progress.note(_summary(row))
        return traces

    exact = rows(["exact"], "memory", None)["exact"]
    assert exact is not None
    dram = [d for d in wanted if not DESIGNS[d].ssd and d != "exact"]
    if dram:
        rows(dram, "memory", exact)
    ssd = sorted((d for d in wanted if DESIGNS[d].ssd), key=lambda d: d == "segment-radix-capped")
    for backend in backends:
        rows(ssd, backend, exact)
    return exact


def _again(opts: RunOptions, rep: int, done: list[tuple[dict[str, Any], Trace]]) -> bool:
    """Whether a row with repetitions ``done`` gets repetition ``rep``: the first ``repeat``
    always, then while its replays add up to less than ``min_time`` seconds and ``rep`` is
    below ``max_repeat``."""
    if rep < opts.repeat:
        return True
    return rep < opts.max_repeat and sum(t.wall_s for _, t in done) < opts.min_time


def _scaling(opts: RunOptions, p: Prepared, backends: list[str], caps: dict[str, int],
             work: Path, progress: Progress) -> list[dict[str, Any]]:
    """The thread-scaling rows, on the first selected non-memory backend."""
    backend = next((b for b in backends if b != "memory"), "memory")
    rows = []
    for name in (d for d in SCALING_DESIGNS if d in opts.designs):
        cap = None
        if name == "segment-radix-capped":
            cap = caps.get(f"{p.name} {backend}") or _probe_radix_cap(opts, p, work)
        rows += scaling(p, DESIGNS[name], _setup(opts, p, backend, cap), opts.threads, work,
                        progress, opts.repeat)
    return rows


def _radix_cap(opts: RunOptions, sarp_routing_bytes: int) -> int:
    """The cap of Segment-Radix (capped): its share of SARP's routing bytes."""
    return max(1, int(sarp_routing_bytes * opts.radix_cap_share))


def _probe_radix_cap(opts: RunOptions, p: Prepared, work: Path) -> int:
    """The cap from SARP's routing bytes after replaying ``p`` (on the memory backend; the
    routing directory does not depend on the backend), where no SARP row has given them."""
    path = work / "cap-probe"
    index = DESIGNS["sarp"].open(path, _setup(opts, p, "memory"))
    try:
        replay(index, p)
        return _radix_cap(opts, int(index.stats()["routing_bytes"]))
    finally:
        index.close()
        shutil.rmtree(path, ignore_errors=True)


def _setup(opts: RunOptions, p: Prepared, backend: str, cap: int | None = None) -> Setup:
    return Setup(backend, store_budget(p), opts.durability, True, cap)


def _summary(row: dict[str, Any]) -> str:
    rps, hit = row["throughput_rps"], row["token_hit_rate"]
    head = f"  {row['workload']} {row['design']} {row['backend']}: "
    if row.get("error"):
        return head + "FAILED " + row["error"]
    return head + (f"{rps:.1f} req/s, hit {hit:.4f}" if rps and hit is not None else "done")


def _meta(opts: RunOptions, skipped: dict[str, str]) -> dict[str, Any]:
    builds = engine_builds([b for b in opts.backends if b not in skipped])
    notes = [CAP_NOTE.format(share=opts.radix_cap_share)]
    notes += [DIAGNOSTIC_NOTE.format(kind=kind, build=build)
              for kind, build in builds.items() if "diagnostic" in build]
    return {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "options": dataclasses.asdict(opts),
            "skipped_backends": skipped, "workloads": {}, "radix_caps": {},
            "sarp_version": sarp.__version__, "python": platform.python_version(),
            "cpus": os.cpu_count(), "engine_builds": builds, "notes": notes}
