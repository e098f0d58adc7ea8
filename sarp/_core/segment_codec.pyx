"""The columnar segment record (docs/segment_format.txt): header, block IDs, metadata, checksum.

Block IDs sit at offset 32 and metadata right after them, so a decoded segment's arrays are
views into the record, not copies.
"""

import sys

import numpy as np

cimport numpy as cnp

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_SIMPLE,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from libc.stdint cimport uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from sarp._core.aligned cimport check_aligned

from sarp.errors import BadLengthError, BadMagicError, ChecksumError, UnsupportedVersionError


cdef extern from "xxh64.h" nogil:
    uint64_t sarp_xxh64(const void* p, size_t n, uint64_t seed)

cdef extern from "endian.h" nogil:
    uint64_t sarp_read_le64(const unsigned char* p)
    uint32_t sarp_read_le32(const unsigned char* p)
    uint16_t sarp_read_le16(const unsigned char* p)
    void sarp_write_le64(unsigned char* p, uint64_t x)
    void sarp_write_le32(unsigned char* p, uint32_t x)
    void sarp_write_le16(unsigned char* p, uint16_t x)


cdef enum:
    HEADER_SIZE = 32
    CHECKSUM_SIZE = 8
    VERSION = 1
cdef uint32_t MAGIC = 0x53505253
cdef bint LITTLE_ENDIAN = sys.byteorder == "little"
cnp.import_array()
cdef Py_ssize_t MAX_BLOCKS = 0xFFFFFFFF
cdef Py_ssize_t MAX_META_WIDTH = 0xFFFF

cdef class Segment:
    """A decoded segment record; block_ids and metadata are views into ``record``, the buffer
    it was decoded from. Made only by this module's decoder (a compiled class: the matching
    path decodes one per retrieval)."""

    cdef readonly object segment_id, start, block_count, meta_width
    cdef readonly object block_ids, metadata, record

    def __repr__(self):
        return (f"Segment(segment_id={self.segment_id}, start={self.start}, "
                f"block_count={self.block_count}, meta_width={self.meta_width})")


cdef Segment make_segment(Header* h, object ids, object meta, object record):
    cdef Segment seg = Segment.__new__(Segment)
    seg.segment_id, seg.start = h.segment_id, h.start
    seg.block_count, seg.meta_width = h.block_count, h.meta_width
    seg.block_ids, seg.metadata, seg.record = ids, meta, record
    return seg


cdef struct Header:
    uint64_t segment_id
    uint64_t start
    Py_ssize_t block_count
    Py_ssize_t meta_width


cdef int check_shape(Py_ssize_t block_count, Py_ssize_t meta_width, str count_name) except -1:
    if block_count < 0 or block_count > MAX_BLOCKS:
        raise ValueError(f"{count_name} must hold 0..{MAX_BLOCKS} blocks, got {block_count}")
    if meta_width < 0 or meta_width > MAX_META_WIDTH:
        raise ValueError(f"meta_width must be in 0..{MAX_META_WIDTH}, got {meta_width}")
    return 0


cdef inline Py_ssize_t record_size(Py_ssize_t block_count, Py_ssize_t meta_width) noexcept nogil:
    return HEADER_SIZE + block_count * (8 + meta_width) + CHECKSUM_SIZE


cdef int parse_header(const unsigned char* p, Py_ssize_t length, Header* h) except -1:
    """Fill ``h`` from the record at ``p``; check magic, version and total length."""
    if length < HEADER_SIZE:
        raise BadLengthError(f"segment record of {length} bytes is shorter than its header")
    cdef uint32_t magic = sarp_read_le32(p)
    if magic != MAGIC:
        raise BadMagicError(f"segment record magic is {magic:#010x}, expected {MAGIC:#010x}")
    cdef uint16_t version = sarp_read_le16(p + 4)
    if version != VERSION:
        raise UnsupportedVersionError(f"segment record version {version}, this build reads 1")
    h.meta_width = sarp_read_le16(p + 6)
    h.segment_id = sarp_read_le64(p + 8)
    h.start = sarp_read_le64(p + 16)
    h.block_count = sarp_read_le32(p + 24)
    cdef Py_ssize_t expected = record_size(h.block_count, h.meta_width)
    if length != expected:
        raise BadLengthError(
            f"segment record is {length} bytes, its header says {expected} "
            f"({h.block_count} blocks of metadata width {h.meta_width})"
        )
    return 0


cdef int check_checksum(const unsigned char* p, Py_ssize_t length) except -1:
    cdef uint64_t stored = sarp_read_le64(p + length - CHECKSUM_SIZE)
    cdef uint64_t actual
    actual = sarp_xxh64(p, <size_t>(length - CHECKSUM_SIZE), 0)
    if stored != actual:
        raise ChecksumError(f"segment record checksum {stored:#018x} != computed {actual:#018x}")
    return 0


