"""odirect's slot versions (sarp._core.slot_versions) against the reference parse."""


import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sarp._core.slot_versions import (
    BAD,
    EMPTY,
    VALID,
    VERSION_HEADER,
    VERSION_OVERHEAD,
    parse_slots,
    parse_version,
    write_version,
)

from . import reference as ref

V = 96  # bytes per copy
MAX_VALUE = V - VERSION_OVERHEAD - 4
#: how a drawn copy is written: whole, or spoilt in one field
KINDS = ("valid", "deleted", "empty", "magic0", "magic", "flags", "length", "value", "checksum",
         "seed")


def version(slot: int, kind: str, key: int, seq: int, value: bytes, synced: int = 0) -> bytes:
    """One copy of ``slot``, V bytes, written as ``kind`` says."""
    if kind == "empty":
        return bytes(V)
    flags = {"deleted": 2, "flags": 3}.get(kind, 1)
    body = bytearray(ref.slot_version_bytes(
        slot, flags, key, seq, value, synced, length=MAX_VALUE + 1 if kind == "length" else None,
        seed=slot + 1 if kind == "seed" else None))
    if kind == "magic0":
        body[0:4] = bytes(4)  # whatever follows, a zero magic is an empty copy
    elif kind == "magic":
        body[0] ^= 1
    elif kind == "value" and value:
        body[VERSION_HEADER] ^= 0x80
    elif kind == "checksum":
        body[-1] ^= 1
    return bytes(body[:V]).ljust(V, b"\xee")


