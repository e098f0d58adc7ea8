"""WiredTiger and RocksDB do their own I/O and stop their own writes after a write fails.

Each case runs ``size_limited_puts.py`` in a subprocess, whose file size limit (RLIMIT_FSIZE)
makes the kernel refuse writes as a full file system does. The process goes on (a diagnostic
WiredTiger build would abort it), the store reports that it takes no more writes
(``writes_stopped``), refuses writes once the limit is lifted too, and after a reopen every
acknowledged put reads back and the store takes writes again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storage_backends import open_store

from . import size_limited_puts

WRITER = Path(size_limited_puts.__file__)


@pytest.mark.parametrize("kind, limit, stop", [
    # WiredTiger panics; every later call raises StoreError naming the failed write
    # (a file size limit or a full file system), not CorruptionError
    ("wiredtiger", 256 << 10, "stopped after a write failed"),
    # RocksDB refuses its WAL append, then every later write until it is reopened
    ("rocksdb", 32 << 10, "IO error"),
])
def test_a_failed_write_stops_the_store_and_loses_no_acknowledged_put(
        tmp_path: Path, kind: str, limit: int, stop: str) -> None:
    path = tmp_path / "s"
    run = subprocess.run([sys.executable, str(WRITER), kind, str(path), str(limit)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    # three failed puts, the put after the limit was lifted, then the close
    assert len(out["errors"]) == 5 and out["acked"], out
    assert 10**6 not in out["acked"]
    assert {kind for kind, _ in out["errors"]} <= {"OSError", "StoreError"}
    for kind_name, message in out["errors"][-2:]:
        assert kind_name == "StoreError" and stop in message and str(path) in message
    assert out["writes_stopped"] == [True, True]
    with open_store(kind, path, memory_budget=1 << 20, durability="sync",
                    direct_io=False) as store:
        assert not store.stats()["writes_stopped"]
        assert all(store.get(k) == size_limited_puts.value(k) for k in out["acked"])
        store.put(10**6, b"taken")
        assert store.get(10**6) == b"taken"
