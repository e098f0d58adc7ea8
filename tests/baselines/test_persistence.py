"""Reopen after close, snapshot then reopen, damaged snapshots, stored settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sarp.baselines import DESIGNS
from sarp.baselines.sealed import seal
from sarp.baselines.settings import FILE, MAGIC
from sarp.errors import ConfigMismatchError, CorruptionError, RecoveryError

from .conftest import HAVE_WT, STORE_VARIANTS, S, variant_params
from .test_against_oracle import check_same, run_against_oracle
from .workload import BLOCK, Reference, metadata_for, requests

needs_wt = pytest.mark.skipif(not HAVE_WT, reason="wiredtiger is not installed")
WT: dict[str, Any] = {"backend": "wiredtiger", "durability": "none", "memory_budget": 4 << 20}
PERSISTENT = [pytest.param(("dram_blockhash", "dram_blockhash", {}), id="dram_blockhash")] + [
    pytest.param(v, id=v[0], marks=needs_wt) for v in STORE_VARIANTS]


@pytest.mark.parametrize("variant", PERSISTENT)
def test_reopen_after_close_keeps_everything(variant, tmp_path):
    """Close, reopen with the path alone: every stored prefix still matches, and inserting
    after the reopen (fresh ids) keeps matching the oracle."""
    _, name, options = variant
    backend = WT if DESIGNS[name].uses_store else {}
    reqs = list(requests(5, sessions=14, turns=4))
    half = len(reqs) // 2
    reference = Reference()
    idx = DESIGNS[name].open(tmp_path / "idx", segment_blocks=S, block_size=BLOCK,
                             **backend, **options)
    oracle = DESIGNS["exact"].open(tmp_path / "oracle", block_size=BLOCK)
    run_against_oracle(idx, oracle, reqs[:half], reference)
    idx.close()
    with DESIGNS[name].open(tmp_path / "idx") as idx:
        assert idx.recovery["seconds"] >= 0
        for req in reqs[:half]:
            check_same(idx.match(req.full), oracle.match(req.full), req.full)
        run_against_oracle(idx, oracle, reqs[half:], reference)
    oracle.close()


def test_snapshot_restores_without_close(tmp_path):
    """A DRAM-BlockHash reopened from its snapshot (the writer never closed: a crash) holds
    exactly what was inserted before the snapshot, and reports its recovery stages."""
    reqs = list(requests(6, sessions=8, turns=2))
    writer = DESIGNS["dram_blockhash"].open(tmp_path / "idx", block_size=BLOCK)
    before = DESIGNS["exact"].open(tmp_path / "oracle", block_size=BLOCK)
    for req in reqs[:8]:
        writer.insert(req.full, req.metadata)
        before.insert(req.full, req.metadata)
    info = writer.snapshot()
    for req in reqs[8:]:
        writer.insert(req.full, req.metadata)
    file = tmp_path / "idx" / "blockhash.snap"
    assert info["bytes_written"] == file.stat().st_size
    with DESIGNS["dram_blockhash"].open(tmp_path / "idx") as restored:
        rec = restored.recovery
        assert rec["bytes_read"] == file.stat().st_size
        assert {"snapshot_load_s", "deserialize_s", "rebuild_s", "seconds"} <= set(rec)
        assert restored.stats()["entries"] == before.stats()["entries"]
        for req in reqs:
            check_same(restored.match(req.full), before.match(req.full), req.full)
    before.close()
    writer.close()


def damaged(data: bytes) -> dict[str, bytes]:
    mid = len(data) // 2
    return {
        "magic": b"X" + data[1:],
        "payload": data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1:],
        "checksum": data[:-1] + bytes([data[-1] ^ 1]),
        "truncated": data[:mid],
        "one_short": data[:-1],
        "empty": b"",
    }


@pytest.mark.parametrize("name,file,backend", [
    ("dram_blockhash", "blockhash.snap", {}),
    pytest.param("segment_radix", "radix.snap", WT, marks=needs_wt),
])
def test_damaged_snapshot_is_detected(name, file, backend, tmp_path):
    with DESIGNS[name].open(tmp_path / "idx", segment_blocks=S, block_size=BLOCK,
                            **backend) as idx:
        for req in requests(7, sessions=6, turns=2):
            idx.insert(req.full, req.metadata)
    snap = tmp_path / "idx" / file
    good = snap.read_bytes()
    for data in damaged(good).values():
        snap.write_bytes(data)
        with pytest.raises(CorruptionError, match=file):
            DESIGNS[name].open(tmp_path / "idx")
    snap.write_bytes(good)
    with DESIGNS[name].open(tmp_path / "idx") as idx:
        assert idx.stats()["entries"] > 1


def test_stored_settings_are_checked(tmp_path: Path):
    DESIGNS["segment_hash"].open(tmp_path / "idx", segment_blocks=8).close()
    with pytest.raises(ConfigMismatchError, match="segment_blocks"):
        DESIGNS["segment_hash"].open(tmp_path / "idx", segment_blocks=16)
    with pytest.raises(ConfigMismatchError, match="design"):
        DESIGNS["segment_radix"].open(tmp_path / "idx")
    with pytest.raises(ConfigMismatchError, match="metadata_dtype"):
        DESIGNS["segment_hash"].open(tmp_path / "idx", metadata_dtype=np.uint64)
    with DESIGNS["segment_hash"].open(tmp_path / "idx") as idx:
        assert idx.settings.segment_blocks == 8


def test_the_recovery_time_counts_the_whole_open(tmp_path: Path, monkeypatch):
    """As SARP's ``total_s`` does: the settings' read is part of a reopen, so a slow one (a
    cold read after the page cache was dropped) shows in ``recovery["seconds"]``."""
    import time

    from sarp.baselines import base

    DESIGNS["dram_blockhash"].open(tmp_path / "idx", segment_blocks=8).close()
    real = base.resolve

    def slow(*args: Any) -> Any:
        time.sleep(0.05)
        return real(*args)

    monkeypatch.setattr(base, "resolve", slow)
    with DESIGNS["dram_blockhash"].open(tmp_path / "idx") as idx:
        assert idx.recovery["seconds"] >= 0.05


@pytest.mark.parametrize("payload", [
    b"not json", b"[1, 2]", b'{"design": "segment_hash"}',
    b'{"backend": "memory", "block_size": 16, "capped": null, "design": "segment_hash", '
    b'"metadata_dtype": "<u8", "segment_blocks": 8, "spare": 1}',
    b'{"backend": "memory", "block_size": 0, "capped": null, "design": "segment_hash", '
    b'"metadata_dtype": "<u8", "segment_blocks": 8}',
], ids=["not_json", "not_an_object", "keys_missing", "key_unknown", "value_out_of_range"])
def test_sealed_settings_that_are_not_settings_are_corruption(payload: bytes, tmp_path: Path):
    """A settings file whose seal holds but whose payload no writer makes is refused as
    corruption, naming the file, never opened with defaults."""
    DESIGNS["segment_hash"].open(tmp_path / "idx", segment_blocks=8).close()
    (tmp_path / "idx" / FILE).write_bytes(seal(MAGIC, payload))
    with pytest.raises(CorruptionError, match=FILE):
        DESIGNS["segment_hash"].open(tmp_path / "idx")


@pytest.mark.parametrize("variant", variant_params(STORE_VARIANTS))
def test_memory_backend_reopens_empty(variant, tmp_path):
    """The memory engine keeps nothing across close(); the index reopens empty and works."""
    _, name, options = variant
    ids = np.arange(1, 20, dtype=np.uint64)
    with DESIGNS[name].open(tmp_path / "idx", segment_blocks=S, **options) as idx:
        idx.insert(ids, metadata_for(ids, 1))
    with DESIGNS[name].open(tmp_path / "idx") as idx:
        assert idx.match(ids).num_blocks == 0
        idx.insert(ids, metadata_for(ids, 2))
        assert idx.match(ids).metadata["node"].tolist() == [2] * len(ids)


@pytest.mark.parametrize("variant", variant_params(STORE_VARIANTS))
def test_segment_ids_are_stored_as_dense_keys(variant, tmp_path):
    """Segment-Radix's store keys are segment ids allocated from 0, as SARP's: it opens its
    store with the dense-keys hint (odirect addresses records by key), the hashed designs do
    not. Either way the index matches the oracle before and after a reopen."""
    _, name, options = variant
    odirect: dict[str, Any] = {"backend": "odirect", "durability": "none", "memory_budget": 1 << 20}
    reqs = list(requests(8, sessions=8, turns=3))
    oracle = DESIGNS["exact"].open(tmp_path / "oracle", block_size=BLOCK)
    idx = DESIGNS[name].open(tmp_path / "idx", segment_blocks=S, block_size=BLOCK, **odirect,
                             **options)
    assert idx.store is not None
    assert idx.store.stats()["key_mode"] == ("dense" if name == "segment_radix" else "sparse")
    run_against_oracle(idx, oracle, reqs, Reference())
    idx.close()
    with DESIGNS[name].open(tmp_path / "idx", **odirect) as idx:
        for req in reqs:
            check_same(idx.match(req.full), oracle.match(req.full), req.full)
    oracle.close()


_CRASHING_WRITER = """
import os, sys
import numpy as np
from sarp.baselines import DESIGNS
from sarp.baselines.sealed import seal
from sarp.baselines.settings import FILE, MAGIC
from tests.baselines.workload import BLOCK, requests
from tests.baselines.conftest import S
idx = DESIGNS["segment_radix"].open(sys.argv[1], segment_blocks=S, block_size=BLOCK,
                                    backend=sys.argv[2], durability="none", capped=2048)
