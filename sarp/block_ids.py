"""Block IDs: the chained 64-bit hashes that name KVCache blocks (docs/block_ids_format.txt).

``block_ids`` computes them from tokens; ``as_block_ids`` checks IDs an inference engine
computed itself. Both return a C-contiguous uint64 array, the form every kernel takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

import numpy as np

from sarp._core.blockids import chain_block_ids, namespace_seed
from sarp.checks import check_int, check_iterable, listed

_TOKEN_LIMIT = 2**32
_ID_LIMIT = 2**64
_NATIVE_U64 = np.dtype(np.uint64)


def block_ids(
    tokens: Iterable[int] | np.ndarray, block_size: int = 16, namespace: bytes = b""
) -> np.ndarray:
    """One uint64 ID per full block of ``block_size`` tokens; a trailing partial block has none.

    h_{-1} = XXH64(namespace, seed=0); h_i = XXH64(the block's tokens as little-endian uint32
    bytes, seed=h_{i-1}). The namespace separates models, adapters and salts.
    """
    size = check_int(block_size, "block_size", 1)
    if not isinstance(namespace, bytes):
        raise TypeError(f"namespace must be bytes, got {type(namespace).__name__}")
    toks = _integer_array(tokens, "tokens", _TOKEN_LIMIT, np.uint32)
    return chain_block_ids(toks, size, namespace_seed(namespace))


def as_block_ids(ids: Iterable[int] | np.ndarray) -> np.ndarray:
    """Engine-computed block IDs as an aligned C-contiguous uint64 array (no copy if already
    one)."""
    if (type(ids) is np.ndarray and ids.dtype == _NATIVE_U64 and ids.ndim == 1
            and ids.flags.c_contiguous and ids.flags.aligned):
        return ids  # every uint64 is a valid block ID
    return _integer_array(ids, "block_ids", _ID_LIMIT, np.uint64)


def _integer_array(values: object, name: str, limit: int, dtype: type) -> np.ndarray:
    """``values`` as a 1-D C-contiguous ``dtype`` array after checking each is an integer in
    [0, limit); TypeError for non-integers (bools and floats included), ValueError for range."""
    if isinstance(values, np.ma.MaskedArray):  # its masked entries have no value
        raise TypeError(f"{name} must not be a masked array")
    if isinstance(values, np.ndarray) and values.dtype != object:
        return _from_array(values, name, limit, dtype)
    if isinstance(values, np.ndarray):
        _check_one_dimensional(values, name)
    # sets and mappings have no token order
    seq = (values.tolist() if isinstance(values, np.ndarray)
           else listed(check_iterable(values, name, "a sequence of integers", (Set, Mapping)),
                       name))
    for t in set(map(type, seq)):
        if issubclass(t, (bool, np.bool_)) or not issubclass(t, (int, np.integer)):
            raise TypeError(f"{name} must hold integers, found {t.__name__}")
    if seq and (min(seq) < 0 or max(seq) >= limit):
        raise ValueError(
            f"{name} must be in [0, 2**{limit.bit_length() - 1}), "
            f"got values in [{min(seq)}, {max(seq)}]"
        )
    return np.array(seq, dtype=dtype)


def _from_array(arr: np.ndarray, name: str, limit: int, dtype: type) -> np.ndarray:
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        # an empty float array (``np.array([])``) holds no value, like ``[]``
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    _check_one_dimensional(arr, name)
    fits = arr.dtype.kind == "u" and 2 ** (8 * arr.dtype.itemsize) <= limit
    if arr.size and not fits and (arr.min() < 0 or int(arr.max()) >= limit):
        raise ValueError(
            f"{name} must be in [0, 2**{limit.bit_length() - 1}), "
            f"got values in [{arr.min()}, {arr.max()}]"
        )
    return np.require(arr, dtype, ("C", "A"))  # aligned too: the kernels take typed views


def _check_one_dimensional(arr: np.ndarray, name: str) -> None:
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
