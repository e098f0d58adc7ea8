"""Plain-Python references for the compiled kernels: direct transcriptions of the definitions
(docs/design.md section 2, docs/block_ids_format.txt, docs/segment_format.txt), one loop step per
block, candidate or byte-field, with no attempt at speed. The tests check the kernels against
these and the microbenchmarks time the kernels against them."""

from __future__ import annotations

import struct

import xxhash

HEADER = struct.Struct("<IHHQQII")
MAGIC = 0x53505253


def block_ids(tokens: list[int], block_size: int, namespace: bytes) -> list[int]:
    """h_{-1} = XXH64(namespace); h_i = XXH64(LE uint32 bytes of block i, seed=h_{i-1})."""
    h = xxhash.xxh64_intdigest(namespace, 0)
    out = []
    for i in range(len(tokens) // block_size):
        block = tokens[i * block_size : (i + 1) * block_size]
        h = xxhash.xxh64_intdigest(struct.pack(f"<{block_size}I", *block), h)
        out.append(h)
    return out


def region_filter(
    ids: list[int], p: int, end: int, n_fields: int = 8, bits: int = 8, stride: int = 2
) -> int:
    """F = sum f_i << (64 - i*bits); f_i hashes the present IDs of region i; empty region 0."""
    end = min(end, p + n_fields * stride)
    f = 0
    for i in range(1, n_fields + 1):
        region = ids[p + (i - 1) * stride:min(p + i * stride, end)]
        if region:
            field = xxhash.xxh64_intdigest(struct.pack(f"<{len(region)}Q", *region), 0)
            f |= (field % 2**bits) << (64 - i * bits)
    return f


def field(f: int, i: int, bits: int) -> int:
    """Field i (1-based, most significant first) of packed filter f."""
    return (f >> (64 - i * bits)) % 2**bits


def matched_fields(a: int, b: int, n_fields: int = 8, bits: int = 8) -> int:
    """Count of leading fields equal in a and b."""
    k = 0
    while k < n_fields and field(a, k + 1, bits) == field(b, k + 1, bits):
        k += 1
    return k


def filter_bounds(fq: int, k: int, n_fields: int = 8, bits: int = 8) -> tuple[int, int]:
    """F_min keeps fq's top k fields and zeroes the rest; F_max sets the rest to all ones."""
    lo = hi = 0
    for i in range(1, n_fields + 1):
        shift = 64 - i * bits
        if i <= k:
            lo |= field(fq, i, bits) << shift
            hi |= field(fq, i, bits) << shift
        else:
            hi |= (2**bits - 1) << shift
    return lo, hi


def exists_match(filters: list[int], fq: int, k: int, n_fields: int = 8, bits: int = 8) -> bool:
    """Does any candidate share fq's top k fields? (a scan of every candidate)"""
    return any(matched_fields(f, fq, n_fields, bits) >= k for f in filters)


def best_fields(filters: list[int], fq: int, n_fields: int = 8, bits: int = 8) -> int:
    """The most leading fields any candidate shares with fq; -1 without candidates."""
    best = -1
    for f in filters:
        best = max(best, matched_fields(f, fq, n_fields, bits))
    return best


def candidate_order(
    filters: list[int], fq: int, limit: int, n_fields: int = 8, bits: int = 8,
    segs: list[int] | None = None,
) -> tuple[list[int], list[int]]:
    """Every candidate by matched fields descending, then segment id descending (index ascending
    without segs); at most limit."""
    scored = [(-matched_fields(f, fq, n_fields, bits), -segs[i] if segs else i, i)
              for i, f in enumerate(filters)]
    scored.sort()
    if limit >= 0:
        scored = scored[:limit]
    return [i for _, _, i in scored], [-m for m, _, _ in scored]


def common_prefix(a, a_off: int, b, b_off: int, limit: int = -1) -> int:
    """Count of consecutive equal positions from the offsets, capped at limit (< 0: none)."""
    n = min(len(a) - a_off, len(b) - b_off)
    if 0 <= limit < n:
        n = limit
    i = 0
    while i < n and a[a_off + i] == b[b_off + i]:
        i += 1
    return i


def encode_segment(
    segment_id: int, start: int, ids: list[int], metadata: bytes, meta_width: int
) -> bytes:
    """Header, IDs, metadata, then XXH64 of all of that: docs/segment_format.txt."""
    body = HEADER.pack(MAGIC, 1, meta_width, segment_id, start, len(ids), 0)
    body += struct.pack(f"<{len(ids)}Q", *ids) + metadata
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body, 0))


