"""An insert skips the whole windows its thread's last match verified, and nothing else."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import sarp
from sarp.baselines import open_baseline
from sarp.matched_prefix import MatchedPrefix


def _ids(n: int, start: int = 1) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.uint64)


def test_known_is_the_remembered_prefix_of_the_same_thread_only():
    mp = MatchedPrefix()
    q = _ids(100)
    assert mp.known(q) == 0
    mp.remember(q[:70])
    assert mp.known(q) == 70
    assert mp.known(q[:69]) == 0  # shorter than what was verified
    other = q.copy()
    other[10] = 999_999
    assert mp.known(other) == 0  # not a prefix
    seen = []
    t = threading.Thread(target=lambda: seen.append(mp.known(q)))
    t.start()
    t.join()
    assert seen == [0]


def test_insert_after_match_reads_only_the_windows_past_the_verified_prefix(tmp_path: Path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as index:
        first = _ids(200)
        index.insert(block_ids=first)
        longer = np.concatenate((first, _ids(100, start=10_000)))
        m = index.match(block_ids=longer)
        assert m.num_blocks == 200
        st = index.insert(block_ids=longer)
        assert st["windows"] == 2  # windows at 192 and 256; 0, 64 and 128 were verified
        assert index.match(block_ids=longer).num_blocks == 300
        # no match before: every window is matched again
        third = np.concatenate((longer, _ids(10, start=50_000)))
        index.match(block_ids=_ids(5, start=70_000))
        assert index.insert(block_ids=third)["windows"] == 5
        assert index.match(block_ids=third).num_blocks == 310


@pytest.mark.parametrize("design", ["ssd_blockhash", "segment_hash", "dram_blockhash"])
def test_baselines_skip_the_verified_prefix_and_store_the_rest(tmp_path: Path, design: str):
    index = open_baseline(design, tmp_path / design, backend="memory")
    try:
        meta = np.zeros(300, index.settings.metadata_dtype)
        meta["address"] = np.arange(300)
        first = _ids(200)
        index.insert(first, meta[:200])
        longer = np.concatenate((first, _ids(100, start=10_000)))
        assert index.match(longer).num_blocks == 200
        st = index.insert(longer, meta)
        # the block-hash designs probe from block 200 (one miss); Segment-Hash descends
        # window 192 only, at sizes 64, 32, ..., 1
        reads = st["probes"] if design == "dram_blockhash" else st["store_reads"]
        assert reads <= (7 if design == "segment_hash" else 1)
        got = index.match(longer)
        assert got.num_blocks == 300
        assert np.array_equal(got.metadata["address"], np.arange(300))
    finally:
        index.close()
