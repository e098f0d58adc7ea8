"""Every kernel that reads items through typed pointers refuses a buffer whose data does not
start at a multiple of the item size (sarp/_core/aligned.pxd), naming the argument, and takes
the same values aligned."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from sarp._core import blockids, bloom, filters, segment_codec
from sarp._core.routing_table import Points, RoutingTable


def misaligned(values: Any, dtype: Any) -> np.ndarray:
    """``values`` as a C-contiguous array of ``dtype`` whose data starts one byte past an
    aligned address."""
    a = np.ascontiguousarray(values, dtype=dtype)
    buf = bytearray(a.nbytes + 1)
    out = np.frombuffer(buf, dtype=dtype, count=a.size, offset=1).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


IDS = np.arange(1, 65, dtype=np.uint64)
SORTED = np.sort(IDS * 0x9E3779B97F4A7C15)
TOKENS = np.arange(64, dtype=np.uint32)
PAGES = np.array([[0, 0, 64]], dtype=np.uint32)
POSITIONS = np.array([0, 2], dtype=np.int64)


POINTS = Points(64, [0, 32], [-1, -1], [1, 1], pruning=False, threshold=8, refinement=False,
                tau=8, n_fields=8, bits=8, stride=2)


def _walk(ids: np.ndarray, filt: np.ndarray) -> object:
    return RoutingTable().walk_points(POINTS, ids, filt, 7, 0, -1)


# (kernel, its arguments, which of them to misalign, the name its error gives)
CASES: list[tuple[Callable[..., object], tuple[Any, ...], int, str]] = [
    (blockids.chain_block_ids, (TOKENS, 16, 0), 0, "tokens"),
    (bloom.build, (IDS, 4), 0, "hashes"),
    (bloom.newest_hit, (IDS, PAGES, 1, 5), 0, "words"),
    (bloom.newest_hit, (IDS, PAGES, 1, 5), 1, "pages"),
    (filters.region_filter, (IDS, 0, 64), 0, "block_ids"),
    (filters.filters_at, (IDS, POSITIONS, 64), 0, "block_ids"),
    (filters.filters_at, (IDS, POSITIONS, 64), 1, "positions"),
    (filters.exists_match, (SORTED, 0, 1), 0, "filters"),
    (filters.best_fields, (SORTED, 0), 0, "filters"),
    (filters.candidate_order, (SORTED, 0, -1, 8, 8, IDS), 0, "filters"),
    (filters.candidate_order, (SORTED, 0, -1, 8, 8, IDS), 5, "segs"),
    (segment_codec.encode_segment, (1, 0, IDS, bytes(64), 1), 2, "block_ids"),
    (segment_codec.append_blocks,
     (segment_codec.encode_segment(1, 0, IDS[:2], bytes(2), 1), IDS[:3], bytes(3)), 1,
     "block_ids"),
    (segment_codec.copy_prefix,
     (segment_codec.encode_segment(1, 0, IDS[:2], bytes(2), 1), 1, 2, 0, IDS[:3], bytes(3)), 4,
     "block_ids"),
    (POINTS.filters, (IDS,), 0, "ids"),
    (_walk, (IDS, POINTS.filters(IDS)), 0, "ids"),
    (_walk, (IDS, POINTS.filters(IDS)), 1, "filters"),
]


@pytest.mark.parametrize("kernel,args,at,name", CASES,
                         ids=[f"{c[0].__name__}-{c[3]}" for c in CASES])
def test_a_misaligned_buffer_is_refused_by_name(kernel: Callable[..., object],
                                                args: tuple[Any, ...], at: int,
                                                name: str) -> None:
    kernel(*args)  # aligned: runs
    bad = list(args)
    bad[at] = misaligned(args[at], args[at].dtype)
    with pytest.raises(ValueError, match=f"^{name} must be aligned"):
        kernel(*bad)


def test_publish_takes_a_misaligned_list_as_a_copy() -> None:
    """``publish`` copies the list into the arena anyway: an unaligned one is copied first."""
    table = RoutingTable()
    e = table.add_entry(5)
    table.publish(e, misaligned([3, 4], np.uint64), misaligned(SORTED[:2], np.uint64))
    segs, filts = table.refs(e)
    assert segs.tolist() == [3, 4] and filts.tolist() == SORTED[:2].tolist()