def decode_segment(buf: bytes) -> tuple[int, int, int, int, list[int], bytes]:
    """(segment_id, start, block_count, meta_width, ids, metadata) of a record, after the
    magic, version, length and checksum checks (ValueError naming the failed check)."""
    if len(buf) < HEADER.size:
        raise ValueError("length")
    magic, version, width, sid, start, n, _ = HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise ValueError("magic")
    if version != 1:
        raise ValueError("version")
    if len(buf) != HEADER.size + n * (8 + width) + 8:
        raise ValueError("length")
    if xxhash.xxh64_intdigest(buf[:-8], 0) != struct.unpack_from("<Q", buf, len(buf) - 8)[0]:
        raise ValueError("checksum")
    ids = list(struct.unpack_from(f"<{n}Q", buf, HEADER.size))
    meta = buf[HEADER.size + 8 * n : HEADER.size + 8 * n + n * width]
    return sid, start, n, width, ids, meta


WINDOW_COUNTERS = ("windows", "routing_probes", "candidates_before", "candidates_after",
                   "segments_retrieved", "blocks_verified", "segments_missing")


def match_window(probe, refs, read, q: list[int], ws: int, window_blocks: int,
                 offsets: list[int], n_fields: int = 8, bits: int = 8, stride: int = 2,
                 filtering: bool = True, max_retrieval: int = 3, known=None, whole=False):
    """(end, segment, counters) of one window, docs/design.md section 3 step by step: route at the
    first offset (deepest first) whose key hits; rank the whole list by matched fields, then
    newest segment; read and verify in that order until the verified match reaches the next
    candidate's potential or the window end, at most max_retrieval reads (0: all).
    ``known`` (end, segment), verified already, starts as the best match and takes one of the
    max_retrieval retrievals; its segment is never read. ``whole``: the candidates whose
    potential falls short of the window's end are read only if their filter is empty past
    the first field that differs from the query's (the segment may end there: an insert
    would extend it), in the same order."""
    st = dict.fromkeys(WINDOW_COUNTERS, 0)
    st["windows"] = 1
    we = min(ws + window_blocks, len(q))
    best_end, best = known if known is not None else (ws, None)
    entry, p = -1, -1
    for o in offsets:
        if ws + o >= we:
            continue
        st["routing_probes"] += 1
        entry = probe(q[ws + o])
        if entry >= 0:
            p = ws + o
            break
    if entry < 0:
        return best_end, best, st
    segs, filters = (list(map(int, a)) for a in refs(entry))
    st["candidates_before"] = len(segs)
    if filtering:
        fq = region_filter(q, p, we, n_fields, bits, stride)
        fields = [matched_fields(f, fq, n_fields, bits) for f in filters]
    else:
        fields = [n_fields] * len(segs)
    ranked = sorted(range(len(segs)), key=lambda i: (-fields[i], -segs[i]))
    reads = len(segs) + (known is not None)  # retrievals that reach every candidate
    if 0 < max_retrieval < reads:
        reads = max_retrieval
    top = sum(fields[i] == fields[ranked[0]] for i in ranked) if ranked else 0
    st["candidates_after"] = min(top, reads)
    if known is not None:
        reads -= 1
        ranked = [i for i in ranked if segs[i] != known[1].segment_id]
    for i in ranked:
        k = fields[i]
        potential = we if k >= n_fields else min(we, p + (k + 1) * stride - 1)
        if reads == 0 or best_end >= we or best_end >= potential:
            break
        empty_after = k >= n_fields - 1 or filters[i] & ((1 << (n_fields - 1 - k) * bits) - 1) == 0
        if whole and potential < we and not empty_after:
            continue
        reads -= 1
        seg = read(segs[i])
        st["segments_retrieved"] += 1
        st["segments_missing"] += seg is None
        if seg is None or seg.start != ws:
            continue
        length = common_prefix(q, ws, [int(b) for b in seg.block_ids], 0, we - ws)
        st["blocks_verified"] += length
        if ws + length > best_end:
            best_end, best = ws + length, seg
    return best_end, best, st


