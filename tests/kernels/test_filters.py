"""Packed filters and Algorithm 1 (sarp._core.filters) against the reference."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.filters import (
    best_fields,
    candidate_order,
    exists_match,
    filter_bounds,
    filters_at,
    matched_fields,
    region_filter,
)

from . import reference as ref

LAYOUTS = [(2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (64, 1)]
IDS = st.lists(st.integers(0, 2**64 - 1), max_size=40)
ALL_ONES = 2**64 - 1


@st.composite
def posting_lists(draw, n_fields=8, bits=8):
    """A sorted filter list whose fields come from a tiny alphabet, so prefixes collide, and a
    query filter from the same alphabet."""
    alphabet = st.integers(0, min(2, 2**bits - 1))

    def one():
        fields = draw(st.lists(alphabet, min_size=n_fields, max_size=n_fields))
        return sum(f << (64 - (i + 1) * bits) for i, f in enumerate(fields))

    filters = sorted(one() for _ in range(draw(st.integers(0, 30))))
    return np.array(filters, dtype=np.uint64), one()


def u64(values):
    return np.array(values, dtype=np.uint64)


@given(IDS, st.data())
def test_region_filter_matches_reference(ids, data):
    p = data.draw(st.integers(0, len(ids)))
    end = data.draw(st.integers(p, len(ids)))
    assert region_filter(u64(ids), p, end) == ref.region_filter(ids, p, end)


@pytest.mark.parametrize("n_fields,bits", LAYOUTS)
@pytest.mark.parametrize("stride", [1, 2, 3, 5, 9])
def test_region_filter_layouts(n_fields, bits, stride):
    ids = list(np.random.default_rng(stride).integers(0, 2**64, size=150, dtype=np.uint64))
    ids = [int(x) for x in ids]
    for p, end in [(0, 150), (5, 150), (5, 9), (149, 150), (150, 150)]:
        got = region_filter(u64(ids), p, end, n_fields, bits, stride)
        assert got == ref.region_filter(ids, p, end, n_fields, bits, stride)


def test_region_filter_edges():
    ids = u64([2**64 - 1, 2**64 - 2, 7])
    assert region_filter(u64([]), 0, 0) == 0
    assert region_filter(ids, 3, 3) == 0
    one = region_filter(ids, 0, 1)
    assert one == ref.region_filter([2**64 - 1], 0, 1) and one & (2**56 - 1) == 0
    # a segment shorter than the filter span: absent regions are field 0
    short = region_filter(ids, 0, 3)
    assert short == ref.region_filter(ids.tolist(), 0, 3) and short & (2**48 - 1) == 0
    # blocks past p + n_fields*stride are ignored
    long = np.arange(100, dtype=np.uint64)
    assert region_filter(long, 10, 100) == region_filter(long, 10, 26)
    # a stride past every block: field 1 holds them all, however large n_fields * stride
    for stride in (100, 2**62, 2**63 - 1):
        want = ref.region_filter(long.tolist(), 10, 100, 2, 32, stride)
        assert region_filter(long, 10, 100, 2, 32, stride) == want
        assert filters_at(long, np.array([10], dtype=np.int64), 100, 2, 32, stride)[0] == want


@given(IDS, st.data())
def test_filters_at_is_region_filter_at_each(ids, data):
    end = data.draw(st.integers(0, len(ids)))
    pos = data.draw(st.lists(st.integers(0, end), max_size=8))
    got = filters_at(u64(ids), np.array(pos, dtype=np.int64), end)
    assert got.dtype == np.uint64
    assert got.tolist() == [region_filter(u64(ids), p, end) for p in pos]


def test_filter_argument_errors():
    ids = u64(range(10))
    with pytest.raises(ValueError, match="p"):
        region_filter(ids, 6, 5)
    with pytest.raises(ValueError, match="end"):
        region_filter(ids, 0, 11)
    with pytest.raises(ValueError, match="stride"):
        region_filter(ids, 0, 5, stride=0)
    with pytest.raises(ValueError, match="positions"):
        filters_at(ids, np.array([0, 9], dtype=np.int64), 5)
    with pytest.raises(ValueError, match="positions"):
        filters_at(ids, np.array([-1], dtype=np.int64), 5)


@pytest.mark.parametrize(
    "n_fields,bits,name", [(8, 7, "n_fields"), (4, 8, "n_fields"), (1, 64, "bits"), (64, 0, "bits")]
)
def test_invalid_layouts(n_fields, bits, name):
    for call in (
        lambda: region_filter(u64([1]), 0, 1, n_fields, bits),
        lambda: filters_at(u64([1]), np.zeros(1, np.int64), 1, n_fields, bits),
        lambda: filter_bounds(0, 0, n_fields, bits),
        lambda: exists_match(u64([1]), 0, 0, n_fields, bits),
        lambda: best_fields(u64([1]), 0, n_fields, bits),
        lambda: matched_fields(0, 0, n_fields, bits),
        lambda: candidate_order(u64([1]), 0, -1, n_fields, bits),
    ):
        with pytest.raises(ValueError, match=name):
            call()


@pytest.mark.parametrize("n_fields,bits", LAYOUTS)
@given(fq=st.integers(0, ALL_ONES), data=st.data())
def test_filter_bounds_matches_reference(n_fields, bits, fq, data):
    k = data.draw(st.integers(0, n_fields))
    assert filter_bounds(fq, k, n_fields, bits) == ref.filter_bounds(fq, k, n_fields, bits)


def test_filter_bounds_extremes():
    fq = 0x0123456789ABCDEF
    assert filter_bounds(fq, 0) == (0, ALL_ONES)
    assert filter_bounds(fq, 8) == (fq, fq)
    assert filter_bounds(ALL_ONES, 3) == (0xFFFFFF << 40, ALL_ONES)
    assert filter_bounds(fq, 1) == (0x01 << 56, (0x01 << 56) | (2**56 - 1))
    with pytest.raises(ValueError, match="k"):
        filter_bounds(fq, 9)
    with pytest.raises(ValueError, match="k"):
        filter_bounds(fq, -1)


@given(st.integers(0, ALL_ONES), st.integers(0, ALL_ONES))
def test_matched_fields_matches_reference(a, b):
    for n_fields, bits in LAYOUTS:
        assert matched_fields(a, b, n_fields, bits) == ref.matched_fields(a, b, n_fields, bits)
    assert matched_fields(a, a) == 8


@given(posting_lists(), st.integers(0, 8))
def test_exists_match_matches_reference(case, k):
    filters, fq = case
    assert exists_match(filters, fq, k) == ref.exists_match(filters.tolist(), fq, k)


@given(posting_lists())
def test_best_fields_matches_reference(case):
    filters, fq = case
    assert best_fields(filters, fq) == ref.best_fields(filters.tolist(), fq)


@pytest.mark.parametrize("n_fields,bits", LAYOUTS)
@given(data=st.data())
def test_algorithm1_other_layouts(n_fields, bits, data):
    filters, fq = data.draw(posting_lists(n_fields, bits))
    limit = data.draw(st.integers(-1, 40))
    assert best_fields(filters, fq, n_fields, bits) == ref.best_fields(
        filters.tolist(), fq, n_fields, bits
    )
    order, matched = candidate_order(filters, fq, limit, n_fields, bits)
    assert (order.tolist(), matched.tolist()) == ref.candidate_order(
        filters.tolist(), fq, limit, n_fields, bits
    )


def test_candidate_order_refuses_repeated_segment_ids():
    """The selection takes each segment once: with an id repeated it runs out before every
    filter is placed, and no order is made up for the rest."""
    with pytest.raises(ValueError, match="segs must hold unique segment ids"):
        candidate_order(u64([1, 2, 3]), 2, -1, segs=u64([5, 5, 5]))


@given(posting_lists(), st.integers(-3, 40))
def test_candidate_order_matches_reference(case, limit):
    filters, fq = case
    order, matched = candidate_order(filters, fq, limit)
    assert order.dtype == np.int64 and matched.dtype == np.int32
    assert (order.tolist(), matched.tolist()) == ref.candidate_order(filters.tolist(), fq, limit)


@given(posting_lists(), st.integers(-3, 40), st.randoms(use_true_random=False))
def test_candidate_order_newest_first_matches_reference(case, limit, rnd):
    filters, fq = case
    segs = rnd.sample(range(2**64 - 40, 2**64), len(filters)) if rnd.random() < 0.2 \
        else rnd.sample(range(100), len(filters))
    order, matched = candidate_order(filters, fq, limit, segs=u64(segs))
    assert (order.tolist(), matched.tolist()) == ref.candidate_order(
        filters.tolist(), fq, limit, segs=segs)


def test_candidate_order_ties_go_newest_first():
    # three identical filters (a pruned entry's typical list), one differing in the last field
    fq = 0x0102030405060708
    filters = u64([fq - 1, fq, fq, fq])
    order, matched = candidate_order(filters, fq, -1, segs=u64([9, 4, 7, 5]))
    assert order.tolist() == [2, 3, 1, 0] and matched.tolist() == [8, 8, 8, 7]
    assert candidate_order(filters, fq, 1, segs=u64([9, 4, 7, 5]))[0].tolist() == [2]
    with pytest.raises(ValueError, match="segs"):
        candidate_order(filters, fq, -1, segs=u64([1, 2]))


def test_empty_posting_list():
    empty = u64([])
    assert best_fields(empty, 123) == -1
    assert exists_match(empty, 123, 0) is False
    order, matched = candidate_order(empty, 123, -1)
    assert order.shape == matched.shape == (0,)


def test_all_ones_and_duplicates():
    filters = u64([0, 5, ALL_ONES - 1, ALL_ONES, ALL_ONES])
    assert best_fields(filters, ALL_ONES) == 8
    assert exists_match(filters, ALL_ONES, 8)
    order, matched = candidate_order(filters, ALL_ONES, -1)
    assert order.tolist() == [3, 4, 2, 0, 1] and matched.tolist() == [8, 8, 7, 0, 0]
    assert candidate_order(filters, ALL_ONES, 2)[0].tolist() == [3, 4]
    assert candidate_order(filters, ALL_ONES, 0)[0].tolist() == []


def test_large_posting_list():
    rng = np.random.default_rng(3)
    filters = np.sort(rng.integers(0, 2**64, size=5000, dtype=np.uint64))
    fq = int(filters[1234]) ^ 0xFF
    assert best_fields(filters, fq) == ref.best_fields(filters.tolist(), fq) == 7
    order, matched = candidate_order(filters, fq, 10)
    assert (order.tolist(), matched.tolist()) == ref.candidate_order(filters.tolist(), fq, 10)


def test_accepts_read_only_views():
    raw = u64([1, 2, 3]).tobytes()
    view = np.frombuffer(raw, dtype=np.uint64)
    assert best_fields(view, 2) == 8
    assert region_filter(view, 0, 3) == ref.region_filter([1, 2, 3], 0, 3)
