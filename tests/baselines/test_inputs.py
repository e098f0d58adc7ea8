"""Argument checks (errors name the argument, the index is left unchanged), lifecycle, counters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sarp.baselines import DESIGNS, open_baseline
from sarp.config import DEFAULT_METADATA_DTYPE
from sarp.errors import IndexClosedError

from .conftest import VARIANTS, S, variant_params
from .workload import metadata_for

IDS = np.arange(1, 21, dtype=np.uint64) * 0x9E3779B97F4A7C15


def bad_calls(n: int) -> list[tuple[object, object, type[Exception], str]]:
    """(block_ids, metadata, expected error, word its message names)."""
    good = metadata_for(IDS[:n], 9)
    return [
        (IDS[:n], good[:-1], ValueError, "metadata"),
        (IDS[:n], np.zeros(n, np.uint64), TypeError, "metadata"),
        (IDS[:n], list(good), TypeError, "metadata"),
        (IDS[:n], good.reshape(1, n), ValueError, "metadata"),
        (IDS[:n].astype(np.float64), good, TypeError, "block_ids"),
        (np.arange(-1, n - 1), good, ValueError, "block_ids"),
        (IDS[:n].reshape(1, n), good, ValueError, "block_ids"),
        ("abc", good, TypeError, "block_ids"),
        ([1.5] * n, good, TypeError, "block_ids"),
    ]


@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_bad_input_leaves_index_unchanged(variant, opener):
    _, name, options = variant
    idx = opener(name, segment_blocks=S, **options)
    idx.insert(IDS[:10], metadata_for(IDS[:10], 1))
    before = idx.match(IDS)
    for ids, meta, error, word in bad_calls(len(IDS)):
        with pytest.raises(error, match=word):
            idx.insert(ids, meta)
    with pytest.raises(TypeError, match="block_ids"):
        idx.match(IDS.astype(np.float64))
    after = idx.match(IDS)
    assert after.num_blocks == before.num_blocks == 10
    assert after.metadata.tobytes() == before.metadata.tobytes()
    assert idx.stats()["inserts"] == 1


@pytest.mark.parametrize("variant", variant_params(VARIANTS))
def test_lifecycle_and_stats(variant, opener):
    _, name, options = variant
    idx = opener(name, segment_blocks=S, **options)
    empty = idx.match(np.empty(0, np.uint64))
    assert empty.num_blocks == 0 and empty.metadata.dtype == DEFAULT_METADATA_DTYPE
    idx.insert([], np.zeros(0, DEFAULT_METADATA_DTYPE))
    idx.insert(IDS.tolist(), metadata_for(IDS, 1))
    m = idx.match(IDS[:15])
    assert (m.num_blocks, m.num_tokens) == (15, 15 * 16)
    st = idx.stats()
    assert {"dram_bytes", "entries", "matches", "inserts", "store_reads"} <= set(st)
    assert ("store" in st) == DESIGNS[name].uses_store
    assert idx.snapshot()["seconds"] >= 0
    idx.close()
    idx.close()
    assert idx.closed
    for call in (lambda: idx.match(IDS), lambda: idx.insert(IDS, metadata_for(IDS, 2)),
                 idx.snapshot, idx.stats):
        with pytest.raises(IndexClosedError):
            call()


def test_store_read_counts(opener):
    """SSD-BlockHash reads one record per probed block (the miss included); Segment-Hash at
    most log2(S) + 1 per window; Segment-Radix one per segment under the matched path."""
    reads = {}
    query = np.concatenate([IDS[:13], [np.uint64(5)]])
    for name in ("ssd_blockhash", "segment_hash", "segment_radix"):
        idx = opener(name, name, segment_blocks=S)
        idx.insert(IDS, metadata_for(IDS, 1))
        m = idx.match(query)
        assert m.num_blocks == 13
        reads[name] = m.stats["store_reads"]
    assert reads["ssd_blockhash"] == 14
    assert reads["segment_hash"] <= 2 * (math.log2(S) + 1)
    assert reads["segment_radix"] == 2


def test_open_arguments(tmp_path):
    with pytest.raises(TypeError, match="capped"):
        DESIGNS["segment_hash"].open(tmp_path / "a", capped=100)
    with pytest.raises(ValueError, match="power of two"):
        DESIGNS["segment_hash"].open(tmp_path / "b", segment_blocks=6)
    assert not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="backend"):
        DESIGNS["ssd_blockhash"].open(tmp_path / "c", backend="nope")
    with pytest.raises(ValueError, match="segment_blocks"):
        DESIGNS["segment_radix"].open(tmp_path / "d", segment_blocks=0)
    with pytest.raises(ValueError, match="name"):
        open_baseline("nope", tmp_path / "e")
    with open_baseline("exact", tmp_path / "f", block_size=4) as idx:
        assert idx.settings.block_size == 4
