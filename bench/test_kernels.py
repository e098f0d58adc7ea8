"""Microbenchmarks: each compiled kernel against its plain-Python reference (tests/kernels).

Run: python -m pytest bench/test_kernels.py --benchmark-only -q
Each group holds a kernel and its reference on the same input (64 blocks); the table's
relative column within a group is the speed ratio. Nothing here asserts on timing.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from sarp._core.blockids import chain_block_ids, namespace_seed
from sarp._core.bloom import K, build, newest_hit
from sarp._core.filters import best_fields, candidate_order, filters_at, region_filter
from sarp._core.segment_codec import decode_segment, encode_segment
from sarp._core.slot_versions import VERSION_OVERHEAD, parse_slots
from sarp._core.verify import common_prefix
from sarp.block_ids import block_ids


def _load_reference():
    path = Path(__file__).resolve().parent.parent / "tests" / "kernels" / "reference.py"
    spec = importlib.util.spec_from_file_location("sarp_kernel_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()
RNG = np.random.default_rng(2024)
BLOCKS = 64
BLOCK_SIZE = 16
TOKENS = RNG.integers(0, 2**32, size=BLOCKS * BLOCK_SIZE, dtype=np.uint32)
TOKEN_LIST = TOKENS.tolist()
SEED = namespace_seed(b"model")
IDS = chain_block_ids(TOKENS, BLOCK_SIZE, SEED)
ID_LIST = IDS.tolist()
POINTS = np.array([0, 16, 32, 48], dtype=np.int64)
META = RNG.integers(0, 256, size=BLOCKS * 16, dtype=np.uint8).tobytes()
RECORD = encode_segment(7, 0, IDS, META, 16)


def _posting_list(size: int = 256) -> tuple[np.ndarray, int]:
    """A posting list of random filters, some sharing 1..7 leading fields with the query."""
    fq = int(RNG.integers(0, 2**64, dtype=np.uint64))
    filters = RNG.integers(0, 2**64, size=size, dtype=np.uint64)
    for i, k in enumerate(range(1, 8)):
        keep = (2**64 - 1) << (64 - 8 * k) & (2**64 - 1)
        filters[i] = (fq & keep) | (int(filters[i]) & ~keep & (2**64 - 1))
    return np.sort(filters), fq


FILTERS, FQ = _posting_list()
FILTER_LIST = FILTERS.tolist()
VERIFY_A = IDS.copy()
VERIFY_B = IDS.copy()
VERIFY_B[-1] ^= 1
VERIFY_A_LIST, VERIFY_B_LIST = VERIFY_A.tolist(), VERIFY_B.tolist()
# a flashlog chain of 64 pages of 64 keys (16 words each) and a key none of them holds
PAGE_KEYS = RNG.integers(0, 2**64, size=(64, 64), dtype=np.uint64)
CHAIN_WORDS = np.concatenate([build(keys, 16) for keys in PAGE_KEYS])
CHAIN_PAGES = np.array([(16 * j, 0, 1024) for j in range(64)], dtype=np.uint32)
CHAIN_LISTS = [CHAIN_WORDS[16 * j:16 * (j + 1)].tolist() for j in range(64)]
ABSENT = int(RNG.integers(0, 2**64, dtype=np.uint64))


def _extent(slots: int, vbytes: int, value: bytes) -> bytes:
    """An odirect extent of ``slots`` slots: every copy 0 holds a version of ``value``, every
    other copy 1 a newer one; the rest are empty."""
    buf = bytearray(2 * slots * vbytes)
    for i in range(slots):
        for c in (0, 1) if i % 2 else (0,):
            body = ref.slot_version_bytes(i, 1, i, 2 * i + c, value)
            at = ref.slot_copy_offset(i, c, slots, vbytes)
            buf[at:at + len(body)] = body
    return bytes(buf)


# one extent of odirect's slot file: 64 slots of 4 KiB copies, each version a segment record
SLOT_VBYTES = 4096
EXTENT = _extent(BLOCKS, SLOT_VBYTES, RECORD)


@pytest.mark.benchmark(group="block_ids (1024 tokens, 64 blocks)")
def test_block_ids_kernel(benchmark):
    benchmark(chain_block_ids, TOKENS, BLOCK_SIZE, SEED)


@pytest.mark.benchmark(group="block_ids (1024 tokens, 64 blocks)")
def test_block_ids_public_api(benchmark):
    benchmark(block_ids, TOKENS, BLOCK_SIZE, b"model")


@pytest.mark.benchmark(group="block_ids (1024 tokens, 64 blocks)")
def test_block_ids_reference(benchmark):
    benchmark(ref.block_ids, TOKEN_LIST, BLOCK_SIZE, b"model")


@pytest.mark.benchmark(group="L* search (256 filters)")
def test_best_fields_kernel(benchmark):
    benchmark(best_fields, FILTERS, FQ)


@pytest.mark.benchmark(group="L* search (256 filters)")
def test_best_fields_reference(benchmark):
    benchmark(ref.best_fields, FILTER_LIST, FQ)


@pytest.mark.benchmark(group="candidate order (256 filters, limit 3)")
def test_candidate_order_kernel(benchmark):
    benchmark(candidate_order, FILTERS, FQ, 3)


@pytest.mark.benchmark(group="candidate order (256 filters, limit 3)")
def test_candidate_order_reference(benchmark):
    benchmark(ref.candidate_order, FILTER_LIST, FQ, 3)


@pytest.mark.benchmark(group="filters (64 blocks, 4 routing points)")
def test_filters_kernel(benchmark):
    benchmark(filters_at, IDS, POINTS, BLOCKS)


@pytest.mark.benchmark(group="filters (64 blocks, 4 routing points)")
def test_filters_reference(benchmark):
    benchmark(lambda: [ref.region_filter(ID_LIST, int(p), BLOCKS) for p in POINTS])


@pytest.mark.benchmark(group="filters (64 blocks, 4 routing points)")
def test_region_filter_kernel(benchmark):
    benchmark(lambda: [region_filter(IDS, int(p), BLOCKS) for p in POINTS])


@pytest.mark.benchmark(group="segment encode (64 blocks, 16-byte metadata)")
def test_encode_kernel(benchmark):
    benchmark(encode_segment, 7, 0, IDS, META, 16)


@pytest.mark.benchmark(group="segment encode (64 blocks, 16-byte metadata)")
def test_encode_reference(benchmark):
    benchmark(ref.encode_segment, 7, 0, ID_LIST, META, 16)


@pytest.mark.benchmark(group="segment decode (64 blocks, 16-byte metadata)")
def test_decode_kernel(benchmark):
    benchmark(decode_segment, RECORD)


@pytest.mark.benchmark(group="segment decode (64 blocks, 16-byte metadata)")
def test_decode_reference(benchmark):
    benchmark(ref.decode_segment, RECORD)


@pytest.mark.benchmark(group="verification (64 blocks, differ at the end)")
def test_verify_kernel(benchmark):
    benchmark(common_prefix, VERIFY_A, 0, VERIFY_B, 0)


@pytest.mark.benchmark(group="verification (64 blocks, differ at the end)")
def test_verify_reference(benchmark):
    benchmark(ref.common_prefix, VERIFY_A, 0, VERIFY_B, 0)


@pytest.mark.benchmark(group="verification (64 blocks, differ at the end)")
def test_verify_reference_on_lists(benchmark):
    benchmark(ref.common_prefix, VERIFY_A_LIST, 0, VERIFY_B_LIST, 0)


def _chain_walk(h: int) -> list[int]:
    hits, j = [], len(CHAIN_PAGES)
    while (j := newest_hit(CHAIN_WORDS, CHAIN_PAGES, j, h)) >= 0:
        hits.append(j)
    return hits


@pytest.mark.benchmark(group="page Bloom chain (64 pages, absent key)")
def test_bloom_chain_kernel(benchmark):
    benchmark(_chain_walk, ABSENT)


@pytest.mark.benchmark(group="page Bloom chain (64 pages, absent key)")
def test_bloom_chain_reference(benchmark):
    benchmark(lambda: [j for j in range(63, -1, -1)
                       if ref.bloom_may_hold(CHAIN_LISTS[j], ABSENT, K)])


SLOT_MAX_VALUE = SLOT_VBYTES - VERSION_OVERHEAD


def _reference_slot_scan() -> list[tuple[int, int, int, int, int]]:
    out = []
    for i in range(BLOCKS):
        for c in (0, 1):
            at = ref.slot_copy_offset(i, c, BLOCKS, SLOT_VBYTES)
            out.append(ref.slot_version(EXTENT[at:at + SLOT_VBYTES], i, SLOT_MAX_VALUE))
    return out


@pytest.mark.benchmark(group="slot scan (one odirect extent: 64 slots, 128 copies)")
def test_slot_scan_kernel(benchmark):
    benchmark(parse_slots, EXTENT, 0, BLOCKS, BLOCKS, SLOT_VBYTES, SLOT_MAX_VALUE)


@pytest.mark.benchmark(group="slot scan (one odirect extent: 64 slots, 128 copies)")
def test_slot_scan_reference(benchmark):
    benchmark(_reference_slot_scan)
