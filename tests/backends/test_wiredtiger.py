"""The wiredtiger engine: leaf page size (by key pattern, fixed at creation), rollbacks under a
full cache, and damaged data (CorruptionError, never an aborted process), also damage the open
finds: a table file it cannot read, damaged metadata, a damaged log file header."""

import _thread
import json
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import wiredtiger

import storage_backends
from sarp.errors import CorruptionError
from storage_backends import open_store, wiredtiger_store
from storage_backends.wiredtiger_store import (
    DENSE_LEAF_PAGE_KB,
    LEAF_PAGE_KB,
    ROLLBACK_RETRIES,
    WiredTigerStore,
    _leaf_page_kb,
)


def test_page_size_follows_the_key_pattern(tmp_path: Path) -> None:
    with open_store("wiredtiger", tmp_path / "sparse", 1 << 20, "sync") as store:
        assert store.stats()["leaf_page_kb"] == LEAF_PAGE_KB == 4
    with open_store("wiredtiger", tmp_path / "dense", 1 << 20, "sync", dense_keys=True) as store:
        assert store.stats()["leaf_page_kb"] == DENSE_LEAF_PAGE_KB == 32


def test_an_existing_table_keeps_its_page_size_and_records(tmp_path: Path) -> None:
    values = [(k, bytes([k % 251]) * 3000) for k in range(100)]  # over half a 4 KB page
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=8) as store:
        store.put_many(values)
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=64) as store:
        assert store.leaf_page_kb == 8
        assert store.get_many(list(range(100))) == [v for _, v in values]


@pytest.mark.parametrize("bad", [0, 6, -4, 1 << 30])
def test_bad_page_size_is_named(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ValueError, match="leaf_page_kb"):
        WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb=bad)
    with pytest.raises(TypeError, match="leaf_page_kb"):
        WiredTigerStore(tmp_path / "s", 1 << 20, "sync", leaf_page_kb="4KB")  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()


def test_metadata_sizes_parse() -> None:
    assert _leaf_page_kb("key_format=Q,leaf_page_max=32KB,leaf_value_max=0") == 32
    assert _leaf_page_kb("leaf_page_max=1MB") == 1024
    assert _leaf_page_kb("a=1,leaf_page_max=8192") == 8


class _FullCacheCursor:
    """A cursor whose insert() fails as WiredTiger's does when its cache cannot hold the
    transaction (WT_ROLLBACK), while a transaction holds more than ``fits`` inserts or, for
    ``fails`` more inserts, always."""

    def __init__(self, cursor: Any, fits: int, fails: int = 0):
        self._cursor = cursor
        self._fits, self._fails, self._in_txn = fits, fails, 0

    def insert(self) -> None:
        self._in_txn += 1
        if self._fails or self._in_txn > self._fits:
            self._fails = max(0, self._fails - 1)
            raise wiredtiger.WiredTigerRollbackError("WT_ROLLBACK: cache full")
        self._cursor.insert()

    def reset(self) -> None:
        self._in_txn = 0
        self._cursor.reset()

    def __getattr__(self, name: str) -> object:
        return getattr(self._cursor, name)


def _the_handle(store: WiredTigerStore) -> Any:
    """The handle every call of a single thread takes: the store's only idle one."""
    h = store._take()
    store._idle.append(h)
    return h


def test_a_batch_the_cache_cannot_hold_is_split_and_stored_whole(tmp_path: Path) -> None:
    values = [(k, bytes([k % 251]) * 100) for k in range(10)]
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync") as store:
        h = _the_handle(store)
        h.cursor = _FullCacheCursor(h.cursor, fits=3)  # a transaction of 4 or more rolls back
        store.put_many(values)
        assert store.get_many([k for k, _ in values]) == [v for _, v in values]


def test_a_record_that_keeps_rolling_back_is_retried_then_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wiredtiger_store, "ROLLBACK_PAUSE_MAX", 0.001)
    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync") as store:
        h = _the_handle(store)
        cursor = h.cursor
        h.cursor = _FullCacheCursor(cursor, fits=1, fails=3)  # three pauses, then it fits
        store.put(1, b"one")
        assert store.get(1) == b"one"
        h.cursor = _FullCacheCursor(cursor, fits=1, fails=ROLLBACK_RETRIES)
        with pytest.raises(wiredtiger.WiredTigerRollbackError):
            store.put(2, b"two")
        assert store.get(2) is None
        store.put(3, b"three")  # the handle is usable again
        assert store.get_many([1, 3]) == [b"one", b"three"]


