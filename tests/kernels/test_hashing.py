"""XXH64 (sarp._core.hashing) against the xxhash package."""

import random

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.hashing import xxh64

SEEDS = st.integers(0, 2**64 - 1)


def test_every_length_to_100_with_random_seeds():
    rng = random.Random(7)
    for n in range(101):
        for _ in range(8):
            data = rng.randbytes(n)
            seed = rng.getrandbits(64)
            assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed), (n, seed)


def test_default_seed_is_zero():
    assert xxh64(b"") == xxhash.xxh64_intdigest(b"", 0)
    assert xxh64(b"abc") == xxhash.xxh64_intdigest(b"abc")


@given(st.binary(max_size=600), SEEDS)
def test_matches_xxhash(data, seed):
    assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed)


@pytest.mark.parametrize("n", [65535, 65536, 300_001])
def test_large_buffers_either_side_of_the_gil_release_size(n):
    # inputs of 64 KiB or more are hashed with the GIL released (sarp/_core/gil.pxd)
    data = random.Random(n).randbytes(n)
    assert xxh64(data, 11) == xxhash.xxh64_intdigest(data, 11)


def test_any_contiguous_buffer():
    arr = np.arange(37, dtype=np.uint32)
    raw = arr.tobytes()
    assert xxh64(arr, 5) == xxh64(raw, 5) == xxh64(bytearray(raw), 5) == xxh64(memoryview(raw), 5)


def test_rejects_non_buffers():
    with pytest.raises(TypeError, match="data"):
        xxh64("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="data"):
        xxh64(np.arange(10, dtype=np.uint32)[::2])


def test_rejects_seed_out_of_range():
    with pytest.raises(OverflowError):
        xxh64(b"x", -1)
    with pytest.raises(OverflowError):
        xxh64(b"x", 2**64)
