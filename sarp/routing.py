"""The routing directory: routing points K(p) -> posting lists of (segment id, filter).

Placement (paper 4.2, 4.4; docs/design.md sections 2, 5): a segment starting at s registers its
base routing points s + i*D, the midpoint s + i*D + D/2 of interval i when the entry at that
interval's base point is refined, and the last-block point s + S - 1 when the final interval's
midpoint entry is refined. Pruning (Algorithm 2) skips a point when the preceding retained
point's list holds at most PruningThreshold references. ``place`` walks these rules for one
segment and is idempotent, so the same walk serves a new segment, an extended one, refinement
back-fill and rematerialization.

Entries created by a back-fill or a rematerialization are private (invisible to probes) until
the whole build is published; until then the preceding entry stays authoritative.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sarp._core import routing_table as rt
from sarp._core.filters import region_filter
from sarp.config import Config

FIXED, MID, LAST = 0, 1, 2


@dataclass
class Build:
    """A group of private entries published together (one back-fill or rematerialization)."""

    kind: str  # "refine" or "remat"
    root: int  # the entry whose state triggered the build
    private: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Layout:
    """The points of a segment of one length (``RoutingDirectory.points``) as arrays."""

    points: list[tuple[int, int, int]]  # (offset, role, parent offset)
    offsets: np.ndarray  # int64
    refinable: np.ndarray  # uint8: base points and the final interval's midpoint
    walk: rt.Points  # the points and the placement rules, as the compiled walk takes them


@dataclass
class Events:
    """What a placement walk found that needs background work."""

    refine: list[int] = field(default_factory=list)  # entries that just exceeded tau
    remat: list[int] = field(default_factory=list)  # pruned entries now above the threshold


class RoutingDirectory:
    """Routing entries in flat arrays (``RoutingTable``) plus the placement rules."""

    def __init__(self, config: Config, table: rt.RoutingTable | None = None):
        self.cfg = config
        self.table = table if table is not None else rt.RoutingTable()
        c = config
        d = c.interval
        self.fixed_offsets = [i * d for i in range(c.routing_points)]
        self.mid_offsets = [i * d + d // 2 for i in range(c.routing_points)]
        self.last_offset = c.segment_blocks - 1
        self.final_mid = self.mid_offsets[-1]
        probe = list(self.fixed_offsets)
        if c.refinement:
            probe += self.mid_offsets + [self.last_offset]
        #: offsets within a window, deepest first: the order of approximate routing
        self.probe_offsets = np.array(sorted(probe, reverse=True), dtype=np.int64)
        #: refined entries whose back-fill is running -> that build
        self.backfills: dict[int, Build] = {}
        #: segment length -> its points, as the placement walk takes them
        self._layouts: dict[int, Layout] = {}

    # -- filters -------------------------------------------------------------------------
    def filter_at(self, ids: np.ndarray, p: int, end: int) -> int:
        """The packed filter of routing point ``p`` from the blocks of ``ids`` before ``end``."""
        c = self.cfg
        return region_filter(ids, p, end, c.filter_fields, c.field_bits, c.stride)

    # -- placement -----------------------------------------------------------------------
    def points(self, count: int) -> list[tuple[int, int, int]]:
        """(offset, role, parent offset) of every point a segment of ``count`` blocks may use,
        in position order; parent is the point whose refinement enables it (-1 for base)."""
        return self._layout(count).points

    def _layout(self, count: int) -> Layout:
        lay = self._layouts.get(count)
        if lay is not None:
            return lay
        out = []
        for i, o in enumerate(self.fixed_offsets):
            if o >= count:
                break
            out.append((o, FIXED, -1))
            if self.cfg.refinement:
                m = self.mid_offsets[i]
                if m < count:
                    out.append((m, MID, o))
                if i == len(self.fixed_offsets) - 1 and self.last_offset < count:
                    out.append((self.last_offset, LAST, m))
        c = self.cfg
        offsets = np.array([o for o, _, _ in out], dtype=np.int64)
        refinable = np.array([r == FIXED or o == self.final_mid for o, r, _ in out],
                             dtype=np.uint8)
        walk = rt.Points(count, offsets, [p for _, _, p in out], refinable, pruning=c.pruning,
                         threshold=c.pruning_threshold, refinement=c.refinement, tau=c.tau,
                         n_fields=c.filter_fields, bits=c.field_bits, stride=c.stride)
        lay = self._layouts[count] = Layout(out, offsets, refinable, walk)
        return lay

    def place(self, seg_id: int, ids: np.ndarray, build: Build | None = None,
              events: Events | None = None) -> Events:
        """Register segment ``seg_id`` (block IDs ``ids``) by Algorithm 2; the background work
        it triggers is added to ``events`` (a new one if None), returned. Its routing keys are
        block IDs, which chain every earlier block: the segment's start is not needed.

        Caller holds the writer lock. A walk that makes a pruned entry cross the threshold
        triggers its rematerialization, which re-places every member, this one too. Until
        that has run, no walk creates an entry below it (except the rematerialization's own
        walks, ``build.root``), but every walk still joins the entries that exist there: a
        match routes through the deepest entry it finds, so an existing entry must list every
        segment with its key, and a published one must never list only some of them.
        The walk runs in ``RoutingTable.walk_points``, which also creates the visible entries of a
        walk outside builds; it returns here only to create a private entry or to start
        background work.
        """
        t = self.table
        if events is None:
            events = Events()
        lay = self._layout(len(ids))
        points = lay.walk
        filts = points.filters(ids)
        n = points.n
        root = -1 if build is None else build.root
        i, prev, blocked = 0, -1, False
        while True:
            i, prev, e, parent, blocked = t.walk_points(points, ids, filts, seg_id, i, prev,
                                                        build is None, root, blocked)
            if i >= n:
                return events
            if e < 0:
                e = self._new_entry(int(ids[lay.offsets[i]]), parent, build)
                t.add_member(e, seg_id, int(filts[i]))
            self._check_triggers(e, bool(lay.refinable[i]), events)
            prev = e
            i += 1

    def _check_triggers(self, e: int, refinable: bool, events: Events) -> None:
        """After ``e`` gained a member: start refinement above tau; start rematerialization
        when a pruned entry exceeds the threshold."""
        c = self.cfg
        t = self.table
        n = t.list_len(e)
        flags = t.flags(e)
        if (refinable and c.refinement and n > c.tau
                and not flags & (rt.REFINED | rt.REFINING)):
            t.set_flags(e, flags | rt.REFINING)
            self.backfills[e] = Build("refine", e)
            events.refine.append(e)
        if c.pruning and flags & rt.PRUNED and n > c.pruning_threshold:
            t.set_flags(e, (t.flags(e) & ~rt.PRUNED) | rt.REMAT)
            events.remat.append(e)

    def _new_entry(self, key: int, parent: int, build: Build | None) -> int:
        """A new entry: private while its parent is being back-filled or a build runs."""
        t = self.table
        owner = self.backfills.get(parent, build)
        e = t.add_entry(key, 0 if owner is not None else rt.VISIBLE)
        if owner is not None:
            owner.private.append(e)
        return e

    def backfill_member(self, build: Build, seg_id: int, ids: np.ndarray, events: Events) -> None:
        """Register one member of a refined entry at the point below it (paper 4.2)."""
        t = self.table
        root_key = t.key_of(build.root)
        for o, role, parent_o in self.points(len(ids)):
            if role != FIXED and parent_o >= 0 and int(ids[parent_o]) == root_key:
                key = int(ids[o])
                filt = self.filter_at(ids, o, len(ids))
                e = t.find(key)
                if e >= 0 and t.update_member(e, seg_id, filt):
                    return
                if e < 0:
                    e = self._new_entry(key, build.root, None)
                t.add_member(e, seg_id, filt)
                self._check_triggers(e, o == self.final_mid, events)
                return

    def publish(self, build: Build) -> None:
        """Make a build's private entries visible at once, then end its root's pending state."""
        t = self.table
        t.make_visible(np.asarray(build.private, dtype=np.int64))
        if build.kind == "refine":
            t.set_flags(build.root, (t.flags(build.root) & ~rt.REFINING) | rt.REFINED)
            self.backfills.pop(build.root, None)
        else:
            t.set_flags(build.root, t.flags(build.root) & ~rt.REMAT)

    # -- statistics ----------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        t = self.table
        return {"routing_entries": int(t.n_entries), "routing_refs": int(t.live_refs),
                "routing_bytes": int(t.nbytes()), "pending_backfills": len(self.backfills),
                "routing_refs_skipped": int(t.refs_skipped)}
