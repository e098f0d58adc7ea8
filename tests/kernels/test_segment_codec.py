"""The segment record codec (sarp._core.segment_codec) against the reference encoding."""

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.segment_codec import (
    append_blocks,
    copy_prefix,
    decode_segment,
    encode_segment,
    encoded_size,
    read_header,
)
from sarp.errors import BadLengthError, BadMagicError, ChecksumError, UnsupportedVersionError

from . import reference as ref

U64 = st.integers(0, 2**64 - 1)


@st.composite
def segments(draw):
    width = draw(st.integers(0, 12))
    ids = draw(st.lists(U64, max_size=40))
    meta = draw(st.binary(min_size=len(ids) * width, max_size=len(ids) * width))
    return draw(U64), draw(U64), ids, meta, width


def u64(values):
    return np.array(values, dtype=np.uint64)


@given(segments())
def test_encode_matches_reference_and_round_trips(case):
    sid, start, ids, meta, width = case
    raw = encode_segment(sid, start, u64(ids), meta, width)
    assert raw == ref.encode_segment(sid, start, ids, meta, width)
    assert len(raw) == encoded_size(len(ids), width)
    seg = decode_segment(raw)
    assert (seg.segment_id, seg.start, seg.block_count, seg.meta_width) == (
        sid,
        start,
        len(ids),
        width,
    )
    assert seg.block_ids.tolist() == ids
    assert seg.metadata.shape == (len(ids), width) and seg.metadata.tobytes() == meta
    assert read_header(raw) == (sid, start, len(ids), width)


@given(segments(), st.data())
def test_append_matches_encoding_the_whole(case, data):
    sid, start, ids, meta, width = case
    more = data.draw(st.lists(U64, max_size=20))
    more_meta = data.draw(st.binary(min_size=len(more) * width, max_size=len(more) * width))
    raw = append_blocks(encode_segment(sid, start, u64(ids), meta, width), u64(more), more_meta)
    assert raw == ref.encode_segment(sid, start, ids + more, meta + more_meta, width)


@given(segments(), st.data())
def test_copy_prefix_matches_encoding_the_kept_blocks_and_the_new_ones(case, data):
    sid, start, ids, meta, width = case
    keep = data.draw(st.integers(0, len(ids)))
    more = data.draw(st.lists(U64, max_size=20))
    more_meta = data.draw(st.binary(min_size=len(more) * width, max_size=len(more) * width))
    new_id, new_start = data.draw(U64), data.draw(U64)
    raw = copy_prefix(encode_segment(sid, start, u64(ids), meta, width), keep, new_id,
                      new_start, u64(more), more_meta)
    assert raw == ref.encode_segment(new_id, new_start, ids[:keep] + more,
                                     meta[:keep * width] + more_meta, width)


def test_copy_prefix_checks_its_arguments():
    raw = encode_segment(1, 0, u64([5, 6, 7]), bytes(6), 2)
    for keep in (-1, 4):
        with pytest.raises(ValueError, match="keep must be in"):
            copy_prefix(raw, keep, 2, 0, u64([8]), bytes(2))
    with pytest.raises(ValueError, match="metadata must be exactly"):
        copy_prefix(raw, 1, 2, 0, u64([8]), bytes(3))
    damaged = bytearray(raw)
    damaged[40] ^= 1
    with pytest.raises(ChecksumError):
        copy_prefix(bytes(damaged), 1, 2, 0, u64([8]), bytes(2))


def test_views_not_copies():
    raw = encode_segment(1, 0, u64([5, 6]), b"abcd", 2)
    seg = decode_segment(raw)
    assert np.shares_memory(seg.block_ids, np.frombuffer(raw, np.uint8))
    assert np.shares_memory(seg.metadata, np.frombuffer(raw, np.uint8))
    assert not seg.block_ids.flags.writeable


@pytest.mark.parametrize("form", [bytes, bytearray, memoryview])
def test_decoded_views_are_read_only_and_outlive_the_callers_reference(form):
    ids, meta = [5, 2**64 - 1, 7], bytes(range(12))
    raw = encode_segment(3, 128, u64(ids), meta, 4)
    seg = decode_segment(form(raw))  # the decoded form has no other reference
    assert bytes(seg.record) == raw
    assert append_blocks(seg.record, u64([9]), b"wxyz") == encode_segment(
        3, 128, u64(ids + [9]), meta + b"wxyz", 4)
    assert seg.block_ids.dtype == np.dtype("<u8") and seg.metadata.dtype == np.uint8
    assert seg.block_ids.tolist() == ids and seg.metadata.tobytes() == meta
    assert seg.metadata.shape == (3, 4) and seg.metadata.flags.c_contiguous
    if form is bytes:
        for a in (seg.block_ids, seg.metadata):
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a[0] = 1


def test_block_ids_at_an_odd_address_are_decoded_aligned():
    """A record at an address not a multiple of 8 (a slice of a larger buffer) still decodes
    to aligned block IDs: the kernels read them through a ``uint64_t*``."""
    raw = encode_segment(3, 128, u64([5, 2**64 - 1, 7]), bytes(6), 2)
    odd = memoryview(bytearray(b"x" + raw))[1:]
    seg = decode_segment(odd)
    assert seg.block_ids.flags.aligned and seg.block_ids.tolist() == [5, 2**64 - 1, 7]
    assert np.shares_memory(seg.metadata, np.frombuffer(odd, np.uint8))  # only ids are copied


