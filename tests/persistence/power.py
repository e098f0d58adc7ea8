"""A kill, and a power cut in the middle of a snapshot, for the tests that recover from them."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

import sarp
from sarp import snapshot
from storage_backends.io import PowerLossIO


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
        snapshot.write = real  # type: ignore[assignment]
