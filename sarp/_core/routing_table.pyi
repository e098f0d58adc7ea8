import numpy as np
import numpy.typing as npt

VISIBLE: int
PRUNED: int
REFINING: int
REFINED: int
REMAT: int

EMPTY_SLOT: int
#: main-run length from which a list keeps its latest additions in a delta run
DELTA_MIN: int

class Points:
    """The routing points of a segment of ``count`` blocks and the placement rules, as
    ``RoutingTable.walk_points`` takes them (ranges checked once, when built)."""

    @property
    def count(self) -> int: ...
    @property
    def n(self) -> int: ...

    def __init__(
        self,
        count: int,
        offsets: npt.ArrayLike,
        parents: npt.ArrayLike,
        refinable: npt.ArrayLike,
        *,
        pruning: bool,
        threshold: int,
        refinement: bool,
        tau: int,
        n_fields: int,
        bits: int,
        stride: int,
    ) -> None: ...
    def filters(self, ids: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The packed filter at each point from the segment's ``count`` block IDs."""

class RoutingTable:
    """Routing entries K(p) -> posting list. Writers must be serialized by the caller.

    A list holds at most ``max_list`` references (2**24 - 1 unless lowered): a segment
    placed at a full entry is not listed there and counted in ``refs_skipped``."""

    n_entries: int
    arena_used: int
    live_refs: int
    refs_skipped: int
    max_list: int

    def __init__(self, capacity: int = 64) -> None: ...
    def find(self, key: int) -> int:
        """Entry id of ``key`` (visible or private), or -1."""
    def probe(self, key: int) -> int:
        """Entry id of ``key`` if it is visible to queries, else -1."""
    def refs(self, entry: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """(segment ids, filters) of ``entry``: read-only arrays of one complete list (views
        of the arena, or the two runs of a long list merged)."""
    def runs(self, entry: int) -> tuple[npt.NDArray[np.uint64], ...]:
        """(segment ids, filters) of the main run, then of the delta run when the list has
        one: read-only views of one version of ``entry``'s list, each run sorted by filter."""
    def list_len(self, entry: int) -> int: ...
    def longest_list(self) -> int:
        """The length of the longest posting list (0 with no entry)."""
    def key_of(self, entry: int) -> int: ...
    def flags(self, entry: int) -> int: ...
    def remat_pending(self, entry: int) -> bool:
        """Whether ``entry`` is a pruned entry whose rematerialization has not run yet."""
    def set_flags(self, entry: int, flags: int) -> None: ...
    def make_visible(self, entries: npt.ArrayLike) -> None:
        """Publish several private entries in one step."""
    def add_entry(self, key: int, flags: int = 0) -> int:
        """Create an empty entry for ``key`` (which must be absent) and return its id."""
    def publish(self, entry: int, segs: npt.NDArray[np.uint64],
                filters: npt.NDArray[np.uint64]) -> None:
        """Replace ``entry``'s list with (segs, filters): 1-D uint64 arrays of one length, at
        most ``max_list``, the filters ascending and the segment ids unique."""
    def update_member(self, entry: int, seg: int, filt: int) -> bool:
        """If ``seg`` is on the list: give it filter ``filt`` (re-sorted, copy-on-write) and
        return True; else change nothing and return False."""
    def add_member(self, entry: int, seg: int, filt: int) -> None:
        """Publish the list with (seg, filt) inserted after the filters <= ``filt``."""
    def walk_points(
        self,
        points: Points,
        ids: npt.NDArray[np.uint64],
        filters: npt.NDArray[np.uint64],
        seg: int,
        i: int,
        prev: int,
        outside_build: bool = False,
        root: int = -1,
        blocked: bool = False,
    ) -> tuple[int, int, int, int, bool]:
        """Algorithm 2's placement walk over the points and rules of ``points`` from point
        ``i`` (``filters``: ``points.filters(ids)``): (point, prev, entry, parent, blocked)
        where the caller must create an entry (entry -1; with ``outside_build`` only a private
        one) or start background work; point == ``points.n`` when the walk is done.
        ``blocked``: the walk retained an entry (not ``root``) whose rematerialization is
        queued, so it creates no more entries; pass it back when resuming."""
    def entry_flags(self) -> npt.NDArray[np.uint8]:
        """The flags of every entry, in entry order (a read-only view, no copy)."""
    def nbytes(self) -> int:
        """Bytes held by the directory's arrays (table, entries, arena)."""
    def export(
        self,
    ) -> tuple[
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint8],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint64],
    ]:
        """(entry keys, flags, list lengths, segs, filters) of the whole directory."""
    def table_slots(self) -> npt.NDArray[np.uint32]:
        """The hash table: the entry id in each slot, EMPTY_SLOT where empty."""
    @classmethod
    def from_arrays(
        cls,
        entry_key: npt.ArrayLike,
        entry_flags: npt.ArrayLike,
        lengths: npt.ArrayLike,
        segs: npt.ArrayLike,
        filters: npt.ArrayLike,
        slots: npt.ArrayLike | None = None,
    ) -> RoutingTable:
        """Rebuild a table from ``export()``'s arrays (and ``table_slots()``, if given)."""
