"""Random damage to an index's own files, closed or left by a power cut: corruption is refused
or raised, never served.

One seed draws a configuration, a backend, a workload with heavy sharing and its snapshots and
reopens, then one file of the index (sarp.json, a snapshot, a journal, the store's kind marker,
and the flash log's and odirect's own files; WiredTiger's and RocksDB's files are their
engines', tested by ``test_damage``'s salvage tests) and one damage: a flipped bit, a run of
random bytes, a zeroed sector, a cut or a deletion. The reopen must refuse with SARP's error
naming the fault (or, for a lost sarp.json, the ``ValueError`` that names what it found), or
serve only what was inserted: each match returns the inserted blocks with the first writer's
records, or raises ``CorruptionError``. A match comes back shorter than exact only after
damage to a journal: damage to the records of its last sync cannot be told from a torn tail
(docs/journal_format.txt). A failure names its seed, which replays it.

The power-cut seeds (``_run_cut``) run such a session on odirect or flashlog through
``PowerLossIO``, end it with a power cut, then damage one file as above. A crash leaves a torn
tail that damage to the store's newest writes looks like (docs/durability.md, "Damage after a
crash"), so there every match must still be verified, and every acknowledged insert (under
``sync`` on return, in every mode once a later ``flush()``, ``snapshot()`` or close returned) must
match whole unless the damage hit a journal or the store's records (its WAL, page log or slots).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp.errors import CorruptionError, SarpError
from storage_backends.power_loss import PowerLossIO

from ..index.helpers import Oracle, assert_verified, metadata_for, random_config, random_workload
from .power import open_through

DEFAULT_SEEDS = range(40)
CUT_SEEDS = range(20)
DAMAGES = ("bit", "bit", "run", "zero", "cut", "delete")


def _own_files(root: Path) -> list[Path]:
    """The index's files but its engines' (WiredTiger, RocksDB) and the lock files."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "LOCK"
                  and p.relative_to(root).parts[:2] not in (("store", "wt"), ("store", "db")))


def _damage(rng: np.random.Generator, path: Path) -> str:
    """Damage ``path`` one way; returns what was done."""
    kind = str(rng.choice(DAMAGES))
    size = path.stat().st_size
    if kind == "delete" or size == 0:
        path.unlink()
        return f"{path.name} deleted"
    data = bytearray(path.read_bytes())
    written = np.flatnonzero(np.frombuffer(bytes(data), np.uint8))  # odirect: skip holes
    at = int(written[rng.integers(len(written))]) if len(written) else int(rng.integers(size))
    if kind == "cut":
        os.truncate(path, at)
    elif kind == "bit":
        data[at] ^= 1 << int(rng.integers(8))
    elif kind == "run":
        data[at:at + 64] = rng.integers(0, 256, len(data[at:at + 64]), dtype=np.uint8).tobytes()
    else:
        at -= at % 512
        data[at:at + 512] = bytes(len(data[at:at + 512]))
    if kind != "cut":
        path.write_bytes(bytes(data))
    return f"{path.name}: {kind} at {at}"


def _requests(rng: np.random.Generator, block_size: int,
              oracle: Oracle) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """A seed's requests, as (block IDs, metadata), each put in ``oracle`` as it is drawn."""
    for tag, (_, full) in enumerate(random_workload(rng, int(rng.integers(20, 150)))):
        ids = sarp.block_ids(full, block_size)
        meta = metadata_for(ids, tag)
        oracle.insert(ids, meta)
        yield ids, meta


def _damage_one(rng: np.random.Generator, root: Path) -> tuple[Path, str]:
    """Damage one of the index's own files; returns it and what was done."""
    files = _own_files(root)
    target = files[int(rng.integers(len(files)))]
    return target, _damage(rng, target)