cdef int get_buffer(object obj, Py_buffer* view, str name, int flags, str kind) except -1:
    """Acquire ``obj``'s bytes (released by the caller); the errors name argument ``name``
    and the ``kind`` of buffer wanted."""
    if not PyObject_CheckBuffer(obj):
        raise TypeError(f"{name} must be a bytes-like object, got {type(obj).__name__}")
    try:
        PyObject_GetBuffer(obj, view, flags)
    except (BufferError, ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a {kind} buffer: {exc}") from None
    return 0


cdef int get_record(object buf, Py_buffer* view) except -1:
    """Acquire ``buf``'s bytes (released by the caller)."""
    return get_buffer(buf, view, "buf", PyBUF_SIMPLE, "contiguous")


cdef int get_metadata(object metadata, Py_buffer* view, Py_ssize_t expected) except -1:
    """Acquire the metadata bytes (released by the caller); exactly ``expected`` bytes."""
    get_buffer(metadata, view, "metadata", PyBUF_C_CONTIGUOUS, "C-contiguous")
    if view.len != expected:
        PyBuffer_Release(view)
        raise ValueError(
            f"metadata must be exactly {expected} bytes (block count * meta_width), "
            f"got {view.len}"
        )
    return 0


cdef bytes build(
    uint64_t segment_id, uint64_t start, Py_ssize_t meta_width,
    const unsigned char* old_ids, const unsigned char* old_meta, Py_ssize_t n_old,
    const uint64_t* new_ids, const unsigned char* new_meta, Py_ssize_t n_new,
):
    """A record of the ``n_old`` blocks of an existing record (raw ID and metadata bytes)
    followed by ``n_new`` more blocks."""
    cdef Py_ssize_t n = n_old + n_new
    cdef Py_ssize_t size = record_size(n, meta_width)
    cdef bytes out = PyBytes_FromStringAndSize(<char*>NULL, size)
    cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(out)
    cdef unsigned char* meta = p + HEADER_SIZE + 8 * n
    cdef Py_ssize_t i
    sarp_write_le32(p, MAGIC)
    sarp_write_le16(p + 4, VERSION)
    sarp_write_le16(p + 6, <uint16_t>meta_width)
    sarp_write_le64(p + 8, segment_id)
    sarp_write_le64(p + 16, start)
    sarp_write_le32(p + 24, <uint32_t>n)
    sarp_write_le32(p + 28, 0)
    if n_old:
        memcpy(p + HEADER_SIZE, old_ids, 8 * n_old)
        memcpy(meta, old_meta, n_old * meta_width)
    for i in range(n_new):
        sarp_write_le64(p + HEADER_SIZE + 8 * (n_old + i), new_ids[i])
    if n_new:
        memcpy(meta + n_old * meta_width, new_meta, n_new * meta_width)
    sarp_write_le64(p + size - CHECKSUM_SIZE, sarp_xxh64(p, <size_t>(size - CHECKSUM_SIZE), 0))
    return out


def encoded_size(Py_ssize_t block_count, Py_ssize_t meta_width):
    """Bytes of the record of ``block_count`` blocks with ``meta_width``-byte metadata."""
    check_shape(block_count, meta_width, "block_count")
    return record_size(block_count, meta_width)


def encode_segment(
    uint64_t segment_id,
    uint64_t start,
    const uint64_t[::1] block_ids not None,
    metadata,
    Py_ssize_t meta_width,
):
    """The record of a segment: ``metadata`` is any C-contiguous buffer of exactly
    len(block_ids) * meta_width bytes (bytes, a uint8 array, a structured array)."""
    cdef Py_ssize_t n = block_ids.shape[0]
    check_shape(n, meta_width, "block_ids")
    check_aligned(&block_ids[0] if n else NULL, 8, "block_ids")
    cdef Py_buffer meta
    get_metadata(metadata, &meta, n * meta_width)
    try:
        return build(segment_id, start, meta_width, NULL, NULL, 0,
                     &block_ids[0] if n else NULL, <const unsigned char*>meta.buf, n)
    finally:
        PyBuffer_Release(&meta)


def read_header(buf):
    """(segment_id, start, block_count, meta_width) of a record, after its magic, version and
    length checks but without the checksum: a cheap peek."""
    cdef Py_buffer view
    cdef Header h
    get_record(buf, &view)
    try:
        parse_header(<const unsigned char*>view.buf, view.len, &h)
    finally:
        PyBuffer_Release(&view)
    return h.segment_id, h.start, h.block_count, h.meta_width


def decode_segment(buf):
    """The fully checked Segment of a record; its arrays are views into ``buf`` (no copy),
    but for block IDs that ``buf`` holds at an address not a multiple of 8, which are copied."""
    cdef Py_buffer view
    cdef Header h
    get_record(buf, &view)
    try:
        parse_header(<const unsigned char*>view.buf, view.len, &h)
        check_checksum(<const unsigned char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    cdef cnp.npy_intp dims[2]
    cdef unsigned char* p
    if PyBytes_CheckExact(buf) and LITTLE_ENDIAN:
        # bytes never move or change: read-only arrays over its data, kept alive as their base
        p = <unsigned char*>PyBytes_AS_STRING(buf) + HEADER_SIZE
        if <uintptr_t>p % 8 == 0:
            dims[0], dims[1] = h.block_count, h.meta_width
            ids = _readonly_view(buf, p, 1, dims, cnp.NPY_UINT64)
            meta = _readonly_view(buf, p + 8 * h.block_count, 2, dims, cnp.NPY_UINT8)
            return make_segment(&h, ids, meta, buf)
    ids = np.frombuffer(buf, dtype="<u8", count=h.block_count, offset=HEADER_SIZE)
    if not ids.flags.aligned:  # a buffer at an odd address: the kernels read aligned words
        ids = ids.copy()
    meta = np.frombuffer(buf, dtype=np.uint8, count=h.block_count * h.meta_width,
                         offset=HEADER_SIZE + 8 * h.block_count)
    return make_segment(&h, ids, meta.reshape(h.block_count, h.meta_width), buf)


cdef cnp.ndarray _readonly_view(object base, unsigned char* data, int nd, cnp.npy_intp* dims,
                                int typenum):
    """A read-only C-contiguous array of ``data`` (inside ``base``), which it keeps alive."""
    cdef cnp.ndarray a = cnp.PyArray_SimpleNewFromData(nd, dims, typenum, data)
    cnp.PyArray_CLEARFLAGS(a, cnp.NPY_ARRAY_WRITEABLE)
    cnp.set_array_base(a, base)
    return a


def append_blocks(buf, const uint64_t[::1] block_ids not None, metadata):
    """A new record: the checked record ``buf`` with ``block_ids`` and their ``metadata``
    appended (same segment id, start and metadata width)."""
    return _with_blocks(buf, 0, True, 0, 0, block_ids, metadata)


def copy_prefix(buf, Py_ssize_t keep, uint64_t segment_id, uint64_t start,
                const uint64_t[::1] block_ids not None, metadata):
    """The record of a new segment ``segment_id`` starting at ``start``: the first ``keep``
    blocks of the checked record ``buf`` (their IDs and metadata), then ``block_ids`` and their
    ``metadata``. The same bytes as ``encode_segment`` of the two joined, without joining
    them first: an insert that diverges inside a stored segment copies its shared prefix so."""
    return _with_blocks(buf, keep, False, segment_id, start, block_ids, metadata)


cdef bytes _with_blocks(object buf, Py_ssize_t keep, bint append, uint64_t segment_id,
                        uint64_t start, const uint64_t[::1] block_ids, object metadata):
    """The first ``keep`` blocks of the checked record ``buf`` followed by ``block_ids`` and
    their ``metadata``, as segment ``segment_id`` at ``start``; with ``append``, every block
    of ``buf`` under its own segment id and start."""
    cdef Py_buffer view, meta
    cdef Header h
    cdef const unsigned char* p
    cdef Py_ssize_t n = block_ids.shape[0]
    check_aligned(&block_ids[0] if n else NULL, 8, "block_ids")
    get_record(buf, &view)
    try:
        p = <const unsigned char*>view.buf
        parse_header(p, view.len, &h)
        check_checksum(p, view.len)
        if append:
            keep, segment_id, start = h.block_count, h.segment_id, h.start
            check_shape(keep + n, h.meta_width, "block_ids (with the existing blocks)")
        else:
            if keep < 0 or keep > h.block_count:
                raise ValueError(f"keep must be in [0, {h.block_count}] (the record's blocks), "
                                 f"got {keep}")
            check_shape(keep + n, h.meta_width, "block_ids (with the blocks kept)")
        get_metadata(metadata, &meta, n * h.meta_width)
        try:
            return build(segment_id, start, h.meta_width,
                         p + HEADER_SIZE, p + HEADER_SIZE + 8 * h.block_count, keep,
                         &block_ids[0] if n else NULL, <const unsigned char*>meta.buf, n)
        finally:
            PyBuffer_Release(&meta)
    finally:
        PyBuffer_Release(&view)