def test_constants_agree_with_the_reference():
    assert VERSION_HEADER == ref.SLOT_VERSION.size and VERSION_OVERHEAD == VERSION_HEADER + 8
    assert (EMPTY, VALID, BAD) == (0, 1, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_copy_parses_as_written(kind):
    copy = version(7, kind, key=2**64 - 3, seq=41, value=b"abc", synced=30)
    want = {"valid": (VALID, 41, 1, 2**64 - 3, 3, 30), "deleted": (VALID, 41, 2, 2**64 - 3, 3, 30),
            "empty": (EMPTY, 0, 0, 0, 0, 0), "magic0": (EMPTY, 0, 0, 0, 0, 0),
            "magic": (BAD, 0, 0, 0, 0, 0)}.get(kind, (BAD, 41, 0, 0, 0, 0))  # header's seq
    assert parse_version(copy, 0, 7, MAX_VALUE) == want
    assert ref.slot_version(copy, 7, MAX_VALUE) == want


@given(st.data())
def test_a_chunk_parses_as_each_copy_alone(data):
    extent = data.draw(st.integers(1, 5), "extent")
    first = extent * data.draw(st.integers(0, 3), "first extent")
    count = data.draw(st.integers(0, 3 * extent), "count")
    buf = bytearray(-(-count // extent) * 2 * extent * V + data.draw(st.integers(0, 50)))
    for i in range(count):
        for c in (0, 1):
            kind = data.draw(st.sampled_from(KINDS))
            value = data.draw(st.binary(max_size=MAX_VALUE))
            key, seq = data.draw(st.integers(0, 2**64 - 1)), data.draw(st.integers(0, 2**64 - 1))
            synced = seq - data.draw(st.integers(0, min(seq, 2**25)))
            at = ref.slot_copy_offset(i, c, extent, V)
            buf[at:at + V] = version(first + i, kind, key, seq, value, synced)
    state, seq_, flags, key_, length, offset, synced_ = parse_slots(bytes(buf), first, count,
                                                                    extent, V, MAX_VALUE)
    for arr in (state, seq_, flags, key_, length, offset, synced_):
        assert arr.shape == (count, 2)
    for i in range(count):
        for c in (0, 1):
            at = ref.slot_copy_offset(i, c, extent, V)
            want = ref.slot_version(bytes(buf[at:at + V]), first + i, MAX_VALUE)
            got = (state[i, c], seq_[i, c], flags[i, c], key_[i, c], length[i, c],
                   synced_[i, c])
            assert tuple(int(x) for x in got) == want
            assert parse_version(buf, at, first + i, MAX_VALUE) == want
            assert offset[i, c] == at


@given(st.integers(0, 2**64 - 1), st.sampled_from([1, 2]), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1),
       st.one_of(st.integers(0, 2**25), st.integers(ref.SLOT_LAG_MAX - 3, ref.SLOT_LAG_MAX)),
       st.binary(max_size=V - VERSION_OVERHEAD), st.integers(0, 3))
def test_a_written_version_is_the_documented_bytes_and_parses_back(slot, flags, key, seq, behind,
                                                                    value, at):
    """The synced lag is recorded when it fits the field (seq - synced + 1 <= 2**24 - 1), else
    0, which records nothing; ``behind`` (seq - synced) is drawn at the limit too."""
    synced = seq - min(seq, behind)
    buf = bytearray(b"\xee" * (at + V + 5))
    write_version(buf, at, V, slot, flags, key, seq, synced, value)
    want = ref.slot_version_bytes(slot, flags, key, seq, value, synced)
    assert bytes(buf[at:at + V]) == want.ljust(V, b"\0")
    assert buf[:at] == b"\xee" * at and buf[at + V:] == b"\xee" * 5  # nothing else written
    max_value = V - VERSION_OVERHEAD
    recorded = synced if seq - synced + 1 <= ref.SLOT_LAG_MAX else 0
    assert parse_version(buf, at, slot, max_value) == (VALID, seq, flags, key, len(value),
                                                       recorded)


def test_a_version_that_cannot_be_written_is_refused():
    buf = bytearray(2 * V)
    with pytest.raises(ValueError, match="flags"):
        write_version(buf, 0, V, 1, 3, 0, 0, 0, b"")
    with pytest.raises(ValueError, match="synced"):
        write_version(buf, 0, V, 1, 1, 0, 5, 6, b"")
    with pytest.raises(ValueError, match="value of"):
        write_version(buf, 0, V, 1, 1, 0, 0, 0, bytes(V - VERSION_OVERHEAD + 1))
    with pytest.raises(ValueError, match="off"):
        write_version(buf, V + 1, V, 1, 1, 0, 0, 0, b"x")
    with pytest.raises(ValueError, match="off"):
        write_version(buf, -1, V, 1, 1, 0, 0, 0, b"x")
    with pytest.raises(ValueError, match="off"):  # off + vbytes past the largest size
        write_version(buf, 2**63 - 50, V, 1, 1, 0, 0, 0, b"x")
    with pytest.raises(TypeError, match="writable"):
        write_version(bytes(2 * V), 0, V, 1, 1, 0, 0, 0, b"x")
    with pytest.raises(TypeError, match="value"):
        write_version(buf, 0, V, 1, 1, 0, 0, 0, "text")  # type: ignore[arg-type]
    assert buf == bytearray(2 * V)


def test_bad_arguments_are_refused():
    buf = bytes(2 * 4 * V)
    with pytest.raises(ValueError, match="extent"):
        parse_slots(buf, 0, 1, 0, V, MAX_VALUE)
    with pytest.raises(ValueError, match="count"):
        parse_slots(buf, 0, -1, 4, V, MAX_VALUE)
    with pytest.raises(ValueError, match="vbytes"):
        parse_slots(buf, 0, 1, 4, V, V - VERSION_OVERHEAD + 1)
    with pytest.raises(ValueError, match="first"):
        parse_slots(buf, 2, 1, 4, V, MAX_VALUE)
    with pytest.raises(ValueError, match="buf must hold"):
        parse_slots(buf[:-1], 0, 4, 4, V, MAX_VALUE)
    with pytest.raises(ValueError, match="buf must hold"):  # a size past 2**64 bytes
        parse_slots(b"", 0, 2, 1, 2**62, MAX_VALUE)
    with pytest.raises(ValueError, match="buf must hold"):  # before arrays of 2**40 slots
        parse_slots(buf, 0, 2**40, 1, V, MAX_VALUE)
    with pytest.raises(TypeError, match="buf"):
        parse_slots("text", 0, 0, 4, V, MAX_VALUE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="off"):
        parse_version(bytes(V), 1, 0, V - VERSION_OVERHEAD)
    with pytest.raises(ValueError, match="off"):
        parse_version(bytes(V), -1, 0, MAX_VALUE)
    with pytest.raises(ValueError, match="off"):
        parse_version(bytes(V), 2**63 - 10, 0, MAX_VALUE)
    with pytest.raises(TypeError, match="buf"):
        parse_version(None, 0, 0, MAX_VALUE)  # type: ignore[arg-type]
    empty = parse_slots(b"", 0, 0, 4, V, MAX_VALUE)
    assert all(isinstance(a, np.ndarray) and a.shape == (0, 2) for a in empty)
