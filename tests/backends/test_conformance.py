"""Conformance of every storage engine to the RecordStore interface (storage_backends/base.py)."""

from __future__ import annotations

import errno
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sarp.errors import (
    ConfigMismatchError,
    StoreClosedError,
    StoreKindError,
    StoreLockedError,
    SyncFailedError,
    WritesStoppedError,
)
from storage_backends import RecordStore, open_store
from storage_backends.base import KIND_FILE, MAX_KEY, claim_directory, stored_kind
from storage_backends.io import LOCK_FILE
from tests.closing import close_under_calls

from .conftest import BUDGET, payload, value_limit

# Engines whose sync counter is one per synced commit and one per group flush, exactly.
EXACT_SYNC_KINDS = ("wiredtiger", "rocksdb")


def test_round_trip_overwrite_and_missing(store: RecordStore) -> None:
    store.put(1, b"one")
    store.put(2, b"two")
    assert store.get(1) == b"one"
    store.put(1, b"uno")
    assert store.get(1) == b"uno"
    assert store.get(2) == b"two"
    assert store.get(3) is None


def test_dense_keys_hint(durable_kind: str, open_kind: Any, tmp_path: Path) -> None:
    """Every engine takes the dense-keys hint (SARP's segment ids) and keeps its records."""
    path = tmp_path / "s"
    with open_kind(durable_kind, path, durability="group", dense_keys=True) as s:
        s.put_many([(k, payload(k, 50)) for k in range(300)])
    with open_kind(durable_kind, path, durability="group", dense_keys=True) as s:
        assert s.get_many(list(range(301))) == [payload(k, 50) for k in range(300)] + [None]


def test_accepts_bytearray_and_memoryview(store: RecordStore) -> None:
    store.put(1, bytearray(b"ba"))
    store.put_many([(2, memoryview(b"mv"))])
    assert store.get_many([1, 2]) == [b"ba", b"mv"]
    assert isinstance(store.get(1), bytes)


def test_delete(store: RecordStore) -> None:
    store.put_many([(1, b"a"), (2, b"b")])
    store.delete(1)
    store.delete(1)  # deleting a missing key is not an error
    store.delete(99)
    assert store.get(1) is None
    assert store.get(2) == b"b"
    assert list(store.scan()) == [(2, b"b")]
    store.put(1, b"again")
    assert store.get(1) == b"again"


def test_empty_and_large_values(kind: str, open_kind: Any, tmp_path: Path) -> None:
    # odirect sizes its slots at creation: declare the largest value this test stores
    store = open_kind(kind, tmp_path / "store", durability="group", **value_limit(kind, 64 << 10))
    big = random.Random(7).randbytes(64 << 10)
    store.put_many([(1, b""), (2, big), (3, big[:4097])])
    assert store.get(1) == b""
    assert store.get(2) == big
    assert store.get(3) == big[:4097]
    store.put(2, b"")
    assert store.get(2) == b""


def test_many_keys(store: RecordStore) -> None:
    n = 100_000
    keys = random.Random(1).sample(range(1 << 40), n)
    for i in range(0, n, 10_000):
        store.put_many((k, payload(k, 8 + k % 24)) for k in keys[i:i + 10_000])
    assert store.get_many(keys) == [payload(k, 8 + k % 24) for k in keys]
    scanned = [k for k, _ in store.scan()]
    assert scanned == sorted(keys)


def test_get_many_with_misses(store: RecordStore) -> None:
    store.put_many([(k, payload(k)) for k in range(0, 20, 2)])
    asked = [3, 2, 2, 19, 0, MAX_KEY, 18]
    expected = [None, payload(2), payload(2), None, payload(0), None, payload(18)]
    assert store.get_many(asked) == expected
    assert store.get_many([]) == []


def test_scan_order_and_boundary_keys(store: RecordStore) -> None:
    keys = [0, 1, 255, 256, 1 << 32, (1 << 63) - 1, 1 << 63, MAX_KEY - 1, MAX_KEY]
    shuffled = keys[:]
    random.Random(3).shuffle(shuffled)
    for k in shuffled:
        store.put(k, payload(k))
    assert list(store.scan()) == [(k, payload(k)) for k in keys]


