from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

class Segment:
    """A decoded segment record; block_ids and metadata are views into ``record``. Made by
    ``decode_segment`` only."""

    @property
    def segment_id(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def block_count(self) -> int: ...
    @property
    def meta_width(self) -> int: ...
    @property
    def block_ids(self) -> npt.NDArray[np.uint64]: ...
    @property
    def metadata(self) -> npt.NDArray[np.uint8]: ...
    @property
    def record(self) -> Buffer: ...

def encoded_size(block_count: int, meta_width: int) -> int:
    """Bytes of the record of ``block_count`` blocks with ``meta_width``-byte metadata."""

def encode_segment(
    segment_id: int,
    start: int,
    block_ids: npt.NDArray[np.uint64],
    metadata: Buffer | npt.NDArray[Any],
    meta_width: int,
) -> bytes:
    """The record of a segment; metadata is exactly len(block_ids) * meta_width bytes."""

def read_header(buf: Buffer) -> tuple[int, int, int, int]:
    """(segment_id, start, block_count, meta_width), checked except for the checksum."""

def decode_segment(buf: Buffer) -> Segment:
    """The fully checked Segment of a record, its arrays viewing ``buf`` (block IDs held at an
    address not a multiple of 8 are copied)."""

def append_blocks(
    buf: Buffer, block_ids: npt.NDArray[np.uint64], metadata: Buffer | npt.NDArray[Any]
) -> bytes:
    """A new record: the checked record ``buf`` with more blocks appended."""

def copy_prefix(
    buf: Buffer,
    keep: int,
    segment_id: int,
    start: int,
    block_ids: npt.NDArray[np.uint64],
    metadata: Buffer | npt.NDArray[Any],
) -> bytes:
    """The record of a new segment: the first ``keep`` blocks of the checked record ``buf``,
    then ``block_ids`` and their ``metadata`` (``encode_segment`` of the two joined)."""
