"""What does the benchmark's replay loop cost by itself, per request?

Replays a workload through an index that does nothing (each match returns one fixed result,
with as many counters as a design reports), repeatedly, and prints the median of the
replay's wall time per request: the part of every row's 1 / throughput_rps that is the
harness's, not the design's. It does not depend on the counters a design reports, which are
tallied after the wall time is taken (sarp/bench/replay.py).

    python bench/replay_overhead.py trace/magagent --repeat 60
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np

from sarp.bench.catalog import WORKLOADS, load_workload
from sarp.bench.cli import arg_type, checked_workload, positive_count
from sarp.bench.replay import prepare, replay

#: counters per match: the baselines report 2 or 3, SARP 7
COUNTER_SETS = (3, 7)


class _Result:
    """What a match returns, as the replay reads it: matched tokens and counters."""

    def __init__(self, counters: int):
        self.num_tokens = 0
        self.stats = {f"counter_{i}": i for i in range(counters)}


class _Null:
    """An index whose match returns one fixed result and whose insert does nothing."""

    def __init__(self, counters: int):
        self._result = _Result(counters)

    def match(self, block_ids: np.ndarray) -> _Result:
        return self._result

    def insert(self, block_ids: np.ndarray, metadata: Any) -> None:
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", type=arg_type(checked_workload),
                        help=f"one of {', '.join(WORKLOADS)}")
    parser.add_argument("--repeat", type=arg_type(positive_count), default=60,
                        help="replays per counter set, interleaved (default 60)")
    args = parser.parse_args(argv)
    p = prepare(args.workload, load_workload(args.workload))
    n = len(p.contexts)
    per_request: dict[int, list[float]] = {c: [] for c in COUNTER_SETS}
    for _ in range(args.repeat):
        for c in COUNTER_SETS:
            per_request[c].append(replay(_Null(c), p).wall_s / n * 1e6)
    print(f"{args.workload}: {n} requests, median of {args.repeat} replays")
    for c, times in per_request.items():
        print(f"  {c} counters per match: {statistics.median(times):.3f} us per request "
              f"({min(times):.3f}-{max(times):.3f})")


if __name__ == "__main__":
    main()
