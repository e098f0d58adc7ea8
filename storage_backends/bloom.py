"""Per-page Bloom filters of flashlog, probed for a whole chain of pages at once with numpy.

A page of n keys gets ``m = 64 * ceil(n * bits / 64)`` bits and ``K`` probes by double hashing:
bit ``(a + i*b) mod m`` for i < K, with ``a``, ``b`` from one XXH64 of the key. With 16 bits per
key the false-positive rate per page is about 5e-4. An exact page (every key's 16-bit fence is
one of the page's block fences, as when every record spans blocks) gets 8 bits per key (rate
about 4e-2), because a lookup there also needs its fence among the page's fences, a 16-bit
check that passes by chance with probability (distinct fences)/65536; see
docs/flashlog_format.txt for the trade-off.
"""

from __future__ import annotations

import numpy as np

from sarp._core.hashing import xxh64

BITS_PER_KEY = 16
BITS_PER_KEY_EXACT = 8
K = 11
SEED = 0x5EED
_I = np.arange(K, dtype=np.uint64)


def probes(key_bytes: bytes) -> np.ndarray:
    """The K probe values of a key (reduce each modulo a page's bit count)."""
    h = xxh64(key_bytes, SEED)
    return np.uint64(h >> 32) + np.uint64((h & 0xFFFFFFFF) | 1) * _I


def words_for(nkeys: int, exact: bool = False) -> int:
    """64-bit words of the filter of a page with ``nkeys`` keys (``exact``: see above)."""
    return max(1, -(-nkeys * (BITS_PER_KEY_EXACT if exact else BITS_PER_KEY) // 64))


def build(probe_rows: list[np.ndarray], nwords: int) -> np.ndarray:
    """The filter words over keys given by their ``probes``."""
    words = np.zeros(nwords, dtype=np.uint64)
    if probe_rows:
        pos = np.stack(probe_rows) % np.uint64(nwords * 64)
        np.bitwise_or.at(words, (pos >> np.uint64(6)).astype(np.intp),
                         np.uint64(1) << (pos & np.uint64(63)))
    return words


def chain_hits(words: np.ndarray, wbase: np.ndarray, nbits: np.ndarray,
               probe: np.ndarray) -> np.ndarray:
    """Indexes of the pages whose filter may hold the key: ``wbase[j]`` is page j's first word
    in ``words`` and ``nbits[j]`` its bit count."""
    pos = probe[None, :] % nbits[:, None]
    w = words[wbase[:, None] + (pos >> np.uint64(6))]
    return np.flatnonzero(((w >> (pos & np.uint64(63))) & np.uint64(1)).all(axis=1))
