"""``odirect``: records in fixed-size, block-aligned slots of one file, read with O_DIRECT.

Each slot holds two versions of its record; a rewrite goes to the copy that does not hold the
newest synced version, so a torn write leaves the last durable record readable. One bit per slot
in memory says which copy is the newest, so a get reads one copy (one block for a segment
record) and a put writes without reading first. The bits are saved at a clean close and at
checkpoints; after a crash a scan rebuilds them, for dense keys only in the regions of the file
written since the last checkpoint, which a write-intent list (DIRTY) names before their first
write. Dense keys (segment ids) are slot numbers, so no key index is kept in memory; sparse keys
map to slots through a table rebuilt from the slots' own headers at open, with the free slots.
The file is laid out in extents of ``EXTENT_SLOTS`` slots, each extent holding the copies 0 of
its slots, then their copies 1: the versions a batch writes into consecutive slots lie side by
side, and each run of them is written with one call.
Format: docs/odirect_format.txt; HEADER, COPIES and DIRTY are read and written by
storage_backends/odirect_files.py.
"""

from __future__ import annotations

import heapq
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sarp._core.slot_versions import (
    BAD,
    DELETED,
    EMPTY,
    LIVE,
    VALID,
    VERSION_HEADER,
    parse_slots,
    parse_version,
    write_version,
)
from sarp.checks import check_int
from sarp.errors import ConfigMismatchError, CorruptionError, SyncFailedError
from storage_backends.base import SALVAGE_HINT, RecordStore, check_io
from storage_backends.io import FileIO, aligned_buffer, block_size
from storage_backends.odirect_files import (
    KEY_MODES,
    MAX_VALUE_SIZE,
    Copies,
    bits_bytes,
    new_layout,
    read_copies,
    read_dirty,
    read_header,
    write_copies,
    write_dirty,
    write_header,
)

#: the largest slot file a dense store grows to: ext4's largest file with 4 KiB blocks,
#: 16 TiB less one block (a file ending at 16 TiB is refused with EFBIG)
MAX_FILE_BYTES = (1 << 44) - (1 << 12)

#: slots per extent: an extent holds the copies 0 of its slots, then their copies 1
EXTENT_SLOTS = 64
#: bytes per read when scanning the file, and per region of the write-intent list: whole
#: extents, at least one; a larger read takes less time per byte from a fast device (a
#: transient buffer of the open)
SCAN_BYTES = 8 << 20
#: regions written since the last checkpoint that make a write sync and checkpoint (dense
#: keys): an open after a crash scans that many (256 MiB of slot file), and one batch's, at most
CHECKPOINT_REGIONS = 32
RUN_BYTES = 1 << 20  # the most bytes one write of side-by-side versions takes
#: slots written since the last sync, at most: past it a write syncs (bounds their memory)
UNSYNCED_LIMIT = 1 << 16


