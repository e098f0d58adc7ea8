"""The versions of odirect's slots (docs/odirect_format.txt): writing one, the checks of one,
and those of both copies of every slot in a chunk of the slot file, which a scan at open reads
whole.

A version: u32 magic, u8 flags, u24 synced lag, u64 key, u64 sequence number, u32 value
length, the value, then the u64 XXH64 (seeded with the slot number) of everything before it.
A copy whose magic is 0 is empty (never written, or cleared). The synced lag L records how far
the store's syncs had got when the version was written: every version numbered below
seq - (L - 1) was durable; L = 0 records nothing (a version of an earlier build, or a lag past
the field).
"""

import numpy as np

cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cnp.import_array()


cdef extern from "xxh64.h" nogil:
    uint64_t sarp_xxh64(const void* p, size_t n, uint64_t seed)


cdef extern from "endian.h" nogil:
    uint64_t sarp_read_le64(const unsigned char* p)
    uint32_t sarp_read_le32(const unsigned char* p)
    void sarp_write_le64(unsigned char* p, uint64_t x)
    void sarp_write_le32(unsigned char* p, uint32_t x)


cdef enum:
    _MAGIC = 0x5344524F  # b"ORDS" little-endian
    _HEADER = 28  # bytes before the value
    _OVERHEAD = 36  # bytes besides the value: the header and the checksum
    _EMPTY = 0
    _VALID = 1
    _BAD = 2
    _LIVE = 1
    _DELETED = 2
    _LAG_MAX = 0xFFFFFF  # the largest synced lag field

#: a version's magic
MAGIC = _MAGIC
#: bytes of a version before its value, and its bytes besides the value (the checksum too)
VERSION_HEADER = _HEADER
VERSION_OVERHEAD = _OVERHEAD
#: a version's flags: a live record, or a delete of one
LIVE = _LIVE
DELETED = _DELETED
#: what a copy parses as: empty (magic 0), a version passing its checks, or one failing them
EMPTY = _EMPTY
VALID = _VALID
BAD = _BAD


cdef uint8_t parse(const unsigned char* p, uint64_t slot, uint32_t max_value, uint64_t* seq,
                   uint8_t* flags, uint64_t* key, uint32_t* length,
                   uint64_t* synced) noexcept nogil:
    """The state of the copy at ``p`` of ``slot``, which holds at least ``max_value`` +
    VERSION_OVERHEAD bytes; a valid version's fields go to the pointers, else zeros, but for
    the unverified sequence number of a bad copy with the right magic."""
    cdef uint32_t magic = sarp_read_le32(p)
    cdef uint32_t n = sarp_read_le32(p + 24)
    cdef uint32_t lag = p[5] | (<uint32_t>p[6] << 8) | (<uint32_t>p[7] << 16)
    seq[0] = key[0] = synced[0] = 0
    flags[0] = 0
    length[0] = 0
    if magic == 0:
        return _EMPTY
    if magic == _MAGIC:
        seq[0] = sarp_read_le64(p + 16)
    if (magic != _MAGIC or (p[4] != _LIVE and p[4] != _DELETED) or n > max_value
            or sarp_read_le64(p + _HEADER + <size_t>n)
            != sarp_xxh64(p, _HEADER + <size_t>n, slot)):
        return _BAD
    flags[0] = p[4]
    key[0] = sarp_read_le64(p + 8)
    length[0] = n
    if lag and lag - 1 <= seq[0]:
        synced[0] = seq[0] - (lag - 1)
    return _VALID


cdef Py_ssize_t get_buffer(object buf, Py_buffer* view, str name="buf",
                           int flags=PyBUF_SIMPLE) except -1:
    try:
        PyObject_GetBuffer(buf, view, flags)
    except (TypeError, BufferError, ValueError) as exc:
        what = "writable " if flags & PyBUF_WRITABLE else ""
        raise TypeError(f"{name} must be a contiguous {what}bytes-like object: {exc}") from None
    return view.len


def write_version(buf, Py_ssize_t off, Py_ssize_t vbytes, uint64_t slot, uint8_t flags,
                  uint64_t key, uint64_t seq, uint64_t synced, value):
    """Write a version of ``slot`` into the copy ``buf[off:off + vbytes]``: its header,
    ``value``, the checksum, then zeros to the copy's end. ``synced``: every version numbered
    below it is durable (0: nothing known), recorded as the synced lag when it fits."""
    if flags != _LIVE and flags != _DELETED:
        raise ValueError(f"flags must be LIVE ({_LIVE}) or DELETED ({_DELETED}), got {flags}")
    if synced > seq:
        raise ValueError(f"synced must be at most seq={seq}, got {synced}")
    cdef uint64_t lag = seq - synced + 1 if seq - synced < _LAG_MAX else 0
    cdef Py_buffer out, val
    cdef unsigned char* p
    cdef Py_ssize_t n
    get_buffer(value, &val, "value")
    try:
        n = val.len
        if n + _OVERHEAD > vbytes or n > 0xFFFFFFFF:  # its length field is a u32
            raise ValueError(f"value of {n} bytes does not fit a copy of vbytes={vbytes}")
        get_buffer(buf, &out, "buf", PyBUF_WRITABLE)
        try:
            if off < 0 or off > out.len - vbytes:
                raise ValueError(f"off must leave vbytes={vbytes} bytes of the {out.len}-byte "
                                 f"buf, got {off}")
            p = <unsigned char*>out.buf + off
            sarp_write_le32(p, _MAGIC)
            p[4] = flags
            p[5] = lag & 0xFF
            p[6] = (lag >> 8) & 0xFF
            p[7] = lag >> 16
            sarp_write_le64(p + 8, key)
            sarp_write_le64(p + 16, seq)
            sarp_write_le32(p + 24, <uint32_t>n)
            memcpy(p + _HEADER, val.buf, n)
            sarp_write_le64(p + _HEADER + n, sarp_xxh64(p, _HEADER + n, slot))
            memset(p + _OVERHEAD + n, 0, vbytes - _OVERHEAD - n)
        finally:
            PyBuffer_Release(&out)
    finally:
        PyBuffer_Release(&val)


