"""The public API: configuration storage, bad input, short sequences, closed indexes."""

from __future__ import annotations

import numpy as np
import pytest

import sarp
from sarp.errors import ConfigMismatchError, IndexClosedError


@pytest.fixture
def index(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as idx:
        yield idx


def tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32000, n)


def snapshot_of(index) -> tuple:
    st = index.stats()
    return st["segments"], st["routing_entries"], st["store"]["logical_writes"]


def test_match_returns_blocks_tokens_ids_and_metadata(index):
    t = tokens(100)
    meta = np.zeros(6, sarp.DEFAULT_METADATA_DTYPE)
    meta["node"] = np.arange(6)
    meta["address"] = 7 * np.arange(6)
    index.insert(tokens=t, metadata=meta)
    m = index.match(tokens=t)
    assert (m.num_blocks, m.num_tokens) == (6, 96)
    assert np.array_equal(m.block_ids, sarp.block_ids(t))
    assert np.array_equal(m.metadata, meta)
    assert m.stats["segments_retrieved"] == 1
    # block IDs computed by an inference engine work the same way
    assert index.match(block_ids=sarp.block_ids(t)).num_blocks == 6


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        (dict(tokens=np.arange(64), metadata=np.zeros(3, sarp.DEFAULT_METADATA_DTYPE)),
         ValueError, "metadata"),
        (dict(tokens=np.arange(64), metadata=np.zeros(4, np.uint64)), TypeError, "metadata"),
        (dict(tokens=np.arange(64.0)), TypeError, "tokens"),
        (dict(tokens=[1, 2, -3] * 20), ValueError, "tokens"),
        (dict(tokens=np.arange(64), namespace=b"other-model"), ValueError, "namespace"),
        (dict(tokens=np.arange(64), block_ids=np.arange(4, dtype=np.uint64)), TypeError,
         "block_ids"),
        (dict(block_ids=[1.5, 2.5]), TypeError, "block_ids"),
    ],
)
def test_bad_input_raises_and_leaves_the_index_unchanged(index, kwargs, exc, word):
    index.insert(tokens=tokens(64, 1))
    before = snapshot_of(index)
    with pytest.raises(exc, match=word):
        index.insert(**kwargs)
    assert snapshot_of(index) == before
    assert index.match(tokens=np.arange(64)).num_blocks == 0


def test_sequence_shorter_than_one_block_matches_nothing_and_inserts_nothing(index):
    before = snapshot_of(index)
    index.insert(tokens=np.arange(15))
    assert snapshot_of(index) == before
    assert index.match(tokens=np.arange(15)).num_blocks == 0
    assert index.match(tokens=[]).num_blocks == 0


def test_configuration_is_stored_and_conflicts_are_refused(tmp_path):
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", tau=17, segment_blocks=32) as idx:
        idx.insert(tokens=tokens(600))
    with pytest.raises(ConfigMismatchError, match="tau"):
        sarp.open(path, backend="wiredtiger", tau=18)
    with pytest.raises(ConfigMismatchError, match="segment_blocks"):
        sarp.open(path, backend="wiredtiger", segment_blocks=64)
    # the stored configuration is used when none is given; max_retrieval only steers queries
    with sarp.open(path, backend="wiredtiger", max_retrieval=1) as idx:
        assert (idx.config.tau, idx.config.segment_blocks, idx.config.max_retrieval) == (17, 32, 1)
        assert idx.match(tokens=tokens(600)).num_blocks == 600 // 16


def test_unknown_parameters_and_bad_paths(tmp_path):
    with pytest.raises(TypeError, match="segment_size"):
        sarp.open(tmp_path / "i", backend="memory", segment_size=64)
    with pytest.raises(ValueError, match="field_bits"):
        sarp.open(tmp_path / "j", backend="memory", filter_fields=8, field_bits=4)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        sarp.open(f, backend="memory")
    with pytest.raises(ValueError, match="max_retrieval"):
        with sarp.open(tmp_path / "k", backend="memory") as idx:
            idx.match(tokens=np.arange(32), max_retrieval=-1)


def test_closed_index_raises(tmp_path):
    idx = sarp.open(tmp_path / "i", backend="memory")
    idx.close()
    idx.close()  # idempotent
    with pytest.raises(IndexClosedError):
        idx.match(tokens=np.arange(32))
    with pytest.raises(IndexClosedError):
        idx.insert(tokens=np.arange(32))
