"""Helpers for the index tests: small configurations, workloads, an exact oracle."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import sarp

#: Small parameters that force every path: 8-block segments, 2 base points (D = 4),
#: 4 filter fields of 16 bits at stride 1, refinement above 3, pruning at 1.
SMALL: dict[str, Any] = dict(segment_blocks=8, routing_points=2, filter_fields=4,
                              field_bits=16, stride=1, tau=3, pruning_threshold=1)


class Oracle:
    """Exact longest-prefix matching over chained block IDs; first metadata per block wins."""

    def __init__(self) -> None:
        self.meta: dict[int, bytes] = {}

    def insert(self, ids: np.ndarray, meta: np.ndarray) -> None:
        for i, b in enumerate(ids.tolist()):
            self.meta.setdefault(b, meta[i].tobytes())

    def match(self, ids: np.ndarray) -> int:
        n = 0
        for b in ids.tolist():
            if b not in self.meta:
                break
            n += 1
        return n


def assert_verified(m, q: np.ndarray, oracle: Oracle, where: str = "") -> None:
    """Every returned block ID and metadata record is what was inserted for that prefix
    (the first writer's record)."""
    assert np.array_equal(m.block_ids, q[: m.num_blocks]), where
    for i in range(m.num_blocks):
        assert m.metadata[i].tobytes() == oracle.meta[int(q[i])], where


def assert_own_records(m, q: np.ndarray, where: str = "") -> None:
    """Every returned block ID is the query's, and each record is its block's own (the
    ``address`` that ``metadata_for`` gives it), whichever writer's it is."""
    assert np.array_equal(m.block_ids, q[: m.num_blocks]), where
    assert np.array_equal(m.metadata["address"], q[: m.num_blocks]), where


def metadata_for(ids: np.ndarray, tag: int) -> np.ndarray:
    """Metadata that differs per insert (tag) so first-writer-wins is observable."""
    m = np.zeros(len(ids), sarp.DEFAULT_METADATA_DTYPE)
    m["address"] = ids
    m["node"] = tag
    return m


def shared_prefix_workload(seed: int, sessions: int = 30, turns: int = 4, vocab: int = 50):
    """Block-ID sequences with heavy sharing: a few system prompts, branching continuations,
    multi-turn extension. Returns a list of (context, full) token arrays in round-robin order."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, vocab, int(rng.integers(16, 200))) for _ in range(3)]
    branches = [rng.integers(0, vocab, int(rng.integers(1, 120))) for _ in range(6)]
    hist = []
    for _ in range(sessions):
        parts = [prompts[rng.integers(len(prompts))]]
        if rng.random() < 0.7:
            parts.append(branches[rng.integers(len(branches))])
        hist.append(np.concatenate(parts))
    out = []
    for _ in range(turns):
        for s in range(sessions):
            user = rng.integers(0, vocab, int(rng.integers(0, 90)))
            ctx = np.concatenate((hist[s], user))
            full = np.concatenate((ctx, rng.integers(0, vocab, int(rng.integers(0, 90)))))
            out.append((ctx, full))
            hist[s] = full
    return out


def random_workload(rng: np.random.Generator, requests: int
                    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(context, context plus output) token arrays: sessions over a few shared prompts that
    grow turn by turn, now and then restart, or go on from a cut of their history."""
    vocab = int(rng.choice([3, 5, 20, 200]))
    prompts = [rng.integers(0, vocab, int(rng.integers(1, 300)))
               for _ in range(int(rng.integers(1, 5)))]
    sessions = [prompts[rng.integers(len(prompts))] for _ in range(int(rng.integers(1, 12)))]
    for _ in range(requests):
        s = int(rng.integers(len(sessions)))
        if rng.random() < 0.1:
            sessions[s] = prompts[rng.integers(len(prompts))]
        hist = sessions[s]
        cut = len(hist) if rng.random() < 0.8 else int(rng.integers(0, len(hist) + 1))
        ctx = np.concatenate((hist[:cut], rng.integers(0, vocab, int(rng.integers(0, 80)))))
        full = np.concatenate((ctx, rng.integers(0, vocab, int(rng.integers(0, 80)))))
        sessions[s] = full
        yield ctx, full


def random_config(rng: np.random.Generator, bounded: bool) -> dict[str, Any]:
    """Parameters small enough that refinement, pruning and filtering ties all happen;
    ``bounded``: a MaxRetrieval of 1 to 3, else unbounded (exact)."""
    routing_points = int(rng.choice([1, 2, 4]))
    segment_blocks = routing_points * int(rng.choice([4, 6, 8]))
    fields = int(rng.choice([n for n in (2, 4, 8) if n <= segment_blocks]))
    return dict(segment_blocks=segment_blocks, routing_points=routing_points,
                filter_fields=fields, field_bits=64 // fields,
                stride=int(rng.choice([s for s in (1, 2, 3) if fields * s <= segment_blocks])),
                tau=int(rng.choice([1, 2, 3, 8])),
                pruning_threshold=int(rng.choice([0, 1, 2, 4])),
                max_retrieval=int(rng.integers(1, 4)) if bounded else 0,
                refinement=bool(rng.random() < 0.8), filtering=bool(rng.random() < 0.8),
                pruning=bool(rng.random() < 0.8), block_size=int(rng.choice([1, 2])))
