"""A kill, a power cut in the middle of a snapshot, and the check of what a crash left, for the
tests that recover from them."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp import snapshot
from storage_backends.power_loss import PowerLossIO

from ..index.helpers import Oracle, assert_own_records, metadata_for


def open_through(io: PowerLossIO, path: Path, kind: str, **options: Any) -> sarp.Index:
    """``sarp.open`` of the index at ``path`` on ``kind`` (odirect, or flashlog with two
    instances), every file of it through ``io``, buffered, with no closing snapshot."""
    store = {"io": io, **({"instances": 2} if kind == "flashlog" else {})}
    return sarp.open(path, backend=kind, direct_io=False, store_options=store, _io=io,
                     snapshot_on_close=False, **options)


def killed(index: Any) -> None:
    """End ``index`` as kill -9 would: what it queued in memory is gone, what it wrote stays
    (in the page cache, not durable), and the store's lock is released."""
    lock = index.store._lock_file
    assert lock is not None
    lock.close()


def snapshot_cut_by_power(index: Any, io: PowerLossIO) -> None:
    """``index.snapshot()`` with a power cut (unsynced writes dropped) where it writes the
    snapshot file: the journal switch is done, the snapshot never published."""
    real = snapshot.write

    def power_cut(*args: object, **kwargs: object) -> None:
        io.crash("drop")
        raise OSError(errno.EIO, "power cut")

    snapshot.write = power_cut  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="power cut"):
            index.snapshot()
    finally:
        snapshot.write = real


def assert_requests_after_crash(index: sarp.Index, requests: list[np.ndarray], begun: set[int],
                                acked: set[int], where: str) -> None:
    """Check each of ``requests`` (block IDs; request i inserted with ``metadata_for(ids, i)``)
    on the index a crash left: acknowledged ones match whole; none matches past what the
    requests begun before the crash hold; every record is its block's own and that of a
    begun request that holds the block."""
    oracle = Oracle()
    writers: dict[int, set[int]] = {}  # block ID -> the begun requests that hold it
    for i in sorted(begun):
        oracle.insert(requests[i], metadata_for(requests[i], i))
        for b in requests[i].tolist():
            writers.setdefault(b, set()).add(i)
    for i, ids in enumerate(requests):
        m = index.match(block_ids=ids)
        at = f"{where}, request {i}"
        assert_own_records(m, ids, at)
        assert m.num_blocks <= oracle.match(ids), at
        if i in acked:
            assert m.num_blocks == len(ids), at
        for b, node in zip(m.block_ids.tolist(), m.metadata["node"].tolist(), strict=True):
            assert node in writers[b], at