def parse_version(buf, Py_ssize_t off, uint64_t slot, uint32_t max_value):
    """(state, seq, flags, key, length, synced) of the copy at ``buf[off:]`` of ``slot``;
    state is EMPTY, VALID or BAD, and the other fields are 0 unless VALID, but seq, which a
    BAD copy with the right magic gives as its header names it, unverified. synced: every
    version numbered below it was durable when this one was written (0: not recorded).
    ``buf[off:]`` must hold ``max_value`` + VERSION_OVERHEAD bytes, as a copy does."""
    cdef Py_buffer view
    cdef uint64_t seq, key, synced
    cdef uint8_t flags, state
    cdef uint32_t n
    get_buffer(buf, &view)
    try:
        if off < 0 or off > view.len - <Py_ssize_t>max_value - _OVERHEAD:
            raise ValueError(f"off must leave max_value + {VERSION_OVERHEAD} bytes of the "
                             f"{view.len}-byte buf, got {off}")
        state = parse(<const unsigned char*>view.buf + off, slot, max_value, &seq, &flags, &key,
                      &n, &synced)
    finally:
        PyBuffer_Release(&view)
    return state, seq, flags, key, n, synced


def parse_slots(buf, uint64_t first, Py_ssize_t count, Py_ssize_t extent, Py_ssize_t vbytes,
                uint32_t max_value):
    """Parse both copies of slots ``first`` .. ``first + count - 1``, read into ``buf`` from
    the start of ``first``'s extent: extents of ``extent`` slots, each holding the copies 0 of
    its slots, then their copies 1, each copy ``vbytes`` bytes. Returns arrays (state, seq,
    flags, key, length, offset, synced) of shape (count, 2): [i, c] is copy c of slot
    first + i, as ``parse_version`` gives it, and offset is where that copy lies in ``buf``."""
    if extent < 1:
        raise ValueError(f"extent must be at least 1, got {extent}")
    if count < 0:
        raise ValueError(f"count must be at least 0, got {count}")
    if vbytes < <Py_ssize_t>max_value + _OVERHEAD:
        raise ValueError(f"vbytes must be at least max_value + {VERSION_OVERHEAD}, got {vbytes}")
    if first % <uint64_t>extent:
        raise ValueError(f"first must start an extent of {extent} slots, got {first}")
    cdef Py_buffer view
    cdef Py_ssize_t i, c, j
    cdef object need = (-(-count // extent)) * <object>extent * 2 * vbytes  # cannot wrap
    cdef const unsigned char* base
    cdef cnp.ndarray state, seq, flags, key, length, offset, synced
    cdef uint8_t* st
    cdef uint8_t* fl
    cdef uint64_t* sq
    cdef uint64_t* ky
    cdef uint64_t* sy
    cdef uint32_t* ln
    cdef int64_t* at
    get_buffer(buf, &view)
    try:
        if view.len < need:  # before the arrays are made: count is the caller's
            raise ValueError(f"buf must hold {need} bytes for {count} slots, got {view.len}")
        state = np.empty((count, 2), dtype=np.uint8)
        seq = np.empty((count, 2), dtype=np.uint64)
        flags = np.empty((count, 2), dtype=np.uint8)
        key = np.empty((count, 2), dtype=np.uint64)
        length = np.empty((count, 2), dtype=np.uint32)
        offset = np.empty((count, 2), dtype=np.int64)
        synced = np.empty((count, 2), dtype=np.uint64)
        st = <uint8_t*>cnp.PyArray_DATA(state)
        sq = <uint64_t*>cnp.PyArray_DATA(seq)
        fl = <uint8_t*>cnp.PyArray_DATA(flags)
        ky = <uint64_t*>cnp.PyArray_DATA(key)
        ln = <uint32_t*>cnp.PyArray_DATA(length)
        at = <int64_t*>cnp.PyArray_DATA(offset)
        sy = <uint64_t*>cnp.PyArray_DATA(synced)
        base = <const unsigned char*>view.buf
        with nogil:
            for i in range(count):
                for c in range(2):
                    j = 2 * i + c
                    at[j] = ((i // extent) * 2 * extent + c * extent + i % extent) * vbytes
                    st[j] = parse(base + at[j], first + <uint64_t>i, max_value, &sq[j], &fl[j],
                                  &ky[j], &ln[j], &sy[j])
    finally:
        PyBuffer_Release(&view)
    return state, seq, flags, key, length, offset, synced
