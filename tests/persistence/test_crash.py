"""Index crash tests: SIGKILL a writer at random moments (snapshot publication included),
reopen, and check every acknowledged sequence, that nothing never inserted comes back, and
that new inserts work. The writer is one thread on a fixed configuration, or request threads
on a configuration and workload that a seed draws (``thread_writer``)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import sarp
from tests.backends.conftest import kind_params

from . import crash_writer, thread_writer
from .power import assert_requests_after_crash
from .workload import CONFIG, assert_holds, check_match, metadata, sequence

WRITER = Path(crash_writer.__file__)
THREAD_WRITER = Path(thread_writer.__file__)
DURABLE = [k for k in kind_params(persistent_only=True)]


def kill_writer(args: list[str], rng: random.Random, log: Path,
                wanted: int) -> tuple[set[int], set[int]]:
    """Run the writer subprocess ``args`` (it prints ``begin i`` and ``ack i``, and ``done``
    when it has no more to write) and SIGKILL it after ``wanted`` acks, at a begin or at
    random after one; returns the sequences begun and those acknowledged, the lines it
    wrote after the one the kill followed included."""
    with open(log, "w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    begun: set[int] = set()
    acked: set[int] = set()

    def note(line: str) -> str:
        word, *i = line.split()
        if word != "done":
            (begun if word == "begin" else acked).add(int(i[0]))
        return word

    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            word = note(line)
            if word == "done" or (len(acked) >= wanted
                                  and (word == "begin" or rng.random() < 0.5)):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:  # written before the kill, not yet read
            note(line)
    finally:
        watchdog.cancel()
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    return begun, acked


def run_until_killed(backend: str, path: Path, durability: str, first: int, rng: random.Random,
                     log: Path) -> int:
    """Start the writer at sequence ``first``, SIGKILL it after a random number of acks or
    mid-insert; returns the last acknowledged sequence (first - 1 if none)."""
    wanted = rng.randint(1, 25)
    every = rng.choice([2, 3, 5])  # frequent snapshots: kills land during publication too
    _, acked = kill_writer([sys.executable, str(WRITER), backend, str(path), durability,
                            str(first), str(every)], rng, log, wanted)
    return max(acked, default=first - 1)


def crash_trial(tmp_path: Path, backend: str, durability: str, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "index"
    last = -1
    for round_ in range(2):  # crash, recover, write more, crash again
        last = run_until_killed(backend, path, durability, last + 1, rng,
                                tmp_path / f"writer{round_}.log")
        with sarp.open(path, backend=backend, durability=durability, memory_budget=8 << 20,
                       snapshot_on_close=False) as index:
            assert not index.recovery["faults"]
            assert_holds(index, last + 1)
            for i in range(last + 1, last + 40):  # sequences never acknowledged: no false reuse
                check_match(index, i)
    with sarp.open(path, backend=backend, memory_budget=8 << 20) as index:
        nxt = last + 1000
        tokens = sequence(nxt)
        index.insert(tokens=tokens, metadata=metadata(sarp.block_ids(tokens, CONFIG["block_size"])))
        assert check_match(index, nxt) == len(tokens) // CONFIG["block_size"]


@pytest.mark.parametrize("backend", DURABLE)
@pytest.mark.parametrize("trial", range(3))
def test_crash_sync(tmp_path, backend, trial):
    crash_trial(tmp_path, backend, "sync", trial)


@pytest.mark.parametrize("backend", ["wiredtiger"])
def test_crash_group(tmp_path, backend):
    crash_trial(tmp_path, backend, "group", 99)


@pytest.mark.slow
@pytest.mark.parametrize("backend", DURABLE)
@pytest.mark.parametrize("trial", range(30))
def test_crash_sync_slow(tmp_path, backend, trial):
    crash_trial(tmp_path, backend, "sync", 1000 + trial)


def thread_trial(tmp_path: Path, seed: int) -> None:
    """Kill the threaded writer of ``seed``, reopen and check every request
    (``assert_requests_after_crash``); insert after the recovery, and check all again after
    the next."""
    rng = random.Random(seed)
    path = tmp_path / "index"
    options, _, requests = thread_writer.draw(seed)
    begun, acked = kill_writer([sys.executable, str(THREAD_WRITER), str(seed), str(path)], rng,
                               tmp_path / "writer.log", rng.randint(1, 200))
    new = np.array([1 << 62, 1 << 61], dtype=np.uint64)
    for reopen in range(2):
        with sarp.open(path, **options) as index:
            assert not index.recovery["faults"]
            assert_requests_after_crash(index, requests, begun, acked,
                                        f"seed {seed}, reopen {reopen}")
            if reopen:
                assert index.match(block_ids=new).num_blocks == 2
            else:
                index.insert(block_ids=new)


@pytest.mark.parametrize("seed", range(3))
def test_crash_of_request_threads(tmp_path, seed):
    thread_trial(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 60))
def test_crash_of_request_threads_over_many_seeds(tmp_path, seed):
    thread_trial(tmp_path, seed)


@pytest.mark.parametrize("background", [False, True])
def test_a_clean_close_after_a_recovery_snapshots_what_it_replayed(tmp_path, background):
    """An open after a crash replays the journal (and redoes its builds); the clean close that
    follows takes a snapshot though no insert came, so the next open replays nothing."""
    from .power import killed
    from .workload import insert

    path = tmp_path / "i"
    index = sarp.open(path, backend="odirect", direct_io=False, durability="group",
                      snapshot_on_close=False, **CONFIG)
    for i in range(30):
        insert(index, i)
    index.flush()
    killed(index)
    with sarp.open(path, background=background) as index:
        assert index.recovery["journal_records"] > 0
    with sarp.open(path, background=background) as index:
        assert index.recovery["snapshot"] is not None
        assert index.recovery["journal_records"] == 0
        assert_holds(index, 30)
    with sarp.open(path) as index:  # a clean open and close with nothing to keep: no snapshot
        pass
    assert len(list(path.glob("snapshot-*.snap"))) == 1
