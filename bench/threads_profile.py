"""Where an N-thread replay spends its time: a py-spy profile of request threads.

    python bench/threads_profile.py --workload trace/magagent --design sarp \
        --backend wiredtiger --threads 8 --out DIR

Replays the workload with ``--threads`` request threads on one index (as ``sarp-bench run
--threads``) twice under the sampling profiler py-spy (``pip install py-spy``): once sampling
every active thread, once only the thread holding the GIL (``--gil``). Only the request
threads' and the background worker's stacks count. The ratio of the two sample counts is how
much of the threads' active time needed the GIL; the top frames of each say where it went.
Writes DIR/all.txt and DIR/gil.txt (py-spy's folded stacks) and DIR/profile.md (the summary,
also printed).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from sarp.bench.backends import check_backend
from sarp.bench.cli import arg_type, checked_workload, positive_count, positive_number
from sarp.bench.designs import DESIGNS

RATE = 250  # samples per second and thread
TOP = 15


def replay(args: argparse.Namespace) -> None:
    """The profiled program: build the workload, open the design, replay with N threads."""
    from sarp.bench.catalog import load_workload
    from sarp.bench.designs import Setup
    from sarp.bench.replay import ENTRY_BYTES, Prepared, prepare, replay_threads

    p: Prepared = prepare(args.workload, load_workload(args.workload, args.scale))
    budget = max(1 << 20, p.unique_blocks * ENTRY_BYTES // 10)
    work = Path(tempfile.mkdtemp(prefix="threads-profile-", dir=args.workdir))
    try:
        index = DESIGNS[args.design].open(work / "index", Setup(args.backend, budget, "group",
                                                                True))
        try:
            done, wall = replay_threads(index, p, args.threads)
        finally:
            index.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{done} requests in {wall:.2f} s: {done / wall:.1f} requests/s")


def folded(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, self samples per function, samples per SARP/store function on the stack) of
    the request threads and the background worker only (start-up is left out); a function is
    named with its file, line numbers dropped."""
    total, leaf, ours = 0, Counter(), Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "sarp/bench/replay.py" not in stack and "sarp/background.py" not in stack:
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";") if f]
        total += n
        leaf[frames[-1]] += n
        for f in set(frames):
            if "sarp/" in f or "storage_backends/" in f:
                ours[f] += n
    return total, leaf, ours


def summary(out: Path, label: str) -> str:
    all_n, all_leaf, all_ours = folded(out / "all.txt")
    gil_n, gil_leaf, _ = folded(out / "gil.txt")
    lines = [f"# Profile of {label}", "",
             f"- samples of active threads: {all_n}; samples holding the GIL: {gil_n} "
             f"({gil_n / all_n:.0%} of active time needed the GIL)" if all_n else "- no samples",
             "", "## Self time of active threads (top frames)", ""]
    lines += [f"- {n / all_n:6.1%}  {f}" for f, n in all_leaf.most_common(TOP)]
    lines += ["", "## Self time while holding the GIL", ""]
    lines += [f"- {n / max(gil_n, 1):6.1%}  {f}" for f, n in gil_leaf.most_common(TOP)]
    lines += ["", "## SARP and store frames on the active stacks (inclusive)", ""]
    lines += [f"- {n / all_n:6.1%}  {f}" for f, n in all_ours.most_common(TOP)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", type=arg_type(checked_workload), default="trace/magagent")
    ap.add_argument("--design", choices=DESIGNS, default="sarp")
    ap.add_argument("--backend", type=arg_type(check_backend), default="wiredtiger")
    ap.add_argument("--threads", type=arg_type(positive_count), default=8)
    ap.add_argument("--scale", type=positive_number, default=1.0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--workdir", type=Path, default=None, help="where the index is built")
    ap.add_argument("--replay-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.replay_only:
        replay(args)
        return
    if args.out is None:
        ap.error("--out is required")
    if shutil.which("py-spy") is None:
        sys.exit("threads_profile: py-spy not found (pip install py-spy)")
    args.out.mkdir(parents=True, exist_ok=True)
    target = [sys.executable, __file__, "--replay-only", "--workload", args.workload,
              "--design", args.design, "--backend", args.backend, "--threads",
              str(args.threads), "--scale", str(args.scale)]
    if args.workdir is not None:
        target += ["--workdir", str(args.workdir)]
    for name, extra in (("all", []), ("gil", ["--gil"])):
        subprocess.run(["py-spy", "record", "--format", "raw", "--rate", str(RATE),
                        "--output", str(args.out / f"{name}.txt"), *extra, "--", *target],
                       check=True)
    text = summary(args.out, f"{args.design} on {args.backend}, {args.workload}, "
                             f"{args.threads} request threads")
    (args.out / "profile.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
