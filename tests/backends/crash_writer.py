"""Crash-test writer: puts deterministic records into a store until it is killed.

    python crash_writer.py KIND PATH DURABILITY SEED DIRECT_IO

Prints ``begin I`` before operation I and ``ack I`` once operations 0..I are durable: after
every put under ``sync``, after every ``flush()`` (each GROUP puts) under ``group``.
The operations and values are functions of SEED, so the checker recomputes them.
"""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Iterator

from storage_backends import open_store

KEYSPACE = 400  # small, so most puts overwrite an earlier version
GROUP = 8
MAX_VALUE = 3000  # below every engine's single-page limit: this suite is about crashes
_HEADER = struct.Struct("<QQ")


def operations(seed: int) -> Iterator[tuple[int, int]]:
    """The writer's puts in order, as (key, version); versions of a key count from 1."""
    rng = random.Random(seed)
    versions: dict[int, int] = {}
    while True:
        key = rng.randrange(KEYSPACE)
        if rng.random() < 0.05:
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
    store = open_store(kind, path, memory_budget=4 << 20, durability=durability,
                       direct_io=direct_io == "1")
    for i, (key, version) in enumerate(operations(int(seed))):
        print(f"begin {i}", flush=True)
        store.put(key, value(key, version))
        if durability == "sync":
            print(f"ack {i}", flush=True)
        elif i % GROUP == GROUP - 1:
            store.flush()
            print(f"ack {i}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
