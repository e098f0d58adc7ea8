import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

MAGIC: int
VERSION_HEADER: int
VERSION_OVERHEAD: int
LIVE: int
DELETED: int
EMPTY: int
VALID: int
BAD: int

def write_version(
    buf: Buffer,
    off: int,
    vbytes: int,
    slot: int,
    flags: int,
    key: int,
    seq: int,
    synced: int,
    value: Buffer,
) -> None:
    """Write a version of ``slot`` into the copy ``buf[off:off + vbytes]``, zero-padded;
    every version numbered below ``synced`` is durable (0: nothing known)."""

def parse_version(
    buf: Buffer, off: int, slot: int, max_value: int
) -> tuple[int, int, int, int, int, int]:
    """(state, seq, flags, key, length, synced) of the copy at ``buf[off:]`` of ``slot``."""

def parse_slots(
    buf: Buffer, first: int, count: int, extent: int, vbytes: int, max_value: int
) -> tuple[
    npt.NDArray[np.uint8],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint8],
    npt.NDArray[np.uint64],
    npt.NDArray[np.uint32],
    npt.NDArray[np.int64],
    npt.NDArray[np.uint64],
]:
    """(state, seq, flags, key, length, offset in ``buf``, synced), each of shape (count, 2),
    of both copies of slots ``first`` .. ``first + count - 1`` laid out in ``buf`` as in the
    file."""
