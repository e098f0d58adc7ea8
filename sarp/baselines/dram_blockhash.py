"""DRAM-BlockHash (paper 6.1): one in-memory entry per block, vLLM style, plus a snapshot.

The table is a Python dict from chained block ID to that block's metadata bytes. A match
probes it from the first block until the first miss, in batches as SSD-BlockHash does.
``snapshot()`` writes every entry as flat columns to ``blockhash.snap``
(docs/baselines_format.txt); opening an existing index reads it, verifies it, and inserts
every entry back into a dict, one insertion per block: that rebuild is the recovery cost the
paper measures. ``close()`` snapshots, so a closed index reopens complete; inserts after the
last snapshot do not survive a crash.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from sarp.baselines.base import BaselineIndex, Matched, match_blocks, split_rows, stored_prefix
from sarp.baselines.sealed import Cursor, seal, unseal
from sarp.errors import BadLengthError
from sarp.matched_prefix import Tail

SNAPSHOT_FILE = "blockhash.snap"
MAGIC = b"SARPBHS\0"
#: bytes of one entry's key object (a 64-bit int); the value adds sys.getsizeof(its bytes)
KEY_BYTES = sys.getsizeof(2**63)


class DRAMBlockHash(BaselineIndex):
    """Per-block dict in DRAM; snapshot and per-entry reload."""

    design = "dram_blockhash"
    uses_store = False

    def _recover(self) -> dict[str, Any]:
        self._table: dict[int, bytes] = {}
        file = self.path / SNAPSHOT_FILE
        if not file.exists():
            return {}
        t0 = time.perf_counter()
        raw = file.read_bytes()
        t1 = time.perf_counter()
        cur = Cursor(unseal(raw, MAGIC, str(file)), str(file))
        width, count = cur.u64(), cur.u64()
        if width != self.settings.meta_width:
            raise BadLengthError(f"{file}: metadata width {width}, index has "
                                 f"{self.settings.meta_width}")
        keys = cur.u64s(count).tolist()
        values = split_rows(cur.rows(count, width))
        cur.done()
        t2 = time.perf_counter()
        self._table = dict(zip(keys, values, strict=True))
        t3 = time.perf_counter()
        return {"snapshot_load_s": t1 - t0, "deserialize_s": t2 - t1, "rebuild_s": t3 - t2,
                "bytes_read": len(raw)}

    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        return list(map(self._table.get, keys))

    def _match(self, q: np.ndarray) -> Matched:
        return match_blocks(self._get_many, q, "probes")

    def _insert(self, q: np.ndarray, rows: np.ndarray, known: int,
                tail: Tail | None) -> dict[str, int]:
        ids = q.tolist()
        m, probes = stored_prefix(self._get_many, ids, known, tail)
        self._table.update(zip(ids[m:], split_rows(rows[m:]), strict=True))
        return {"probes": probes, "blocks_written": len(ids) - m}

    def _snapshot(self) -> int:
        count = len(self._table)
        keys = np.fromiter(self._table.keys(), dtype="<u8", count=count)
        header = np.array([self.settings.meta_width, count], dtype="<u8")
        data = seal(MAGIC, header.tobytes() + keys.tobytes() + b"".join(self._table.values()))
        self.io.publish(self.path / SNAPSHOT_FILE, data)
        return len(data)

    def _on_close(self) -> None:
        self._snapshot()

    def _entries(self) -> int:
        return len(self._table)

    def _dram_bytes(self) -> int:
        value_bytes = sys.getsizeof(b"\0" * self.settings.meta_width)
        return sys.getsizeof(self._table) + len(self._table) * (KEY_BYTES + value_bytes)
