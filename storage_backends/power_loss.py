"""``PowerLossIO``: the file I/O layer (storage_backends/io.py) with a simulated power cut.

The crash, torn-write, failed-sync and damage tests run the engines and the index over it, and
``bench/damage_after_crash.py`` counts what cuts and damage do to acknowledged inserts: it
remembers every write and directory entry that no sync made durable, so that ``crash()`` can
undo them, as a power cut would, and release the locks the crashed engines held.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import threading
from pathlib import Path
from typing import Any

from sarp.errors import SyncFailedError
from storage_backends.io import File, FileIO

#: the unit of a torn write: a write is cut at a multiple of it (or, with ``sectors``, kept
#: in whole units of that size, a multiple of it)
SECTOR = 512


class PowerLossIO(FileIO):
    """A ``FileIO`` that can simulate a power cut: ``crash()`` undoes what no sync made durable.

    Writes reach the real file at once (so reads see them) and are remembered, with the bytes
    they replaced, until the file is synced. So are directory entries: a file or directory
    created (``make_dirs``), a rename (within one directory) and an unlink are remembered,
    with the durable bytes of a file they replaced or removed, until ``fsync_dir`` of their
    directory (a directory undone goes with all it holds).
    ``crash("drop")`` undoes every unsynced write and entry; ``crash("tear")`` keeps all but
    the newest unsynced write and keeps only a prefix of that one, cut at a random 512-byte
    boundary short of its end; ``crash("reorder")`` undoes every unsynced write but a prefix
    of the newest, cut at a random 512-byte boundary or whole (a device may write unsynced
    data in any order). ``tear`` and ``reorder`` keep a random prefix of the unsynced entries
    (a file system commits its metadata in order). Every file is then closed and further I/O
    raises ``OSError``.
    With ``sectors`` (a sector size, e.g. 512 or 4096) ``tear`` and ``reorder`` keep an
    arbitrary subset of the newest write's sectors instead of a prefix: a device may persist
    a later sector of a write in flight without an earlier one. Sectors are the file's
    aligned ``sectors``-byte units (a write's first and last may be partial); each is kept
    whole or not at all, ``tear`` never keeps them all, and a write that extended its file
    leaves it ending at the last sector kept, with zeros in the sectors lost past its old end.
    ``fail_syncs(n)`` makes the next ``n`` file syncs fail as Linux fails them: EIO (raised as
    ``SyncFailedError``), and the file's unsynced writes stay readable but are lost at the
    crash (the bytes they replaced, or zeros past the old end of the file), whatever later
    syncs do, unless a later truncation took off their whole range and a sync then made the
    file durable (a file published again in place of one whose sync failed), or a rename
    replaced the file (``FileIO.redo_failed_syncs``); ``tear`` and
    ``reorder`` may still put back a prefix of the newest write, lost or not (harsher than
    Linux, never kinder). ``fail_dir_syncs(n)`` makes the next ``n`` directory syncs fail:
    their entries stay unsynced until a later directory sync succeeds.
    Thread-safe: each operation, the crash included, runs whole under one lock, so a crash
    from one thread falls between the writes and syncs of the others.
    """

    def __init__(self, seed: int = 0, sectors: int | None = None) -> None:
        super().__init__()
        if sectors is not None and (sectors <= 0 or sectors % SECTOR):
            raise ValueError(f"sectors must be a positive multiple of {SECTOR}, got {sectors}")
        self._rng = random.Random(seed)
        self._sectors = sectors  # None: tears keep a prefix of the newest write
        # every file opened, held (unlike FileIO's weak set): the crash closes them all,
        # also those their owner dropped without closing, so no lock outlives it
        self._files: list[File] = []
        # unsynced writes, oldest first: (path, offset, new bytes, old bytes, old size, lost);
        # lost: a sync of it failed, so no later sync makes it durable
        self._pending: list[tuple[Path, int, bytes, bytes, int, bool]] = []
        # unsynced directory entries, oldest first: (what, path, source, durable bytes):
        # ("create", path, None, None); ("mkdir", path, None, None); ("rename", dst, src,
        # bytes dst held or None); ("unlink", path, None, bytes it held)
        self._entries: list[tuple[str, Path, Path | None, bytes | None]] = []
        self._failing_syncs = 0
        self._failing_dir_syncs = 0
        self.dead = False
        self._op_lock = threading.RLock()  # one operation at a time (FileIO's guards counters)

    def open(self, path: str | Path, direct: bool, create: bool = True, *,
             read_only: bool = False) -> File:
        with self._op_lock:
            self._check()
            p = _absolute(path)
            created = create and not read_only and not p.exists()
            f = super().open(path, direct, create, read_only=read_only)
            self._files.append(f)
            if created:
                self._entries.append(("create", p, None, None))
            return f

    def _close(self, f: File) -> None:
        with self._op_lock:  # the crash closes every file, also one its owner is closing
            super()._close(f)

    def _check(self) -> None:
        if self.dead:
            raise OSError(errno.EIO, "simulated power loss")

    def _pread(self, f: File, buf: Any, offset: int) -> int:
        with self._op_lock:
            self._check()
            return super()._pread(f, buf, offset)

    def _pwrite(self, f: File, buf: Any, offset: int) -> None:
        with self._op_lock:
            self._check()
            new = bytes(buf)
            with open(f.path, "rb") as raw:
                raw.seek(offset)
                old = raw.read(len(new))
            self._pending.append((_absolute(f.path), offset, new, old, f.size(), False))
            super()._pwrite(f, buf, offset)

    def _truncate(self, f: File, size: int) -> None:
        with self._op_lock:
            self._check()
            old_size = f.size()
            with open(f.path, "rb") as raw:
                raw.seek(size)
                old = raw.read()
            self._pending.append((_absolute(f.path), size, b"", old, old_size, False))
            super()._truncate(f, size)

    def make_dirs(self, path: str | Path) -> list[Path]:
        with self._op_lock:
            self._check()
            made = super().make_dirs(_absolute(path))
            self._entries += [("mkdir", d, None, None) for d in reversed(made)]
            return made

    def rename(self, src: str | Path, dst: str | Path) -> None:
        with self._op_lock:
            self._check()
            src, dst = _absolute(src), _absolute(dst)
            if src.parent != dst.parent:
                raise ValueError(f"PowerLossIO renames within one directory, got {src} -> {dst}")
            replaced = self._forget(dst)
            super().rename(src, dst)
            self._pending = [(dst if w[0] == src else w[0], *w[1:]) for w in self._pending]
            self._entries.append(("rename", dst, src, replaced))

    def unlink(self, path: str | Path) -> None:
        with self._op_lock:
            self._check()
            p = _absolute(path)
            removed = self._forget(p)
            super().unlink(p)
            if removed is not None:
                self._entries.append(("unlink", p, None, removed))

    def _forget(self, path: Path) -> bytes | None:
        """The durable bytes of ``path`` (None if it does not exist), whose unsynced writes
        are then dropped: a rename over it or its unlink is about to remove it."""
        if not path.is_file():
            return None
        data = bytearray(path.read_bytes())
        for w in reversed(self._pending):
            if w[0] == path:
                _undo_write(data, *w[1:])
        self._pending = [w for w in self._pending if w[0] != path]
        return bytes(data)

    def _sync(self, f: File, data_only: bool) -> None:
        with self._op_lock:
            self._check()
            path = _absolute(f.path)
            if self._failing_syncs:
                self._failing_syncs -= 1
                self._pending = [(*w[:5], w[5] or w[0] == path) for w in self._pending]
                raise SyncFailedError(errno.EIO, f"simulated failed sync of {f.path.name}")
            super()._sync(f, data_only)
            self._pending = [w for i, w in enumerate(self._pending)
                             if w[0] != path or w[5] and not self._truncated_after(i)]

    def fsync_dir(self, path: str | Path) -> None:
        with self._op_lock:
            self._check()
            if self._failing_dir_syncs:
                self._failing_dir_syncs -= 1
                raise SyncFailedError(errno.EIO,
                                      f"simulated failed sync of directory {Path(path).name}")
            super().fsync_dir(path)
            d = _absolute(path)
            self._entries = [e for e in self._entries if e[1].parent != d]

    def _truncated_after(self, i: int) -> bool:
        """Whether a truncation of its file, made after the lost write ``i``, took off all of
        the range it wrote: once synced, the file's durable bytes there are what came after."""
        path, offset = self._pending[i][:2]
        return any(w[0] == path and not w[2] and w[1] <= offset for w in self._pending[i + 1:])

    def fail_syncs(self, n: int = 1) -> None:
        """Make the next ``n`` file syncs fail (see the class docstring)."""
        self._failing_syncs = n

    def fail_dir_syncs(self, n: int = 1) -> None:
        """Make the next ``n`` directory syncs fail (see the class docstring)."""
        self._failing_dir_syncs = n

    def crash(self, mode: str = "drop") -> None:
        """Cut the power: ``drop`` loses every unsynced write and directory entry; ``tear``
        keeps the writes but tears the newest one; ``reorder`` loses them all but a prefix of
        the newest, as a device that wrote them out of order (a prefix of it, or with
        ``sectors`` any subset of its sectors). ``tear`` and ``reorder`` keep a random prefix
        of the unsynced entries."""
        with self._op_lock:
            if mode not in ("drop", "tear", "reorder"):
                raise ValueError(f"mode must be 'drop', 'tear' or 'reorder', got {mode!r}")
            undo = self._pending[-1:] if mode == "tear" else self._pending
            images: dict[Path, bytearray] = {}
            for w in reversed(undo):
                if w[0].exists():  # else deleted since: nothing of it survives in any case
                    _undo_write(images.setdefault(w[0], bytearray(w[0].read_bytes())), *w[1:])
            if mode != "drop" and undo and undo[-1][2] and undo[-1][0].exists():
                path, offset, new = undo[-1][:3]
                data = images.setdefault(path, bytearray(path.read_bytes()))
                for start, end in self._torn_pieces(offset, len(new), whole=mode == "reorder"):
                    data.extend(bytes(max(0, start - len(data))))
                    data[start:end] = new[start - offset:end - offset]
            for path, data in images.items():
                path.write_bytes(data)
            kept = 0 if mode == "drop" else self._rng.randrange(len(self._entries) + 1)
            for what, path, src, saved in reversed(self._entries[kept:]):
                if what == "create":
                    path.unlink(missing_ok=True)
                    continue
                if what == "mkdir":
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if what == "rename" and src is not None and path.exists():
                    os.replace(path, src)
                if saved is not None:
                    path.write_bytes(saved)
            self._pending, self._entries = [], []
            self.dead = True  # before the closes: a thread that finds its file closed sees it
            for f in self._files:
                f.close()

    def _torn_pieces(self, offset: int, size: int, whole: bool) -> list[tuple[int, int]]:
        """The byte ranges, ascending, that a torn write of ``size`` bytes at ``offset`` puts
        on the device: a prefix at 512-byte steps, or (``sectors``) any subset of its
        sectors; all of it only if ``whole`` (``reorder``) allows."""
        if self._sectors is None:
            cut = self._rng.randrange(max(1, size // SECTOR + whole)) * SECTOR
            return [(offset, offset + cut)]  # empty: the file still reaches ``offset``
        unit, end = self._sectors, offset + size
        pieces = [(max(offset, s), min(end, s + unit))
                  for s in range(offset - offset % unit, end, unit)]
        share = self._rng.random()  # few or most sectors kept, not always about half
        kept = [p for p in pieces if self._rng.random() < share]
        if not whole and len(kept) == len(pieces):
            del kept[self._rng.randrange(len(kept))]
        return kept

    def unsynced_writes(self) -> int:
        """How many writes a crash would undo now."""
        return len(self._pending)


def _absolute(path: str | Path) -> Path:
    """``path`` made absolute (not resolved), the one form ``PowerLossIO`` remembers."""
    return Path(os.path.abspath(path))


def _undo_write(data: bytearray, offset: int, new: bytes, old: bytes, old_size: int,
                lost: bool) -> None:
    """Undo, in the bytes ``data`` of a file, a write of ``new`` (empty: a truncation) at
    ``offset`` that replaced ``old`` in a file of ``old_size`` bytes. A lost write (its sync
    failed) may lie within a size a later sync made durable: its range reads as the old
    bytes or zeros, and the size stays."""
    if lost:
        keep = max(0, min(len(new), len(data) - offset))
        data[offset:offset + keep] = (old + bytes(len(new)))[:keep]
        return
    if len(data) < offset:
        data.extend(bytes(offset - len(data)))
    data[offset:offset + len(old)] = old
    if len(data) > old_size:
        del data[old_size:]
    else:
        data.extend(bytes(old_size - len(data)))