def test_metadata_forms():
    ids = u64([1, 2, 3])
    dt = np.dtype([("node", "<u4"), ("tier", "u1"), ("addr", "<u8")])
    structured = np.zeros(3, dtype=dt)
    structured["addr"] = [10, 20, 30]
    raw = encode_segment(4, 64, ids, structured, dt.itemsize)
    assert decode_segment(raw).metadata.view(dt).reshape(-1)["addr"].tolist() == [10, 20, 30]
    as_bytes = structured.tobytes()
    for form in (
        as_bytes,
        bytearray(as_bytes),
        np.frombuffer(as_bytes, np.uint8),
        memoryview(as_bytes),
    ):
        assert encode_segment(4, 64, ids, form, dt.itemsize) == raw


def test_empty_and_zero_width():
    raw = encode_segment(0, 0, u64([]), b"", 0)
    assert len(raw) == 40 and decode_segment(raw).block_count == 0
    raw = encode_segment(2**64 - 1, 2**64 - 1, u64([2**64 - 1] * 3), b"", 0)
    seg = decode_segment(raw)
    assert seg.metadata.shape == (3, 0) and seg.block_ids.tolist() == [2**64 - 1] * 3
    assert decode_segment(append_blocks(raw, u64([]), b"")).block_count == 3
    assert read_header(encode_segment(1, 2, u64([]), b"", 65535)) == (1, 2, 0, 65535)


def test_layout_bytes():
    raw = encode_segment(0x1122, 0x3344, u64([7]), b"\x09", 1)
    assert raw[:4] == b"SRPS"
    assert struct.unpack_from("<IHHQQII", raw) == (0x53505253, 1, 1, 0x1122, 0x3344, 1, 0)
    assert struct.unpack_from("<Q", raw, 32) == (7,) and raw[40:41] == b"\x09"


@pytest.mark.parametrize("meta,width", [(b"abc", 2), (b"abcdefg", 2), (b"", 1)])
def test_metadata_wrong_length(meta, width):
    with pytest.raises(ValueError, match="metadata"):
        encode_segment(1, 0, u64([1, 2, 3]), meta, width)


def test_metadata_wrong_kind():
    with pytest.raises(ValueError, match="metadata"):
        encode_segment(1, 0, u64([1, 2]), np.zeros((2, 8), np.uint8)[:, ::2], 4)
    with pytest.raises(TypeError, match="metadata"):
        encode_segment(1, 0, u64([1]), [1, 2], 2)  # type: ignore[arg-type]
    raw = encode_segment(1, 0, u64([1]), b"ab", 2)
    with pytest.raises(ValueError, match="metadata"):
        append_blocks(raw, u64([2]), b"abc")


@pytest.mark.parametrize("width", [-1, 65536])
def test_meta_width_range(width):
    with pytest.raises(ValueError, match="meta_width"):
        encode_segment(1, 0, u64([]), b"", width)
    with pytest.raises(ValueError, match="meta_width"):
        encoded_size(0, width)


def test_block_count_range():
    assert encoded_size(2**32 - 1, 0) == 32 + 8 * (2**32 - 1) + 8
    with pytest.raises(ValueError, match="block_count"):
        encoded_size(2**32, 0)
    with pytest.raises(ValueError, match="block_count"):
        encoded_size(-1, 0)


GOOD = encode_segment(9, 128, u64([1, 2**64 - 1]), b"xyzw", 2)


def flip(raw, at):
    return raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1 :]


@pytest.mark.parametrize(
    "raw,error",
    [
        (b"", BadLengthError),
        (GOOD[:31], BadLengthError),
        (b"XRPS" + GOOD[4:], BadMagicError),
        (GOOD[:4] + struct.pack("<H", 2) + GOOD[6:], UnsupportedVersionError),
        (GOOD[:-1], BadLengthError),
        (GOOD + b"\x00", BadLengthError),
        (GOOD[:32], BadLengthError),
        (flip(GOOD, 24), BadLengthError),
    ],
)
def test_damaged_headers(raw, error):
    with pytest.raises(error):
        decode_segment(raw)
    with pytest.raises(error):
        read_header(raw)
    with pytest.raises(error):
        append_blocks(raw, u64([]), b"")


@pytest.mark.parametrize("at", [8, 16, 28, 32, 39, 45, len(GOOD) - 1])
def test_flipped_byte_fails_checksum(at):
    bad = flip(GOOD, at)
    with pytest.raises(ChecksumError):
        decode_segment(bad)
    with pytest.raises(ChecksumError):
        append_blocks(bad, u64([]), b"")
    assert read_header(bad)[2] == 2


def test_check_order_magic_before_length():
    with pytest.raises(BadMagicError):
        decode_segment(b"\x00" * 32)
    with pytest.raises(UnsupportedVersionError):
        decode_segment(b"SRPS" + b"\x00" * 28)


def test_buf_must_be_bytes_like():
    with pytest.raises(TypeError, match="buf"):
        decode_segment("not bytes")  # type: ignore[arg-type]
    assert decode_segment(bytearray(GOOD)).block_ids.tolist() == [1, 2**64 - 1]
    assert decode_segment(memoryview(GOOD)).segment_id == 9