def bloom_probes(h: int, nbits: int, k: int) -> list[int]:
    """The k bits of a filter of ``nbits`` bits that filter hash ``h`` sets: double hashing,
    (h >> 32) + i * ((h & 0xFFFFFFFF) | 1) modulo nbits (docs/flashlog_format.txt)."""
    a, b = h >> 32, (h & 0xFFFFFFFF) | 1
    return [(a + i * b) % nbits for i in range(k)]


def bloom_build(hashes: list[int], nwords: int, k: int) -> list[int]:
    """The filter words (as ints) holding every key of ``hashes``."""
    words = [0] * nwords
    for h in hashes:
        for pos in bloom_probes(h, nwords * 64, k):
            words[pos // 64] |= 1 << (pos % 64)
    return words


def bloom_may_hold(words: list[int], h: int, k: int) -> bool:
    return all(words[pos // 64] >> (pos % 64) & 1 for pos in bloom_probes(h, len(words) * 64, k))


SLOT_VERSION = struct.Struct("<IB3sQQI")
SLOT_VERSION_MAGIC = 0x5344524F
#: the largest synced lag field (3 bytes)
SLOT_LAG_MAX = 0xFFFFFF


def slot_version_bytes(slot: int, flags: int, key: int, seq: int, value: bytes,
                       synced: int = 0, length: int | None = None,
                       seed: int | None = None) -> bytes:
    """A version of ``slot`` as docs/odirect_format.txt lays it out: magic, flags, the synced
    lag (seq - synced + 1, or 0 when that is past the field), key, seq, length, ``value``,
    then the XXH64 of everything before, seeded with the slot. ``length`` and ``seed``, when
    given, replace the length field and the checksum's seed (to write spoilt versions)."""
    n = len(value) if length is None else length
    lag = seq - synced + 1 if seq - synced + 1 <= SLOT_LAG_MAX else 0
    head = SLOT_VERSION.pack(SLOT_VERSION_MAGIC, flags, lag.to_bytes(3, "little"), key, seq,
                             n) + value
    checksum = xxhash.xxh64_intdigest(head, slot if seed is None else seed)
    return head + struct.pack("<Q", checksum)


def slot_version(copy: bytes, slot: int, max_value: int) -> tuple[int, int, int, int, int, int]:
    """(state, seq, flags, key, length, synced) of one copy of an odirect slot
    (docs/odirect_format.txt): state 0 (empty) if its magic is 0; 1 (valid) if its magic, its
    flags (1 or 2), its length (at most ``max_value``) and the XXH64 of its bytes before the
    checksum, seeded with the slot, all hold; else 2 (bad). The other fields are 0 unless the
    copy is valid, but seq, which a bad copy with the right magic gives as its header names
    it. synced is seq - (lag - 1), or 0 for a lag of 0 (or past seq)."""
    magic, flags, lag_bytes, key, seq, n = SLOT_VERSION.unpack_from(copy)
    if magic == 0:
        return 0, 0, 0, 0, 0, 0
    claimed = seq if magic == SLOT_VERSION_MAGIC else 0
    end = SLOT_VERSION.size + n
    if magic != SLOT_VERSION_MAGIC or flags not in (1, 2) or n > max_value:
        return 2, claimed, 0, 0, 0, 0
    if struct.unpack_from("<Q", copy, end)[0] != xxhash.xxh64_intdigest(copy[:end], slot):
        return 2, claimed, 0, 0, 0, 0
    lag = int.from_bytes(lag_bytes, "little")
    return 1, seq, flags, key, n, seq - (lag - 1) if lag and lag - 1 <= seq else 0


def slot_copy_offset(i: int, copy: int, extent: int, vbytes: int) -> int:
    """Where copy ``copy`` of the ``i``-th slot from an extent's start lies: e*2*K*V +
    (c*K + i)*V, with e and i the slot's extent and place in it."""
    e, i = divmod(i, extent)
    return e * 2 * extent * vbytes + (copy * extent + i) * vbytes
