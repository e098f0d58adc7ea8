"""Chained block IDs: the kernel and sarp.block_ids against the reference."""

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.blockids import chain_block_ids, namespace_seed
from sarp.block_ids import as_block_ids, block_ids

from . import reference as ref

TOKENS = st.lists(st.integers(0, 2**32 - 1), max_size=200)


@given(TOKENS, st.integers(1, 40), st.binary(max_size=20))
def test_matches_reference(tokens, block_size, namespace):
    got = block_ids(tokens, block_size, namespace)
    assert got.dtype == np.uint64 and got.flags.c_contiguous
    assert got.tolist() == ref.block_ids(tokens, block_size, namespace)


# 1000 tokens; then either side of 64 KiB of tokens, where hashing releases the GIL
# (sarp/_core/gil.pxd)
@pytest.mark.parametrize("n", [1000, 16383, 16384, 50_011])
def test_definition_with_xxhash(n):
    tok = np.random.default_rng(n).integers(0, 2**32, size=n, dtype=np.uint32)
    prev = xxhash.xxh64_intdigest(b"model-a", seed=0)
    expected = []
    for i in range(len(tok) // 16):
        prev = xxhash.xxh64_intdigest(np.asarray(tok[i * 16 : (i + 1) * 16], "<u4").tobytes(), prev)
        expected.append(prev)
    assert block_ids(tok, 16, b"model-a").tolist() == expected
    assert chain_block_ids(tok, 16, namespace_seed(b"model-a")).tolist() == expected


def test_namespace_seed():
    assert namespace_seed(b"") == xxhash.xxh64_intdigest(b"", 0)
    assert namespace_seed(b"lora:7") == xxhash.xxh64_intdigest(b"lora:7", 0)


def test_empty_one_block_and_trailing_partial():
    assert block_ids([], 16).shape == (0,)
    assert block_ids(list(range(15)), 16).shape == (0,)
    one = block_ids(list(range(16)), 16)
    assert one.shape == (1,)
    assert block_ids(list(range(31)), 16).tolist() == one.tolist()
    assert block_ids(list(range(32)), 16)[0] == one[0]


def test_prefix_causal_and_namespaced():
    a = block_ids(list(range(64)), 16)
    b = block_ids(list(range(48)) + [0] * 16, 16)
    assert a[:3].tolist() == b[:3].tolist() and a[3] != b[3]
    assert block_ids(list(range(16)), 16, b"x")[0] != block_ids(list(range(16)), 16, b"y")[0]


@pytest.mark.parametrize(
    "tokens",
    [
        np.arange(40, dtype=np.int64),
        np.arange(40, dtype=np.uint16),
        np.arange(40, dtype=">u4"),
        np.arange(40, dtype=np.uint32).repeat(2)[::2],
        tuple(range(40)),
        range(40),
        [np.int32(i) for i in range(40)],
        np.array(list(range(40)), dtype=object),
    ],
)
def test_accepts_integer_sequences_and_arrays(tokens):
    assert block_ids(tokens, 8).tolist() == ref.block_ids(list(range(40)), 8, b"")


def test_token_extremes():
    assert block_ids([0, 2**32 - 1], 2).tolist() == ref.block_ids([0, 2**32 - 1], 2, b"")


@pytest.mark.parametrize(
    "tokens",
    [
        [1.0, 2.0],
        np.array([1.0, 2.0]),
        [True, False],
        np.array([True]),
        [1, True],
        [1, "2"],
        "abcd",
        b"abcd",
        5,
        None,
        [[1, 2]],
    ],
)
def test_rejects_non_integer_tokens(tokens):
    with pytest.raises(TypeError, match="tokens"):
        block_ids(tokens, 1)


@pytest.mark.parametrize(
    "tokens",
    [
        [-1],
        [2**32],
        [0, 2**64],
        np.array([-1]),
        np.array([2**32], dtype=np.int64),
        np.zeros((2, 2), dtype=np.uint32),
    ],
)
def test_rejects_tokens_out_of_range(tokens):
    with pytest.raises(ValueError, match="tokens"):
        block_ids(tokens, 1)


@pytest.mark.parametrize(
    "size,exc",
    [
        (0, ValueError),
        (-3, ValueError),
        (1.5, TypeError),
        ("16", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_rejects_bad_block_size(size, exc):
    with pytest.raises(exc, match="block_size"):
        block_ids([1, 2, 3], size)


@pytest.mark.parametrize("namespace", ["model", bytearray(b"m"), None, 3])
def test_rejects_non_bytes_namespace(namespace):
    with pytest.raises(TypeError, match="namespace"):
        block_ids([1, 2], 1, namespace)


def test_chain_kernel_rejects_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        chain_block_ids(np.zeros(4, np.uint32), 0, 0)


def test_as_block_ids_no_copy_for_uint64():
    ids = np.array([1, 2**64 - 1], dtype=np.uint64)
    assert as_block_ids(ids) is ids or np.shares_memory(as_block_ids(ids), ids)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_as_block_ids_sequences(values):
    got = as_block_ids(values)
    assert got.dtype == np.uint64 and got.flags.c_contiguous and got.tolist() == values


def test_as_block_ids_converts_arrays():
    assert as_block_ids(np.arange(5, dtype=np.int32)).dtype == np.uint64
    strided = np.arange(10, dtype=np.uint64)[::2]
    assert as_block_ids(strided).flags.c_contiguous
    assert as_block_ids(np.array([2**64 - 1], dtype=">u8")).tolist() == [2**64 - 1]
    got = as_block_ids(np.array([1, 2], dtype=">u8"))
    assert got.dtype == np.dtype("=u8") and got.tolist() == [1, 2]


def test_as_block_ids_rejects_uint64_of_two_dimensions():
    with pytest.raises(ValueError, match="block_ids must be one-dimensional"):
        as_block_ids(np.zeros((2, 2), dtype=np.uint64))


@pytest.mark.parametrize("ids", [[-1], [2**64], np.array([-5], dtype=np.int64)])
def test_as_block_ids_rejects_out_of_range(ids):
    with pytest.raises(ValueError, match="block_ids"):
        as_block_ids(ids)


@pytest.mark.parametrize("ids", [[1.0], np.array([1.5]), [True], np.array([1], dtype=bool), 7])
def test_as_block_ids_rejects_non_integers(ids):
    with pytest.raises(TypeError, match="block_ids"):
        as_block_ids(ids)


def test_an_empty_float_array_is_an_empty_sequence():
    """``np.array([])`` is float64 but holds no value: taken like ``[]``, while a 2-D empty
    array is still refused."""
    assert as_block_ids(np.array([])).dtype == np.uint64 and len(as_block_ids(np.array([]))) == 0
    assert len(block_ids(np.array([]), 4)) == 0
    with pytest.raises(ValueError, match="block_ids must be one-dimensional"):
        as_block_ids(np.zeros((0, 2)))
