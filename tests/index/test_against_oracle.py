"""SARP against an exact longest-prefix oracle on workloads with heavy prefix sharing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import sarp

from .helpers import SMALL, Oracle, assert_verified, metadata_for, shared_prefix_workload


def replay(index, workload, block_size: int, check) -> None:
    oracle = Oracle()
    for tag, (ctx, full) in enumerate(workload):
        q = sarp.block_ids(ctx, block_size)
        m = index.match(block_ids=q)
        check(m, q, oracle.match(q), oracle)
        ids = sarp.block_ids(full, block_size)
        meta = metadata_for(ids, tag)
        index.insert(block_ids=ids, metadata=meta)
        oracle.insert(ids, meta)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block_size", [1, 4])
def test_unbounded_retrieval_equals_oracle(tmp_path, backend, seed, block_size):
    with sarp.open(tmp_path / "i", backend=backend, background=False, durability="none",
                   max_retrieval=0, block_size=block_size, **SMALL) as index:
        def check(m, q, exact, oracle):
            assert m.num_blocks == exact
            assert_verified(m, q, oracle)

        replay(index, shared_prefix_workload(seed), block_size, check)
        st = index.stats()
    # the workload exercised every path
    assert st["segments_extended"] > 0 and st["segments_written"] > 0
    assert st["routing_entries"] > st["segments"] / 4


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize("background", [False, True])
def test_bounded_retrieval_is_never_longer_and_never_wrong(tmp_path, seed, background):
    with sarp.open(tmp_path / "i", backend="memory", background=background, block_size=2,
                   max_retrieval=1, **SMALL) as index:
        def check(m, q, exact, oracle):
            assert m.num_blocks <= exact
            assert_verified(m, q, oracle)

        replay(index, shared_prefix_workload(seed), 2, check)


def test_default_configuration_against_oracle(tmp_path):
    """Paper defaults (S=64, R=4, tau=256 ...) on longer sequences: never longer, never wrong,
    and with this little sharing per window, equal."""
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        def check(m, q, exact, oracle):
            assert m.num_blocks == exact
            assert_verified(m, q, oracle)

        replay(index, shared_prefix_workload(5, sessions=10, turns=3, vocab=32000), 1, check)


def test_a_reopen_and_a_rebuild_from_segments_serve_what_was_inserted(tmp_path):
    """A reopen loads the snapshot written at close; ``sarp.rebuild`` then rebuilds the
    directory from a scan of the segments alone: both match every sequence in full."""
    workload = shared_prefix_workload(6, sessions=12, turns=3)
    with sarp.open(tmp_path / "i", backend="wiredtiger", background=False, block_size=2,
                   max_retrieval=0, **SMALL) as index:
        replay(index, workload, 2, lambda *a: None)
        before = [index.match(tokens=full).num_blocks for _, full in workload]
        segments = index.stats()["segments"]
    with sarp.open(tmp_path / "i", backend="wiredtiger", background=False) as index:
        assert index.recovery["snapshot"] is not None and index.recovery["journal_records"] == 0
        reopened = [index.match(tokens=full).num_blocks for _, full in workload]
        assert index.config.segment_blocks == SMALL["segment_blocks"]
    report = sarp.rebuild(tmp_path / "i")
    assert report["segments"] == segments
    with sarp.open(tmp_path / "i", backend="wiredtiger", background=False) as index:
        rebuilt = [index.match(tokens=full).num_blocks for _, full in workload]
    assert reopened == before and rebuilt == before
    assert all(b == len(full) // 2 for b, (_, full) in zip(before, workload, strict=True))


def test_full_field_ties_go_newest_first_and_stay_verified(tmp_path):
    """Three segments share a window's first L_max blocks, so their filters at p0 are identical
    and (pruned at p0) p0 is the only routing point. The newest is read first: one retrieval
    when it is the longest; a shorter but verified match when MaxRetrieval cuts off the longest;
    the exact match when MaxRetrieval is unbounded."""
    cfg: dict[str, Any] = dict(block_size=1, segment_blocks=8, routing_points=2, filter_fields=4,
               field_bits=16, stride=1, pruning_threshold=3)
    base = list(range(100, 105))
    seqs = [np.array(base + tail) for tail in ([1, 2, 3], [4, 5, 6], [7, 8, 9])]
    with sarp.open(tmp_path / "i", backend="memory", background=False, **cfg) as index:
        for s in seqs:
            index.insert(tokens=s)
        assert index.stats()["routing_entries"] == 1
        newest = index.match(tokens=seqs[2], max_retrieval=1)
        assert newest.num_blocks == 8 and newest.stats["segments_retrieved"] == 1
        assert newest.stats["candidates_after"] == 1
        oldest = index.match(tokens=seqs[0], max_retrieval=1)
        assert oldest.num_blocks == 5 and oldest.stats["segments_retrieved"] == 1
        assert np.array_equal(oldest.block_ids, sarp.block_ids(seqs[0], 1)[:5])
        exact = index.match(tokens=seqs[0], max_retrieval=0)
        assert exact.num_blocks == 8 and exact.stats["segments_retrieved"] == 3
        assert exact.stats["candidates_after"] == 3
