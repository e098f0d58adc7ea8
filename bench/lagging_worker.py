"""Hit rate while the background worker lags: replay a workload with SARP's worker held for
the whole replay (refinement back-fills and rematerializations all stay queued), next to the
exact oracle, and print SARP's hit-rate loss and its segment retrievals.

    python bench/lagging_worker.py synthetic/ultrachat trace/magagent
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import sarp
from sarp.baselines import open_baseline
from sarp.bench.catalog import load_workload
from sarp.bench.cli import each_workload
from sarp.bench.replay import prepare


def held_replay(name: str, work: Path) -> dict[str, float]:
    """Replay ``name`` on the memory store with the worker held; SARP against exact."""
    p = prepare(name, load_workload(name))
    index = sarp.open(work / "sarp", backend="memory", background=True)
    exact = open_baseline("exact", work / "exact", backend="memory")
    release = threading.Event()
    index._worker.submit(lambda: release.wait(3600))  # every later job waits behind this one
    got = want = reads = 0
    try:
        for ctx, full, meta in zip(p.contexts, p.fulls, p.metadata, strict=True):
            m = index.match(block_ids=ctx)
            got += m.num_blocks
            reads += m.stats["segments_retrieved"]
            want += exact.match(ctx).num_blocks
            index.insert(block_ids=full, metadata=meta)
            exact.insert(full, meta)
    finally:
        release.set()
        index.close()
        exact.close()
    return {"hit_blocks": got, "exact_blocks": want, "segments_retrieved": reads,
            "loss_pct": 100 * (want - got) / want if want else 0.0}


def main(argv: Sequence[str] | None = None) -> None:
    """Print each named workload's hit-rate loss with the worker held."""
    for name, r in each_workload(__doc__.split("\n\n")[0], argv, held_replay):
        print(f"{name}: loss {r['loss_pct']:.3f}% ({r['hit_blocks']} of {r['exact_blocks']} "
              f"blocks), {r['segments_retrieved']} segment retrievals")


if __name__ == "__main__":
    main()
