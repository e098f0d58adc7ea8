from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

COUNTERS: tuple[str, ...]

class _Table(Protocol):
    def probe(self, key: int) -> int: ...
    def runs(self, entry: int) -> tuple[npt.NDArray[np.uint64], ...]: ...

class WindowMatcher:
    """The per-window loop of one query over a routing table and a segment store's read."""

    windows: int
    routing_probes: int
    candidates_before: int
    candidates_after: int
    segments_retrieved: int
    blocks_verified: int
    segments_missing: int

    def __init__(
        self,
        table: _Table,
        read: Callable[[int], Any],
        q: npt.NDArray[np.uint64],
        window_blocks: int,
        probe_offsets: Sequence[int] | npt.NDArray[np.int64],
        *,
        n_fields: int = 8,
        bits: int = 8,
        stride: int = 2,
        filtering: bool = True,
        max_retrieval: int = 3,
        unbounded_at: Callable[[int], bool] | None = None,
    ) -> None: ...
    def prefix(self) -> tuple[int, list[Any], tuple[int, int, Any] | None]:
        """(end, metadata parts, tail): the query matched from block 0 while each window
        matches to its end; ``tail`` is (window start, end, segment) where it stopped inside one."""
    def match(
        self, ws: int, known: tuple[int, Any] | None = None, whole: bool = False
    ) -> tuple[int, Any]:
        """(end, segment): the longest verified match in the window starting at ``ws``;
        ``known``, a verified (end, segment) of this window, is the match to beat; ``whole``
        reads only candidates that may hold the query to the window's end, then those that
        may end where they stop matching it."""
    def stats(self) -> dict[str, int]:
        """The counters by name."""