def test_scan_spans_chunks_and_allows_writes(store: RecordStore) -> None:
    """Writes during a scan may or may not show in it (``RecordStore.scan``); every record
    stored before it and left alone is returned, once, in order."""
    keys = list(range(0, 5000, 2))
    store.put_many([(k, payload(k)) for k in keys])
    changed = {1001, 10, 4000, 4002, 6000}
    seen = []
    for k, v in store.scan():
        assert v == payload(k) or k in changed
        seen.append(k)
        if k == 1000:  # none of these breaks the scan
            store.put(k + 1, b"written during the scan")
            store.delete(10)
            store.delete(4000)
            store.put(4002, b"overwritten during the scan")
            store.put(6000, b"new past the end")
    assert seen == sorted(set(seen))
    assert [k for k in seen if k not in changed] == [k for k in keys if k not in changed]


@pytest.mark.parametrize("durability", ["sync", "group", "none"])
def test_reopen_keeps_everything(durable_kind: str, durability: str, open_kind: Any,
                                 tmp_path: Path) -> None:
    path = tmp_path / "store"
    expected = {k: payload(k, 8 + k % 100) for k in range(0, 3000, 3)}
    with open_kind(durable_kind, path, durability=durability) as s:
        s.put_many(expected.items())
        s.put(3, b"overwritten")
        expected[3] = b"overwritten"
        for k in range(0, 300, 9):
            s.delete(k)
            expected.pop(k, None)
    with open_kind(durable_kind, path, durability=durability) as s:
        assert dict(s.scan()) == expected
        assert s.get_many(list(expected)) == list(expected.values())


def test_abandon_keeps_what_was_made_durable(durable_kind: str, open_kind: Any,
                                             tmp_path: Path) -> None:
    """``abandon()`` leaves the store as a crash would: the next open recovers every write
    made durable before it; it closes the store (later calls raise, a close does nothing).
    An open that scans nothing after it lists no absent key."""
    path = tmp_path / "store"
    expected = {k: payload(k, 40) for k in range(0, 600, 3)}
    s = open_kind(durable_kind, path, durability="group")
    assert s.absent_after_crash().tolist() == []
    s.put_many(expected.items())
    s.flush()
    s.abandon()
    assert s.closed
    s.close()
    with pytest.raises(StoreClosedError):
        s.get(3)
    with open_kind(durable_kind, path, durability="group") as s2:
        assert s2.get_many(list(expected)) == list(expected.values())
    with open_kind(durable_kind, path, durability="group") as s3:  # after a clean close
        assert s3.absent_after_crash().tolist() == []


# The cache-size statistic each engine reports, and the part of the budget it should be.
CACHE_CAPACITY = {"wiredtiger": ("wt_cache_bytes_max", 1),
                  "rocksdb": ("rocksdb_block_cache_capacity", 2)}


@pytest.mark.parametrize("engine", sorted(CACHE_CAPACITY))
def test_budget_holds_after_reopen(engine: str, tmp_path: Path) -> None:
    stat, share = CACHE_CAPACITY[engine]
    budget = 24 << 20
    for _ in range(2):  # create, then reopen: the budget must not fall back to a default
        with open_store(engine, tmp_path / "s", memory_budget=budget, durability="group") as s:
            s.put(1, b"v")
            assert s.stats()[stat] == budget // share


def test_memory_reopen_starts_empty(open_kind: Any, tmp_path: Path) -> None:
    with open_kind("memory", tmp_path / "m") as s:
        s.put(1, b"x")
    with open_kind("memory", tmp_path / "m") as s:
        assert s.get(1) is None
        assert list(s.scan()) == []


def test_stats_counters_exact(store: RecordStore) -> None:
    store.put_many([(1, b"abc"), (2, b"defg")])
    store.put(3, b"")
    store.get_many([1, 2, 9])
    store.get(3)
    store.delete(2)
    store.delete(77)
    stats = store.stats()
    assert stats["kind"] == store.kind
    assert stats["durability"] == "group"
    assert {k: stats[k] for k in ("logical_writes", "bytes_written", "logical_reads",
                                  "bytes_read", "logical_deletes")} == {
        "logical_writes": 3, "bytes_written": 7, "logical_reads": 4, "bytes_read": 7,
        "logical_deletes": 2}


