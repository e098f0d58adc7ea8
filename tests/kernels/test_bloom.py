"""flashlog's page Bloom filters (sarp._core.bloom) against the plain-Python reference."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.bloom import K, build, newest_hit
from tests.kernels.reference import bloom_build, bloom_may_hold

HASHES = st.lists(st.integers(0, 2**64 - 1), max_size=80)


@given(HASHES, st.integers(1, 40))
def test_build_sets_the_reference_bits(hashes, nwords):
    got = build(np.array(hashes, dtype=np.uint64), nwords)
    assert got.dtype == np.uint64 and got.tolist() == bloom_build(hashes, nwords, K)


def chain(rng: random.Random, npages: int) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """A flashlog-style chain: (words, pages rows (word base, start, bits), keys per page)."""
    words: list[int] = []
    pages, keys = [], []
    for j in range(npages):
        page_keys = [rng.getrandbits(64) for _ in range(rng.randrange(1, 30))]
        nwords = rng.randrange(1, 8)
        pages.append((len(words), 100 * j, 64 * nwords | 3 << 16))
        words += bloom_build(page_keys, nwords, K)
        keys.append(page_keys)
    return (np.array(words, dtype=np.uint64), np.array(pages, dtype=np.uint32).reshape(-1, 3),
            keys)


@pytest.mark.parametrize("seed", range(6))
def test_newest_hit_walks_the_chain_newest_first_like_the_reference(seed):
    rng = random.Random(seed)
    words, pages, keys = chain(rng, rng.randrange(1, 25))
    probes = [k for ks in keys for k in ks] + [rng.getrandbits(64) for _ in range(200)]
    for h in probes:
        expect = [j for j in range(len(pages) - 1, -1, -1)
                  if bloom_may_hold(words[pages[j, 0]:pages[j, 0] + (pages[j, 2] & 0xFFFF) // 64]
                                    .tolist(), h, K)]
        got, j = [], len(pages)
        while (j := newest_hit(words, pages, j, h)) >= 0:
            got.append(j)
        assert got == expect


def test_a_stored_key_is_always_found():
    rng = random.Random(11)
    words, pages, keys = chain(rng, 20)
    for j, ks in enumerate(keys):
        for h in ks:
            assert newest_hit(words, pages, j + 1, h) == j


def test_an_empty_chain_has_no_hit():
    assert newest_hit(np.zeros(0, np.uint64), np.zeros((0, 3), np.uint32), 0, 123) == -1


def test_bad_arguments_are_named():
    words, pages, _ = chain(random.Random(1), 3)
    with pytest.raises(ValueError, match="nwords"):
        build(np.zeros(1, np.uint64), 0)
    with pytest.raises(ValueError, match="before"):
        newest_hit(words, pages, 4, 1)
    with pytest.raises(ValueError, match="columns"):
        newest_hit(words, np.zeros((3, 2), np.uint32), 3, 1)
    with pytest.raises(ValueError, match="outside"):
        newest_hit(words[:1], pages, 3, 1)
