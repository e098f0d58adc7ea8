"""Segment-Radix's tree nodes: their columnar encoding and the table that holds them.

A node covers the compressed edge of blocks [depth, depth + len(edge)); its blocks' metadata
sit in a run of consecutive segments (ids run, run + 1, ..., S blocks each) starting at the
edge's first block's position ``offset`` within the run. Children are keyed by the first
block ID of their edge. Nodes refer to each other by node id, so any node but the root can be
evicted from DRAM: the table spills it to a record store (capped variant) and reads it back
when a walk reaches it. The encoding is the same for a snapshot (every resident node) and a
spilled node (one node), see docs/baselines_format.txt. A spilled node larger than the spill
store's largest value (odirect's slot) is stored in pieces: piece 0 under the node id, piece i
under ``i << PIECE_SHIFT | node id``; piece 0 starts with the sealed header, whose length says
how many pieces follow.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from sarp.baselines.sealed import CHECKSUM, HEADER, Cursor, seal, unseal
from sarp.errors import CorruptionError
from storage_backends import RecordStore

ROOT = 0
NODE_MAGIC = b"SARPRNOD"
PIECE_SHIFT = 48  # node ids stay below 2**48; a piece number goes above them
COLUMNS = 6  # node id, depth, run, offset, edge length, child count


@dataclass(eq=False, slots=True)
class Node:
    """A tree node: the edge of blocks from ``depth``, where their metadata sits (segment
    ``run``, position ``offset``) and the child ids by first block ID."""

    node_id: int
    depth: int
    edge: np.ndarray  # uint64 block IDs
    run: int
    offset: int
    children: dict[int, int]  # first block ID of the child's edge -> child node id


#: DRAM a resident node is charged for, per node and per child: its columnar encoding's
#: (``encode_nodes``; 8 bytes per edge block besides), the size of a compact node as a compiled
#: implementation holds it. SARP's routing bytes are its packed arrays, so the cap compares
#: like with like (this tree's Python objects take several times as much: 2.6x to 7.7x on the
#: benchmark's workloads).
NODE_BYTES = COLUMNS * 8
CHILD_BYTES = 16  # the child's first block ID and its node id


def node_bytes(node: Node) -> int:
    """The DRAM a resident node is charged for."""
    return NODE_BYTES + 8 * len(node.edge) + CHILD_BYTES * len(node.children)


def encode_nodes(nodes: list[Node]) -> bytes:
    """The columnar encoding of ``nodes``."""
    head = np.array([(x.node_id, x.depth, x.run, x.offset, len(x.edge), len(x.children))
                     for x in nodes], dtype="<u8").reshape(-1, COLUMNS)
    edges = [x.edge for x in nodes]
    firsts = [k for x in nodes for k in x.children]
    kids = [v for x in nodes for v in x.children.values()]
    return b"".join((np.array([len(nodes)], "<u8").tobytes(), head.T.tobytes(),
                     np.concatenate(edges or [np.empty(0, "<u8")]).astype("<u8").tobytes(),
                     np.array(firsts, "<u8").tobytes(), np.array(kids, "<u8").tobytes()))


def decode_columns(cur: Cursor) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Deserialize: (per-node columns (COLUMNS, count), edge IDs, child keys, child ids)."""
    count = cur.u64()
    head = cur.u64s(COLUMNS * count).reshape(COLUMNS, count)
    edges = cur.u64s(int(head[4].sum()))
    n_children = int(head[5].sum())
    return head, edges, cur.u64s(n_children), cur.u64s(n_children)


def build_nodes(head: np.ndarray, edges: np.ndarray, firsts: np.ndarray,
                kids: np.ndarray) -> list[Node]:
    """Rebuild: one Node (and children dict) per decoded row."""
    e_end = np.cumsum(head[4]).tolist()
    c_end = np.cumsum(head[5]).tolist()
    firsts_l, kids_l = firsts.tolist(), kids.tolist()
    out = []
    e0 = c0 = 0
    for (nid, depth, run, offset, _, _), e1, c1 in zip(head.T.tolist(), e_end, c_end, strict=True):
        # a copy: a view would keep the whole decoded buffer alive, uncounted by the cap
        out.append(Node(nid, depth, edges[e0:e1].copy(), run, offset,
                        dict(zip(firsts_l[c0:c1], kids_l[c0:c1], strict=True))))
        e0, c0 = e1, c1
    return out


