"""Does --min-time steady the benchmark's ratios? Run the same small benchmark several times
for each --min-time value, alternating, and print SARP's throughput over a baseline's in each
run, with the spread between runs (highest over lowest).

    python bench/repeat_stability.py --runs 4 --min-times 0,1 --noise

``--noise`` adds an intermittent CPU load while it runs, as another tenant of the machine
would: two processes, each busy for 0-300 ms, then idle for 0-700 ms (seeded).
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sarp.bench.backends import check_backend
from sarp.bench.catalog import WORKLOADS
from sarp.bench.cli import (
    arg_type,
    checked_workload,
    comma_list,
    nonnegative_number,
    positive_count,
    positive_number,
)
from sarp.bench.designs import DESIGNS
from sarp.bench.harness import RunOptions, run
from sarp.bench.progress import Progress

NOISE_PROCESSES = 2


def _busy_then_idle(seed: int) -> None:
    """Forever: spin for 0-300 ms, then sleep for 0-700 ms."""
    r = random.Random(seed)
    while True:
        end = time.perf_counter() + r.uniform(0, 0.3)
        while time.perf_counter() < end:
            pass
        time.sleep(r.uniform(0, 0.7))


@contextmanager
def cpu_noise(enabled: bool, seed: int = 0) -> Iterator[None]:
    """The intermittent load of ``--noise`` while the block runs (nothing if not ``enabled``)."""
    procs = [multiprocessing.Process(target=_busy_then_idle, args=(seed + i,), daemon=True)
             for i in range(NOISE_PROCESSES if enabled else 0)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def ratios(opts: RunOptions, baseline: str) -> dict[tuple[str, str], tuple[float, int, int]]:
    """(workload, backend) -> (SARP's throughput over ``baseline``'s, their repetitions)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(opts, Path(tmp), Progress(False))["rows"]
    by = {(r["workload"], r["design"], r["backend"]): r for r in rows}
    return {(w, b): (r["throughput_rps"] / by[(w, baseline, b)]["throughput_rps"],
                     r["repeats"], by[(w, baseline, b)]["repeats"])
            for (w, d, b), r in by.items() if d == "sarp"}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=comma_list(checked_workload),
                    default=["trace/magagent", "synthetic/codeact"],
                    help=f"from {', '.join(WORKLOADS)}, mooncake:PATH (default "
                         "trace/magagent,synthetic/codeact)")
    ap.add_argument("--backends", type=comma_list(check_backend),
                    default=["memory", "rocksdb", "flashlog"],
                    help="comma-separated record-store kinds (default memory,rocksdb,flashlog)")
    ap.add_argument("--baseline", choices=[d for d in DESIGNS if d not in ("sarp", "exact")],
                    default="segment-radix-capped",
                    help="the design SARP is compared with (default segment-radix-capped)")
    ap.add_argument("--min-times", type=comma_list(nonnegative_number), default=[0.0, 1.0],
                    help="the --min-time values compared, seconds (default 0,1)")
    ap.add_argument("--runs", type=arg_type(positive_count), default=4,
                    help="benchmark runs per --min-time value, alternating (default 4)")
    ap.add_argument("--repeat", type=arg_type(positive_count), default=3,
                    help="--repeat of each run (default 3)")
    ap.add_argument("--max-repeat", type=arg_type(positive_count), default=15,
                    help="--max-repeat of each run (default 15)")
    ap.add_argument("--scale", type=positive_number, default=1.0,
                    help="workload scale (default 1)")
    ap.add_argument("--noise", action="store_true",
                    help="run under an intermittent CPU load (see above)")
    a = ap.parse_args(argv)
    got: dict[float, list[dict]] = {mt: [] for mt in a.min_times}
    seconds: dict[float, list[float]] = {mt: [] for mt in a.min_times}
    with cpu_noise(a.noise):
        for _ in range(a.runs):
            for mt in a.min_times:
                opts = RunOptions(workloads=a.workloads, designs=["sarp", a.baseline],
                                  backends=a.backends, scale=a.scale, repeat=a.repeat,
                                  min_time=mt, max_repeat=a.max_repeat, threads=[], sweep=[])
                t0 = time.perf_counter()
                got[mt].append(ratios(opts, a.baseline))
                seconds[mt].append(time.perf_counter() - t0)
    print(f"SARP over {a.baseline}, throughput, in each run (highest over lowest); "
          f"repetitions SARP / baseline per run{'; under --noise' if a.noise else ''}")
    print("| workload | backend | " + " | ".join(f"--min-time {mt:g}" for mt in a.min_times)
          + " |")
    print("|---|---|" + "---|" * len(a.min_times))
    spreads: dict[float, list[float]] = {mt: [] for mt in a.min_times}
    for key in sorted(got[a.min_times[0]][0]):
        cells = []
        for mt in a.min_times:
            rs = [g[key][0] for g in got[mt]]
            spreads[mt].append(max(rs) / min(rs))
            reps = ", ".join(f"{g[key][1]}/{g[key][2]}" for g in got[mt])
            cells.append(f"{' '.join(f'{x:.2f}' for x in rs)} ({spreads[mt][-1]:.2f}); {reps}")
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    for mt in a.min_times:
        print(f"--min-time {mt:g}: spread median {statistics.median(spreads[mt]):.2f}, "
              f"max {max(spreads[mt]):.2f}; a run took {statistics.median(seconds[mt]):.1f} s "
              "(median)")


if __name__ == "__main__":
    main()
