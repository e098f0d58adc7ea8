"""Hit-rate loss against MaxRetrieval for SARP (paper 6.4, Figure 9): one replay per budget,
each compared with the exact oracle on the same requests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sarp.bench import metrics
from sarp.bench.designs import Setup, sarp_variant
from sarp.bench.progress import Progress
from sarp.bench.replay import Prepared, Trace, replay

#: MaxRetrieval values of the sweep; 0 means unbounded
DEFAULT_BUDGETS = (1, 2, 3, 4, 0)


def sweep(p: Prepared, exact: Trace, budgets: list[int], setup: Setup, workdir: Path,
          progress: Progress) -> list[dict[str, Any]]:
    """One row per MaxRetrieval value: hit rate, loss vs exact, retrievals per match/window."""
    rows = []
    for budget in budgets:
        design = sarp_variant(f"sarp-mr{budget}", f"SARP MaxRetrieval={budget}",
                              max_retrieval=budget)
        index = design.open(workdir / design.name, setup)
        try:
            with progress.bar(len(p.contexts), f"{p.name} sweep mr={budget}") as tick:
                trace = replay(index, p, None, tick)
        finally:
            index.close()
            shutil.rmtree(workdir / design.name, ignore_errors=True)
        row = metrics.new_row(p.name, "sarp", setup.backend)
        metrics.hit_rate(row, trace, p, exact)
        metrics.reads(row, "sarp", trace)
        rows.append({"workload": p.name, "backend": setup.backend, "max_retrieval": budget,
                     "token_hit_rate": row["token_hit_rate"],
                     "hit_loss_vs_exact": row["hit_loss_vs_exact"],
                     "segment_retrievals_per_match": row["store_reads_per_match"],
                     "segment_retrievals_per_window": row["segment_retrievals_per_window"]})
    return rows
