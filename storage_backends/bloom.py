"""Per-page Bloom filters of flashlog; the kernels are ``sarp._core.bloom``.

A page of n keys gets ``m = 64 * ceil(n * bits / 64)`` bits and ``K`` (``sarp._core.bloom``)
probes by double hashing from one XXH64 of the key (``filter_hash``). With 16 bits per key the
false-positive rate per page is about 5e-4. An exact page (every key's 16-bit fence is one of
the page's block fences, as when every record spans blocks) gets 8 bits per key (rate about
4e-2), because a lookup there also needs its fence among the page's fences, a 16-bit check that
passes by chance with probability (distinct fences)/65536; see docs/flashlog_format.txt for the
trade-off.
"""

from __future__ import annotations

from sarp._core.bloom import SEED, build, newest_hit
from sarp._core.hashing import xxh64

__all__ = ["BITS_PER_KEY", "BITS_PER_KEY_EXACT", "build", "filter_hash", "newest_hit",
           "words_for"]

BITS_PER_KEY = 16
BITS_PER_KEY_EXACT = 8


def filter_hash(key_bytes: bytes) -> int:
    """The hash a key's probes derive from."""
    return xxh64(key_bytes, SEED)


def words_for(nkeys: int, exact: bool = False) -> int:
    """64-bit words of the filter of a page with ``nkeys`` keys (``exact``: see above)."""
    return max(1, -(-nkeys * (BITS_PER_KEY_EXACT if exact else BITS_PER_KEY) // 64))
