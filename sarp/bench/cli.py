"""sarp-bench: the backend-comparison benchmark of paper Section 6.

    sarp-bench run [--quick] [--workloads W,..] [--designs D,..] [--backends B,..] [--out DIR]
    sarp-bench recovery [--blocks 1000000,10000000] [--backend wiredtiger]
    sarp-bench sweep [--workloads W,..] [--budgets 1,2,3,4,0]
    sarp-bench report DIR

run, recovery and sweep write results.json, report.md and plots to --out (default
results/<timestamp>); report renders report.md and the plots again in DIR.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sarp.bench.backends import check_backend
from sarp.bench.catalog import MOONCAKE, WORKLOADS, MooncakeOptions, check_workload
from sarp.bench.designs import BREAKDOWN, DESIGNS
from sarp.bench.harness import RunOptions, run, run_recovery, run_sweep
from sarp.bench.mooncake import read_mooncake
from sarp.bench.progress import Progress
from sarp.bench.recovery_bench import RECOVERY_DESIGNS
from sarp.bench.report import render
from sarp.bench.results import default_dir, load_results, write_results
from sarp.bench.sweep import DEFAULT_BUDGETS
from sarp.checks import check_directory
from storage_backends import DURABILITY_MODES, KINDS

T = TypeVar("T")
QUICK_WORKLOADS = [w for w in WORKLOADS if w.startswith("synthetic/")] + ["trace/magagent"]
QUICK = {"scale": 0.25, "repeat": 5, "min_time": 0.25, "max_repeat": 9, "time_limit": 20.0,
         "threads": [], "recovery": [100_000]}
FULL = {"scale": 1.0, "repeat": 3, "min_time": 1.0, "max_repeat": 15, "time_limit": None,
        "threads": [1, 2, 4, 8], "recovery": [1_000_000]}


def _design(name: str) -> str:
    if name not in DESIGNS:
        raise ValueError(f"unknown design {name!r} (choose from {', '.join(DESIGNS)})")
    return name


def _recovery_design(name: str) -> str:
    if name not in RECOVERY_DESIGNS:
        raise ValueError(f"unknown design {name!r} (choose from {', '.join(RECOVERY_DESIGNS)})")
    return name


def count(text: str, positive: bool = False) -> int:
    """``text`` as a non-negative (or ``positive``) integer, ``1e6`` allowed, else ValueError."""
    try:
        value = float(text)
        if value >= (1 if positive else 0) and value.is_integer():
            return int(value)
    except ValueError:
        pass
    raise ValueError(f"{text!r} is not a {'positive' if positive else 'non-negative'} integer")


def arg_type(check: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``check``, its ValueError becoming the argument's error message."""
    def parse(text: str) -> Any:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


positive_count = partial(count, positive=True)


def comma_list(check: Callable[[str], Any], allow_none: bool = False) -> Callable[[str], list]:
    """An argparse type: a comma-separated list, each item checked and listed once (``none``:
    empty list)."""
    def parse(text: str) -> list:
        if allow_none and text == "none":
            return []
        items = [check(t.strip()) for t in text.split(",") if t.strip()]
        if not items:
            raise ValueError("empty list")
        twice = next((x for i, x in enumerate(items) if x in items[:i]), None)
        if twice is not None:
            raise ValueError(f"{twice!r} is listed twice")
        return items
    return arg_type(parse)


def _number(text: str, positive: bool = True) -> float:
    """``text`` as a finite number, positive (or non-negative), else ValueError."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not (0 < value if positive else 0 <= value) or value == math.inf:
        raise ValueError(f"{text!r} must be {'positive' if positive else 'non-negative'} "
                         "and finite")
    return value


def _out_directory(text: str) -> Path:
    """A results directory to create, or an empty one: a run never mixes its files with
    another's."""
    path = Path(text)
    check_directory(path, f"{text!r} exists and is not a directory",
                    f"{text!r} cannot be created")
    if path.is_dir() and any(path.iterdir()):
        raise ValueError(f"{text!r} is not empty (sarp-bench report DIR renders a results "
                         "directory again)")
    return path


def _persistent_backend(kind: str) -> str:
    """A backend whose store survives a reopen (recovery measures one)."""
    check_backend(kind)
    if kind == "memory":
        raise ValueError("recovery needs a persistent backend; 'memory' keeps nothing across "
                         "a reopen")
    return kind


