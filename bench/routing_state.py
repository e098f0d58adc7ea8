"""Where a workload's segment retrievals and routing bytes come from: replay it through SARP
(defaults, memory store; each request matched, then inserted) and print the match counters
and the routing directory's arrays (docs/architecture.md quotes these figures).

    python bench/routing_state.py synthetic/ultrachat trace/taubench
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sarp
from sarp.bench.catalog import load_workload
from sarp.bench.cli import each_workload
from sarp.bench.replay import prepare, replay


def routing_state(name: str, work: Path) -> dict[str, float]:
    """The counters of one replay of ``name``."""
    p = prepare(name, load_workload(name))
    with sarp.open(work / "sarp", backend="memory") as index:
        trace = replay(index, p)
        st, table = index.stats(), index.directory.table
        windows, retrieved = trace.stats["windows"], trace.stats["segments_retrieved"]
        return {
            "requests": trace.completed, "unique_blocks": p.unique_blocks,
            "query_windows": windows, "segment_retrievals": retrieved,
            "retrievals_per_window": retrieved / windows if windows else 0.0,
            "segments": st["segments"], "blocks_written": st["blocks_written"],
            "routing_bytes": table.nbytes(), "routing_entries": table.n_entries,
            "table_slots": len(table.table_slots()), "arena_refs_used": table.arena_used,
            "live_refs": table.live_refs, "longest_list": table.longest_list(),
            "routing_bytes_per_block": table.nbytes() / p.unique_blocks,
        }


def main(argv: Sequence[str] | None = None) -> None:
    """Print the counters of each workload given."""
    for name, counters in each_workload(__doc__.split("\n\n")[0], argv, routing_state):
        print(name)
        for key, value in counters.items():
            print(f"  {key:24s} {value:,.3f}" if isinstance(value, float)
                  else f"  {key:24s} {value:,}")


if __name__ == "__main__":
    main()
