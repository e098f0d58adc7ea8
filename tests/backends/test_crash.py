"""Crash consistency: SIGKILL a writer at a random moment, reopen, check acknowledged records.

Every acknowledged record must be present with exactly its bytes (the acknowledged version or
a later one the writer had started), and nothing may come back that was never written.
SIGKILL leaves the page cache intact, so this checks the engines' logs and recovery, not
their fsyncs (see docs/durability.md).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from storage_backends import odirect

from . import crash_writer

WRITER = Path(crash_writer.__file__)
TIMEOUT = 120.0


def run_writer(kind: str, path: Path, durability: str, seed: int, direct_io: bool,
               log: Path) -> tuple[int, int]:
    """Run the writer, SIGKILL it after a random number of acks; (last ack, last begin)."""
    rng = random.Random(seed)
    acks_wanted = rng.randint(1, 40 if durability == "sync" else 6)
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), kind, str(path), durability, str(seed),
             "1" if direct_io else "0"],
            stdout=subprocess.PIPE, stderr=err, text=True)
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    last = {"ack": -1, "begin": -1}
    acks = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            word, index = line.split()
            last[word] = int(index)
            acks += word == "ack"
            if acks >= acks_wanted:
                break
        else:
            pytest.fail(f"writer ended before {acks_wanted} acks: {log.read_text()}")
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        for line in proc.stdout:  # lines printed before the kill still count
            word, index = line.split()
            last[word] = int(index)
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
    return last["ack"], last["begin"]


def check_recovered(kind: str, path: Path, seed: int, last_ack: int, last_begin: int,
                    open_kind: Any) -> None:
    acked: dict[int, int] = {}
    started: dict[int, int] = {}
    for i, (key, version) in enumerate(islice(crash_writer.operations(seed, kind),
                                              last_begin + 1)):
        started[key] = version
        if i <= last_ack:
            acked[key] = version
    with open_kind(kind, path, durability="sync") as store:
        found = dict(store.scan())
        assert set(acked) <= set(found), "acknowledged records lost"
        assert set(found) <= set(started), "records that were never written"
        for key, data in found.items():
            named_key, version = crash_writer.version_of(data)
            assert named_key == key
            assert data == crash_writer.value(key, version), f"key {key}: bytes never written"
            assert acked.get(key, 0) <= version <= started[key], f"key {key}: stale version"
        assert store.get_many(list(started)) == [found.get(k) for k in started]
        new_key = crash_writer.KEYSPACE  # never written: the recovered store takes writes
        store.put(new_key, b"after recovery")
        assert store.get(new_key) == b"after recovery"


def crash_trial(kind: str, durability: str, seed: int, tmp_path: Path, direct_io: bool,
                open_kind: Any) -> None:
    path = tmp_path / f"store-{seed}"
    last_ack, last_begin = run_writer(kind, path, durability, seed, direct_io,
                                      tmp_path / f"writer-{seed}.log")
    assert last_ack >= 0
    check_recovered(kind, path, seed, last_ack, last_begin, open_kind)


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("trial", range(3))
def test_crash(durable_kind: str, durability: str, trial: int, tmp_path: Path,
               direct_io: bool, open_kind: Any) -> None:
    crash_trial(durable_kind, durability, 1000 + trial, tmp_path, direct_io, open_kind)


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("trial", range(4))
def test_crash_across_odirect_checkpoints(durability: str, trial: int, tmp_path: Path,
                                          direct_io: bool, open_kind: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """odirect in small write-intent regions, checkpointed as the writer goes: the open after
    the kill scans only the regions named since the last checkpoint."""
    for name in ("SCAN_BYTES", "CHECKPOINT_REGIONS"):
        monkeypatch.setattr(odirect, name, getattr(odirect, name))  # restored at teardown
    crash_writer.small_regions()

    def open_dense(kind: str, path: Path, **options: Any) -> Any:
        return open_kind("odirect", path, key_mode="dense", **options)

    crash_trial(crash_writer.ODIRECT_REGIONS, durability, 3000 + trial, tmp_path, direct_io,
                open_dense)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["sync", "group"])
def test_crash_many(durable_kind: str, durability: str, tmp_path: Path, direct_io: bool,
                    open_kind: Any) -> None:
    for seed in range(30):
        crash_trial(durable_kind, durability, 2000 + seed, tmp_path, direct_io, open_kind)