def test_sessions_number_the_calls_at_once_not_the_threads_that_made_them(
        tmp_path: Path) -> None:
    """Threads that ``threading`` did not start (a C extension's, an embedding server's) never
    show as ended, so sessions kept per thread were never reclaimed, and past WiredTiger's
    limit of SESSION_MAX every new thread's call failed. Each call now takes an idle session:
    1,200 such threads, one after another, share one."""
    def read(store: WiredTigerStore, got: list[object], done: threading.Event) -> None:
        try:
            got.append(store.get(1))
        except Exception as exc:
            got.append(exc)
        finally:
            done.set()

    with WiredTigerStore(tmp_path / "s", 1 << 20, "sync", direct_io=False) as store:
        store.put(1, b"one")
        for _ in range(1200):
            got: list[object] = []
            done = threading.Event()
            _thread.start_new_thread(read, (store, got, done))
            assert done.wait(60) and got == [b"one"], got
        assert len(store._handles) == 1


# Reads keys of a wiredtiger store in a subprocess, so that a WiredTiger abort fails the test
# rather than the test run: prints, per key, its value's hex or "corruption", then close's.
_READER = """
import json, sys
from sarp.errors import CorruptionError
from storage_backends import open_store
out = []
store = open_store("wiredtiger", sys.argv[1], 1 << 20, "sync", direct_io=False)
for key in map(int, sys.argv[2:]):
    try:
        value = store.get(key)
        out.append(None if value is None else value.hex())
    except CorruptionError as exc:
        out.append("corruption" if "damaged data" in str(exc) else str(exc))
try:
    store.close()
    out.append("closed")
except CorruptionError:
    out.append("corruption")
print(json.dumps(out))
"""


