"""Many request threads at once: mixed match and insert over heavily shared prefixes."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import sarp
from sarp._core import routing_table as rt
from sarp.background import Worker
from sarp.errors import IndexClosedError
from sarp.matching import match as match_path
from tests.closing import close_under_calls

from .helpers import SMALL

THREADS = 8
SECONDS = 4.0


def sequence(i: int) -> np.ndarray:
    """Sequences that share prompts and branches, so inserts race on the same segments."""
    rng = np.random.default_rng(i)
    prompt = np.random.default_rng(i % 3).integers(0, 40, 60)
    branch = np.random.default_rng(100 + i % 5).integers(0, 40, 8 * (i % 5))
    return np.concatenate((prompt, branch, rng.integers(0, 40, int(rng.integers(0, 50)))))


def run_threads(worker, errors: list[BaseException], timeout: float) -> None:
    """Run ``worker(t)`` on THREADS threads; fail on a deadlock or any error they recorded."""
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads), "deadlock: a request thread never finished"
    assert not errors, errors[0]


def meta(ids: np.ndarray) -> np.ndarray:
    m = np.zeros(len(ids), sarp.DEFAULT_METADATA_DTYPE)
    m["address"] = ids
    return m


@pytest.mark.parametrize("background", [False, True], ids=["inline", "worker"])
@pytest.mark.parametrize("backend", ["wiredtiger", "flashlog", "odirect"])
def test_concurrent_match_and_insert_stay_correct(tmp_path, backend, background):
    path = tmp_path / "i"
    index = sarp.open(path, backend=backend, durability="group", block_size=1,
                      snapshot_every_inserts=50, background=background, **SMALL)
    acked: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    deadline = time.monotonic() + SECONDS

    def worker(t: int) -> None:
        rng = np.random.default_rng(t)
        n = 0
        try:
            while time.monotonic() < deadline:
                i = t * 100_000 + n
                if rng.random() < 0.5 or n == 0:
                    ids = sarp.block_ids(sequence(i), 1)
                    index.insert(block_ids=ids, metadata=meta(ids))
                    with lock:
                        acked.append(i)
                    n += 1
                else:
                    q = sarp.block_ids(sequence(int(rng.integers(0, 10 * THREADS * 1000))), 1)
                    m = index.match(block_ids=q)
                    assert np.array_equal(m.block_ids, q[: m.num_blocks])
                    assert np.array_equal(m.metadata["address"], m.block_ids)
        except BaseException as exc:
            errors.append(exc)

    run_threads(worker, errors, SECONDS + 60)
    index.drain()
    st = index.stats()
    # the background work ran while the request threads inserted and matched
    assert st["snapshots"] > 0 and st["rematerializations"] > 0 and st["backfills"] > 0, st
    index.close()
    assert len(acked) > THREADS
    with sarp.open(path, backend=backend, max_retrieval=0) as index:
        for i in acked:
            q = sarp.block_ids(sequence(i), 1)
            assert index.match(block_ids=q).num_blocks == len(q), i


def race(body, rounds: int) -> list[list[int]]:
    """Run ``body(t, r)`` for rounds r = 0.. on THREADS threads that start each round together;
    returns the sequences the bodies acknowledged (their inserts returned)."""
    acked: list[list[int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        try:
            for r in range(rounds):
                start.wait(30)
                seq = body(t, r)
                with lock:
                    acked.append(seq)
        except BaseException as exc:
            errors.append(exc)
            start.abort()

    run_threads(worker, errors, 120)
    return acked


@pytest.mark.parametrize("backend", ["memory", "wiredtiger", "odirect"])
def test_racing_extensions_of_one_segment_all_survive(tmp_path, backend):
    """Threads extend the same stored segment with different suffixes at once: every
    acknowledged sequence keeps matching in full (no extension overwrites another). Each
    write waits a moment first, so that the other threads match meanwhile: without the
    window's lock they would read the segment it is about to extend."""
    path = tmp_path / "i"
    index = sarp.open(path, backend=backend, durability="group", block_size=1,
                      background=False, **SMALL)
    base = list(range(1000, 1003))
    index.insert(tokens=base)
    put_all = index.segments.put_all

    def waiting_put_all(records, **kw):
        time.sleep(0.001)  # releases the GIL: the other threads run their inserts' matches
        put_all(records, **kw)

    index.segments.put_all = waiting_put_all  # type: ignore[assignment, method-assign]

    def body(t: int, r: int) -> list[int]:
        seq = base + [t, r % 7, r]  # shares the segment's prefix, then diverges
        index.insert(tokens=seq)
        return seq

    for seq in race(body, 40):
        assert index.match(tokens=seq, max_retrieval=0).num_blocks == len(seq), seq
    index.close()


