"""Crash-test writer: puts deterministic records into a store until it is killed.

    python crash_writer.py KIND PATH DURABILITY SEED DIRECT_IO

KIND is a store kind, or ``odirect-regions``: odirect with dense keys in write-intent regions
of one extent, checkpointed once two are named (``small_regions``), so that kills fall around
its checkpoints.

Prints ``begin I`` before operation I and ``ack I`` once operations 0..I are durable: after
every put under ``sync``, after every ``flush()`` (each GROUP puts) under ``group``.
The operations and values are functions of SEED, so the checker recomputes them.
"""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Iterator
from typing import Any

from storage_backends import RecordStore, odirect, open_store

KEYSPACE = 400  # small, so most puts overwrite an earlier version
GROUP = 8
MAX_VALUE = 3000  # below every engine's single-page limit: this suite is about crashes
_HEADER = struct.Struct("<QQ")
ODIRECT_REGIONS = "odirect-regions"


def small_regions() -> None:
    """odirect's write-intent regions of one extent (scanned slot by slot), and a checkpoint
    once two regions are named; the process that checks the store sets the same, so that its
    open uses the checkpoint."""
    odirect.SCAN_BYTES = 1
    odirect.CHECKPOINT_REGIONS = 2


def open_writer_store(kind: str, path: str, **options: Any) -> RecordStore:
    """The store of a writer ``kind`` (after ``small_regions`` for ODIRECT_REGIONS)."""
    if kind == ODIRECT_REGIONS:
        return open_store("odirect", path, key_mode="dense", **options)
    return open_store(kind, path, **options)


def operations(seed: int, kind: str = "") -> Iterator[tuple[int, int]]:
    """The writer's puts in order, as (key, version); versions of a key count from 1. Keys at
    the top of the range too, unless ``kind`` is ODIRECT_REGIONS (dense keys)."""
    rng = random.Random(seed)
    versions: dict[int, int] = {}
    while True:
        key = rng.randrange(KEYSPACE)
        if rng.random() < 0.05 and kind != ODIRECT_REGIONS:
            key = (1 << 64) - 1 - key  # keys at the top of the range too
        versions[key] = versions.get(key, 0) + 1
        yield key, versions[key]


def value(key: int, version: int) -> bytes:
    """The bytes written for ``key`` at ``version``: a header naming both, then filler."""
    rng = random.Random(f"{key}:{version}")
    return _HEADER.pack(key, version) + rng.randbytes(rng.randrange(MAX_VALUE))


def version_of(data: bytes) -> tuple[int, int]:
    """(key, version) named by a value's header."""
    return _HEADER.unpack_from(data)


def main(argv: list[str]) -> None:
    kind, path, durability, seed, direct_io = argv
    if kind == ODIRECT_REGIONS:
        small_regions()
    store = open_writer_store(kind, path, memory_budget=4 << 20, durability=durability,
                              direct_io=direct_io == "1")
    for i, (key, version) in enumerate(operations(int(seed), kind)):
        print(f"begin {i}", flush=True)
        store.put(key, value(key, version))
        if durability == "sync":
            print(f"ack {i}", flush=True)
        elif i % GROUP == GROUP - 1:
            store.flush()
            print(f"ack {i}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
