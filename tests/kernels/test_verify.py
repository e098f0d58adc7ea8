"""Verification (sarp._core.verify.common_prefix) against the reference loop."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.verify import common_prefix

from . import reference as ref

SMALL = st.lists(st.integers(0, 2), max_size=30)


def u64(values):
    return np.array(values, dtype=np.uint64)


@given(SMALL, SMALL, st.data())
def test_matches_reference(a, b, data):
    a_off = data.draw(st.integers(0, len(a)))
    b_off = data.draw(st.integers(0, len(b)))
    limit = data.draw(st.integers(-2, 35))
    assert common_prefix(u64(a), a_off, u64(b), b_off, limit) == ref.common_prefix(
        a, a_off, b, b_off, limit
    )


def test_edges():
    a = u64(range(64))
    b = a.copy()
    b[63] = 0
    assert common_prefix(a, 0, b, 0) == 63
    assert common_prefix(a, 0, a, 0) == 64
    assert common_prefix(a, 0, a, 0, 10) == 10
    assert common_prefix(a, 0, a, 0, 0) == 0
    assert common_prefix(a, 64, a, 0) == 0
    assert common_prefix(a, 10, a, 10) == 54
    assert common_prefix(a[:40].copy(), 0, a, 0) == 40
    assert common_prefix(u64([]), 0, u64([]), 0) == 0
    top = u64([2**64 - 1, 2**64 - 2])
    assert common_prefix(top, 0, u64([2**64 - 1, 2**64 - 1]), 0) == 1


def test_read_only_views():
    raw = u64([4, 5, 6]).tobytes()
    view = np.frombuffer(raw, dtype=np.uint64)
    assert common_prefix(view, 1, u64([5, 6, 7]), 0) == 2


@pytest.mark.parametrize(
    "a_off,b_off,name", [(-1, 0, "a_off"), (4, 0, "a_off"), (0, -1, "b_off"), (0, 3, "b_off")]
)
def test_offsets_out_of_range(a_off, b_off, name):
    with pytest.raises(ValueError, match=name):
        common_prefix(u64([1, 2, 3]), a_off, u64([1, 2]), b_off)


def test_rejects_other_arrays():
    with pytest.raises(TypeError, match="^a "):
        common_prefix(np.zeros(3), 0, u64([1]), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^b "):
        common_prefix(u64([1]), 0, [1, 2], 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^b "):
        common_prefix(u64([1]), 0, u64(range(10))[::2], 0)
    with pytest.raises(ValueError, match="^a "):
        common_prefix(np.zeros((2, 2), np.uint64), 0, u64([1]), 0)
    odd = np.frombuffer(bytearray(8 * 3 + 1), np.uint64, count=3, offset=1)
    with pytest.raises(ValueError, match="^a must be aligned"):
        common_prefix(odd, 0, u64([1]), 0)