@pytest.mark.parametrize("backend", ["memory", "odirect"])
def test_racing_match_then_insert_all_survive(tmp_path, backend):
    """The serving pattern under races: in each round every thread matches a context that ends
    in a fresh 5-block segment, then inserts the context plus an output, so the first insert
    extends that segment in place while the others' matches still hold its old version. An
    insert may take the segment its match stopped on only if no write began since
    (``sarp.matched_prefix``): every acknowledged sequence keeps matching in full."""
    path = tmp_path / "i"
    index = sarp.open(path, backend=backend, durability="group", block_size=1, **SMALL)
    rounds = 30
    for r in range(rounds):
        index.insert(tokens=[10_000 * (r + 1) + k for k in range(5)])

    def body(t: int, r: int) -> list[int]:
        context = [10_000 * (r + 1) + k for k in range(5)] + [t % 2]
        seq = context + [t, r] + list(range(100 * t, 100 * t + 12))  # 3 windows
        m = index.match(tokens=context)
        assert np.array_equal(m.block_ids, sarp.block_ids(context, 1)[:m.num_blocks])
        index.insert(tokens=seq)
        return seq

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so matches and inserts interleave
    try:
        acked = race(body, rounds)
    finally:
        sys.setswitchinterval(old)
    index.drain()
    lost = [seq for seq in acked
            if index.match(tokens=seq, max_retrieval=0).num_blocks != len(seq)]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged sequences lost, e.g. {lost[0]}"
    index.close()


