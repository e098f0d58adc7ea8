"""SSD-BlockHash (paper 6.1): DRAM-BlockHash's per-block entries kept in the record store.

Key = chained block ID, value = that block's metadata bytes. A match looks the blocks up from
the first block until the first miss (vLLM-style probing), in ``get_many`` batches of
``PROBE_BATCH`` keys (a store's MultiGet), so ``store_reads`` counts every key looked up, the
rest of the batch after the miss included. An insert probes the same way, then writes only the
blocks after the stored prefix in one ``put_many``. No in-DRAM state, nothing to rebuild.
"""

from __future__ import annotations

import numpy as np

from sarp.baselines.base import BaselineIndex, Matched, match_blocks, split_rows, stored_prefix
from sarp.matched_prefix import Tail
from storage_backends import RecordStore


class SSDBlockHash(BaselineIndex):
    """Per-block entries in the backend; one logical store read per probed block."""

    store: RecordStore  # this design always has one
    design = "ssd_blockhash"

    def _match(self, q: np.ndarray) -> Matched:
        return match_blocks(self.store.get_many, q, "store_reads")

    def _insert(self, q: np.ndarray, rows: np.ndarray, known: int,
                tail: Tail | None) -> dict[str, int]:
        ids = q.tolist()
        m, probes = stored_prefix(self.store.get_many, ids, known, tail)
        self.store.put_many(zip(ids[m:], split_rows(rows[m:]), strict=True))
        return {"store_reads": probes, "store_writes": len(ids) - m}

    def _entries(self) -> None:
        return None