@pytest.mark.parametrize("durability", ["sync", "group", "none"])
def test_syncs_counted(kind: str, durability: str, open_kind: Any, tmp_path: Path) -> None:
    s = open_kind(kind, tmp_path / "store", durability=durability)
    for k in range(5):
        s.put(k, b"v")
    s.put_many([(10, b"a"), (11, b"b")])
    s.delete(1)
    after_writes = s.stats()["syncs"]
    s.flush()
    after_flush = s.stats()["syncs"]
    if not s.persistent or durability == "none":
        assert after_flush == 0
    elif durability == "sync":
        assert after_writes >= 7  # 7 write calls, each durable before it returns
    else:
        assert after_flush > after_writes
    if kind in EXACT_SYNC_KINDS:
        expected = {"sync": (7, 7), "group": (0, 1), "none": (0, 0)}[durability]
        assert (after_writes, after_flush) == expected
    s.put(20, b"c")
    before = s.stats()["syncs"]
    s.flush(durable=True)  # as a snapshot does: a sync in every mode that has not synced
    if s.persistent and durability != "sync":
        assert s.stats()["syncs"] > before


def test_concurrent_readers_and_a_writer(store: RecordStore) -> None:
    n = 2000
    store.put_many([(k, payload(k, 16 + k % 200)) for k in range(n)])
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(300):
                ks = [rng.randrange(n + 100) for _ in range(rng.randrange(1, 8))]
                want = [payload(k, 16 + k % 200) if k < n else None for k in ks]
                got = store.get(ks[0]) if len(ks) == 1 else store.get_many(ks)
                assert (got == want[0]) if len(ks) == 1 else (got == want)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def writer() -> None:
        try:
            for k in range(10 * n, 10 * n + 500):
                store.put(k, payload(k))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert store.get_many(range(10 * n, 10 * n + 500)) == [
        payload(k) for k in range(10 * n, 10 * n + 500)]


def versioned(key: int, version: int) -> bytes:
    """A value naming its key and version, of a size that changes with the version."""
    return (key.to_bytes(8, "little") + version.to_bytes(8, "little")) * (4 + version % 40)


def test_readers_see_whole_versions_during_rewrites(store: RecordStore) -> None:
    """Readers racing rewrites and deletes of the same keys get a whole version or None."""
    keys = list(range(40))
    rounds = 60
    errors: list[BaseException] = []
    done = threading.Event()
    store.put_many([(k, versioned(k, 0)) for k in keys])

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                k = rng.choice(keys)
                got = store.get(k)
                if got is not None:
                    version = int.from_bytes(got[8:16], "little")
                    assert got == versioned(k, version) and version <= rounds, k
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    try:
        for v in range(1, rounds + 1):
            store.put_many([(k, versioned(k, v)) for k in keys])
            store.delete(keys[v % len(keys)])
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_closed_store_raises(store: RecordStore) -> None:
    store.put_many([(k, b"v") for k in range(3000)])
    scan = store.scan()
    next(scan)
    store.close()
    store.close()  # closing twice is fine
    assert store.closed
    calls = [lambda: store.put(1, b"x"), lambda: store.put_many([(1, b"x")]),
             lambda: store.get(1), lambda: store.get_many([1]), lambda: store.delete(1),
             lambda: list(store.scan()), store.flush, lambda: list(scan)]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()
    assert store.stats()["logical_writes"] == 3000  # counters stay readable


def test_context_manager_closes(kind: str, open_kind: Any, tmp_path: Path) -> None:
    with open_kind(kind, tmp_path / "s") as s:
        s.put(1, b"x")
    with pytest.raises(StoreClosedError):
        s.get(1)


@pytest.mark.parametrize("bad", [-1, 1 << 64, 2**70])
def test_key_out_of_range(store: RecordStore, bad: int) -> None:
    for call in (lambda: store.put(bad, b"x"), lambda: store.get(bad),
                 lambda: store.get_many([1, bad]), lambda: store.delete(bad)):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("bad", ["1", 1.0, True, None, b"\x01"])
def test_key_not_an_integer(store: RecordStore, bad: Any) -> None:
    for call in (lambda: store.put(bad, b"x"), lambda: store.get(bad),
                 lambda: store.get_many([bad]), lambda: store.delete(bad)):
        with pytest.raises(TypeError):
            call()


