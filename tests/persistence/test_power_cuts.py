"""Randomized sessions ended by a power cut: every acknowledged insert survives.

Each seed runs an index on odirect or flashlog through ``PowerLossIO``: batches of inserts
(sequences that share prefixes, and one-block sequences of their own), flushes, snapshots,
failed file and directory syncs, and kills (the process's lock released, its memory gone)
followed by reopens without a restart, also after a failed sync
(``FileIO.redo_failed_syncs``), in one durability mode or, in the mixed runs, a mode picked
again at each reopen. A power cut (drop, tear or reorder) ends it: it undoes the writes and
the directory entries no sync made durable. The index must then open, and every insert that
its mode acknowledged must match whole: under ``sync`` on return, under ``group`` and
``none`` once a later ``flush()`` or ``snapshot()`` returned. Other seeds cut the power under
request threads (``_thread_session``).
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp.errors import SarpError, SyncFailedError, WritesStoppedError
from storage_backends import odirect
from storage_backends.power_loss import PowerLossIO

from ..index.helpers import metadata_for, random_config
from . import thread_writer
from .power import assert_requests_after_crash, killed, open_through
from .workload import CONFIG, check_match, full_blocks, insert, metadata

MODES = ("sync", "group", "none")


def _own_block(n: int) -> np.ndarray:
    return np.array([10_000_000 + n], dtype=np.uint64)


def _session(path: Path, seed: int, mixed: bool, config: dict[str, Any],
             sectors: int | None = None) -> tuple[str, set[tuple[str, int]]]:
    """Run the seed's session up to its power cut (``sectors``: see ``PowerLossIO``), on an
    index of ``config``; returns the store kind and what was acknowledged: ("s", i) for
    sequence(i), ("b", n) for one-block sequence n."""
    rng = random.Random(seed)
    kind = rng.choice(["odirect", "flashlog"])
    mode = rng.choice(MODES)
    io = PowerLossIO(seed, sectors)
    index = open_through(io, path, kind, durability=mode, **config)
    acked: set[tuple[str, int]] = set()
    pending: set[tuple[str, int]] = set()
    own = 0
    for _ in range(rng.randint(5, 25)):
        op = rng.random()
        try:
            if op < 0.55:
                for _ in range(rng.choice([1, 5, 50, 400])):
                    if rng.random() < 0.5:
                        i = rng.randrange(30)
                        insert(index, i)
                        key = ("s", i)
                    else:
                        index.insert(block_ids=_own_block(own), metadata=metadata(_own_block(own)))
                        key, own = ("b", own), own + 1
                    (acked if mode == "sync" else pending).add(key)
            elif op < 0.8:
                index.flush() if op < 0.7 else index.snapshot()
                acked |= pending
                pending = set()
            elif op < 0.85:
                io.fail_syncs(1)
                if op < 0.825:  # decided by op: the seeds draw what they drew before
                    io.fail_dir_syncs(1)
            elif op < 0.95:  # kill -9, then reopen (after a failed sync too: no restart)
                killed(index)
                pending = set()
                io.fail_syncs(0)
                io.fail_dir_syncs(0)
                mode = rng.choice(MODES) if mixed else mode
                index = open_through(io, path, kind, durability=mode)
            else:
                break
        except (SyncFailedError, WritesStoppedError):
            pending = set()  # not acknowledged; the session goes on with writes stopped
    io.crash(rng.choice(["drop", "tear", "reorder"]))
    return kind, acked


def _check(tmp_path: Path, seed: int, mixed: bool, config: dict[str, Any] = CONFIG,
           sectors: int | None = None) -> None:
    path = tmp_path / "i"
    kind, acked = _session(path, seed, mixed, config, sectors)
    with sarp.open(path, backend=kind, direct_io=False, snapshot_on_close=False) as index:
        lost = [key for key in sorted(acked)
                if (check_match(index, key[1]) != full_blocks(key[1]) if key[0] == "s"
                    else _own_match(index, key[1]) != 1)]
        for i in range(30):  # acknowledged or not, what a match serves was inserted
            check_match(index, i)
        for n in range(max((n for k, n in acked if k == "b"), default=0) + 400):
            _own_match(index, n)
    assert not lost, f"seed {seed} ({kind}): acknowledged inserts lost: {lost[:10]}"


def _own_match(index: sarp.Index, n: int) -> int:
    """Match one-block sequence n; assert its record, if any, is the one inserted."""
    m = index.match(block_ids=_own_block(n))
    assert np.array_equal(m.metadata, metadata(m.block_ids))
    return m.num_blocks


#: seeds run by default: 104 reopens after a failed sync (without the redo it lost inserts)
DEFAULT_SEEDS = (*range(6), 104)


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_a_power_cut_loses_no_acknowledged_insert(tmp_path: Path, seed: int,
                                                  mixed: bool) -> None:
    _check(tmp_path, seed, mixed)


@pytest.mark.slow
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("seed", [s for s in range(200) if s not in DEFAULT_SEEDS])
def test_a_power_cut_loses_no_acknowledged_insert_over_many_seeds(tmp_path: Path, seed: int,
                                                                  mixed: bool) -> None:
    _check(tmp_path, seed, mixed)


@pytest.mark.parametrize("sectors", [512, 4096])
@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_a_power_cut_tearing_any_sectors_loses_no_acknowledged_insert(
        tmp_path: Path, seed: int, sectors: int) -> None:
    """The mixed sessions, the newest write torn in any subset of its sectors
    (``PowerLossIO``): on the store's slots, WAL and log, and on the index's journal."""
    _check(tmp_path, seed, True, sectors=sectors)


@pytest.mark.slow
@pytest.mark.parametrize("sectors", [512, 4096])
@pytest.mark.parametrize("seed", [s for s in range(200) if s not in DEFAULT_SEEDS])
def test_a_power_cut_tearing_any_sectors_over_many_seeds(tmp_path: Path, seed: int,
                                                         sectors: int) -> None:
    _check(tmp_path, seed, bool(seed % 2), sectors=sectors)


#: seeds whose session runs on odirect
ODIRECT_SEEDS = [s for s in range(200) if random.Random(s).choice(["odirect", "flashlog"])
                 == "odirect"]


def _check_across_checkpoints(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch,
                              sectors: int | None = None) -> None:
    """The seed's session on odirect in write-intent regions of one extent (64 segments),
    checkpointed once two are named: the failed syncs and power cuts fall on DIRTY and
    COPIES too, and the opens after a kill or the cut read only the regions named
    (``sectors``: see ``PowerLossIO``)."""
    monkeypatch.setattr(odirect, "SCAN_BYTES", 1)
    monkeypatch.setattr(odirect, "CHECKPOINT_REGIONS", 2)
    _check(tmp_path, seed, mixed=True, sectors=sectors)


@pytest.mark.parametrize("seed", ODIRECT_SEEDS[:6])
def test_a_power_cut_across_odirect_checkpoints_loses_no_acknowledged_insert(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_across_checkpoints(tmp_path, seed, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", ODIRECT_SEEDS[6:])
def test_a_power_cut_across_odirect_checkpoints_over_many_seeds(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_across_checkpoints(tmp_path, seed, monkeypatch)


@pytest.mark.parametrize("seed", ODIRECT_SEEDS[:3])
def test_a_power_cut_tearing_any_sectors_across_odirect_checkpoints(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_across_checkpoints(tmp_path, seed, monkeypatch, sectors=512)


@pytest.mark.slow
@pytest.mark.parametrize("seed", ODIRECT_SEEDS[3:])
def test_a_power_cut_tearing_any_sectors_across_odirect_checkpoints_over_many_seeds(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_across_checkpoints(tmp_path, seed, monkeypatch, sectors=512)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100))
def test_a_power_cut_loses_no_acknowledged_insert_under_random_configurations(
        tmp_path: Path, seed: int) -> None:
    """The sessions on indexes of the randomized oracle runs' configurations (refinement,
    filtering and pruning each on or off, small thresholds, bounded or not); the workload's
    block size is kept."""
    config = random_config(np.random.default_rng(10_000 + seed), bounded=seed % 3 == 0)
    _check(tmp_path, seed, bool(seed % 2), {**config, "block_size": CONFIG["block_size"]})


def _thread_session(path: Path, seed: int, sectors: int | None = None
                    ) -> tuple[str, list[np.ndarray], set[int], set[int]]:
    """2 to 4 request threads insert a workload with heavy sharing on an index of a random
    configuration (odirect or flashlog, through ``PowerLossIO``, with or without the
    background worker and periodic snapshots: ``thread_writer.draw``, as the threaded kill
    test); after a random number of acknowledgements the
    power is cut under them. Returns the store kind, the requests' block IDs, and the
    requests begun and acknowledged (under ``sync`` on return, under ``group`` once the
    ``flush()`` after them returned)."""
    options, threads, requests = thread_writer.draw(seed, ("odirect", "flashlog"), 200)
    kind, mode = options.pop("backend"), options["durability"]
    rng = random.Random(seed)
    cut_after = rng.randint(1, 149)
    io = PowerLossIO(seed, sectors)
    index = open_through(io, path, kind, **options)
    begun: set[int] = set()
    acked: set[int] = set()
    lock = threading.Lock()
    due = threading.Event()
    failures: list[BaseException] = []

    def work(t: int) -> None:
        for i in range(t, len(requests), threads):
            with lock:
                begun.add(i)
            try:
                index.insert(block_ids=requests[i], metadata=metadata_for(requests[i], i))
                if mode == "group":
                    index.flush()
            except BaseException as exc:
                if not (io.dead and isinstance(exc, OSError | SarpError)):
                    failures.append(exc)  # only the power cut may stop a request
                return
            with lock:
                acked.add(i)
                if len(acked) >= cut_after:
                    due.set()
        due.set()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    due.wait(120)
    io.crash(rng.choice(["drop", "tear", "reorder"]))
    for w in workers:
        w.join(120)
    assert not failures, failures
    return kind, requests, begun, acked


def _check_threads(tmp_path: Path, seed: int, sectors: int | None = None) -> None:
    path = tmp_path / "i"
    kind, requests, begun, acked = _thread_session(path, seed, sectors)
    with sarp.open(path, backend=kind, direct_io=False, snapshot_on_close=False) as index:
        assert_requests_after_crash(index, requests, begun, acked, f"seed {seed} ({kind})")


@pytest.mark.parametrize("seed", range(4))
def test_a_power_cut_under_request_threads_loses_no_acknowledged_insert(tmp_path: Path,
                                                                        seed: int) -> None:
    _check_threads(tmp_path, seed)


@pytest.mark.parametrize("seed", range(4))
def test_a_power_cut_tearing_any_sectors_under_request_threads(tmp_path: Path,
                                                               seed: int) -> None:
    _check_threads(tmp_path, seed, sectors=512)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 150))
def test_a_power_cut_tearing_any_sectors_under_request_threads_over_many_seeds(
        tmp_path: Path, seed: int) -> None:
    _check_threads(tmp_path, seed, sectors=512)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 150))
def test_a_power_cut_under_request_threads_over_many_seeds(tmp_path: Path, seed: int) -> None:
    _check_threads(tmp_path, seed)
