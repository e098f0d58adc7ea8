"""RocksDB specifics: damage that RocksDB's block checksums find is a CorruptionError, and
salvage (RepairDB) keeps the intact table files. Damage the open finds is a CorruptionError
too, a WAL record damaged inside the log included; a WAL cut short by a crash is a torn tail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import storage_backends
from sarp.errors import CorruptionError, StoreError, StoreLockedError

from .conftest import ENGINES

pytestmark = pytest.mark.skipif(not isinstance(ENGINES.get("rocksdb"), type),
                                reason="rocksdb is not installed")


def test_damaged_table_file_raises_corruption_on_get_and_scan(open_kind: Any,
                                                              tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = open_kind("rocksdb", path, durability="sync")
    values = {k: os.urandom(200) for k in range(5000)}
    store.put_many(list(values.items()))
    store.close()
    tables = sorted(path.rglob("*.sst"))
    assert tables, "close() left no table file to damage"
    raw = bytearray(tables[0].read_bytes())
    for off in range(1000, len(raw) // 2, 997):
        raw[off] ^= 0x55
    tables[0].write_bytes(bytes(raw))
    again = open_kind("rocksdb", path, durability="sync")
    with pytest.raises(CorruptionError, match="Corruption"):
        again.get_many(list(values))
    with pytest.raises(CorruptionError, match="Corruption"):
        list(again.scan())


def test_salvage_keeps_the_intact_table_files_and_drops_the_damaged_one(open_kind: Any,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "s"
    batches = [{k: os.urandom(200) for k in range(b * 1000, b * 1000 + 1000)} for b in range(3)]
    for batch in batches:  # each close writes one table file: three, too few to compact
        store = open_kind("rocksdb", path, durability="sync")
        store.put_many(list(batch.items()))
        store.close()
    needle = batches[2][2500]
    tables = [t for t in sorted(path.rglob("*.sst")) if needle in t.read_bytes()]
    assert len(tables) == 1 and len(list(path.rglob("*.sst"))) == 3
    raw = bytearray(tables[0].read_bytes())
    raw[raw.find(needle) + 7] ^= 0x55
    tables[0].write_bytes(bytes(raw))
    store = open_kind("rocksdb", path, durability="sync")
    with pytest.raises(CorruptionError, match="block checksum"):
        store.get(2500)
    with pytest.raises(StoreLockedError):
        storage_backends.salvage(path)
    store.close()
    assert storage_backends.salvage(path) == "rocksdb"
    assert [p.name for p in (path / "db" / "lost").rglob("*.sst")] == [tables[0].name]
    again = open_kind("rocksdb", path, durability="sync")
    kept = {**batches[0], **batches[1]}
    assert dict(again.scan()) == kept  # the damaged file's records are gone, the rest intact
    assert again.get_many(list(batches[2])) == [None] * 1000


ROOT = Path(__file__).resolve().parents[2]


def _flip(file: Path, at: int) -> None:
    raw = bytearray(file.read_bytes())
    raw[at] ^= 0x40
    file.write_bytes(bytes(raw))


def _only(db: Path, pattern: str) -> Path:
    (found,) = db.glob(pattern)
    return found


def _unlink(*files: Path) -> None:
    for file in files:
        file.unlink()


def _cut(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:file.stat().st_size // 2])


# Damage to the files a closed store opens with; whether the table file survives it.
OPEN_DAMAGE: dict[str, tuple[Callable[[Path], object], bool]] = {
    "CURRENT flipped": (lambda db: _flip(db / "CURRENT", 3), True),
    "MANIFEST record flipped": (lambda db: _flip(_only(db, "MANIFEST-*"), 10), True),
    "MANIFEST missing": (lambda db: _only(db, "MANIFEST-*").unlink(), True),
    "CURRENT missing": (lambda db: (db / "CURRENT").unlink(), True),
    # RocksDB would take this for a new database and delete the table file as obsolete
    "CURRENT and WAL missing": (lambda db: _unlink(db / "CURRENT", *db.glob("*.log")), True),
    "table file cut short": (lambda db: _cut(_only(db, "*.sst")), False),
    "table file missing": (lambda db: _only(db, "*.sst").unlink(), False),
}


@pytest.mark.parametrize("damage", OPEN_DAMAGE)
def test_damage_found_by_the_open_is_corruption_naming_the_store(
        damage: str, open_kind: Any, tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = open_kind("rocksdb", path, durability="sync")
    values = {k: os.urandom(200) for k in range(3000)}
    store.put_many(list(values.items()))
    store.close()  # one table file, and the WAL that followed it
    damage_files, table_survives = OPEN_DAMAGE[damage]
    damage_files(path / "db")
    for _ in range(2):  # the failed open changed nothing and released the store
        with pytest.raises(CorruptionError) as info:
            open_kind("rocksdb", path, durability="sync")
        assert str(path) in str(info.value) and "salvage" in str(info.value)
    assert storage_backends.salvage(path) == "rocksdb"
    again = open_kind("rocksdb", path, durability="sync")
    assert dict(again.scan()) == (values if table_survives else {})


def test_an_open_failure_that_is_not_damage_is_a_store_error(open_kind: Any,
                                                              tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    path = tmp_path / "s"
    open_kind("rocksdb", path, durability="sync").close()
    held = Rdict(str(path / "db"), Options(raw_mode=True))  # RocksDB's own lock, not the store's
    try:
        with pytest.raises(StoreError, match="lock") as info:
            open_kind("rocksdb", path, durability="sync")
        assert not isinstance(info.value, CorruptionError) and str(path) in str(info.value)
    finally:
        held.close()
    open_kind("rocksdb", path, durability="sync").close()


def test_an_engine_failure_of_a_write_is_a_store_error(open_kind: Any, tmp_path: Path) -> None:
    """The binding raises a plain Exception with RocksDB's status; a write's is raised as the
    package's StoreError naming the store (here the engine's database handle, closed under the
    store, stands in for a device that fails its writes)."""
    path = tmp_path / "s"
    store = open_kind("rocksdb", path, durability="sync")
    store.put(1, b"kept")
    store._db.close()
    for write in (lambda: store.put(2, b"x"), lambda: store.delete(1), store.flush):
        with pytest.raises(StoreError) as info:
            write()
        assert str(path) in str(info.value) and not isinstance(info.value, CorruptionError)
        assert store.stats()["writes_stopped"]
    with pytest.raises(StoreError):
        store.close()  # closed all the same, its lock released
    assert open_kind("rocksdb", path, durability="sync").get(1) == b"kept"


def test_writes_stopped_reports_whether_the_latest_write_failed(open_kind: Any,
                                                                tmp_path: Path) -> None:
    """RocksDB refuses writes after a failed one until reopened (test_engine_stops.py); a
    write it takes again shows it no longer refuses them (here one write fails by itself)."""
    store = open_kind("rocksdb", tmp_path / "s", durability="sync")
    db = store._db

    class FailsOnce:
        def __getattr__(self, name: str) -> Any:
            return getattr(db, name)

        def write(self, *args: Any) -> None:
            store._db = db
            raise Exception("IO error: injected")

    store._db = FailsOnce()
    with pytest.raises(StoreError, match="IO error: injected"):
        store.put(1, b"x")
    assert store.stats()["writes_stopped"]
    store.put(1, b"y")
    assert not store.stats()["writes_stopped"] and store.get(1) == b"y"
    store.close()


# Puts 300 records under ``sync`` (each one's WAL record synced before put returns), then dies:
# the records are in the WAL only.
_CRASH_WRITER = """
import os, signal, sys
from storage_backends import open_store
store = open_store("rocksdb", sys.argv[1], 8 << 20, "sync", direct_io=False)
for key in range(300):
    store.put(key, bytes([key % 251]) * 1000)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _crashed_wal(path: Path) -> Path:
    """The WAL of a store at ``path`` killed after 300 synced puts."""
    run = subprocess.run([sys.executable, "-c", _CRASH_WRITER, str(path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert not list((path / "db").glob("*.sst"))
    (wal,) = [w for w in (path / "db").glob("*.log") if w.stat().st_size]
    return wal


def _written(keys: Any) -> dict[int, bytes]:
    return {k: bytes([k % 251]) * 1000 for k in keys}


def test_a_damaged_wal_record_is_corruption_not_the_end_of_the_log(open_kind: Any,
                                                                   tmp_path: Path) -> None:
    """A crash cuts the WAL short but does not damage a record inside it. RocksDB's default
    recovery (point_in_time) would replay the log up to the damaged record and drop the
    synced records after it without an error; the store's mode raises instead."""
    path = tmp_path / "s"
    wal = _crashed_wal(path)
    _flip(wal, wal.stat().st_size // 2)
    for _ in range(2):
        with pytest.raises(CorruptionError, match="checksum mismatch") as info:
            open_kind("rocksdb", path, durability="sync")
        assert str(path) in str(info.value) and "salvage" in str(info.value)
    # RepairDB reads the WAL past the damaged block: the records after it are kept
    assert storage_backends.salvage(path) == "rocksdb"
    found = dict(open_kind("rocksdb", path, durability="sync").scan())
    assert found == _written(found) and 250 < len(found) < 300 and 299 in found


@pytest.mark.parametrize("cut", [1, 500])
def test_a_wal_cut_short_by_a_crash_is_a_torn_tail(cut: int, open_kind: Any,
                                                   tmp_path: Path) -> None:
    """A crash may end the WAL inside its last record (a write cut short): that record was
    never acknowledged, and the open drops it without an error."""
    path = tmp_path / "s"
    wal = _crashed_wal(path)
    wal.write_bytes(wal.read_bytes()[:-cut])
    store = open_kind("rocksdb", path, durability="sync")
    assert dict(store.scan()) == _written(range(299))


_EXIT_WITHOUT_CLOSE = """
import os, sys, threading
from storage_backends import open_store
store = open_store("rocksdb", sys.argv[1], memory_budget=1 << 20, durability="sync")
started = threading.Semaphore(0)

def writer(t):
    for n in range(10**9):
        key = t << 32 | n
        store.put(key, key.to_bytes(8, "little") * 50)
        os.write(1, f"{key}\\n".encode())  # acknowledged
        store.get(key)
        if n == 20:
            started.release()

for t in range(4):
    threading.Thread(target=writer, args=(t,), daemon=True).start()
for _ in range(4):
    started.acquire()
sys.exit(0)  # without close(), the writers inside RocksDB calls
"""


def test_an_exit_without_close_while_threads_write_ends_the_process_cleanly(
        tmp_path: Path) -> None:
    """A daemon thread inside a RocksDB call when the interpreter finalizes aborted the
    process (the binding cannot unwind it). The store is now closed at exit, after the calls
    running: the process exits with its own status, and every acknowledged put is there."""
    path = tmp_path / "s"
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _EXIT_WITHOUT_CLOSE, str(path)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        acked = [int(line) for line in run.stdout.split()]
        assert len(acked) >= 4 * 21
        with storage_backends.open_store("rocksdb", path) as store:
            assert store.get_many(acked) == [k.to_bytes(8, "little") * 50 for k in acked]