@pytest.mark.parametrize("bad", ["text", None, 5, [1, 2]])
def test_value_not_bytes(store: RecordStore, bad: object) -> None:
    with pytest.raises(TypeError, match="value must be bytes, bytearray or memoryview, got"):
        store.put(1, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.put_many([(2, b"ok"), (3, bad)])  # type: ignore[list-item]
    assert store.get_many([1, 2, 3]) == [None, None, None]  # a bad batch writes nothing
    assert store.stats()["logical_writes"] == 0


@pytest.mark.parametrize("pairs, word", [
    (None, "pairs must be an iterable"), ("ab", "pairs must be an iterable"),
    ({3: b"a"}, "pairs must be an iterable"), ([(3,)], "pairs must hold"),
    ([b"ab"], "pairs must hold"), ([(1, b"a", b"b")], "pairs must hold"),
])
def test_malformed_batches_are_refused_by_name(store: RecordStore, pairs: object,
                                               word: str) -> None:
    with pytest.raises(TypeError, match=word):
        store.put_many(pairs)  # type: ignore[arg-type]
    for keys in (None, 5, "12"):
        with pytest.raises(TypeError, match="keys must be an iterable of integers"):
            store.get_many(keys)  # type: ignore[arg-type]
    assert store.stats()["logical_writes"] == 0


def test_one_open_handle_at_a_time(kind: str, open_kind: Any, tmp_path: Path) -> None:
    """A second open of an open store, which would write its files from a second state,
    raises; the first handle is unaffected, and once it is closed the store opens again."""
    path = tmp_path / "s"
    first = open_kind(kind, path, durability="sync")
    first.put(1, b"kept")
    with pytest.raises(StoreLockedError, match=kind):
        open_kind(kind, path, durability="sync")
    first.put(2, b"also kept")
    assert first.get_many([1, 2]) == [b"kept", b"also kept"]
    first.close()
    with open_kind(kind, path, durability="sync") as again:
        expected = [b"kept", b"also kept"] if again.persistent else [None, None]
        assert again.get_many([1, 2]) == expected


def test_lock_is_held_across_processes_until_the_holder_dies(kind: str, open_kind: Any,
                                                             tmp_path: Path) -> None:
    """Another process's open handle locks the store out; kill -9 of that process frees it."""
    path = tmp_path / "s"
    holder = ("import sys; from storage_backends import open_store; "
              "s = open_store(sys.argv[1], sys.argv[2], memory_budget=8 << 20); "
              "print('open', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", holder, kind, str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "open\n"
        with pytest.raises(StoreLockedError):
            open_kind(kind, path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    open_kind(kind, path).put(1, b"x")


def test_failed_open_releases_the_lock(open_kind: Any, tmp_path: Path) -> None:
    """An open that fails after locking the directory releases it."""
    path = tmp_path / "s"
    open_kind("flashlog", path, instances=2).close()
    with pytest.raises(ConfigMismatchError):
        open_kind("flashlog", path, instances=3)
    with open_kind("flashlog", path) as s:
        s.put(1, b"x")


def test_bad_open_arguments(kind: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        open_store(kind, tmp_path / "a", durability="fast")
    with pytest.raises(ValueError):
        open_store(kind, tmp_path / "b", memory_budget=0)
    with pytest.raises(TypeError):
        open_store(kind, tmp_path / "c", memory_budget="1MB")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        open_store("no-such-kind", tmp_path / "d")
    with pytest.raises(ValueError, match="kind must be one of"):
        open_store([kind], tmp_path / "e")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dense_keys must be a bool"):
        open_store(kind, tmp_path / "f", dense_keys="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        open_store(kind, None)  # type: ignore[arg-type]
    for bad in ("", "a\0b"):
        with pytest.raises(ValueError, match="path must be a non-empty path"):
            open_store(kind, bad)
    assert list(tmp_path.iterdir()) == []


class _Index:
    """An integer by ``__index__`` only: taken as the int it stands for."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


def test_an_integer_option_is_used_as_the_int_it_was_checked_as(kind: str, open_kind: Any,
                                                                  tmp_path: Path) -> None:
    """A numpy integer or an object with ``__index__`` passes the check, and the store then
    uses the checked int (not the object, which numpy arithmetic could overflow)."""
    options: dict[str, Any] = {"memory_budget": _Index(BUDGET)}
    per_kind: dict[str, dict[str, Any]] = {
        "flashlog": {"instances": np.uint16(2)},
        "odirect": {"max_value_size": np.int32(8000)},
        "wiredtiger": {"checkpoint_seconds": _Index(30), "leaf_page_kb": np.int64(32)}}
    options.update(per_kind.get(kind, {}))
    with open_kind(kind, tmp_path / "s", **options) as s:
        assert type(s.memory_budget) is int and s.memory_budget == BUDGET
        s.put(3, b"x" * 5000)
        assert s.get(3) == b"x" * 5000
        st = s.stats()
        if kind == "flashlog":
            assert st["instances"] == 2
        if kind == "odirect":
            assert st["max_value_size"] == 8000


def test_flush_takes_a_bool(store: RecordStore) -> None:
    for bad in ("no", 5, None):
        with pytest.raises(TypeError, match="durable must be a bool"):
            store.flush(durable=bad)  # type: ignore[arg-type]
    store.flush(durable=True)


def test_path_is_a_file(kind: str, open_kind: Any, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"not a store")
    with pytest.raises(StoreKindError):
        open_kind(kind, f)
    assert f.read_bytes() == b"not a store"


def test_path_holds_another_kind(kind: str, open_kind: Any, tmp_path: Path) -> None:
    claim_directory(tmp_path / "other", "some-other-kind").close()
    with pytest.raises(StoreKindError):
        open_kind(kind, tmp_path / "other")
    assert sorted(p.name for p in (tmp_path / "other").iterdir()) == [LOCK_FILE, KIND_FILE]


def _open_at_once(kinds: tuple[str, ...],
                  path: Path) -> tuple[list[RecordStore], list[BaseException]]:
    """Open a store of each of ``kinds`` at ``path`` from one thread each, released at once:
    the stores opened and the errors raised."""
    start = threading.Barrier(len(kinds))
    opened: list[RecordStore] = []
    errors: list[BaseException] = []

    def create(kind: str) -> None:
        start.wait()
        try:
            opened.append(open_store(kind, path, memory_budget=BUDGET, durability="none"))
        except BaseException as exc:  # noqa: BLE001 - kept for the assertions
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(k,)) for k in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return opened, errors


@pytest.mark.parametrize("kinds", [("odirect", "odirect"), ("flashlog", "flashlog"),
                                   ("odirect", "flashlog")])
def test_two_opens_creating_one_store_at_once(kinds: tuple[str, str], tmp_path: Path) -> None:
    """One creates it; the other raises StoreLockedError (or StoreKindError, finding the
    other kind's store), never another error; the marker names the engine that created the
    store, which reopens holding what was written."""
    for trial in range(15):
        path = tmp_path / str(trial)
        opened, errors = _open_at_once(kinds, path)
        assert len(opened) == 1, errors
        assert [type(e) for e in errors] in ([StoreLockedError], [StoreKindError]), errors
        store = opened[0]
        assert stored_kind(path) == store.kind
        store.put(1, b"kept")
        store.close()
        with open_store(store.kind, path, memory_budget=BUDGET) as again:
            assert again.get(1) == b"kept"


def test_path_holds_foreign_files(kind: str, open_kind: Any, tmp_path: Path) -> None:
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "data.bin").write_bytes(b"x")
    with pytest.raises(StoreKindError):
        open_kind(kind, tmp_path / "foreign")


def test_buffered_io(durable_kind: str, open_kind: Any, tmp_path: Path) -> None:
    with open_kind(durable_kind, tmp_path / "s", direct_io=False, durability="sync") as s:
        s.put_many([(k, payload(k, 1500)) for k in range(500)])
        assert not s.stats()["direct_io"]
    with open_kind(durable_kind, tmp_path / "s", direct_io=False) as s:
        assert s.get_many(range(500)) == [payload(k, 1500) for k in range(500)]


def test_small_budget_large_batch(durable_kind: str, open_kind: Any, tmp_path: Path) -> None:
    """A put_many far larger than the memory budget still lands whole."""
    pairs = [(k, payload(k, 4096)) for k in range(2 * BUDGET // 4096)]
    with open_kind(durable_kind, tmp_path / "s", durability="sync",
                   **value_limit(durable_kind, 4096)) as s:
        s.put_many(pairs)
        assert s.get_many([0, len(pairs) - 1]) == [pairs[0][1], pairs[-1][1]]
    with open_kind(durable_kind, tmp_path / "s") as s:
        assert sum(1 for _ in s.scan()) == len(pairs)


def test_values_come_back_as_bytes(durable_kind: str, open_kind: Any, tmp_path: Path) -> None:
    """Values read from the engine's files (a small budget keeps few in memory) are ``bytes``,
    as the interface promises, never a mutable buffer of the engine's."""
    pairs = [(k, payload(k, 1500)) for k in range(2000)]
    with open_kind(durable_kind, tmp_path / "s", memory_budget=256 << 10) as s:
        s.put_many(pairs)
        assert {type(v) for v in s.get_many([0, 999, 1999])} == {bytes}
    with open_kind(durable_kind, tmp_path / "s", memory_budget=256 << 10) as s:
        values = s.get_many(range(len(pairs)))
        assert values == [v for _, v in pairs]
        assert {type(v) for v in values} | {type(v) for _, v in s.scan()} == {bytes}


def test_close_waits_for_running_calls(kind: str, open_kind: Any, tmp_path: Path) -> None:
    """close() on one thread while others read and write (and a second close() races it):
    every call either completes or raises StoreClosedError, every put that returned is kept,
    and the process survives (an engine closed under a running call may abort it)."""
    path = tmp_path / "s"
    store = open_kind(kind, path, durability="sync")
    done: list[int] = []

    def writer(t: int) -> None:
        for i in range(100_000):
            key = t * 1_000_000 + i
            store.put(key, b"v%d" % key)
            done.append(key)
            store.get_many([key, max(key - 1, 0)])
            store.stats()

    close_under_calls(store.close, writer, 4, lambda: len(done), 200, StoreClosedError)
    assert store.closed
    if store.persistent:
        with open_kind(kind, path, durability="sync") as again:
            assert again.get_many(done) == [b"v%d" % k for k in done]


def test_failed_close_still_releases_the_store(kind: str, open_kind: Any,
                                               tmp_path: Path) -> None:
    """An engine whose close fails raises, but the store is closed and its lock released."""
    path = tmp_path / "s"
    store = open_kind(kind, path)
    engine_close = store._close

    def failing() -> None:
        engine_close()
        raise OSError("close failed")

    store._close = failing
    with pytest.raises(OSError, match="close failed"):
        store.close()
    assert store.closed
    store.close()  # nothing left to do
    with pytest.raises(StoreClosedError):
        store.get(1)
    open_kind(kind, path).put(1, b"x")  # not StoreLockedError


def test_close_waits_for_a_scan_being_started(kind: str, open_kind: Any, tmp_path: Path) -> None:
    """Some engines read every record when a scan starts: close() waits for that read."""
    store = open_kind(kind, tmp_path / "s")
    store.put_many([(k, b"v") for k in range(100)])
    entered, release = threading.Event(), threading.Event()
    events: list[str] = []
    engine_scan, engine_close = store._scan, store._close

    def slow_scan() -> Any:
        entered.set()
        release.wait(30)
        rows = engine_scan()
        events.append("scan started")
        return rows

    def close() -> None:
        events.append("close")
        engine_close()

    store._scan, store._close = slow_scan, close
    errors: list[BaseException] = []

    def scan() -> None:
        try:
            list(store.scan())
        except StoreClosedError:
            pass  # continuing a scan after close() raises (lazy engines get there)
        except BaseException as exc:
            errors.append(exc)

    scanner = threading.Thread(target=scan)
    scanner.start()
    entered.wait(30)
    closer = threading.Thread(target=store.close)
    closer.start()
    time.sleep(0.2)  # a close that did not wait would run now
    release.set()
    scanner.join(30)
    closer.join(30)
    assert not errors, errors[0]
    assert events == ["scan started", "close"]
    assert store.closed


@pytest.mark.parametrize("failing", ["put", "delete", "flush"])
def test_a_failed_sync_stops_writes_until_reopened(kind: str, failing: str, open_kind: Any,
                                                   tmp_path: Path) -> None:
    """A write whose engine call fails with SyncFailedError stops writes: the device may have
    dropped what followed the last good sync, so nothing is acknowledged on top of it. Later
    puts (an empty batch too), deletes and flushes raise WritesStoppedError naming the failed
    sync; reads go on;
    close() releases the store; a reopened store holds every acknowledged value and takes
    writes. A write that fails by itself (a full disk) stops nothing."""
    path = tmp_path / "s"
    store = open_kind(kind, path, durability="sync")
    store.put_many([(k, payload(k)) for k in range(10)])
    engine = {"put": "_put_many", "delete": "_delete", "flush": "_flush"}[failing]
    real = getattr(store, engine)
    write = {"put": lambda: store.put(10, b"v"), "delete": lambda: store.delete(3),
             "flush": store.flush}[failing]

    def fails(error: OSError) -> Any:
        def call(*args: Any) -> None:
            raise error
        return call

    setattr(store, engine, fails(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        write()
    setattr(store, engine, real)
    write()  # the disk has room again: the store takes writes
    assert not store.stats()["writes_stopped"]
    setattr(store, engine, fails(SyncFailedError(errno.EIO, "sync of x failed")))
    with pytest.raises(SyncFailedError):
        write()
    assert store.stats()["writes_stopped"]
    setattr(store, engine, real)  # the device works again: the store still refuses writes
    for refused in (lambda: store.put(11, b"w"), lambda: store.delete(4), store.flush,
                    lambda: store.put_many([])):
        with pytest.raises(WritesStoppedError, match=f"{kind} store .* sync of x failed") as e:
            refused()
        assert isinstance(e.value.__cause__, SyncFailedError)
    assert store.get_many(range(3)) == [payload(k) for k in range(3)]
    assert store.get(11) is None
    store.close()
    assert store.closed
    if store.persistent:
        with open_kind(kind, path, durability="sync") as again:
            assert again.get_many(range(3)) == [payload(k) for k in range(3)]
            again.put(11, b"w")
            assert again.get(11) == b"w"


def test_claiming_a_new_directory_syncs_the_entry_of_each_directory_it_creates(
        tmp_path: Path) -> None:
    """A power cut must not take a new store (or a new index around it) away after its first
    acknowledged write: each directory made is synced into its parent, the outermost first."""
    from storage_backends.io import FileIO

    synced: list[Path] = []

    class Recording(FileIO):
        def fsync_dir(self, path: str | Path) -> None:
            synced.append(Path(path))
            super().fsync_dir(path)

    store = tmp_path / "a" / "index" / "store"
    claim_directory(store, "odirect", Recording()).close()
    # the marker's own publish syncs the store directory; then each new entry, outermost first
    assert synced == [store, tmp_path, tmp_path / "a", tmp_path / "a" / "index"]
    synced.clear()
    claim_directory(store, "odirect", Recording()).close()  # there: nothing to make durable
    assert synced == []


@pytest.mark.parametrize("kind, home", [("wiredtiger", "wt"), ("rocksdb", "db")])
def test_an_engine_home_is_synced_into_the_store_directory(
        kind: str, home: str, open_kind: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """WiredTiger and RocksDB sync the files they make in their home directory, not the
    home's own entry: the store makes the home and syncs that entry before the engine opens,
    when it creates it. A reopen syncs the store directory once, as every open does
    (``FileIO.redo_failed_syncs``)."""
    from storage_backends import io as sio

    seen: list[tuple[Path, bool]] = []
    real = sio.FileIO.fsync_dir

    def recording(self: sio.FileIO, path: str | Path) -> None:
        seen.append((Path(path), (Path(path) / home).is_dir()))
        real(self, path)

    monkeypatch.setattr(sio.FileIO, "fsync_dir", recording)
    path = tmp_path / "s"
    with open_kind(kind, path, durability="sync") as store:
        store.put(1, b"x")
    assert (path, True) in seen
    seen.clear()
    with open_kind(kind, path, durability="sync") as store:
        assert store.get(1) == b"x"
    assert [p for p, _ in seen if p == path] == [path]
