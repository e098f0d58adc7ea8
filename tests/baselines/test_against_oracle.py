"""Every design against the exact oracle on a prefix-heavy workload (and the oracle against a
reference model): same matched length, the query's block IDs, the first-written metadata."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pytest

from sarp.baselines import BaselineIndex
from sarp.baselines.base import PROBE_BATCH, probe_blocks
from sarp.baselines.radix_nodes import PIECE_SHIFT, NodeTable
from sarp.block_ids import block_ids
from sarp.matching import MatchResult

from ..index.helpers import random_workload
from .conftest import BACKENDS, CAP, STORE_VARIANTS, VARIANTS, S, variant_params
from .workload import BLOCK, Reference, Request, metadata_for, requests


def check_same(got: MatchResult, want: MatchResult, query: np.ndarray) -> None:
    assert got.num_blocks == want.num_blocks
    assert got.num_tokens == got.num_blocks * BLOCK
    assert np.array_equal(got.block_ids, query[: got.num_blocks])
    assert got.metadata.dtype == want.metadata.dtype
    assert got.metadata.tobytes() == want.metadata.tobytes()
    assert got.stats["store_reads"] >= 0


def run_against_oracle(idx: BaselineIndex, oracle: BaselineIndex, reqs: Iterable[Request],
                       reference: Reference | None = None) -> int:
    """Match then insert each request on both (and on ``reference``, which must hold what the
    oracle holds); returns the blocks the oracle matched."""
    reference = Reference() if reference is None else reference
    hits = 0
    for req in reqs:
        want = oracle.match(req.context)
        n, meta = reference.match(req.context)
        assert (want.num_blocks, want.metadata.tobytes()) == (n, meta)
        check_same(idx.match(req.context), want, req.context)
        hits += want.num_blocks
        for target in (idx, oracle):
            target.insert(req.full, req.metadata)
        reference.insert(req.full, req.metadata)
    return hits


@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_memory_backend(variant, opener):
    _, name, options = variant
    idx = opener(name, backend="memory", segment_blocks=S, block_size=BLOCK, **options)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    hits = run_against_oracle(idx, oracle, requests(1))
    assert hits > 0


@pytest.mark.parametrize("variant", variant_params(STORE_VARIANTS))
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
def test_persistent_backend(variant, backend, opener):
    _, name, options = variant
    idx = opener(name, backend=backend, segment_blocks=S, block_size=BLOCK,
                 durability="none", memory_budget=4 << 20, **options)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    run_against_oracle(idx, oracle, requests(2, sessions=16, turns=3))


@pytest.mark.parametrize("segment_blocks", [1, 2, 4, 32])
@pytest.mark.parametrize("variant", variant_params(STORE_VARIANTS))
def test_segment_sizes(variant, segment_blocks, opener):
    _, name, options = variant
    idx = opener(name, segment_blocks=segment_blocks, block_size=BLOCK, **options)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    run_against_oracle(idx, oracle, requests(3, sessions=10, turns=3))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_random_workloads(variant, seed, opener):
    """The randomized workloads of SARP's suite (``tests/index/test_randomized.py``), at a
    random segment size."""
    rng = np.random.default_rng(seed)
    _, name, options = variant
    idx = opener(name, segment_blocks=int(rng.choice([1, 2, 4, 8, 16])), block_size=BLOCK,
                 **options)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    reqs = []
    for k, (ctx, full) in enumerate(random_workload(rng, 150)):
        ids = block_ids(full, BLOCK)
        reqs.append(Request(block_ids(ctx, BLOCK), ids, metadata_for(ids, k)))
    run_against_oracle(idx, oracle, reqs)


def test_first_writer_wins(opener):
    """Re-inserting a stored prefix with other metadata keeps the first metadata, and a
    longer re-insert adds only its new blocks, in every design."""
    ids = np.arange(1, 30, dtype=np.uint64) * 0x9E3779B97F4A7C15
    for k, (_, name, options) in enumerate(VARIANTS):
        idx = opener(name, f"d{k}", segment_blocks=S, **options)
        first = np.zeros(20, idx.settings.metadata_dtype)
        first["address"] = 7
        second = np.zeros(29, idx.settings.metadata_dtype)
        second["address"] = 9
        idx.insert(ids[:20], first)
        idx.insert(ids, second)
        got = idx.match(ids).metadata["address"]
        assert got.tolist() == [7] * 20 + [9] * 9, name


def test_capped_radix_stays_under_cap(opener):
    """The capped tree's resident nodes stay under the cap after every operation while it
    still matches exactly; the same workload uncapped needs more DRAM than the cap."""
    capped = opener("segment_radix", "capped", segment_blocks=S, block_size=BLOCK, capped=CAP)
    uncapped = opener("segment_radix", "uncapped", segment_blocks=S, block_size=BLOCK)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    for req in requests(4, sessions=16, turns=3):
        want = oracle.match(req.context)
        check_same(capped.match(req.context), want, req.context)
        assert capped.stats()["dram_bytes"] <= CAP
        for idx in (capped, uncapped, oracle):
            idx.insert(req.full, req.metadata)
        assert capped.stats()["dram_bytes"] <= CAP
    st = capped.stats()
    assert st["store_reads"] > 0 and st["spill_writes"] > 0
    assert uncapped.stats()["dram_bytes"] > 4 * CAP
    assert uncapped.stats()["entries"] == st["entries"]


def long_requests(seed: int, sessions: int = 300, turns: int = 2) -> Iterator[Request]:
    """One long shared prompt (an edge of several KiB) that every session forks right after
    (a node of several hundred children), then more turns that walk back through it."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 50, 3000)
    histories = [np.concatenate([prompt, rng.integers(0, 50, 8)]) for _ in range(sessions)]
    serial = 0
    for _ in range(turns):
        for s, history in enumerate(histories):
            histories[s] = np.concatenate([history, rng.integers(0, 50, 12)])
            serial += 1
            full = block_ids(histories[s].astype(np.uint32), BLOCK)
            yield Request(block_ids(history.astype(np.uint32), BLOCK), full,
                          metadata_for(full, serial))


