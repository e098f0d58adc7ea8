"""The deterministic workload the crash writer inserts and the checks verify.

Sequence i shares prompts and branches with others (so inserts extend segments, copy shared
prefixes and trigger refinement and pruning), and block metadata is a function of the block
ID, so any returned record can be checked without knowing who inserted it first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import sarp

CONFIG: dict[str, Any] = dict(block_size=4, segment_blocks=16, routing_points=2, filter_fields=8,
                              field_bits=8, stride=1, tau=4, pruning_threshold=1)


def sequence(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    prompt = np.random.default_rng(1000 + i % 3).integers(0, 500, 150)
    branch = np.random.default_rng(2000 + i % 7).integers(0, 500, int(20 + 10 * (i % 7)))
    return np.concatenate((prompt, branch, rng.integers(0, 500, int(rng.integers(0, 200)))))


def metadata(ids: np.ndarray) -> np.ndarray:
    m = np.zeros(len(ids), sarp.DEFAULT_METADATA_DTYPE)
    m["address"] = ids
    m["node"] = (ids >> np.uint64(40)).astype(np.uint32)
    return m


def check_match(index, i: int) -> int:
    """Match sequence i; assert every returned block and record is one that was inserted.
    Returns the matched block count."""
    tokens = sequence(i)
    m = index.match(tokens=tokens, max_retrieval=0)
    ids = sarp.block_ids(tokens, CONFIG["block_size"])
    assert np.array_equal(m.block_ids, ids[: m.num_blocks])
    assert np.array_equal(m.metadata, metadata(m.block_ids))
    return m.num_blocks


def assert_holds(index, n: int) -> None:
    """Assert that sequences 0 .. n-1 match whole, each checked as by ``check_match``."""
    short = [i for i in range(n) if check_match(index, i) != full_blocks(i)]
    assert not short, f"sequences that match short: {short}"


def insert(index, i: int) -> None:
    """Insert sequence i with its metadata."""
    tokens = sequence(i)
    index.insert(tokens=tokens, metadata=metadata(sarp.block_ids(tokens, CONFIG["block_size"])))


def full_blocks(i: int) -> int:
    """The blocks of sequence i: what a match of it returns once it is stored whole."""
    return len(sequence(i)) // CONFIG["block_size"]