class NodeTable:
    """The resident nodes (an LRU when capped) and, when capped, the spill store.

    Spilled nodes are keyed by ``key_base | node id`` (pieces as above), so they can share a
    store with other records under a disjoint key range."""

    def __init__(self, cap: int | None, spill: RecordStore | None, key_base: int = 0):
        self.cap = cap
        self.spill = spill
        self.key_base = key_base
        self.spill_reads = self.spill_writes = 0  # records, since open
        self.nodes: OrderedDict[int, Node] = OrderedDict()
        self._charged: dict[int, int] = {}
        self._dirty: set[int] = set()
        #: the largest record the spill store takes (None: unbounded); larger nodes go in pieces
        self.piece_bytes: int | None = None
        if spill is not None:
            self.piece_bytes = spill.stats().get("max_value_size")
            if self.piece_bytes is not None and self.piece_bytes < HEADER.size:
                raise ValueError(f"spill store values of {self.piece_bytes} bytes cannot hold "
                                 f"a node header ({HEADER.size} bytes)")
        self.resident_bytes = 0
        self.next_id = ROOT
        self.add(Node(self.allocate(), 0, np.empty(0, np.uint64), 0, 0, {}))

    def allocate(self) -> int:
        """A new, never used node id (ids are not reused, so spilled records stay unique)."""
        nid = self.next_id
        self.next_id += 1
        return nid

    def load(self, nodes: list[Node], next_id: int) -> None:
        """Make ``nodes`` (from a snapshot, already in the spill store if capped) resident."""
        self.nodes.clear()
        self._charged.clear()
        self._dirty.clear()
        self.resident_bytes = 0
        for node in nodes:
            self._charge(node)
        if ROOT not in self.nodes:
            raise CorruptionError("radix snapshot holds no root node")
        self.next_id = next_id

    def get(self, node_id: int, st: dict[str, int]) -> Node:
        """The node, read back from the spill store if it was evicted."""
        node = self.nodes.get(node_id)
        if node is None:
            node = self._read_spilled(node_id, st)
            self._charge(node)
        elif self.cap is not None:
            self.nodes.move_to_end(node_id)
        return node

    def add(self, node: Node) -> None:
        """Record a new or changed node as resident and dirty."""
        self._charge(node)
        if self.spill is not None:
            self._dirty.add(node.node_id)

    def enforce_cap(self, st: dict[str, int]) -> None:
        """Evict least recently used nodes (never the root) until under the cap; dirty ones
        are written to the spill store in one batch."""
        if self.cap is None:
            return
        evicted = []
        for nid in list(self.nodes):
            if self.resident_bytes <= self.cap:
                break
            if nid != ROOT:
                evicted.append(self.nodes.pop(nid))
                self.resident_bytes -= self._charged.pop(nid)
        if self.spill is not None:
            self._write(self.spill, [x for x in evicted if x.node_id in self._dirty], st)

    def flush(self, st: dict[str, int]) -> None:
        """Write every dirty resident node to the spill store (capped variant only)."""
        if self.spill is not None:
            self._write(self.spill, [self.nodes[nid] for nid in self._dirty], st)

    def _charge(self, node: Node) -> None:
        self.resident_bytes += node_bytes(node) - self._charged.get(node.node_id, 0)
        self._charged[node.node_id] = node_bytes(node)
        self.nodes[node.node_id] = node
        self.nodes.move_to_end(node.node_id)

    def _write(self, spill: RecordStore, nodes: list[Node], st: dict[str, int]) -> None:
        if not nodes:
            return
        records = [r for x in nodes for r in self._pieces(x.node_id, seal(NODE_MAGIC,
                                                                          encode_nodes([x])))]
        spill.put_many(records)
        self.spill_writes += len(records)
        self._dirty.difference_update(x.node_id for x in nodes)
        st["spill_writes"] = st.get("spill_writes", 0) + len(records)
        st["store_writes"] = st.get("store_writes", 0) + len(records)

    def _pieces(self, node_id: int, blob: bytes) -> list[tuple[int, bytes]]:
        """(key, bytes) records of one sealed node: one, or pieces of ``piece_bytes``."""
        step = self.piece_bytes
        if step is None or len(blob) <= step:
            return [(self.key_base | node_id, blob)]
        return [(self.key_base | (i << PIECE_SHIFT) | node_id, blob[o:o + step])
                for i, o in enumerate(range(0, len(blob), step))]

    def _read_spilled(self, node_id: int, st: dict[str, int]) -> Node:
        if self.spill is None:
            raise CorruptionError(f"radix node {node_id} in DRAM is missing")
        raw = self.spill.get(self.key_base | node_id)
        reads = 1
        name = f"radix node {node_id} in {self.spill.path}"
        if raw is not None and len(raw) >= HEADER.size:
            total = HEADER.size + HEADER.unpack_from(raw)[3] + CHECKSUM.size
            if total > len(raw):  # stored in pieces of len(raw) bytes each
                keys = [self.key_base | (i << PIECE_SHIFT) | node_id
                        for i in range(1, -(-total // len(raw)))]
                rest = [r for r in self.spill.get_many(keys) if r is not None]
                reads += len(keys)
                if len(rest) != len(keys):
                    raise CorruptionError(f"{name}: a piece is missing")
                raw = b"".join([raw, *rest])
        self.spill_reads += reads
        st["spill_reads"] = st.get("spill_reads", 0) + reads
        st["store_reads"] = st.get("store_reads", 0) + reads
        if raw is None:
            raise CorruptionError(f"{name} is missing")
        cur = Cursor(unseal(raw, NODE_MAGIC, name), name)
        nodes = build_nodes(*decode_columns(cur))
        cur.done()
        if len(nodes) != 1 or nodes[0].node_id != node_id:
            raise CorruptionError(f"{name} holds another node")
        return nodes[0]
