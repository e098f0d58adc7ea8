"""Index crash tests: SIGKILL a writer at random moments (snapshot publication included),
reopen, and check every acknowledged sequence, that nothing never inserted comes back, and
that new inserts work."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sarp
from tests.backends.conftest import kind_params

from . import crash_writer
from .workload import CONFIG, assert_holds, check_match, metadata, sequence

WRITER = Path(crash_writer.__file__)
DURABLE = [k for k in kind_params(persistent_only=True)]


def run_until_killed(backend: str, path: Path, durability: str, first: int, rng: random.Random,
                     log: Path) -> int:
    """Start the writer at sequence ``first``, SIGKILL it after a random number of acks or
    mid-insert; returns the last acknowledged sequence (first - 1 if none)."""
    wanted = rng.randint(1, 25)
    every = rng.choice([2, 3, 5])  # frequent snapshots: kills land during publication too
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), backend, str(path), durability, str(first), str(every)],
            stdout=subprocess.PIPE, stderr=err, text=True)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    last_ack, acks = first - 1, 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            word, i = line.split()
            if word == "ack":
                last_ack, acks = int(i), acks + 1
            if acks >= wanted and (word == "begin" or rng.random() < 0.5):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        watchdog.cancel()
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    return last_ack


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