@pytest.mark.parametrize("backend", ["memory", "wiredtiger"])
def test_an_insert_skipping_known_windows_waits_for_the_extension_it_read(tmp_path, backend):
    """Z extends the segment of window 1 to its end and writes window 2 as new, under window
    1's lock. Between Z's store write and its registration, W matches the same sequence (it
    reads the extended record: windows 0 and 1 verified) and inserts it, skipping those
    windows. W must wait for Z at window 1's lock, then find window 2 stored: with
    MaxRetrieval 0 no block is written twice, and the first writer's records are served."""
    bs, s = SMALL["segment_blocks"] // 4, SMALL["segment_blocks"]
    index = sarp.open(tmp_path / "i", backend=backend, durability="group", block_size=bs,
                      max_retrieval=0, **{k: v for k, v in SMALL.items() if k != "max_retrieval"})
    for seed in range(100):  # windows 1 and 2 on different lock stripes
        b = np.random.default_rng(seed).integers(0, 500, (2 * s + s // 2) * bs)
        ids = sarp.block_ids(b, bs)
        if int(ids[s]) % sarp.index.WINDOW_LOCKS != int(ids[2 * s]) % sarp.index.WINDOW_LOCKS:
            break
    a = b[:(s + s // 2) * bs]  # window 0 whole, window 1 half
    index.insert(tokens=a, metadata=node_meta(ids[:s + s // 2], 1))
    stored, w_at_lock = threading.Event(), threading.Event()
    put_all = index.segments.put_all

    def pausing_put_all(records, **kw):
        put_all(records, **kw)
        if threading.current_thread().name == "Z":
            stored.set()
            assert w_at_lock.wait(30)  # W asked for window 1's lock, or W is done

    index.segments.put_all = pausing_put_all  # type: ignore[assignment, method-assign]
    out = _writer_and_follower(index, b, ids, stored, w_at_lock, int(ids[s]))
    assert out["W match"] == 2 * s  # W read Z's extension before Z registered it
    assert out["Z"]["blocks_written"] > 0 and out["W"]["blocks_written"] == 0
    assert index.stats()["indexed_blocks"] == len(ids)
    m = index.match(tokens=b)
    assert m.num_blocks == len(ids) and set(m.metadata["node"][s + s // 2:].tolist()) == {2}
    index.close()


@pytest.mark.parametrize("backend", ["memory", "wiredtiger"])
def test_an_insert_skipping_known_windows_waits_for_a_writer_of_an_earlier_one(tmp_path,
                                                                                backend):
    """Z writes a new sequence of three windows under window 0's lock and registers them one
    by one. Between its registrations of windows 1 and 2, W matches the sequence (windows 0
    and 1 verified) and inserts it. W must wait for Z at window 0's lock, the lock of the
    first window Z wrote, not only at window 1's, then find window 2 stored: with
    MaxRetrieval 0 no block is written twice, and the first writer's records are served."""
    bs, s = SMALL["segment_blocks"] // 4, SMALL["segment_blocks"]
    index = sarp.open(tmp_path / "i", backend=backend, durability="group", block_size=bs,
                      max_retrieval=0, **{k: v for k, v in SMALL.items() if k != "max_retrieval"})
    for seed in range(100):  # the three windows on different lock stripes
        b = np.random.default_rng(seed).integers(0, 500, 3 * s * bs)
        ids = sarp.block_ids(b, bs)
        if len({int(ids[k * s]) % sarp.index.WINDOW_LOCKS for k in range(3)}) == 3:
            break
    placed, w_at_lock = threading.Event(), threading.Event()
    place = index.directory.place

    def pausing_place(seg_id, block_ids, **kw):
        out = place(seg_id, block_ids, **kw)
        if threading.current_thread().name == "Z" and int(block_ids[0]) == int(ids[s]):
            placed.set()
            assert w_at_lock.wait(30)  # W asked for window 0's lock, or W is done
        return out

    index.directory.place = pausing_place  # type: ignore[assignment, method-assign]
    out = _writer_and_follower(index, b, ids, placed, w_at_lock, int(ids[0]))
    assert out["W match"] == 2 * s  # W read Z's windows 0 and 1 before Z registered window 2
    assert out["Z"]["blocks_written"] == len(ids) and out["W"]["blocks_written"] == 0
    assert index.stats()["indexed_blocks"] == len(ids)
    m = index.match(tokens=b)
    assert m.num_blocks == len(ids) and set(m.metadata["node"].tolist()) == {2}
    index.close()


def _writer_and_follower(index, b, ids, z_paused: threading.Event, w_waits: threading.Event,
                         lock_block: int) -> dict:
    """Thread Z inserts tokens ``b`` (records of node 2) and pauses mid-write, setting
    ``z_paused``; thread W then matches and inserts the same (node 3). ``w_waits`` is set when
    W asks for the lock of the window that starts with block ``lock_block``, or when W is
    done. Returns Z's and W's insert counters and the blocks W's match verified."""
    window_lock = index._window_lock

    def noting_window_lock(first_block):
        if threading.current_thread().name == "W" and first_block == lock_block:
            w_waits.set()
        return window_lock(first_block)

    index._window_lock = noting_window_lock
    out = {}

    def z():
        out["Z"] = index.insert(tokens=b, metadata=node_meta(ids, 2))

    def w():
        assert z_paused.wait(30)
        out["W match"] = index.match(tokens=b).num_blocks
        out["W"] = index.insert(tokens=b, metadata=node_meta(ids, 3))
        w_waits.set()

    threads = [threading.Thread(target=z, name="Z"), threading.Thread(target=w, name="W")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return out


def node_meta(ids: np.ndarray, node: int) -> np.ndarray:
    m = meta(ids)
    m["node"] = node
    return m


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("backend", ["wiredtiger", "rocksdb", "flashlog", "odirect"])
def test_close_waits_for_running_calls(tmp_path, backend, durability):
    """close() (twice, on two threads) while request threads insert, match and read stats:
    each call completes or raises IndexClosedError, and every insert that returned is there
    after a reopen (under group, close() makes them durable). Without the wait, a closed
    engine session aborted the process, and inserts returned with their records dropped."""
    path = tmp_path / "i"
    index = sarp.open(path, backend=backend, durability=durability, block_size=1, **SMALL)
    returned: list[int] = []

    def worker(t: int) -> None:
        for n in range(100_000):
            i = t * 100_000 + n
            ids = sarp.block_ids(sequence(i), 1)
            index.insert(block_ids=ids, metadata=meta(ids))
            returned.append(i)
            index.match(block_ids=ids)
            index.stats()

    close_under_calls(index.close, worker, THREADS, lambda: len(returned), 3 * THREADS,
                      IndexClosedError)
    with sarp.open(path) as again:
        for i in returned:
            ids = sarp.block_ids(sequence(i), 1)
            assert again.match(block_ids=ids, max_retrieval=0).num_blocks == len(ids), i


def test_worker_reports_a_failed_job_once_and_runs_the_later_ones():
    """A job that raises on the worker thread is raised by the next ``drain()`` (once) or, if
    none comes, by ``close()``: an error in background work is never lost."""
    worker = Worker(enabled=True)
    ran = []

    def fail() -> None:
        raise OSError("device gone")

    worker.submit(fail)
    worker.submit(lambda: ran.append(1))
    with pytest.raises(OSError, match="device gone"):
        worker.drain()
    assert ran == [1]
    worker.drain()
    worker.submit(fail)
    with pytest.raises(OSError, match="device gone"):
        worker.close()


def test_worker_close_runs_the_jobs_that_a_running_job_queues():
    """A back-fill still running when ``close()`` is called may queue follow-up builds: close
    runs them too, instead of stopping at a marker queued ahead of them."""
    worker = Worker(enabled=True)
    started, ran = threading.Event(), []

    def parent() -> None:
        started.set()
        deadline = time.monotonic() + 0.5  # until close() has queued its stop marker, if any
        while worker._q.qsize() == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        worker.submit(lambda: ran.append("follow-up"))

    worker.submit(parent)
    started.wait()
    worker.close()
    assert ran == ["follow-up"]


class _MatchDuringGrowth(rt.RoutingTable):
    """A routing table that runs a match of ``query`` each time its posting-list arena grows:
    where another thread may take the GIL in the middle of a placement."""

    index: sarp.Index
    query: np.ndarray | None = None
    before = growths = 0
    shorter: list[tuple[int, int]]

    def _grow_arena(self, need: int) -> None:
        self.growths += 1
        if self.query is not None:
            got = match_path(self.index.config, self.index.directory, self.index.segments,
                             self.query, 0)[0]
            if got.num_blocks < self.before:
                self.shorter.append((self.before, got.num_blocks))
        return super()._grow_arena(need)  # type: ignore[misc]


def test_a_new_routing_entry_is_visible_only_with_its_segment(tmp_path) -> None:
    """Placing a segment may create an entry, then grow the posting-list arena, which releases
    the GIL (numpy's copy; compaction runs without it): a match running then must not find the
    new entry with an empty list, which would end its window at 0 blocks."""
    index = sarp.open(tmp_path / "i", "memory", block_size=1, segment_blocks=64,
                      max_retrieval=0)
    table = index.directory.table = _MatchDuringGrowth()
    table.index, table.shorter = index, []
    rng = np.random.default_rng(0)
    for _ in range(1500):
        tokens = np.concatenate((rng.integers(0, 4, 1),  # a few shared first blocks
                                 rng.integers(0, 1 << 30, int(rng.integers(1, 60)))))
        ids = sarp.block_ids(tokens, 1)
        index.insert(block_ids=ids[:max(1, len(ids) // 4)])  # a segment with one point
        table.query, table.before = ids, index.match(block_ids=ids).num_blocks
        index.insert(block_ids=ids)  # extends it: new entries at its later points
        table.query = None
    index.close()
    assert table.growths > 20
    assert not table.shorter, table.shorter[:3]


@pytest.mark.parametrize("backend", ["memory", "odirect"])
def test_racing_copies_of_a_shared_prefix_all_survive(tmp_path, backend):
    """Threads insert sequences that share a prefix ending inside a window, and match as they
    go: every insert copies that window's shared blocks into a new segment listed under its
    keys, whose lists pass DELTA_MIN and keep a delta run while matches read them. Each
    sequence matches in full once inserted, and every acknowledged one at the end. A query
    with a sequence's own block after the prefix, then another, routes through the shared
    keys' lists (its next routing point is past the block it diverges at), where only that
    sequence's segment shares its block: it matches one block past the prefix only if the
    list holds that segment, also the latest ones, in the delta run."""
    path = tmp_path / "i"
    index = sarp.open(path, backend=backend, durability="group", block_size=1, **SMALL)
    prefix = list(range(5000, 5013))  # ends 5 blocks into the second window

    def body(t: int, r: int) -> list[int]:
        seq = prefix + [1_000_000 + 1000 * t + r] + list(range(100 * t, 100 * t + 6))
        m = index.match(tokens=seq)
        assert np.array_equal(m.block_ids, sarp.block_ids(seq, 1)[:m.num_blocks])
        index.insert(tokens=seq)
        assert index.match(tokens=seq, max_retrieval=0).num_blocks == len(seq)
        return seq

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so matches and inserts interleave
    try:
        acked = race(body, 40)
    finally:
        sys.setswitchinterval(old)
    index.drain()
    assert index.directory.table.longest_list() >= len(acked) > rt.DELTA_MIN
    lost = [seq for seq in acked
            if index.match(tokens=seq, max_retrieval=0).num_blocks != len(seq)
            or index.match(tokens=seq[:len(prefix) + 1] + [7]).num_blocks != len(prefix) + 1]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged sequences lost, e.g. {lost[0]}"
    index.close()
