"""Recovery against index size (paper 6.3), with Redis as the anchor and the disk's sequential
read bandwidth as the physical reference.

A workload is grown to N unique blocks by replication with fresh IDs: copy c maps every block
ID through a bijective 64-bit mix salted with c, so each copy keeps the prefix structure of the
original while sharing no ID with another copy. Each design is built at that size, persisted,
and reopened; the reopen's recovery report is the row.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sarp.bench.designs import DESIGNS, Design, Setup
from sarp.bench.disk import copy_tree, drop_page_cache, sequential_read
from sarp.bench.metrics import RECOVERY_STAGES
from sarp.bench.progress import Progress
from sarp.bench.redis_anchor import NOT_FOUND, find_server, redis_recovery
from sarp.bench.replay import ENTRY_BYTES, Prepared, block_metadata
from sarp.errors import RedisError

RECOVERY_DESIGNS = ("sarp", "dram-blockhash", "segment-radix", "redis")
_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
NOTES = ("Recovery: from opening the persisted index (SARP: sarp.open of a snapshotted index; "
         "DRAM-BlockHash and Segment-Radix: reload of their snapshot) or starting redis-server, "
         "until it serves queries (Redis: PING, then a GET of a loaded key returns its value).",
         "Before each reopen the index's files are dropped from the page cache, so recovery "
         "reads them from the disk (Redis reads its own dump after a restart of the server); "
         "the physical reference is the snapshot size over the sequential O_DIRECT read "
         "bandwidth of the same disk, measured in the same run. Each index is reopened "
         "--repeat times; the reopen with the median recovery time is the row.",
         "first_insert_s: the first insert after one more reopen (one fresh sequence; after "
         "the timed ones, so that each of those recovers the same index), which pays "
         "any work a design defers past recovery (SARP: moving the posting lists it adopted "
         "from the snapshot into growable arrays).",
         "crash_*: SARP reopened after a crash. A child process reopens the index, inserts "
         "fresh sequences (whole copies of the workload, 1% of the index's blocks or more) "
         "after its last snapshot, flushes them and ends without closing, as a kill -9 "
         "would; each of --repeat copies of what it left (holes kept) is reopened from the "
         "disk. The reopen replays the journal and the store recovers its unclean state.")
#: the inserts after the last snapshot that a crash leaves to the journal, as a share of the
#: index's blocks
CRASH_TAIL = 0.01


def mix(ids: np.ndarray, copy: int) -> np.ndarray:
    """Fresh IDs for copy ``copy``: SplitMix64 of the IDs xor a per-copy salt (bijective)."""
    x = ids ^ np.uint64(((copy + 1) * _GOLDEN) & _MASK)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def maximal_sequences(p: Prepared) -> list[np.ndarray]:
    """The inserted sequences that are not a prefix of their session's next one (inserting
    those gives the same blocks as the whole replay, with fewer calls)."""
    last: dict[int, int] = {}
    keep = []
    for i, s in enumerate(p.sessions.tolist()):
        j = last.get(s)
        if j is not None and not _is_prefix(p.fulls[j], p.fulls[i]):
            keep.append(j)
        last[s] = i
    keep += last.values()
    return [p.fulls[i] for i in sorted(keep)]


def _is_prefix(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) <= len(b) and bool(np.array_equal(a, b[: len(a)]))


def copies_for(p: Prepared, blocks: int) -> int:
    """Copies of ``p`` needed for at least ``blocks`` unique blocks."""
    return max(1, -(-blocks // max(p.unique_blocks, 1)))


def replicated(base: list[np.ndarray], copies: int) -> Iterator[np.ndarray]:
    """The sequences of ``copies`` copies, copy by copy."""
    for c in range(copies):
        for seq in base:
            yield mix(seq, c)


def _budget(blocks: int) -> int:
    """10% of SSD-BlockHash's store at ``blocks`` blocks, as in the runs (``store_budget``)."""
    return max(1, blocks * ENTRY_BYTES // 10)


def _index_row(name: str, backend: str, blocks: int, copies: int, base: list[np.ndarray],
               work: Path, durability: str, progress: Progress,
               repeat: int) -> dict[str, Any]:
    """Build design ``name`` at ``blocks`` blocks, persist it, reopen it ``repeat`` times (cold
    page cache each time): the row of the reopen with the median recovery time."""
    design = DESIGNS[name]
    store = backend if design.ssd else "memory"
    setup = Setup(store, _budget(blocks), durability, True)
    path = work / f"{name}-{blocks}"
    shutil.rmtree(path, ignore_errors=True)
    index = design.open(path, setup)
    t0 = time.perf_counter()
    try:
        with progress.bar(copies * len(base), f"build {name} {blocks}") as tick:
            for seq in replicated(base, copies):
                index.insert(block_ids=seq, metadata=block_metadata(seq))
                tick()
        getattr(index, "drain", lambda: None)()
        build_s = time.perf_counter() - t0
        snap = index.snapshot()
        built = index.stats().get("store")
    finally:
        index.close()
    rec = _median_reopen(design, path, setup, repeat)  # none inserts: each recovers the same
    drop_page_cache(path)
    with design.open(path, setup) as reopened:  # one more, for the first insert after it
        fresh = mix(base[0], copies)  # IDs no copy uses
        t1 = time.perf_counter()
        reopened.insert(block_ids=fresh, metadata=block_metadata(fresh))
        rec["first_insert_s"] = time.perf_counter() - t1
    crash = _crash_reopens(path, setup, base, copies, repeat) if name == "sarp" else {}
    shutil.rmtree(path, ignore_errors=True)
    row = {"blocks": blocks, "design": name, "backend": store if design.ssd else "dram",
           "recovery_s": rec.get("total_s", rec.get("seconds")), "build_s": build_s,
           "snapshot_bytes": snap.get("bytes", snap.get("bytes_written"))}
    for k in ("checkpoints", "dirty_writes"):  # odirect's, with dense keys
        row[f"build_store_{k}"] = built.get(k) if isinstance(built, dict) else None
    row.update({k: rec.get(k) for k in (*RECOVERY_STAGES, "store_bytes_read", "first_insert_s")})
    row.update(crash)
    return row


def _median_reopen(design: Design, path: Path, setup: Setup, repeat: int,
                   copy_of: Path | None = None) -> dict[str, Any]:
    """The recovery report of the reopen with the median time among ``repeat`` reopens of
    ``path``, each with its files dropped from the page cache. With ``copy_of``, each reopens
    a new copy of that directory made at ``path`` (a crashed index recovers only once), and
    ``path`` is removed after."""
    reports = []
    for _ in range(repeat):
        if copy_of is not None:
            shutil.rmtree(path, ignore_errors=True)
            copy_tree(copy_of, path)
        drop_page_cache(path)
        with design.open(path, setup) as reopened:
            report = dict(reopened.recovery)
            report["store_bytes_read"] = _store_bytes_read(reopened)
            reports.append(report)
    if copy_of is not None:
        shutil.rmtree(path)
    reports.sort(key=lambda r: r["total_s"] if "total_s" in r else r["seconds"])
    return reports[len(reports) // 2]


def _store_bytes_read(index: Any) -> int | None:
    """Bytes the record store of a just opened ``index`` has read: its own open's reads, and
    the records the index's recovery read from it (after a crash, the segments the journal
    replay reads). None where it keeps no store or its engine does its own I/O (WiredTiger,
    RocksDB)."""
    store = index.stats().get("store")
    return store["io"]["bytes_read"] if isinstance(store, dict) and "io" in store else None


def _crash_reopens(path: Path, setup: Setup, base: list[np.ndarray], copies: int,
                   repeat: int) -> dict[str, Any]:
    """SARP's recovery after a crash: a child process inserts a journal tail after the index's
    last snapshot and ends without closing (``_insert_and_die``); ``repeat`` copies of what it
    left are reopened, each from the disk. The fields of the reopen with the median time."""
    tail = max(1, math.ceil(copies * CRASH_TAIL))
    child = multiprocessing.get_context("spawn").Process(
        target=_insert_and_die, args=(str(path), setup, base, copies + 1, tail))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the crash child for {path} exited with {child.exitcode}")
    rec = _median_reopen(DESIGNS["sarp"], path.with_name(path.name + "-crashed"), setup, repeat,
                         copy_of=path)
    return {"crash_recovery_s": rec["total_s"], "crash_store_open_s": rec["store_open_s"],
            "crash_journal_replay_s": rec["journal_replay_s"],
            "crash_journal_records": rec["journal_records"],
            "crash_store_bytes_read": rec["store_bytes_read"]}


def _insert_and_die(path: str, setup: Setup, base: list[np.ndarray], first_copy: int,
                    copies: int) -> None:
    """In a child process: reopen the SARP index at ``path``, insert ``copies`` copies of
    ``base`` from copy ``first_copy`` on (IDs no other copy uses), flush, and end the process
    without closing the index, as a kill -9 after the flush would."""
    index = DESIGNS["sarp"].open(Path(path), setup)
    for c in range(first_copy, first_copy + copies):
        for seq in base:
            fresh = mix(seq, c)
            index.insert(block_ids=fresh, metadata=block_metadata(fresh))
    index.flush()
    os._exit(0)


def _redis_row(blocks: int, copies: int, base: list[np.ndarray], work: Path) -> dict[str, Any]:
    keys = np.unique(np.concatenate([s for s in replicated(base, copies)]))
    got = redis_recovery(keys, block_metadata(keys).view(np.uint8).reshape(len(keys), -1),
                         work / f"redis-{blocks}")
    shutil.rmtree(work / f"redis-{blocks}", ignore_errors=True)
    return {"blocks": blocks, "design": "redis", "backend": "redis",
            "recovery_s": got["recovery_s"], "build_s": got["load_s"] + got["save_s"],
            "snapshot_bytes": got["snapshot_bytes"], "load_s": got["load_s"],
            "save_s": got["save_s"]}


def recovery(p: Prepared, sizes: list[int], designs: list[str], backend: str, work: Path,
             durability: str, progress: Progress, repeat: int = 1) -> dict[str, Any]:
    """The recovery section: one row per (size, design), the disk bandwidth per size."""
    base = maximal_sequences(p)
    rows: list[dict[str, Any]] = []
    disk: list[dict[str, Any]] = []
    notes = [*NOTES, f"grown from {p.name} ({p.unique_blocks} unique blocks per copy); "
             f"SARP on backend {backend}"]
    if not p.unique_blocks:
        notes.append(f"recovery: n/a, {p.name} has no full block to grow an index from")
        return {"workload": p.name, "backend": backend, "rows": rows, "disk": disk,
                "notes": notes}
    for blocks in sizes:
        copies = copies_for(p, blocks)
        actual = copies * p.unique_blocks
        progress.note(f"recovery: {actual} blocks ({copies} copies of {p.name})")
        for name in designs:
            if name == "redis":
                if find_server() is None:
                    notes.append(f"Redis at {actual} blocks: n/a, {NOT_FOUND}")
                    continue
                try:
                    rows.append(_redis_row(actual, copies, base, work))
                except (RedisError, OSError) as exc:
                    notes.append(f"Redis at {actual} blocks: n/a, {exc}")
            else:
                rows.append(_index_row(name, backend, actual, copies, base, work, durability,
                                       progress, repeat))
        sizes_here = {r["design"]: r["snapshot_bytes"] or 0 for r in rows
                      if r["blocks"] == actual}
        try:
            bw = sequential_read(work, sizes_here.get("sarp", max(sizes_here.values(), default=0)))
        except OSError as exc:
            notes.append(f"physical reference at {actual} blocks: n/a, O_DIRECT read failed "
                         f"({exc})")
            continue
        disk.append({"blocks": actual, **bw})
        for r in rows:
            if r["blocks"] == actual and r["snapshot_bytes"]:
                r["physical_s"] = r["snapshot_bytes"] / (bw["mb_per_s"] * 1e6)
    return {"workload": p.name, "backend": backend, "rows": rows, "disk": disk, "notes": notes}
