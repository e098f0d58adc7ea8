"""The designs the benchmark compares: SARP, its design-breakdown variants and the baselines.

Every design is opened through one signature, ``Design.open(path, setup)``, and then has the
SARP index's API (match, insert, snapshot, stats, close, ``recovery`` after a reopen).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sarp
from sarp.baselines import DESIGNS as BASELINES


@dataclass(frozen=True)
class Setup:
    """How a design's store is opened in one benchmark row."""

    backend: str
    memory_budget: int
    durability: str
    direct_io: bool
    radix_cap: int | None = None  # Segment-Radix (capped): its DRAM cap in bytes


@dataclass(frozen=True)
class Design:
    """One benchmarked design. ``ssd``: it keeps its entries in a storage backend."""

    name: str
    label: str
    ssd: bool
    opener: Callable[[Path, Setup], Any]

    def open(self, path: Path, setup: Setup) -> Any:
        """Open (or reopen) the design's index at ``path``."""
        return self.opener(path, setup)


def sarp_variant(name: str, label: str, **config: Any) -> Design:
    """SARP with the given configuration parameters (e.g. ``max_retrieval=1``)."""
    return Design(name, label, True, _sarp(**config))


def _sarp(**config: Any) -> Callable[[Path, Setup], Any]:
    def opener(path: Path, s: Setup) -> Any:
        return sarp.open(path, backend=s.backend, memory_budget=s.memory_budget,
                         durability=s.durability, direct_io=s.direct_io, **config)
    return opener


def _baseline(key: str, capped: bool = False) -> Callable[[Path, Setup], Any]:
    def opener(path: Path, s: Setup) -> Any:
        extra = {"capped": s.radix_cap} if capped else {}
        return BASELINES[key].open(path, backend=s.backend, memory_budget=s.memory_budget,
                                   durability=s.durability, direct_io=s.direct_io,
                                   block_size=16, segment_blocks=64, **extra)
    return opener


_ALL = (
    Design("sarp", "SARP", True, _sarp()),
    Design("sarp-norefine", "SARP w/o refinement", True, _sarp(refinement=False)),
    Design("sarp-nofilter", "SARP w/o filtering", True, _sarp(filtering=False)),
    Design("sarp-noprune", "SARP w/o pruning", True, _sarp(pruning=False)),
    Design("dram-blockhash", "DRAM-BlockHash", False, _baseline("dram_blockhash")),
    Design("ssd-blockhash", "SSD-BlockHash", True, _baseline("ssd_blockhash")),
    Design("segment-hash", "Segment-Hash", True, _baseline("segment_hash")),
    Design("segment-radix", "Segment-Radix", True, _baseline("segment_radix")),
    Design("segment-radix-capped", "Segment-Radix (capped)", True,
           _baseline("segment_radix", capped=True)),
    Design("exact", "Exact oracle", False, _baseline("exact")),
)
DESIGNS: dict[str, Design] = {d.name: d for d in _ALL}
#: the design-breakdown variants of paper 6.5, each compared with full SARP
BREAKDOWN = ("sarp-norefine", "sarp-nofilter", "sarp-noprune")
#: the backend name reported for designs that keep everything in DRAM
DRAM_BACKEND = "dram"


def is_sarp(name: str) -> bool:
    """Whether ``name`` is SARP or one of its design-breakdown variants."""
    return name == "sarp" or name in BREAKDOWN
