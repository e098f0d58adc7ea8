"""Print the shape of the benchmark workloads: ``python -m sarp.bench.describe``.

Rows: the shipped trace's sub-datasets and the synthetic datasets at scale 1, with
16-token blocks (mean context blocks per request, rounded up; unbounded-cache hit ratio).
"""

from sarp.bench.synthetic import NAMES, synthetic
from sarp.bench.trace import SUBSETS, load_trace
from sarp.bench.workloads import format_stats, workload_stats


def main() -> None:
    """Print one statistics row per workload."""
    rows = {f"trace/{s}": workload_stats(load_trace(s)) for s in SUBSETS}
    rows |= {f"synthetic/{n}": workload_stats(synthetic(n)) for n in NAMES}
    print(format_stats(rows))


if __name__ == "__main__":
    main()