def checked_workload(name: str) -> str:
    """A workload name; a Mooncake trace is read whole, so a malformed one fails here."""
    check_workload(name)
    if name.startswith(MOONCAKE):
        if not read_mooncake(name[len(MOONCAKE):]):
            raise ValueError(f"Mooncake trace {name[len(MOONCAKE):]!r} holds no request")
    return name


positive_number = arg_type(_number)
nonnegative_number = arg_type(partial(_number, positive=False))
out_directory = arg_type(_out_directory)


def each_workload(description: str, argv: Sequence[str] | None,
                  measure: Callable[[str, Path], T]) -> Iterator[tuple[str, T]]:
    """The command line of a bench/ script that measures each workload it names: (name, what
    ``measure(name, a temporary directory)`` returned), in order."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("workloads", nargs="+", type=arg_type(checked_workload),
                    help=f"from {', '.join(WORKLOADS)}, mooncake:PATH")
    for name in ap.parse_args(argv).workloads:
        with tempfile.TemporaryDirectory() as tmp:
            yield name, measure(name, Path(tmp))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=out_directory,
                   help="results directory (default results/<timestamp>)")
    p.add_argument("--durability", choices=DURABILITY_MODES, default="group",
                   help="store durability mode (default group: write-ahead log, synced on "
                        "flush)")
    p.add_argument("--seed", type=arg_type(count), default=0,
                   help="synthetic workload seed (default 0)")
    p.add_argument("--block-tokens", type=arg_type(positive_count), default=512,
                   help="tokens each hashed block of a Mooncake trace covers (default 512)")
    p.add_argument("--expand", type=arg_type(positive_count), default=1,
                   help="sub-blocks each hashed block of a Mooncake trace becomes (default 1)")
    p.add_argument("--no-progress", action="store_true",
                   help="nothing on stderr (bars are shown only when it is a terminal)")


def parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    ap = argparse.ArgumentParser(prog="sarp-bench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="workloads x designs x backends",
                       description="Replay workloads through every design on every backend "
                                   "and write results.json, report.md and plots.")
    r.add_argument("--workloads", type=comma_list(checked_workload),
                   help=f"comma-separated, from {', '.join(WORKLOADS)}, mooncake:PATH")
    r.add_argument("--designs", type=comma_list(_design), help=f"from {', '.join(DESIGNS)}")
    r.add_argument("--backends", type=comma_list(check_backend), help=f"from {', '.join(KINDS)}")
    r.add_argument("--scale", type=positive_number, help="workload scale (sessions multiplier)")
    r.add_argument("--repeat", type=arg_type(positive_count),
                   help="repetitions per row (medians reported)")
    r.add_argument("--min-time", type=nonnegative_number,
                   help="after --repeat repetitions, repeat a row again (interleaved with the "
                        "others still short) while its replays add up to less than this many "
                        "seconds (default 1, 0.25 with --quick; 0: exactly --repeat)")
    r.add_argument("--max-repeat", type=arg_type(positive_count),
                   help="the most repetitions --min-time adds up to (default 15, 9 with "
                        "--quick)")
    r.add_argument("--quick", action="store_true",
                   help="a few minutes: defaults become scale 0.25, repeat 5, time limit 20 s, "
                        "no threads table, recovery at 100000 blocks, the synthetic "
                        "workloads and trace/magagent, the design breakdown on the first "
                        "workload only (without it: scale 1, repeat 3, no time limit, threads "
                        "1,2,4,8, recovery at 1000000 blocks, every workload)")
    r.add_argument("--time-limit", type=positive_number,
                   help="seconds per replay before cutting it")
    r.add_argument("--threads", type=comma_list(positive_count, allow_none=True),
                   help="request-thread counts for the scaling table, or none")
    r.add_argument("--sweep", type=comma_list(count, allow_none=True),
                   help="MaxRetrieval values (0 = unbounded), or none (default "
                        f"{','.join(map(str, DEFAULT_BUDGETS))})")
    r.add_argument("--recovery-blocks", type=comma_list(positive_count, allow_none=True),
                   help="sizes of the recovery section, or none")
    r.add_argument("--radix-cap-share", type=positive_number, default=1.0,
                   help="Segment-Radix (capped)'s DRAM cap over SARP's routing bytes on the "
                        "same workload (default 1: equal memory)")
    _common(r)
    rec = sub.add_parser("recovery", help="recovery against size, with Redis as the anchor",
                         description="Grow a workload to each size, persist every design, "
                                     "and time its reopen; Redis is the anchor.")
    rec.add_argument("--blocks", type=comma_list(positive_count),
                     default=[1_000_000, 10_000_000],
                     help="comma-separated index sizes in blocks (default 1000000,10000000)")
    rec.add_argument("--workload", type=arg_type(checked_workload), default="trace/magagent",
                     help=f"the workload grown to each size, from {', '.join(WORKLOADS)}, "
                          "mooncake:PATH (default trace/magagent)")
    rec.add_argument("--designs", type=comma_list(_recovery_design), default=list(RECOVERY_DESIGNS),
                     help=f"from {', '.join(RECOVERY_DESIGNS)} (default all)")
    rec.add_argument("--backend", type=arg_type(_persistent_backend), default="wiredtiger",
                     help=f"from {', '.join(k for k in KINDS if k != 'memory')} (default "
                          "wiredtiger)")
    rec.add_argument("--repeat", type=arg_type(positive_count), default=3,
                     help="reopens of each index (the median one is reported; default 3)")
    _common(rec)
    sw = sub.add_parser("sweep", help="SARP's hit-rate loss against MaxRetrieval",
                        description="SARP's token hit-rate loss against exact matching, for "
                                    "each MaxRetrieval value.")
    sw.add_argument("--workloads", type=comma_list(checked_workload), default=QUICK_WORKLOADS,
                    help=f"comma-separated, from {', '.join(WORKLOADS)}, mooncake:PATH "
                         f"(default {','.join(QUICK_WORKLOADS)})")
    sw.add_argument("--budgets", type=comma_list(count), default=list(DEFAULT_BUDGETS),
                    help="comma-separated MaxRetrieval values, 0 = unbounded (default "
                         f"{','.join(map(str, DEFAULT_BUDGETS))})")
    sw.add_argument("--scale", type=positive_number, default=1.0,
                    help="workload scale (sessions multiplier; default 1)")
    _common(sw)
    rp = sub.add_parser("report", help="render report.md and the plots from results.json",
                        description="Render report.md and the plots of a results directory "
                                    "again from its results.json.")
    rp.add_argument("dir", type=Path, help="a results directory (holding results.json)")
    return ap


def _mooncake(a: argparse.Namespace) -> MooncakeOptions:
    return MooncakeOptions(a.block_tokens, a.expand)


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def run_options(a: argparse.Namespace) -> RunOptions:
    """The options of ``run``: the given ones, else the --quick or full defaults."""
    d = QUICK if a.quick else FULL
    workloads = _pick(a.workloads, QUICK_WORKLOADS if a.quick else list(WORKLOADS))
    designs = _pick(a.designs, list(DESIGNS))
    return RunOptions(
        workloads=workloads, designs=designs, backends=_pick(a.backends, list(KINDS)),
        scale=_pick(a.scale, d["scale"]), repeat=_pick(a.repeat, d["repeat"]),
        min_time=_pick(a.min_time, d["min_time"]), max_repeat=_pick(a.max_repeat, d["max_repeat"]),
        durability=a.durability, time_limit=_pick(a.time_limit, d["time_limit"]),
        threads=_pick(a.threads, d["threads"]), sweep=_pick(a.sweep, list(DEFAULT_BUDGETS)),
        breakdown_workloads=workloads[:1] if a.quick and any(b in designs for b in BREAKDOWN)
        else None, recovery_blocks=_pick(a.recovery_blocks, d["recovery"]), seed=a.seed,
        quick=a.quick, radix_cap_share=a.radix_cap_share, mooncake=_mooncake(a))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``sarp-bench``; returns the exit status."""
    ap = parser()
    a = ap.parse_args(argv)
    if a.command == "report":
        try:
            results = load_results(a.dir)
        except (OSError, ValueError) as exc:
            ap.error(f"argument dir: {exc}")
        print(render(results, a.dir))
        return 0
    out = a.out or default_dir()
    progress = Progress(not a.no_progress)
    if a.command == "run":
        results = run(run_options(a), out, progress)
    elif a.command == "sweep":
        opts = RunOptions(workloads=a.workloads, designs=[], backends=[], scale=a.scale,
                          repeat=1, durability=a.durability, sweep=a.budgets, seed=a.seed,
                          mooncake=_mooncake(a))
        results = run_sweep(opts, out, progress)
    else:
        opts = RunOptions(workloads=[], designs=[], backends=[a.backend], repeat=a.repeat,
                          durability=a.durability, recovery_blocks=a.blocks,
                          recovery_workload=a.workload, recovery_designs=a.designs,
                          seed=a.seed, mooncake=_mooncake(a))
        results = run_recovery(opts, out, progress)
    write_results(out, results)
    print(render(results, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
