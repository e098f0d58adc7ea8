"""A small synthetic request stream with heavy prefix sharing, and a reference prefix model.

Sessions start from one of a few shared system prompts, some fork another session's history
mid-way (branching), and every turn extends the session's context (multi-turn). Block IDs are
the real chained IDs of the tokens, so shared prefixes share IDs and nothing else does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sarp.block_ids import block_ids
from sarp.config import DEFAULT_METADATA_DTYPE

BLOCK = 4  # tokens per block: small, so short token lists give many blocks


@dataclass
class Request:
    context: np.ndarray  # block IDs to match
    full: np.ndarray  # block IDs of context + output, to insert
    metadata: np.ndarray  # one record per block of ``full``, unique to this request


def requests(seed: int, sessions: int = 24, turns: int = 4) -> Iterator[Request]:
    """Round-robin turns of ``sessions`` sessions, as in the paper's methodology."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 50, int(rng.integers(0, 60))) for _ in range(3)]
    histories: list[np.ndarray] = []
    for _ in range(sessions):
        if histories and rng.random() < 0.3:  # fork another session's history
            other = histories[int(rng.integers(len(histories)))]
            histories.append(other[: int(rng.integers(0, len(other) + 1))])
        else:
            histories.append(prompts[int(rng.integers(len(prompts)))].copy())
    serial = 0
    for _ in range(turns):
        for s, history in enumerate(histories):
            context = np.concatenate([history, rng.integers(0, 50, int(rng.integers(1, 30)))])
            output = rng.integers(0, 50, int(rng.integers(0, 40)))
            histories[s] = np.concatenate([context, output])
            serial += 1
            full = block_ids(histories[s].astype(np.uint32), BLOCK)
            yield Request(block_ids(context.astype(np.uint32), BLOCK), full,
                          metadata_for(full, serial))


def metadata_for(ids: np.ndarray, serial: int) -> np.ndarray:
    """Records that say which request wrote them and for which block position."""
    meta = np.zeros(len(ids), DEFAULT_METADATA_DTYPE)
    meta["node"] = serial
    meta["address"] = np.arange(len(ids), dtype=np.uint64)
    return meta


class Reference:
    """The expected index: first-written metadata per chained block ID."""

    def __init__(self) -> None:
        self.table: dict[int, bytes] = {}

    def insert(self, ids: np.ndarray, meta: np.ndarray) -> None:
        for h, row in zip(ids.tolist(), meta, strict=True):
            self.table.setdefault(h, row.tobytes())

    def match(self, ids: np.ndarray) -> tuple[int, bytes]:
        found = []
        for h in ids.tolist():
            if h not in self.table:
                break
            found.append(self.table[h])
        return len(found), b"".join(found)
