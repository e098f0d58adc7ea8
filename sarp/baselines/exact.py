"""The exact oracle: exact longest-prefix matching, the reference for token hit rate.

Because block IDs are prefix-chained, the longest indexed prefix is found by probing from
the first block until the first miss, which is exactly what DRAM-BlockHash does; the oracle
is that table under its own name (and its own snapshot, so it reopens like DRAM-BlockHash).
"""

from __future__ import annotations

from sarp.baselines.dram_blockhash import DRAMBlockHash


class ExactOracle(DRAMBlockHash):
    """Exact prefix matching over a per-block dict."""

    design = "exact"
