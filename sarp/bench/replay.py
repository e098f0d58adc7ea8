"""Replaying a workload against one index (paper 6.1): match each context, insert context + output.

Block IDs and metadata are computed once per request (``prepare``), untimed and identical for
every design; each match and each insert is timed with ``time.perf_counter_ns``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import sarp
from sarp.bench.workloads import Workload, iter_requests
from sarp.config import DEFAULT_METADATA_DTYPE

BLOCK_TOKENS = 16
#: bytes of one SSD-BlockHash entry: 8-byte key + the metadata record
ENTRY_BYTES = 8 + DEFAULT_METADATA_DTYPE.itemsize


@dataclass(frozen=True)
class Prepared:
    """A workload as the index sees it: per request, block IDs and metadata."""

    name: str
    sessions: np.ndarray  # session of each request, in replay order
    contexts: list[np.ndarray]  # block IDs of each context
    fulls: list[np.ndarray]  # block IDs of context + output
    metadata: list[np.ndarray]  # one record per block of ``fulls``
    context_tokens: np.ndarray  # tokens of each context (partial blocks included)
    unique_blocks: int


@dataclass
class Trace:
    """What one replay measured, per request and summed."""

    match_ns: np.ndarray
    insert_ns: np.ndarray
    matched_tokens: np.ndarray
    wall_s: float
    stats: dict[str, int] = field(default_factory=dict)  # match counters, summed

    @property
    def completed(self) -> int:
        """Requests replayed (fewer than the workload's when ``time_limit`` stopped it)."""
        return len(self.match_ns)


def block_metadata(ids: np.ndarray) -> np.ndarray:
    """A deterministic record per block, derived from its ID (node, tier, address)."""
    meta = np.zeros(len(ids), DEFAULT_METADATA_DTYPE)
    meta["node"] = (ids % np.uint64(8)).astype(np.uint32)
    meta["tier"] = 1
    meta["address"] = ids
    return meta


def prepare(name: str, workload: Workload) -> Prepared:
    """Block IDs and metadata of every request of ``workload``, in round-robin order."""
    sessions, contexts, fulls, tokens = [], [], [], []
    for r in iter_requests(workload):
        if r.unit == "blocks":
            ctx, full, ntok = r.context, r.full, len(r.context) * BLOCK_TOKENS
        else:
            ctx, full, ntok = sarp.block_ids(r.context), sarp.block_ids(r.full), len(r.context)
        sessions.append(r.session)
        contexts.append(ctx)
        fulls.append(full)
        tokens.append(ntok)
    unique = len(np.unique(np.concatenate(fulls))) if fulls else 0
    return Prepared(name, np.array(sessions, np.int64), contexts, fulls,
                    [block_metadata(f) for f in fulls], np.array(tokens, np.int64), unique)


def store_budget(p: Prepared, share: float = 0.10) -> int:
    """The memory budget of SSD-backed designs: ``share`` of SSD-BlockHash's uncompressed
    store size (unique blocks x entry bytes), at least 1 byte. An engine raises a budget
    below its own minimum itself (WiredTiger's cache: 1 MiB; RocksDB's cache and its two
    write buffers: 64 KiB each); the report says when it does."""
    return max(1, int(p.unique_blocks * ENTRY_BYTES * share))


def replay(index: Any, p: Prepared, time_limit: float | None = None,
           tick: Callable[[], None] | None = None) -> Trace:
    """Match then insert every request in order; stop early after ``time_limit`` seconds.

    The timed loop makes the index's calls and reads the clock, nothing more: what each match
    returned is kept as it came and tallied once the wall time is taken, so that throughput
    counts the index's work, not the harness's (a design reporting more counters would
    otherwise pay for their tally)."""
    clock = time.perf_counter_ns
    contexts, fulls, metadata = p.contexts, p.fulls, p.metadata
    match, insert = index.match, index.insert
    marks: list[int] = []  # per request: the clock before its match, between, after its insert
    tokens: list[int] = []  # per request: the tokens its match returned
    counters: list[dict[str, int]] = []  # per request: its match's counters
    deadline = None if time_limit is None else clock() + int(time_limit * 1e9)
    t0 = time.perf_counter()
    for i in range(len(contexts)):
        a = clock()
        if deadline is not None and a > deadline:
            break
        m = match(block_ids=contexts[i])
        b = clock()
        insert(block_ids=fulls[i], metadata=metadata[i])
        marks += (a, b, clock())
        tokens.append(m.num_tokens)
        counters.append(m.stats)
        if tick is not None:
            tick()
    _drain(index)
    wall = time.perf_counter() - t0
    t = np.array(marks, np.int64).reshape(-1, 3)
    stats: dict[str, int] = {}
    for st in counters:
        for k, v in st.items():
            stats[k] = stats.get(k, 0) + v
    return Trace(t[:, 1] - t[:, 0], t[:, 2] - t[:, 1], np.array(tokens, np.int64), wall, stats)


def replay_threads(index: Any, p: Prepared, threads: int) -> tuple[int, float]:
    """Replay with ``threads`` request threads, each owning a disjoint share of the sessions
    (session s goes to thread s mod threads) in round-robin order. Returns (requests, seconds)."""
    shares = [np.flatnonzero(p.sessions % threads == t) for t in range(threads)]
    errors: list[BaseException] = []

    def worker(share: np.ndarray) -> None:
        try:
            for i in share.tolist():
                index.match(block_ids=p.contexts[i])
                index.insert(block_ids=p.fulls[i], metadata=p.metadata[i])
        except BaseException as exc:  # re-raised on the caller's thread below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(s,)) for s in shares]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    _drain(index)
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return len(p.contexts), wall


def _drain(index: Any) -> None:
    """Wait for SARP's deferred background work (refinement, rematerialization)."""
    drain = getattr(index, "drain", None)
    if drain is not None:
        drain()