def _run(root: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    cfg = random_config(rng, bounded=False)
    backend = str(rng.choice(["odirect", "flashlog", "wiredtiger", "rocksdb"]))
    opts: dict[str, Any] = dict(durability=str(rng.choice(["none", "group", "sync"])),
                                snapshot_every_inserts=int(rng.choice([0, 0, 7])),
                                snapshot_on_close=bool(rng.random() < 0.5))
    oracle = Oracle()
    inserted = []
    index = sarp.open(root, backend=backend, **opts, **cfg)
    try:
        for ids, meta in _requests(rng, cfg["block_size"], oracle):
            index.insert(block_ids=ids, metadata=meta)
            inserted.append(ids)
            step = rng.random()
            if step < 0.04:
                index.snapshot()
            elif step < 0.08:
                index.close()
                index = sarp.open(root, **opts)
    finally:
        index.close()
    target, done = _damage_one(rng, root)
    whole = 0 if target.name.startswith("journal-") else len(inserted)
    _check(root, opts, inserted, whole, oracle, target, f"seed {seed}, {backend}, {done}")


@dataclass
class Cut:
    """A power-cut seed's session, ended by the cut, and the damage then done to one file."""

    inserted: list[np.ndarray]  # block IDs of each insert, in order
    acked: int  # inserted[:acked] were acknowledged
    oracle: Oracle
    target: Path  # the damaged file
    where: str  # the seed, backend, mode and damage, for messages

    @property
    def store_records(self) -> bool:
        """Whether the damage hit the store's records (flashlog's WAL or page log, odirect's
        slots)."""
        return self.target.name.startswith(("wal.", "log.", "slots."))

    @property
    def records(self) -> bool:
        """Whether the damage hit a journal or the store's records."""
        return self.store_records or self.target.name.startswith("journal-")


#: the options of the reopen after a power cut
REOPEN: dict[str, Any] = dict(direct_io=False, snapshot_on_close=False)


def cut_and_damage(root: Path, seed: int, sectors: int | None = None) -> Cut:
    """Run power-cut seed ``seed`` at ``root``: a session on odirect or flashlog through
    ``PowerLossIO`` (``sectors``: see there), ended by a power cut; then damage one of the
    index's files."""
    rng = np.random.default_rng(seed)
    cfg = random_config(rng, bounded=False)
    backend = str(rng.choice(["odirect", "flashlog"]))
    mode = str(rng.choice(["none", "group", "sync"]))
    opts: dict[str, Any] = dict(durability=mode, snapshot_every_inserts=int(rng.choice([0, 0, 7])))
    oracle = Oracle()
    inserted: list[np.ndarray] = []
    acked = 0
    io = PowerLossIO(seed, sectors)
    index = open_through(io, root, backend, **opts, **cfg)
    for ids, meta in _requests(rng, cfg["block_size"], oracle):
        index.insert(block_ids=ids, metadata=meta)
        inserted.append(ids)
        acked = len(inserted) if mode == "sync" else acked
        step = rng.random()
        if step < 0.1:
            index.snapshot() if step < 0.04 else index.flush()
            acked = len(inserted)
        elif step < 0.13:
            index.close()
            acked = len(inserted)
            index = open_through(io, root, backend, **opts)
    io.crash(str(rng.choice(["drop", "tear", "reorder"])))
    target, done = _damage_one(rng, root)
    torn = f" in {sectors}-byte sectors" if sectors else ""
    return Cut(inserted, acked, oracle, target,
               f"seed {seed}, {backend}, {mode}, power cut{torn}, {done}")


def _run_cut(root: Path, seed: int, sectors: int | None = None) -> None:
    cut = cut_and_damage(root, seed, sectors)
    _check(root, REOPEN, cut.inserted, 0 if cut.records else cut.acked, cut.oracle, cut.target,
           cut.where)


def _check(root: Path, opts: dict[str, Any], inserted: list[np.ndarray], whole: int,
           oracle: Oracle, target: Path, where: str) -> None:
    """Reopen the damaged index: it refuses, or each of ``inserted`` matches verified or
    raises ``CorruptionError``, and each of the first ``whole`` matches whole (or raises)."""
    try:
        index = sarp.open(root, **opts)
    except SarpError:
        return
    except ValueError as exc:  # sarp.json lost: the open names the index files it found
        assert target.name == "sarp.json" and "but no sarp.json" in str(exc), where
        return
    with index:
        for i, ids in enumerate(inserted):
            try:
                m = index.match(block_ids=ids)
            except CorruptionError:
                continue
            assert_verified(m, ids, oracle, where)
            if i < whole:
                assert m.num_blocks == len(ids), where


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_random_damage_is_refused_or_raised_never_served(tmp_path: Path, seed: int) -> None:
    _run(tmp_path / "i", seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [s for s in range(400) if s not in DEFAULT_SEEDS])
def test_random_damage_over_many_seeds(tmp_path: Path, seed: int) -> None:
    _run(tmp_path / "i", seed)


@pytest.mark.parametrize("seed", CUT_SEEDS)
def test_damage_after_a_power_cut_is_refused_or_raised_never_served(tmp_path: Path,
                                                                    seed: int) -> None:
    _run_cut(tmp_path / "i", seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [s for s in range(400) if s not in CUT_SEEDS])
def test_damage_after_a_power_cut_over_many_seeds(tmp_path: Path, seed: int) -> None:
    _run_cut(tmp_path / "i", seed)


@pytest.mark.parametrize("seed", CUT_SEEDS)
def test_damage_after_a_power_cut_tearing_any_sectors_is_never_served(tmp_path: Path,
                                                                      seed: int) -> None:
    _run_cut(tmp_path / "i", seed, sectors=512)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [s for s in range(400) if s not in CUT_SEEDS])
def test_damage_after_a_power_cut_tearing_any_sectors_over_many_seeds(tmp_path: Path,
                                                                      seed: int) -> None:
    _run_cut(tmp_path / "i", seed, sectors=512)