reqs = list(requests(5, sessions=14, turns=4))
for req in reqs[:20]:
    idx.insert(req.full, req.metadata)
idx.snapshot()
for req in reqs[20:]:
    idx.insert(req.full, req.metadata)  # spills nodes newer than the snapshot
assert idx.stats()["spill_writes"] > 0
os._exit(0)  # a crash: no close
"""


@pytest.mark.parametrize("backend", [pytest.param("wiredtiger", marks=needs_wt), "odirect"])
def test_capped_radix_refuses_to_open_after_a_crash(backend, tmp_path):
    """Segment-Radix (capped) recovers only from a clean close: after a crash its spilled
    nodes may be newer than its snapshot, so opening it raises RecoveryError instead of
    serving a tree it cannot reconcile."""
    path = tmp_path / "idx"
    subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(path), backend], check=True,
                   cwd=Path(__file__).resolve().parents[2])
    with pytest.raises(RecoveryError, match="was not closed"):
        DESIGNS["segment_radix"].open(path)


def test_capped_radix_opens_again_after_an_open_that_failed(tmp_path):
    """An open that fails while loading (a damaged snapshot) leaves no open marker behind:
    once the snapshot is whole again, the tree opens."""
    path = tmp_path / "idx"
    reqs = list(requests(5, sessions=14, turns=4))
    opts: dict[str, Any] = dict(segment_blocks=S, block_size=BLOCK, backend="odirect", capped=2048)
    with DESIGNS["segment_radix"].open(path, **opts) as idx:
        for req in reqs:
            idx.insert(req.full, req.metadata)
    snap = path / "radix.snap"
    good = snap.read_bytes()
    snap.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(CorruptionError):
        DESIGNS["segment_radix"].open(path, **opts)
    snap.write_bytes(good)
    with DESIGNS["segment_radix"].open(path, **opts) as idx:
        assert idx.match(reqs[-1].full).num_blocks == len(reqs[-1].full)