@pytest.mark.parametrize("backend", ["memory", "odirect"])
def test_capped_radix_spills_nodes_larger_than_a_record(backend, opener):
    """Segment-Radix (capped) works when a spilled node exceeds the store's largest value
    (odirect's slot): such a node is written and read back in pieces."""
    idx = opener("segment_radix", backend=backend, segment_blocks=S, block_size=BLOCK,
                 durability="none", capped=CAP)
    oracle = opener("exact", "oracle", block_size=BLOCK)
    assert run_against_oracle(idx, oracle, long_requests(4)) > 0
    st = idx.stats()
    limit = st["spill_piece_bytes"]
    assert (limit is not None) == (backend == "odirect")
    if limit is not None:
        assert st["spill_store"]["logical_writes"] == st["spill_writes"] > st["store_writes"] // 2


def test_radix_node_pieces_round_trip():
    """A sealed node is cut into pieces of the store's value size and reassembled."""
    table = NodeTable(None, None)
    table.piece_bytes = 100
    blob = bytes(range(256)) * 3
    pieces = table._pieces(7, blob)
    assert [k & ((1 << PIECE_SHIFT) - 1) for k, _ in pieces] == [7] * 8
    assert [k >> PIECE_SHIFT for k, _ in pieces] == list(range(8))
    assert b"".join(v for _, v in pieces) == blob and max(len(v) for _, v in pieces) == 100
    assert table._pieces(7, blob[:100]) == [(7, blob[:100])]


def test_decoded_radix_nodes_own_their_edges():
    """A node read back (from the snapshot or the spill store) holds a copy of its edge, not
    a view that would keep the whole decoded record alive outside the cap's count."""
    from sarp.baselines.radix_nodes import Node, build_nodes, decode_columns, encode_nodes
    from sarp.baselines.sealed import Cursor

    nodes = [Node(i, 3 * i, np.arange(i, i + 5, dtype=np.uint64), 10 + i, i, {i + 1: i + 1})
             for i in range(4)]
    raw = memoryview(encode_nodes(nodes))
    back = build_nodes(*decode_columns(Cursor(raw, "test")))
    for want, got in zip(nodes, back, strict=True):
        assert np.array_equal(got.edge, want.edge) and got.children == want.children
        assert got.edge.base is None  # owns its data


def test_segment_hash_takes_a_diverged_partial_window_from_its_match(tmp_path):
    """A match that stops where its query diverged, inside a window shorter than S, settled
    that window: no stored sequence holds the block it stopped at. The insert that follows
    (context + output) takes it from the match, as SARP's does, and reads nothing."""
    from sarp.baselines import DESIGNS

    ids = block_ids(np.arange(19 * BLOCK), BLOCK)
    ctx = ids[:15].copy()
    ctx[13:] = block_ids(np.arange(100, 100 + 15 * BLOCK), BLOCK)[13:15]  # new from block 13
    full = np.concatenate((ctx, block_ids(np.arange(500, 504 * BLOCK), BLOCK)[:4]))
    with DESIGNS["segment_hash"].open(tmp_path / "i", segment_blocks=16, block_size=BLOCK,
                                      backend="memory") as idx:
        idx.insert(ids[:13], metadata_for(ids[:13], 1))
        m = idx.match(ctx)
        assert m.num_blocks == 13 and m.stats["store_reads"] > 0
        st = idx.insert(full, metadata_for(full, 2))
        assert st["store_reads"] == 0
        got = idx.match(full)
        assert got.num_blocks == len(full)
        assert got.metadata["node"].tolist() == [1] * 13 + [2] * (len(full) - 13)


def test_block_hash_probes_batch_by_batch_until_the_batch_with_the_first_miss():
    """A block-hash probe looks keys up PROBE_BATCH at a time and stops after the batch that
    holds the first miss; every key looked up counts, as the paper counts logical reads."""
    stored = {k: bytes([k % 256]) for k in range(1, 101)}  # keys 1..100
    calls: list[list[int]] = []

    def get_many(keys: list[int]) -> list[bytes | None]:
        calls.append(keys)
        return [stored.get(k) for k in keys]

    ids = list(range(1, 200))
    found, probes = probe_blocks(get_many, ids)
    assert found == [stored[k] for k in range(1, 101)]
    assert calls == [ids[:PROBE_BATCH], ids[PROBE_BATCH:2 * PROBE_BATCH]]
    assert probes == 2 * PROBE_BATCH
    calls.clear()
    assert probe_blocks(get_many, ids[:70]) == ([stored[k] for k in range(1, 71)], 70)
    assert probe_blocks(get_many, []) == ([], 0)