def _read_in_subprocess(path: Path, keys: list[int]) -> list[str | None]:
    run = subprocess.run([sys.executable, "-c", _READER, str(path), *map(str, keys)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_a_damaged_block_is_corruption_and_stops_the_store(tmp_path: Path) -> None:
    rng = random.Random(3)
    values = {k: rng.randbytes(1500) for k in range(2000)}
    path = tmp_path / "s"
    with WiredTigerStore(path, 1 << 20, "sync", direct_io=False) as store:
        store.put_many(values.items())
    table = path / "wt" / "records.wt"
    data = bytearray(table.read_bytes())
    at = data.find(values[1500][700:760])
    assert at >= 0 and data.find(values[1500][700:760], at + 1) < 0
    data[at + 10] ^= 0x40
    table.write_bytes(bytes(data))
    intact = values[7].hex()
    # An intact block reads; the damaged one raises; then the store is stopped: every call
    # raises, close() too, but it releases the store, which opens again and reads as before.
    for _ in range(2):
        assert _read_in_subprocess(path, [7, 1500, 7]) == [
            intact, "corruption", "corruption", "corruption"]


def test_the_wiredtiger_installed_is_a_release_build() -> None:
    """install.sh builds WiredTiger as Release: a diagnostic build runs at -Og with
    assertions (so the benchmark would not measure a released engine) and aborts the process
    when a write fails."""
    assert wiredtiger.diagnostic_build() == 0, "reinstall with install.sh"
    assert wiredtiger_store.build().endswith("release build")


def _flip(file: Path, at: int) -> None:
    raw = bytearray(file.read_bytes())
    raw[at] ^= 0x40
    file.write_bytes(bytes(raw))


def _closed_store(path: Path) -> dict[int, bytes]:
    rng = random.Random(5)
    values = {k: rng.randbytes(500) for k in range(3000)}
    with WiredTigerStore(path, 1 << 20, "sync", direct_io=False) as store:
        store.put_many(values.items())
    return values


def _open_fails(path: Path, match: str) -> None:
    """Opening the store raises CorruptionError naming it and salvage, and changes nothing:
    a second open raises the same."""
    for _ in range(2):
        with pytest.raises(CorruptionError, match=match) as info:
            WiredTigerStore(path, 1 << 20, "sync", direct_io=False)
        assert str(path) in str(info.value) and "salvage" in str(info.value)


def _salvaged(path: Path) -> dict[int, bytes]:
    assert storage_backends.salvage(path) == "wiredtiger"
    with WiredTigerStore(path, 1 << 20, "sync", direct_io=False) as store:
        return dict(store.scan())


# Damage to the table file of a closed store: none stops the connection (no WT_PANIC); before
# the open read the table, the first read raised WiredTiger's bare error.
TABLE_DAMAGE: dict[str, Callable[[Path], object]] = {
    "first byte flipped": lambda f: _flip(f, 0),
    "first page zeroed": lambda f: f.write_bytes(bytes(4096) + f.read_bytes()[4096:]),
    "cut short": lambda f: f.write_bytes(f.read_bytes()[:f.stat().st_size // 2]),
    "deleted": lambda f: f.unlink(),
}


@pytest.mark.parametrize("damage", TABLE_DAMAGE)
def test_a_table_file_the_open_cannot_read_is_corruption(damage: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    values = _closed_store(path)
    TABLE_DAMAGE[damage](path / "wt" / "records.wt")
    _open_fails(path, "cannot read the table file records.wt")
    found = _salvaged(path)
    if damage == "deleted":
        assert found == {}  # no block left to keep: the table is empty again
    elif damage == "cut short":
        assert 0 < len(found) < len(values) and all(values[k] == v for k, v in found.items())
    else:
        assert found == values  # the records are on intact blocks


def test_damaged_metadata_is_corruption_then_salvaged(tmp_path: Path) -> None:
    path = tmp_path / "s"
    values = _closed_store(path)
    metadata = path / "wt" / "WiredTiger.wt"
    _flip(metadata, metadata.stat().st_size - 100)  # in the blocks of its last checkpoint
    _open_fails(path, "metadata damaged")
    assert _salvaged(path) == values


def test_metadata_that_salvage_cannot_read_stays_corruption(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _closed_store(path)
    _flip(path / "wt" / "WiredTiger.wt", 0)  # its descriptor block: WiredTiger's salvage stops
    _open_fails(path, "metadata damaged")
    with pytest.raises(CorruptionError, match="metadata damaged"):
        storage_backends.salvage(path)


ROOT = Path(__file__).resolve().parents[2]

# Puts 300 records under ``sync`` (each commit's log record synced), then dies before any
# checkpoint: the records, and the table's creation, are in the log only.
_CRASH_WRITER = """
import os, signal, sys
from storage_backends import open_store
store = open_store("wiredtiger", sys.argv[1], 1 << 20, "sync", direct_io=False)
for key in range(300):
    store.put(key, bytes([key % 251]) * 1000)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("at", [0, 20])  # the header record's length, the log's magic number
def test_a_damaged_log_header_is_corruption_not_an_empty_log(at: int, tmp_path: Path) -> None:
    """A crash cannot tear a log file's header (it is synced before the file takes its name),
    but WiredTiger's recovery takes a damaged one for a torn record and drops the log: here
    every record and the table itself (it moves records.wt aside and creates an empty one)."""
    path = tmp_path / "s"
    run = subprocess.run([sys.executable, "-c", _CRASH_WRITER, str(path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    intact = tmp_path / "intact"
    shutil.copytree(path, intact)
    with WiredTigerStore(intact, 1 << 20, "sync", direct_io=False) as store:  # headers pass
        assert dict(store.scan()) == {k: bytes([k % 251]) * 1000 for k in range(300)}
    (log,) = (path / "wt").glob("WiredTigerLog.*")
    _flip(log, at)
    _open_fails(path, "header of log file .*WiredTigerLog.* is damaged")
    assert not list((path / "wt").glob("records.wt.*"))  # nothing was moved aside


def test_log_header_faults_are_named() -> None:
    length, magic = wiredtiger_store.LOG_RECORD.size, wiredtiger_store.LOG_MAGIC_AT
    assert "less than a header" in str(wiredtiger_store._log_header_fault(bytes(magic)))
    assert "record length 0" in str(wiredtiger_store._log_header_fault(bytes(128)))
    assert wiredtiger_store._crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value
    record = bytearray(128)
    record[:length] = wiredtiger_store.LOG_RECORD.pack(128, 0)
    record[4:8] = wiredtiger_store._crc32c(bytes(record)).to_bytes(4, "little")
    assert wiredtiger_store._log_header_fault(bytes(record)) == "bad magic number"
