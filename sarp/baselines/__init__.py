"""The baselines SARP is compared against (paper 6.1, docs/design.md section 7), with its API.

``DESIGNS`` maps each design's name to its class; ``open_baseline(name, path, ...)`` opens one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sarp.baselines.base import BaselineIndex
from sarp.baselines.dram_blockhash import DRAMBlockHash
from sarp.baselines.exact import ExactOracle
from sarp.baselines.segment_hash import SegmentHash
from sarp.baselines.segment_radix import SegmentRadix
from sarp.baselines.ssd_blockhash import SSDBlockHash

DESIGNS: dict[str, type[BaselineIndex]] = {
    cls.design: cls
    for cls in (ExactOracle, DRAMBlockHash, SSDBlockHash, SegmentHash, SegmentRadix)
}


def open_baseline(name: str, path: str | Path, **kwargs: Any) -> BaselineIndex:
    """Open the baseline ``name`` (a key of ``DESIGNS``) at ``path``."""
    if name not in DESIGNS:
        raise ValueError(f"name must be one of {sorted(DESIGNS)}, got {name!r}")
    return DESIGNS[name].open(path, **kwargs)


__all__ = ["DESIGNS", "BaselineIndex", "DRAMBlockHash", "ExactOracle", "SSDBlockHash",
           "SegmentHash", "SegmentRadix", "open_baseline"]
