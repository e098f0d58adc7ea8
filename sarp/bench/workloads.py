"""Workload model shared by the benchmark: sessions of turns, replayed round-robin.

A workload is a list of sessions; a session is a list of turns; a turn is a pair
``(context, output)`` of 1-D arrays. Token workloads hold ``uint32`` token IDs; block
workloads (read from Mooncake traces, see :mod:`sarp.bench.mooncake`) hold ``uint64``
chained block IDs, one per block. The replay method of the paper (Section 6.1) matches
each turn's context, then inserts context + output; sessions advance round-robin.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

Turn = tuple[np.ndarray, np.ndarray]
Session = list[Turn]
Workload = list[Session]
Unit = Literal["tokens", "blocks"]

_UNITS: dict[np.dtype, Unit] = {np.dtype(np.uint32): "tokens", np.dtype(np.uint64): "blocks"}


@dataclass(frozen=True)
class Request:
    """One replayed turn: match ``context``, then insert ``full`` (context + output).

    With ``unit == "tokens"`` the arrays are ``uint32`` token IDs; with
    ``unit == "blocks"`` they are ``uint64`` chained block IDs (equal ID = equal
    block prefix), to be fed to an index by block ID instead of by token.
    """

    session: int
    turn: int
    context: np.ndarray
    output: np.ndarray
    unit: Unit = "tokens"

    @property
    def full(self) -> np.ndarray:
        """The sequence inserted after the match: context followed by output."""
        return np.concatenate((self.context, self.output))


def unit_of(context: np.ndarray, output: np.ndarray) -> Unit:
    """The unit of a turn, from its dtype: uint32 = tokens, uint64 = block IDs."""
    unit = _UNITS.get(context.dtype)
    if unit is None or output.dtype != context.dtype:
        raise ValueError(
            f"workload: a turn must be two uint32 (tokens) or two uint64 (block IDs) arrays, "
            f"got {context.dtype} and {output.dtype}"
        )
    return unit


def iter_requests(workload: Workload) -> Iterator[Request]:
    """Yield the workload's turns round-robin: turn 0 of every session, then turn 1, ..."""
    depth = max((len(session) for session in workload), default=0)
    for turn in range(depth):
        for index, session in enumerate(workload):
            if turn < len(session):
                context, output = session[turn]
                yield Request(index, turn, context, output, unit_of(context, output))


def frozen(array: np.ndarray) -> np.ndarray:
    """Mark an array read-only: turns may share memory, so consumers must not write."""
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class WorkloadStats:
    """Shape of a workload: the numbers the paper's Table 2 and the trace README report."""

    sessions: int
    requests: int
    context_tokens: int
    mean_blocks: float
    hit_ratio: float


def _chain_keys(request: Request, block_tokens: int) -> list[int]:
    """Chained keys of the full blocks of ``request.full``; a key stands for its whole prefix."""
    full = request.full
    if request.unit == "blocks":
        return full.tolist()
    count = len(full) // block_tokens
    keys, key = [], 0
    for row in full[: count * block_tokens].reshape(count, block_tokens):
        key = hash((key, row.tobytes()))
        keys.append(key)
    return keys


def workload_stats(workload: Workload, block_tokens: int = 16) -> WorkloadStats:
    """Sessions, requests, mean context blocks per request and the unbounded-cache hit ratio.

    Blocks per request counts a trailing partial block (the trace README's measure). The
    hit ratio replays the workload round-robin against an exact cache that never
    evicts: the fraction of context units (tokens, or blocks for block workloads) covered
    by leading full blocks already inserted by an earlier request.
    """
    if block_tokens <= 0:
        raise ValueError(f"block_tokens must be positive, got {block_tokens}")
    seen: set[int] = set()
    requests = context_units = context_blocks = hit_units = 0
    for request in iter_requests(workload):
        per_block = 1 if request.unit == "blocks" else block_tokens
        blocks = len(request.context) // per_block
        keys = _chain_keys(request, block_tokens)
        hits = 0
        while hits < blocks and keys[hits] in seen:
            hits += 1
        seen.update(keys)
        requests += 1
        context_units += len(request.context)
        context_blocks += -(-len(request.context) // per_block)
        hit_units += hits * per_block
    return WorkloadStats(
        sessions=len(workload),
        requests=requests,
        context_tokens=context_units,
        mean_blocks=context_blocks / requests if requests else 0.0,
        hit_ratio=hit_units / context_units if context_units else 0.0,
    )


def same_workload(a: Workload, b: Workload) -> bool:
    """Whether two workloads hold the same sessions, turns and arrays."""
    return len(a) == len(b) and all(
        len(s) == len(t)
        and all(
            np.array_equal(x, y)
            for p, q in zip(s, t, strict=True)
            for x, y in zip(p, q, strict=True)
        )
        for s, t in zip(a, b, strict=True)
    )


def format_stats(rows: dict[str, WorkloadStats]) -> str:
    """A plain-text table of workload statistics, one row per named workload."""
    lines = [
        f"{'workload':<24} {'sessions':>8} {'requests':>8} {'blocks/req':>10} {'hit ratio':>9}"
    ]
    for name, s in rows.items():
        lines.append(
            f"{name:<24} {s.sessions:>8} {s.requests:>8} {s.mean_blocks:>10.1f} {s.hit_ratio:>9.1%}"
        )
    return "\n".join(lines)