def _unserved(state: npt.NDArray[Any], named: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """Of the slots whose copies parsed as ``state`` (slots, 2), those whose copy ``named``
    is not what a get serves: it fails its checks or reads as empty, unless the slot was
    never written (bit 0, both copies empty)."""
    never = (named == 0) & (state == EMPTY).all(axis=1)
    return (state[np.arange(len(state)), named] != VALID) & ~never


class _Checkpoint(NamedTuple):
    """The last checkpoint, loaded by an open after a crash (dense keys)."""

    regions: set[int]  # the regions DIRTY names as written since
    seq: int  # COPIES's next sequence number: every version below it was durable
    slots: int  # the slots COPIES's bits cover
    bits: bytes  # the newest-copy bits


#: a parsed copy of a slot: (state, seq, flags, key, length, synced)
_State = tuple[int, int, int, int, int, int]
#: ``parse_slots``' arrays, each (slots, 2): state, seq, flags, key, length, offset in the
#: chunk, synced
_Parsed = tuple[npt.NDArray[Any], ...]


def _bit(bits: bytes | bytearray, slot: int) -> int:
    """The newest-copy bit of ``slot`` in ``bits`` (0 past their end)."""
    i = slot >> 3
    return (bits[i] >> (slot & 7)) & 1 if i < len(bits) else 0


def _bits(bits: bytes | bytearray, first: int, count: int) -> npt.NDArray[np.intp]:
    """The newest-copy bits of slots ``first`` .. ``first + count - 1`` (0 past their end)."""
    packed = np.frombuffer(bits[first >> 3:(first + count + 7) >> 3], np.uint8)
    out = np.zeros(count, np.intp)
    got = np.unpackbits(packed, bitorder="little")[first & 7:(first & 7) + count]
    out[:len(got)] = got
    return out


class ODirectStore(RecordStore):
    """A slot file with two crash-safe versions per slot; see the module docstring."""

    kind = "odirect"
    DENSE_KEYS = {"key_mode": "dense"}
    _SALVAGING = False  # the open of ``salvage``: see ``_SalvageStore``

    def __init__(self, path: str | Path, memory_budget: int = 64 << 20, durability: str = "sync",
                 direct_io: bool = True, *, key_mode: str | None = None,
                 max_value_size: int | None = None, io: FileIO | None = None):
        super().__init__(path, memory_budget, durability, direct_io)
        if key_mode is not None and key_mode not in KEY_MODES:
            raise ValueError(f"key_mode must be one of {KEY_MODES}, got {key_mode!r}")
        if max_value_size is not None:
            max_value_size = check_int(max_value_size, "max_value_size", 0, MAX_VALUE_SIZE)
        self._io = check_io(io)
        with self._claim(self._io):
            self._lock = threading.RLock()
            existed, clean = self._open_header(key_mode, max_value_size)
            self._slot_bytes = 2 * self._vbytes
            self._extent_bytes = self._extent * self._slot_bytes
            self._dense_limit = MAX_FILE_BYTES // self._extent_bytes * self._extent
            data = self.path / "slots.dat"
            if existed and not data.exists():  # created before HEADER is first written
                raise CorruptionError(f"{str(self.path)!r}: slots.dat is missing")
            self._data = self._io.open(data, direct=self.direct_io)
            try:
                self._open_slots(clean)
            except BaseException:
                self._data.close()
                raise

    def _open_slots(self, clean: bool) -> None:
        """Set up the in-memory state over the open slot file and mark the store open
        (HEADER's clean flag cleared)."""
        self._local = threading.local()  # each reader thread's aligned read buffer
        self._run_max = max(1, RUN_BYTES // self._vbytes)  # versions per write call
        self._wbuf = aligned_buffer(self._vbytes)  # grown to the longest run written
        self._nslots = self._file_slots()
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []  # a heap: the lowest free slot first
        #: slots written since the last sync: a rewrite goes to the same copy again, so
        #: the copy holding the slot's last synced version stays whole
        self._unsynced: set[int] = set()
        #: bit s set: copy 1 of slot s holds the newest version (else copy 0, or none)
        self._newer = bytearray()
        #: the highest slot the open's scan found holding a record (``_hole_regions``)
        self._top = 0
        #: slots per region of the write-intent list, and per read of a scan
        self._region = max(1, SCAN_BYTES // self._extent_bytes) * self._extent
        repair = not clean or self._SALVAGING
        saved = not repair and self._load_copies()
        checkpoint = self._load_checkpoint() if repair and not self._SALVAGING else None
        if checkpoint is not None:
            self._load_slots(repair=True, checkpoint=checkpoint)
        elif not saved or self._sparse:
            self._load_slots(repair=repair, saved=bytes(self._newer) if saved else None)
        #: every version numbered below it is durable, as each version records
        self._synced = self._next_seq  # a clean close synced all; an unclean open syncs
        #: dense keys: the regions DIRTY names, written since the last checkpoint (None in
        #: sparse mode, whose open reads every slot for its slot table anyway)
        self._dirty: set[int] | None = None
        self._checkpoints = self._dirty_writes = 0
        if not self._sparse:
            if not saved:  # the bits the open rebuilt, all durable now: a checkpoint
                self._save_copies()
            self._checkpoint_seq = self._next_seq
            self._write_dirty(self._hole_regions())
        self._write_header(clean=False)

    # -- header and the saved newest-copy bits -------------------------------------------------
    def _open_header(self, key_mode: str | None,
                     max_value_size: int | None) -> tuple[bool, bool]:
        """Read HEADER, or set up a new store's layout; returns whether HEADER existed and
        whether the store was closed cleanly (a new store counts as clean)."""
        hpath = self.path / "HEADER"
        self._next_seq = 1
        if not hpath.exists():
            layout = new_layout((key_mode or "sparse") == "sparse", block_size(self.path),
                                max_value_size, EXTENT_SLOTS)
            existed, clean = False, True
        else:
            layout, clean, self._next_seq = read_header(self._io, hpath)
            existed = True
            stored_mode = KEY_MODES[layout.sparse]
            if key_mode is not None and key_mode != stored_mode:
                raise ConfigMismatchError(f"key_mode={key_mode!r}, but the store at "
                                          f"{str(self.path)!r} was created with {stored_mode!r}")
            if max_value_size is not None and max_value_size != layout.max_value:
                raise ConfigMismatchError(f"max_value_size={max_value_size}, but the store "
                                          f"was created with {layout.max_value}")
        self._layout = layout
        self._sparse, self._block, self._max_value, self._vbytes, self._extent = layout
        return existed, clean

    def _write_header(self, clean: bool) -> None:
        write_header(self._io, self.path / "HEADER", self._layout, clean, self._next_seq)

    def _load_copies(self) -> bool:
        """Load the newest-copy bits saved by the last clean close (HEADER says there was
        one); False if they are missing, damaged or not of this state of the file (the caller
        then scans the slots). A slot file shorter than that close left it is corruption: its
        records were cut off since."""
        saved = read_copies(self._io, self.path / "COPIES")
        if saved is None or saved.seq != self._next_seq:
            return False
        self._check_not_cut(saved.size, "the clean close")
        if saved.slots != self._nslots:
            return False
        self._newer = bytearray(saved.bits)
        return True

    def _check_not_cut(self, size: int, when: str) -> None:
        """Raise CorruptionError if slots.dat is now shorter than the ``size`` it had at
        ``when``: the store never shortens it, so its records were cut off since."""
        if size > self._data.size():
            raise CorruptionError(f"slots.dat: {self._data.size()} bytes, {size} at {when} "
                                  f"(cut short); {SALVAGE_HINT}")

    def _save_copies(self) -> None:
        write_copies(self._io, self.path / "COPIES",
                     Copies(self._next_seq, self._nslots, self._data.size(), bytes(self._newer)))

    def _load_checkpoint(self) -> _Checkpoint | None:
        """After a crash (dense keys): load the newest-copy bits of the last checkpoint and
        return it with the regions written since, which DIRTY names (a slot past the
        checkpoint's bits and in no such region was never written). None without a usable
        checkpoint (missing, damaged, of another region size, or not of one checkpoint): the
        caller then scans every slot. A slot file shorter than at the checkpoint is
        corruption, as after a clean close."""
        if self._sparse:
            return None
        dirty = read_dirty(self._io, self.path / "DIRTY")
        if dirty is None:
            return None
        saved = read_copies(self._io, self.path / "COPIES")
        if saved is None:
            return None
        seq, region, regions = dirty
        if seq != saved.seq or region != self._region:
            return None
        self._check_not_cut(saved.size, "the last checkpoint")
        self._newer = bytearray(saved.bits)
        self._next_seq = max(self._next_seq, seq)
        return _Checkpoint(regions, seq, saved.slots, saved.bits)

    def _hole_regions(self) -> set[int]:
        """The regions holding a slot of ``absent_after_crash`` below the highest slot found
        holding a record: DIRTY keeps naming them past the checkpoint an open after a crash
        makes, so that every open until a clean close scans them and lists such a slot
        again. An open whose caller found a record lost there (and abandoned the store)
        is then refused again, not served as if the slot had never been written."""
        absent = self._absent[self._absent < self._top]
        return set((absent // np.uint64(self._region)).tolist())

    def _write_dirty(self, regions: set[int]) -> None:
        """Durably name ``regions`` in DIRTY as written since the checkpoint whose COPIES has
        the next sequence number ``_checkpoint_seq``."""
        write_dirty(self._io, self.path / "DIRTY", self._checkpoint_seq, self._region, regions)
        self._dirty = regions
        self._dirty_writes += 1

    def _checkpoint_due(self) -> bool:
        """Whether DIRTY names enough regions for a checkpoint (dense keys)."""
        return self._dirty is not None and len(self._dirty) >= CHECKPOINT_REGIONS

    def _checkpoint(self) -> None:
        """Save the newest-copy bits, all durable (after a sync), and name no region written
        since: an open after a crash then scans only what is written later."""
        self._save_copies()
        self._checkpoint_seq = self._next_seq
        self._write_dirty(set())
        self._checkpoints += 1

    def _file_slots(self) -> int:
        """The slots the file has room for: whole extents."""
        return -(-self._data.size() // self._extent_bytes) * self._extent

    def _newest_copy(self, slot: int) -> int:
        return _bit(self._newer, slot)

    def _set_newest_copy(self, slot: int, copy: int) -> None:
        i = slot >> 3
        if i >= len(self._newer):
            self._newer.extend(bytes(i + 1 - len(self._newer)))
        bit = 1 << (slot & 7)
        self._newer[i] = (self._newer[i] | bit) if copy else (self._newer[i] & ~bit)

    # -- versions ------------------------------------------------------------------------------
    def _states(self, buf: Any, offsets: tuple[int, int], slot: int) -> list[_State]:
        """The parsed versions of ``slot``'s two copies, at ``offsets`` of ``buf``."""
        return [parse_version(buf, off, slot, self._max_value) for off in offsets]

    def _read_buffer(self) -> Any:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = aligned_buffer(self._slot_bytes)
        return buf

    def _offset(self, slot: int, copy: int) -> int:
        """Where copy ``copy`` of ``slot`` lies in the file."""
        e, i = divmod(slot, self._extent)
        return e * self._extent_bytes + (copy * self._extent + i) * self._vbytes

    def _read(self, buf: Any, slot: int, copy: int, at: int = 0) -> None:
        """Read copy ``copy`` of ``slot`` into ``buf[at:]``."""
        view = memoryview(buf)[at:at + self._vbytes]
        n = self._data.pread(view, self._offset(slot, copy)) if slot < self._nslots else 0
        if n < len(view):
            view[n:] = bytes(len(view) - n)

    def _read_copies(self, buf: Any, slot: int) -> None:
        """Read ``slot``'s two copies into ``buf``, copy c at c * V."""
        self._read(buf, slot, 0)
        self._read(buf, slot, 1, self._vbytes)

    def _write_versions(self, versions: list[tuple[int, int, int, bytes]],
                        written: set[int] | None = None) -> None:
        """Write versions (slot, flags, key, value) of distinct slots, in order, each into the
        copy of its slot that does not hold its last synced version: the other copy than the
        newest, or the newest again if it was written since the last sync. A run of versions
        that lie side by side in the file is written with one call. A slot's newest-copy bit
        flips once its run is written; a reader that finds a copy torn by a running write reads
        again under the store lock (``_value``). The slots of the runs written are added to
        ``written``: if a run fails (``_undo_run``), the runs before it stay written."""
        planned = []  # (offset, slot, copy, flags, key, value)
        for slot, flags, key, value in versions:
            newest = self._newest_copy(slot)
            copy = newest if slot in self._unsynced else 1 - newest
            planned.append((self._offset(slot, copy), slot, copy, flags, key, value))
        if self._dirty is not None:  # DIRTY names a region before its first write since
            regions = {slot // self._region for _, slot, *_ in planned}
            if not regions <= self._dirty:
                self._write_dirty(self._dirty | regions)
        v = self._vbytes
        first = 0
        while first < len(planned):
            end = first + 1
            while (end < len(planned) and end - first < self._run_max
                   and planned[end][0] == planned[end - 1][0] + v):
                end += 1
            self._write_run(planned[first:end])
            if written is not None:
                written.update(slot for _, slot, *_ in planned[first:end])
            first = end
        if len(self._unsynced) >= UNSYNCED_LIMIT or self._checkpoint_due():
            self._sync()  # which then checkpoints

    def _write_run(self, run: list[tuple[int, int, int, int, int, bytes]]) -> None:
        """Write versions that lie side by side, from ``run[0]``'s offset, with one call."""
        v = self._vbytes
        if len(self._wbuf) < len(run) * v:
            self._wbuf = aligned_buffer(len(run) * v)
        w = memoryview(self._wbuf)[:len(run) * v]
        for i, (_, slot, _, flags, key, value) in enumerate(run):
            write_version(w, i * v, v, slot, flags, key, self._next_seq + i, self._synced,
                          value)
        try:
            self._data.pwrite(w, run[0][0])
        except OSError as e:
            self._undo_run(run, e)
            raise
        self._next_seq += len(run)
        k = self._extent
        for _, slot, copy, _, _, _ in run:
            self._set_newest_copy(slot, copy)
            self._unsynced.add(slot)
            self._nslots = max(self._nslots, (slot // k + 1) * k)

    def _undo_run(self, run: list[tuple[int, int, int, int, int, bytes]],
                  error: OSError) -> None:
        """After the write of ``run`` failed with ``error``: zero the copies it went to, which
        may hold none, part or all of it, so that each slot reads, and reopens, as before the
        write (the bits still name the slots' newest copies). Left there, such a copy would
        fail the gets of a slot never written (CorruptionError), come back after an open that
        reads every slot, or, torn, pass for a synced version damaged once later syncs go
        past its sequence number. Its numbers are not given again, so later versions
        outnumber what of it a power cut before the next sync may keep.
        A slot written since the last sync had that version in the copy rewritten: it is lost
        and the slot serves its last synced version (its other copy) again, as after a crash,
        and writes stop (SyncFailedError), as after a failed sync: a later sync must not
        acknowledge the lost version. They stop too if the zeroing fails: what the copies
        hold is not known. Format: docs/odirect_format.txt, "Failed writes"."""
        self._next_seq += len(run)
        lost = [(slot, copy) for _, slot, copy, *_ in run if slot in self._unsynced]
        for slot, copy in lost:
            self._set_newest_copy(slot, 1 - copy)
        start, v = run[0][0], self._vbytes
        try:
            copies = min(len(run), -(-(self._data.size() - start) // v))  # those in the file
            if copies > 0:
                self._data.pwrite(aligned_buffer(copies * v), start)
        except OSError as z:
            raise SyncFailedError(z.errno, f"a write failed ({error.strerror}), and so did "
                                           f"zeroing what it wrote: {z.strerror}") from error
        self._nslots = max(self._nslots, self._file_slots())  # the failed write may grow it
        if lost:
            raise SyncFailedError(error.errno, "a write over versions not yet synced failed: "
                                               f"{error.strerror}") from error

    def _commit(self) -> None:
        if self.durability == "sync":
            self._sync()

    def _sync(self) -> None:
        synced = self._next_seq  # under the store lock: every version below it is written
        self._data.fdatasync()
        self._synced = synced
        self._unsynced.clear()
        self._count("syncs", 1)
        if self._checkpoint_due():
            self._checkpoint()

    # -- slots of keys -------------------------------------------------------------------------
    def _slot(self, key: int) -> int | None:
        """The slot holding ``key``, if it may have one (dense: every key in the key space)."""
        if self._sparse:
            return self._slot_of.get(key)
        return key if key < self._dense_limit else None

    def _give_back(self, taken: dict[int, int], nslots: int) -> None:
        """Undo what a put that failed did for the new keys it did not write (``taken``, slot
        -> key): the keys stay absent, their slots free. Extents added for them go too: the
        slot count is ``nslots``, as before the put, or what the file holds now."""
        if not taken:
            return
        for key in taken.values():
            del self._slot_of[key]
        self._nslots = max(nslots, self._file_slots())
        self._free = [s for s in [*self._free, *taken] if s < self._nslots]
        heapq.heapify(self._free)

    def _new_slot(self) -> int:
        """A slot for a new sparse key: the lowest free one; when none is free, the file gains
        an extent, whose other slots become free."""
        if not self._free:
            first = self._nslots
            self._nslots += self._extent
            self._free = list(range(first + 1, self._nslots))  # ascending: a heap
            return first
        return heapq.heappop(self._free)

    def _chunks(self, regions: set[int] | None = None) -> Iterator[tuple[int, Any, _Parsed]]:
        """(first slot, buffer, ``parse_slots`` of the buffer) for every slot of the file, or
        of ``regions``, read in large aligned chunks of a region each, in order; slot by slot
        where one extent is larger than a chunk (large values), so that a scan's memory stays
        bounded. Each buffer is reused by the next chunk."""
        if not self._nslots:
            return
        v, m, step = self._vbytes, self._max_value, self._region
        firsts = (range(0, self._nslots, step) if regions is None
                  else [r * step for r in sorted(regions) if r * step < self._nslots])
        if self._extent_bytes > SCAN_BYTES:
            buf = aligned_buffer(2 * v)
            for first in firsts:
                for slot in range(first, min(first + step, self._nslots)):
                    self._read_copies(buf, slot)  # copy c at c * V: extents of one slot
                    yield slot, buf, parse_slots(buf, slot, 1, 1, v, m)
            return
        chunk = aligned_buffer(min(step, self._nslots) // self._extent * self._extent_bytes)
        for first in firsts:
            n = self._data.pread(chunk, self._offset(first, 0))
            chunk[n:] = bytes(len(chunk) - n)
            count = min(step, self._nslots - first)
            yield first, chunk, parse_slots(chunk, first, count, self._extent, v, m)

    @staticmethod
    def _slot_states(parsed: _Parsed, i: int) -> list[_State]:
        """The parsed versions of the two copies of the ``i``-th slot of a chunk."""
        state, seq, flags, key, length, _, synced = parsed
        return [(int(state[i, c]), int(seq[i, c]), int(flags[i, c]), int(key[i, c]),
                 int(length[i, c]), int(synced[i, c])) for c in (0, 1)]

    def _load_slots(self, repair: bool, saved: bytes | None = None,
                    checkpoint: _Checkpoint | None = None) -> None:
        """Rebuild the newest-copy bits, the next sequence number and (sparse) the slot table
        and free list from every slot, or (dense) from the slots of the regions written since
        ``checkpoint``, over its bits; after a crash, clear the copies torn writes left, and
        sync, and (dense keys) keep the slots scanned that hold no record for
        ``absent_after_crash``.
        ``saved``: the bits of the clean close just before (sparse mode), whose copies must
        pass their checks. Each chunk's versions are checked by ``parse_slots`` and
        picked here by array operations; only the slots that need it are visited one by one.

        After a crash a copy failing its checks is taken for a write the crash tore, unless
        its header names a sequence number above the slot's other copy's (it was the slot's
        newest) that the store had synced, as the versions written later record: that is a
        version damaged after it was acknowledged, and the open raises ``CorruptionError``
        before it changes anything (``_damaged``); so is a slot whose newest copy at the
        ``checkpoint`` no longer passes its checks where nothing was written into the slot
        since (``_check_checkpoint``).

        Sparse keys: a crash can leave one key in two slots (a delete, its slot taken by
        another key and the key put again, of which only the last write reached the device).
        The version with the higher sequence number is the key's; an older live one elsewhere
        is cleared, so that no later reuse of the newer slot brings it back."""
        clear: list[int] = []  # slots zeroed: torn first writes, superseded live versions
        absent: list[npt.NDArray[np.intp]] = []  # dense keys after a crash: slots without one
        torn: list[tuple[int, int, int, int]] = []  # (slot, copy, its seq, the other's): bad
        newest: dict[int, tuple[int, int, int]] = {}  # key -> (seq, slot, flags) of its newest
        synced = 0  # the versions below it were durable, as the valid versions record
        regions = None if checkpoint is None else checkpoint.regions
        if regions is None:
            self._newer = bytearray(bits_bytes(self._nslots))
        for first, _, parsed in self._chunks(regions):
            state, seq, flags, key = parsed[:4]
            if saved is not None:
                self._check_saved(parsed, first, saved)
            if checkpoint is not None:
                self._check_checkpoint(parsed, first, checkpoint)
            valid = state == VALID
            one = valid[:, 1] & (~valid[:, 0] | (seq[:, 1] > seq[:, 0]))  # copy 1 is newest
            found = valid.any(axis=1)
            self._set_newest_copies(first, one)
            if repair and not self._sparse:
                absent.append(first + np.flatnonzero(~found))
            if found.any():
                self._next_seq = max(self._next_seq, int(seq[valid].max()) + 1)
                synced = max(synced, int(parsed[6][valid].max()))
                self._top = max(self._top, first + int(np.flatnonzero(found)[-1]))
            bad = (state == BAD).sum(axis=1)
            if repair:
                rows = np.flatnonzero(bad == 1)
                c = (state[rows, 1] == BAD).astype(np.intp)
                torn.extend(zip((first + rows).tolist(), c.tolist(), seq[rows, c].tolist(),
                                seq[rows, 1 - c].tolist(), strict=True))
            for i in np.flatnonzero((bad > 0) & ~found).tolist():
                if not repair:
                    raise CorruptionError(f"slots.dat: slot {first + i}: no version passes its "
                                          f"checks; {SALVAGE_HINT}")
                # a crash tears at most one copy of a slot (see the clearing)
                if bad[i] == 2 and not self._SALVAGING:
                    raise CorruptionError(f"slots.dat: slot {first + i}: both copies fail "
                                          f"their checks (damage, not a torn write); "
                                          f"{SALVAGE_HINT}")
                clear.append(first + i)
            if not self._sparse:
                continue
            self._free.extend((first + np.flatnonzero(~found)).tolist())
            rows, copy = np.arange(len(state)), one.astype(np.intp)  # each slot's newest copy
            keys, seqs, flags_ = (a[rows, copy][found].tolist() for a in (key, seq, flags))
            for i, k, s, f in zip(np.flatnonzero(found).tolist(), keys, seqs, flags_,
                                  strict=True):
                older = newest.get(k)
                if older is None or s > older[0]:
                    newest[k], older = (s, first + i, f), older
                else:
                    older = (s, first + i, f)
                if older is not None:
                    self._free.append(older[1])
                    if older[2] == LIVE:
                        clear.append(older[1])
        for k, (_, slot, f) in newest.items():
            if f == LIVE:
                self._slot_of[k] = slot
            else:
                self._free.append(slot)
        heapq.heapify(self._free)
        if not self._SALVAGING:
            self._damaged(torn, synced)
        if absent:
            self._absent = np.concatenate(absent).astype(np.uint64)
        # never acknowledged, or superseded by an acknowledged version; one copy at a time,
        # synced, so that a crash while clearing tears at most one copy of a slot. A torn
        # copy beside a valid one is cleared too: later versions will record syncs past it
        copies = [(slot, c) for slot in clear for c in (0, 1)]
        copies += [(slot, c) for slot, c, _, other in torn if other]
        head = aligned_buffer(self._block)
        for c in (0, 1) if copies else ():
            for slot, copy in copies:
                if copy == c:
                    self._clear_copy(head, slot, c)
            self._data.fdatasync()
        if repair and not copies:  # what the scan found is durable: later versions say so
            self._data.fdatasync()
        for slot in clear:  # empty now, as a slot never written
            self._set_newest_copy(slot, 0)

    def _clear_copy(self, head: Any, slot: int, copy: int) -> None:
        """Make copy ``copy`` of ``slot`` read as empty: zero its magic, in one write of its
        first block that rewrites the rest of the block as it reads. However a power cut
        tears that write (any of its sectors kept), the copy then holds its old bytes or an
        empty header, never a header over zeroed data, which would pass for a synced
        version damaged (``_damaged``). ``head``: a buffer of one block."""
        off = self._offset(slot, copy)
        n = self._data.pread(head, off)
        head[n:] = bytes(len(head) - n)
        head[:4] = bytes(4)
        self._data.pwrite(head, off)

    @staticmethod
    def _damaged(torn: list[tuple[int, int, int, int]], synced: int) -> None:
        """Raise ``CorruptionError`` for the first of the copies failing their checks
        (``torn``: slot, copy, the sequence number its header names, the other copy's, 0 if
        empty) that was its slot's newest version and numbered below ``synced``: synced
        before the crash, so not a write it tore. A torn write's header is the new version's,
        numbered at or past the last sync, or the copy's older one, below the other copy's."""
        for slot, c, seq, other in torn:
            if other < seq < synced:
                raise CorruptionError(
                    f"slots.dat: slot {slot}: its newest version (copy {c}, sequence {seq}) "
                    f"fails its checks, though every version below {synced} had been synced: "
                    "damage after it was acknowledged, not a write torn by the crash; "
                    f"{SALVAGE_HINT}")

    @staticmethod
    def _check_checkpoint(parsed: _Parsed, first: int, checkpoint: _Checkpoint) -> None:
        """After a crash, raise ``CorruptionError`` for the first slot of the chunk that the
        checkpoint's bits name a copy of, that copy now empty or failing its checks, while
        the slot's other copy is empty or holds a version numbered below the checkpoint.

        Every version below the checkpoint was durable, and the bits named each slot's
        newest. A write after it goes to the other copy first (numbered at or past the
        checkpoint), and the named copy is written again only after that one: so where the
        other copy shows no version since, nothing was written into the named copy since
        either, and no crash or failed write can have changed it. Its version was lost after
        it was synced: damage, which the scan would otherwise take for a torn write or an
        empty copy and serve the older version, or none, in its place. A slot with bit 0 and
        both copies empty was never written (its bit names no copy)."""
        count = max(0, checkpoint.slots - first)  # the slots the checkpoint's bits cover
        state, seq = parsed[0][:count], parsed[1][:count]
        rows = np.arange(len(state))
        named = _bits(checkpoint.bits, first, len(state))
        other = state[rows, 1 - named]
        older = seq[rows, 1 - named] < checkpoint.seq
        untouched = (other == EMPTY) | ((other == VALID) & older)
        for i in np.flatnonzero(_unserved(state, named) & untouched)[:1].tolist():
            what = "reads as empty" if state[i, named[i]] == EMPTY else "fails its checks"
            raise CorruptionError(
                f"slots.dat: slot {first + i}: its newest version at the last checkpoint "
                f"(copy {named[i]}) {what}, and no version was written into the slot since: "
                f"damage after it was synced, not a write torn by the crash; {SALVAGE_HINT}")

    def _check_saved(self, parsed: _Parsed, first: int, saved: bytes) -> None:
        """Raise ``_served``'s CorruptionError for the first slot of the chunk whose copy
        named by the ``saved`` bits is not served (fails its checks, or reads as empty)."""
        state = parsed[0]
        named = _bits(saved, first, len(state))
        for i in np.flatnonzero(_unserved(state, named))[:1].tolist():
            self._served(self._slot_states(parsed, i), first + i, int(named[i]))

    def _set_newest_copies(self, first: int, one: npt.NDArray[np.bool_]) -> None:
        """Set the newest-copy bit of each slot ``first`` + i to ``one[i]``."""
        lo, hi = first >> 3, (first + len(one) + 7) >> 3
        if len(self._newer) < hi:
            self._newer.extend(bytes(hi - len(self._newer)))
        bits = np.unpackbits(np.frombuffer(self._newer[lo:hi], np.uint8), bitorder="little")
        bits[first & 7:(first & 7) + len(one)] = one
        self._newer[lo:hi] = np.packbits(bits, bitorder="little").tobytes()

    # -- the record-store primitives -------------------------------------------------------------
    def _put_many(self, pairs: list[tuple[int, bytes]]) -> None:
        for k, v in pairs:  # all checked before any is written
            if len(v) > self._max_value:
                raise ValueError(f"value of {len(v)} bytes exceeds max_value_size="
                                 f"{self._max_value}")
            if not self._sparse and k >= self._dense_limit:
                raise ValueError(f"key {k} is beyond the dense key space (< "
                                 f"{self._dense_limit}: slots of {self._slot_bytes} bytes in a "
                                 f"file of at most {MAX_FILE_BYTES} bytes)")
        with self._lock:
            nslots = self._nslots
            versions = []
            taken: dict[int, int] = {}  # slot -> key: the slots taken for new (sparse) keys
            for key, value in dict(pairs).items():  # a key named twice: its last value
                slot = self._slot(key)
                if slot is None:
                    slot = self._slot_of[key] = self._new_slot()
                    taken[slot] = key
                versions.append((slot, LIVE, key, value))
            written: set[int] = set()
            try:
                self._write_versions(versions, written)
            except OSError:
                self._give_back({s: k for s, k in taken.items() if s not in written}, nslots)
                raise
            self._commit()

    def _get_many(self, keys: list[int]) -> list[bytes | None]:
        """Without the store lock, so reader threads overlap: a reader sees a version whole
        or finds it torn by a running write (its checksum) and reads again under the lock
        (``_value``); a slot that a concurrent delete freed and another key took is told by
        the key in the version."""
        out: list[bytes | None] = []
        for key in keys:
            slot = self._slot(key)
            out.append(None if slot is None else self._value(slot, key))
        return out

    def _value(self, slot: int, key: int) -> bytes | None:
        """The live value of ``key`` at ``slot``: one read of the newest copy. If that copy
        fails its checks, or reads as empty, both copies are read and served by ``_served``;
        if that finds them damaged, they are read again with writers held off (a write
        running now may tear the copy it rewrites, or flip the bit), and served or raised."""
        buf = self._read_buffer()
        self._read(buf, slot, self._newest_copy(slot))
        state, _, flags, found, n, _ = parse_version(buf, 0, slot, self._max_value)
        start = VERSION_HEADER
        if state != VALID:
            offsets = (0, self._vbytes)
            self._read_copies(buf, slot)
            try:
                copy, flags, found, n = self._served(self._states(buf, offsets, slot), slot)
            except CorruptionError:
                with self._lock:
                    self._read_copies(buf, slot)
                    copy, flags, found, n = self._served(self._states(buf, offsets, slot), slot)
            if copy < 0:
                return None
            start += offsets[copy]
        if flags != LIVE or found != key:
            return None
        return buf[start:start + n]

    def _served(self, states: list[_State], slot: int,
                copy: int | None = None) -> tuple[int, int, int, int]:
        """(copy, flags, key, length) of ``slot``'s version to serve, its copies having parsed
        as ``states``; copy -1 for a slot never written (bit 0, both copies empty).
        The copy the newest-copy bit names (or ``copy``) is the one: a write flips the bit
        once it is written, so under the store lock that copy fails its checks, or reads as
        empty, only if the device lost it. That is ``CorruptionError``, never the older
        version."""
        if copy is None:
            copy = self._newest_copy(slot)
        state, _, flags, key, n, _ = states[copy]
        if state == VALID:
            return copy, flags, key, n
        other = states[1 - copy][0]
        if state == other == EMPTY and copy == 0:  # a slot's first version goes to copy 1
            return -1, 0, 0, 0
        if other != VALID and BAD in (state, other):
            raise CorruptionError(f"slots.dat: slot {slot}: no version passes its checks; "
                                  f"{SALVAGE_HINT}")
        fault = "fails its checks" if state == BAD else "reads as empty"
        raise CorruptionError(f"slots.dat: slot {slot}: its newest version (copy {copy}) "
                              f"{fault}; an older version is never served in its place; "
                              f"{SALVAGE_HINT}")

    def _delete(self, key: int) -> None:
        with self._lock:
            slot = self._slot(key)
            if slot is None or self._value(slot, key) is None:
                return
            self._write_versions([(slot, DELETED, key, b"")])
            if self._sparse:
                del self._slot_of[key]
                heapq.heappush(self._free, slot)
            self._commit()

    def _scan(self) -> Iterator[tuple[int, bytes]]:
        with self._lock:
            records = []
            for first, buf, parsed in self._chunks():
                for i in range(len(parsed[0])):
                    copy, flags, key, n = self._served(self._slot_states(parsed, i), first + i)
                    if copy >= 0 and flags == LIVE:
                        start = int(parsed[5][i, copy]) + VERSION_HEADER
                        records.append((key, bytes(buf[start:start + n])))
        records.sort()
        return iter(records)

    def _flush(self, sync: bool) -> None:
        if sync:  # its writes reach the device at once (O_DIRECT); sync its write cache
            with self._lock:
                self._sync()

    def _close(self) -> None:
        with self._lock:
            try:
                self._data.fdatasync()
                self._save_copies()
                self._write_header(clean=True)
            finally:
                self._data.close()

    def _abandon(self) -> None:
        with self._lock:  # HEADER keeps clean = 0: the next open checks every slot
            self._data.close()

    def _engine_stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "key_mode": KEY_MODES[int(self._sparse)],
                "max_value_size": self._max_value,
                "slot_bytes": self._slot_bytes,
                "slots": self._nslots,
                "dirty_regions": -1 if self._dirty is None else len(self._dirty),
                "checkpoints": self._checkpoints,
                "dirty_writes": self._dirty_writes,
                "free_slots": len(self._free),
                "dram_bytes": len(self._newer) + self._slot_table_bytes() + self._unsynced_bytes(),
                "direct_io_effective": self._data.direct,
                "io": self._io.stats(),
            }

    def _unsynced_bytes(self) -> int:
        """Bytes of the set of slots written since the last sync (0 when empty)."""
        if not self._unsynced:
            return 0
        return sys.getsizeof(self._unsynced) + len(self._unsynced) * sys.getsizeof(1 << 40)

    def _slot_table_bytes(self) -> int:
        """Bytes of the sparse key -> slot table and free list (0 in dense mode)."""
        if not self._sparse:
            return 0
        return (sys.getsizeof(self._slot_of) + sys.getsizeof(self._free)
                + len(self._slot_of) * 2 * sys.getsizeof(1 << 62))


def salvage(path: str | Path, **options: Any) -> None:
    """Repair the odirect store at ``path`` after an open or a read found damage
    (``CorruptionError``): every slot is read, as after a crash, and every copy that fails
    its checks is cleared, so a slot serves its other copy where that one passes (an older
    version of its record) and is lost where none does. The store is then closed cleanly.
    ``options``: the store's open options (``key_mode``, ``max_value_size``), checked against
    HEADER before any slot is read. The store must not be open elsewhere (its lock is
    taken)."""
    _SalvageStore(path, **options).close()


class _SalvageStore(ODirectStore):
    """The store opened by ``salvage``: an unclean open that clears damaged copies too."""

    _SALVAGING = True
