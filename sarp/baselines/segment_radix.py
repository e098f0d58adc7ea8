"""Segment-Radix (paper 6.1): metadata in segments, an exact in-memory radix tree over block IDs.

The tree (radix_nodes.py) compresses unbranched paths into edges; a node knows the run of
segments holding its edge's blocks. An insert walks the tree to the exact stored prefix m
(no segment reads), packs the new blocks [m, n) into a run of segments of S blocks each
(sarp's segment codec, start = the segment's first block position, consecutive ids) written in
one ``put_many``, then adds one leaf, splitting the edge it diverged in. Stored blocks are never
rewritten, so the first writer's metadata stays. A match walks the tree, reads the segments
under the matched path in one ``get_many`` and verifies their block IDs against the query.

``capped=bytes`` bounds the resident nodes' DRAM: after each operation the least recently used
nodes are evicted, dirty ones written to the backend: to the segments' own store, under keys with
the top bit set, so that they share its memory budget as SARP's segments share SARP's (on odirect,
whose dense slots the segment ids are, to a second, sparse odirect store ``path/spill``, which
caches nothing). A walk that reaches an evicted node reads it back. Spill reads and writes are
counted as store reads and writes. ``snapshot()`` writes every resident node (the whole tree when
uncapped; the capped variant first spills its dirty nodes) to ``radix.snap``; opening an existing
index loads and rebuilds them: the recovery cost the paper measures. ``close()`` snapshots;
inserts after the last snapshot do not survive a crash (their segments become unreachable). The
capped variant recovers only from a clean close: after a crash its spilled nodes may be newer
than its snapshot's and name nodes that were never written, so opening it then raises
RecoveryError (``radix.open`` is there from its open to its close).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from sarp._core.segment_codec import decode_segment, encode_segment
from sarp._core.verify import common_prefix
from sarp.baselines.base import BaselineIndex, Matched
from sarp.baselines.radix_nodes import (
    ROOT,
    Node,
    NodeTable,
    build_nodes,
    decode_columns,
    encode_nodes,
)
from sarp.baselines.sealed import Cursor, seal, unseal
from sarp.errors import RecoveryError
from sarp.matched_prefix import Tail
from storage_backends import RecordStore

SNAPSHOT_FILE = "radix.snap"
SPILL_DIR = "spill"
#: present while the capped variant is open: found at open, the last session crashed
OPEN_FILE = "radix.open"
#: spilled nodes in the segments' store: keys with this bit set (segment ids stay below it)
SPILL_KEYS = 1 << 63
MAGIC = b"SARPRDX\0"

TreePath = list[tuple[Node, int]]  # (node, blocks of its edge on the matched path)


class SegmentRadix(BaselineIndex):
    """Segments in the backend, exact radix tree in DRAM (optionally capped, with spilling)."""

    store: RecordStore  # this design always has one
    design = "segment_radix"
    dense_keys = True  # segment ids, as SARP's
    serial_match = True
    options = ("capped",)

    def _recover(self) -> dict[str, Any]:
        cap = self.settings.capped
        marked = cap is not None and self.store.persistent
        if marked and (self.path / OPEN_FILE).exists():
            raise RecoveryError(
                f"Segment-Radix (capped) at {str(self.path)!r} was not closed: its spilled "
                "tree nodes may be newer than its snapshot, which it cannot reconcile; "
                "build it again")
        report = self._load_tree()
        if marked:  # once loaded: an open that fails before it spills nothing
            self.io.publish(self.path / OPEN_FILE, b"")
        return report

    def _load_tree(self) -> dict[str, Any]:
        """Open the spill store (capped) and load the tree from the snapshot, if there is one."""
        cap = self.settings.capped
        self._spill: RecordStore | None = None
        key_base = 0
        if cap is not None and self.store.kind == "odirect":
            self._spill = self._open_store(SPILL_DIR, memory_budget=1, dense_keys=False)
        elif cap is not None:
            self._spill, key_base = self.store, SPILL_KEYS
        self._tree = NodeTable(cap, self._spill, key_base)
        self._next_segment = 0
        file = self.path / SNAPSHOT_FILE
        if not (file.exists() and self.store.persistent):
            return {}
        t0 = time.perf_counter()
        raw = file.read_bytes()
        t1 = time.perf_counter()
        cur = Cursor(unseal(raw, MAGIC, str(file)), str(file))
        next_node, self._next_segment = cur.u64(), cur.u64()
        columns = decode_columns(cur)
        cur.done()
        t2 = time.perf_counter()
        self._tree.load(build_nodes(*columns), next_node)
        self._tree.enforce_cap({})
        t3 = time.perf_counter()
        return {"snapshot_load_s": t1 - t0, "deserialize_s": t2 - t1, "rebuild_s": t3 - t2,
                "bytes_read": len(raw)}

    def _walk(self, q: np.ndarray, st: dict[str, int]) -> TreePath:
        """The nodes on the longest tree path that ``q`` follows."""
        node = self._tree.get(ROOT, st)
        path: TreePath = []
        d, n = 0, len(q)
        while d < n:
            child_id = node.children.get(int(q[d]))
            if child_id is None:
                break
            node = self._tree.get(child_id, st)
            k = common_prefix(q, d, node.edge, 0, min(len(node.edge), n - d))
            path.append((node, k))
            d += k
            if k < len(node.edge):
                break
        return path

    def _match(self, q: np.ndarray) -> Matched:
        st = {"store_reads": 0, "store_writes": 0, "segment_reads": 0}
        path = self._walk(q, st)
        meta = self._read_metadata(q, path, st)
        self._tree.enforce_cap(st)
        return meta, st, None

    def _read_metadata(self, q: np.ndarray, path: TreePath, st: dict[str, int]) -> bytes:
        """Metadata of the matched path's blocks, from its segments, verified against ``q``."""
        S = self.settings.segment_blocks
        spans = []  # (segment id, first index in it, blocks, query position)
        for node, k in path:
            pos, o = node.depth, node.offset
            while pos < node.depth + k:
                take = min(node.depth + k - pos, S - o % S)
                spans.append((node.run + o // S, o % S, take, pos))
                pos, o = pos + take, o + take
        ids = list(dict.fromkeys(s[0] for s in spans))
        raws = self.store.get_many(ids)
        st["store_reads"] += len(ids)
        st["segment_reads"] += len(ids)
        segs = {i: decode_segment(r) for i, r in zip(ids, raws, strict=True) if r is not None}
        out = []
        for sid, first, take, pos in spans:
            seg = segs.get(sid)
            ok = 0
            if seg is not None and first < seg.block_count:
                ok = common_prefix(q, pos, seg.block_ids, first, take)
                out.append(seg.metadata[first:first + ok].tobytes())
            if ok < take:
                break
        return b"".join(out)

    def _insert(self, q: np.ndarray, rows: np.ndarray, known: int,
                tail: Tail | None) -> dict[str, int]:
        # ``known`` and ``tail`` are not used: the walk must reach the leaf's parent anyway.
        st = {"store_reads": 0, "store_writes": 0, "segments_written": 0}
        path = self._walk(q, st)
        m = sum(k for _, k in path)
        if m < len(q):
            run = self._write_run(q, rows, m, st)
            leaf = Node(self._tree.allocate(), m, q[m:].copy(), run, 0, {})
            if path and path[-1][1] < len(path[-1][0].edge):
                parent = self._split(*path[-1])
            else:
                parent = path[-1][0] if path else self._tree.get(ROOT, st)
            parent.children[int(q[m])] = leaf.node_id
            self._tree.add(leaf)
            self._tree.add(parent)
        self._tree.enforce_cap(st)
        return st

    def _write_run(self, q: np.ndarray, rows: np.ndarray, m: int, st: dict[str, int]) -> int:
        """Store blocks [m, n) as consecutive segments of S blocks; returns the first id."""
        S, width = self.settings.segment_blocks, self.settings.meta_width
        run = self._next_segment
        starts = range(m, len(q), S)
        self.store.put_many(
            (run + j, encode_segment(run + j, s, q[s:s + S], rows[s:s + S], width))
            for j, s in enumerate(starts))
        self._next_segment += len(starts)
        st["store_writes"] += len(starts)
        st["segments_written"] += len(starts)
        return run

    def _split(self, node: Node, k: int) -> Node:
        """Cut ``node``'s edge after ``k`` blocks; the rest becomes its only child."""
        tail = Node(self._tree.allocate(), node.depth + k, node.edge[k:], node.run,
                    node.offset + k, node.children)
        node.edge = node.edge[:k]
        node.children = {int(tail.edge[0]): tail.node_id}
        self._tree.add(tail)
        return node

    def _snapshot(self) -> int:
        st: dict[str, int] = {}
        self.store.flush(durable=True)
        written = 0
        if self._spill is not None:
            before = self._spill.stats()["bytes_written"]
            self._tree.flush(st)
            self._spill.flush()
            written = self._spill.stats()["bytes_written"] - before
        header = np.array([self._tree.next_id, self._next_segment], dtype="<u8").tobytes()
        data = seal(MAGIC, header + encode_nodes(list(self._tree.nodes.values())))
        self.io.publish(self.path / SNAPSHOT_FILE, data)
        return written + len(data)

    def _on_close(self) -> None:
        if self.store.persistent:
            self._snapshot()
            if self.settings.capped is not None:
                self.io.unlink(self.path / OPEN_FILE)
                self.io.fsync_dir(self.path)

    def _stores(self) -> list[RecordStore]:
        spill = getattr(self, "_spill", None)
        return super()._stores() + ([spill] if spill not in (None, self.store) else [])

    def _entries(self) -> int:
        return self._tree.next_id

    def _dram_bytes(self) -> int:
        return self._tree.resident_bytes

    def _extra_stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resident_nodes": len(self._tree.nodes),
                               "cap": self.settings.capped}
        if self._spill is not None:
            out.update(spill_reads=self._tree.spill_reads, spill_writes=self._tree.spill_writes,
                       spill_piece_bytes=self._tree.piece_bytes)
        if self._spill not in (None, self.store):
            out["spill_store"] = self._spill.stats()
        return out
