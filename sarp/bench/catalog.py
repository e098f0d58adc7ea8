"""Workload names the benchmark accepts, and loading them at a scale.

``synthetic/NAME`` (the four synthetic datasets; ``scale`` multiplies their sessions),
``trace/SUBSET`` (the shipped LMCache agent trace; ``trace/all`` is the whole trace, its three
subsets together; a ``scale`` below 1 keeps that fraction of its sessions, the first ones) and
``mooncake:PATH`` (a Mooncake trace file, docs/mooncake_format.txt: ``mooncake`` options
say how many tokens each hashed block covers and into how many sub-blocks it expands).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from sarp.bench.mooncake import read_mooncake
from sarp.bench.synthetic import NAMES, synthetic
from sarp.bench.trace import SUBSETS, load_trace
from sarp.bench.workloads import Workload

ALL_TRACE = "all"
WORKLOADS = (tuple(f"synthetic/{n}" for n in NAMES) + tuple(f"trace/{s}" for s in SUBSETS)
             + (f"trace/{ALL_TRACE}",))
MOONCAKE = "mooncake:"


@dataclass(frozen=True)
class MooncakeOptions:
    """How a Mooncake trace is read (``read_mooncake``): the tokens each hashed block
    covers, and the sub-blocks each becomes."""

    block_tokens: int = 512
    expand: int = 1


def check_workload(name: str) -> str:
    """Return ``name`` if it names a workload (for ``mooncake:PATH``, a readable file), else
    raise ValueError naming it."""
    if name.startswith(MOONCAKE) and len(name) > len(MOONCAKE):
        path = Path(name[len(MOONCAKE):])
        if not path.exists():
            raise ValueError(f"Mooncake trace {str(path)!r} does not exist")
        if not (path.is_file() and os.access(path, os.R_OK)):
            raise ValueError(f"Mooncake trace {str(path)!r} is not a readable file")
        return name
    if name in WORKLOADS:
        return name
    raise ValueError(f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)}, "
                     f"or {MOONCAKE}PATH)")


def effective_scale(name: str, scale: float) -> float:
    """The scale ``load_workload`` applies to ``name``: a Mooncake file is replayed whole, and
    the agent trace has no more sessions than it holds (at most 1)."""
    if name.startswith(MOONCAKE):
        return 1.0
    return scale if name.startswith("synthetic/") else min(scale, 1.0)


def load_workload(name: str, scale: float = 1.0, seed: int = 0,
                  mooncake: MooncakeOptions = MooncakeOptions()) -> Workload:
    """The sessions of workload ``name`` at ``scale`` (``effective_scale``); a Mooncake trace
    read with ``mooncake``."""
    kind, _, rest = check_workload(name).partition("/")
    if name.startswith(MOONCAKE):
        return read_mooncake(name[len(MOONCAKE):], mooncake.block_tokens, mooncake.expand)
    if kind == "synthetic":
        return synthetic(rest, scale, seed)
    sessions = load_trace(None if rest == ALL_TRACE else rest)
    return sessions[: max(1, math.ceil(len(sessions) * scale))] if scale < 1 else sessions
