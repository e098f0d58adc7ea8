"""flashlog specifics: DRAM per key, reads of one block, compaction, recovery from headers."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest

from sarp.errors import ConfigMismatchError
from storage_backends import open_store
from storage_backends.flashlog import FlashLogStore
from storage_backends.flashlog_log import PageLog
from storage_backends.io import FileIO

VALUE = 1576  # a full SARP segment record


def _open(path: Path, **options: object) -> FlashLogStore:
    options.setdefault("memory_budget", 4 << 20)
    options.setdefault("instances", 4)
    store = open_store("flashlog", path, durability="none", **options)  # type: ignore[arg-type]
    assert isinstance(store, FlashLogStore)
    return store


def _load(s: FlashLogStore, n: int, rng: random.Random) -> dict[int, bytes]:
    values = {rng.getrandbits(64): rng.randbytes(VALUE) for _ in range(n)}
    items = list(values.items())
    for i in range(0, n, 1000):
        s.put_many(items[i:i + 1000])
    return values


def test_dram_under_4_bytes_per_key_and_one_block_per_get(tmp_path: Path) -> None:
    io = FileIO()
    with _open(tmp_path / "s", io=io) as s:
        values = _load(s, 20_000, random.Random(1))
        st = s.stats()
        assert st["log_records"] > 15_000
        assert st["dram_bytes_per_key"] < 4
        keys = random.Random(2).sample(sorted(values), 500)
        before = io.stats()
        assert s.get_many(keys) == [values[k] for k in keys]
        after = io.stats()
        reads = after["reads"] - before["reads"]
        assert reads <= 1.1 * len(keys)
        assert after["bytes_read"] - before["bytes_read"] <= reads * 2 * 4096


def test_tombstone_shadows_older_pages(tmp_path: Path) -> None:
    with _open(tmp_path / "s") as s:
        values = _load(s, 3000, random.Random(3))
        k = next(iter(values))
        s.delete(k)
        _load(s, 3000, random.Random(4))  # pushes the tombstone into a page
        assert s.get(k) is None
        s.put(k, b"back")
        assert s.get(k) == b"back"


def test_compaction_bounds_the_log(tmp_path: Path) -> None:
    rng = random.Random(5)
    keys = list(range(2000))
    with _open(tmp_path / "s") as s:
        for _ in range(8):
            s.put_many((k, rng.randbytes(VALUE)) for k in keys)
        last = {k: rng.randbytes(VALUE) for k in keys}
        s.put_many(last.items())
        st = s.stats()
        assert st["compactions"] >= 1
        live = len(keys) * (VALUE + 13)
        assert st["log_record_bytes"] <= 2 * live + 4 * st["page_target_bytes"]
    with _open(tmp_path / "s") as s:
        assert dict(s.scan()) == last
        assert len(list((tmp_path / "s").glob("log.*"))) == 1


def test_recovery_reads_headers_not_records(tmp_path: Path) -> None:
    path = tmp_path / "s"
    # pages of 64 blocks: the buffered records (read back from the WAL) stay a small part
    with _open(path, memory_budget=2 << 20) as s:
        values = _load(s, 5000, random.Random(6))
        pages = s.stats()["pages"]
    io = FileIO()
    with _open(path, io=io, memory_budget=2 << 20) as s:
        st = io.stats()
        assert st["reads"] <= pages + 8
        assert st["bytes_read"] < 0.2 * len(values) * VALUE
        k = next(iter(values))
        assert s.get(k) == values[k]


def test_instances_are_fixed_at_creation(tmp_path: Path) -> None:
    _open(tmp_path / "s", instances=8).close()
    with pytest.raises(ConfigMismatchError):
        _open(tmp_path / "s", instances=16)
    with _open(tmp_path / "s", instances=None) as s:
        assert s.stats()["instances"] == 8


def test_a_failed_compaction_removes_its_new_log_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction that fails before MANIFEST names its new log (here the disk is full while
    live records are copied) raises from the put that triggered it, removes that log, keeps
    every record (that put's included), and the next compaction succeeds."""
    path = tmp_path / "s"
    real_append = PageLog.append
    failed = []

    def append(log: PageLog, inst: int, recs: list) -> None:
        if log.number > 1 and not failed:  # the first compaction's new log (log.2)
            failed.append(log.path)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(log, inst, recs)

    monkeypatch.setattr(PageLog, "append", append)
    rng = random.Random(7)
    keys = list(range(2000))
    last: dict[int, bytes] = {}
    with _open(path) as s:
        with pytest.raises(OSError, match="No space left"):
            for _ in range(8):
                last = {k: rng.randbytes(VALUE) for k in keys}
                s.put_many(last.items())
        assert failed and not failed[0].exists()
        assert s.stats()["compactions"] == 0
        assert dict(s.scan()) == last  # the put that raised was applied whole
        for _ in range(8):
            last = {k: rng.randbytes(VALUE) for k in keys}
            s.put_many(last.items())
        assert s.stats()["compactions"] >= 1
    with _open(path) as s:
        assert dict(s.scan()) == last
        assert len(list(path.glob("log.*"))) == 1
