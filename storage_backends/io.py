"""The file I/O layer of the flashlog and odirect engines (in the spirit of LevelDB's Env).

Every byte those engines read or write goes through a ``FileIO``: it opens files with O_DIRECT
when asked and the file system allows it (falling back to buffered I/O with a warning, e.g. on
tmpfs), reads and writes page-aligned buffers, syncs files and directories, and counts all of it.
Every engine takes its directory lock through it (``lock``). ``PowerLossIO``
(storage_backends/power_loss.py) is the same layer with a simulated power cut, for crash and
torn-write tests.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sarp.errors import StoreLockedError, SyncFailedError

MIN_BLOCK = 4096
LOCK_FILE = "LOCK"
#: names the files of its directory whose sync failed since they were last made durable whole
#: (docs/durability.md, "Failed writes"): the next open of the directory redoes them
SYNC_FAILED_FILE = "SYNC_FAILED"
#: the unit ``redo_failed_syncs`` copies in; all-zero chunks are left as holes
REDO_CHUNK = 1 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def is_block_size(n: int) -> bool:
    """Whether ``n`` is a block size a store is made with (``block_size``): a power of two,
    at least MIN_BLOCK. A store's header naming another is damage."""
    return n >= MIN_BLOCK and n & (n - 1) == 0


def block_size(path: str | Path) -> int:
    """The I/O unit for files under directory ``path``: max(4096, what the file system
    reports). OSError (EINVAL) if that is not a power of two: a store made with it would be
    refused at its next open, as the headers of such a block size are (``is_block_size``)."""
    st = os.statvfs(path)
    n = max(MIN_BLOCK, st.f_bsize, os.stat(path).st_blksize)
    if not is_block_size(n):
        raise OSError(errno.EINVAL, f"the file system under {str(path)!r} reports a block "
                                    f"size of {n}, not a power of two; stores need one")
    return n


def aligned_buffer(size: int) -> mmap.mmap:
    """A zeroed, page-aligned buffer of ``size`` bytes (anonymous mmap), usable with O_DIRECT."""
    return mmap.mmap(-1, max(size, 1))


def round_up(n: int, unit: int) -> int:
    """``n`` rounded up to a multiple of ``unit``."""
    return -(-n // unit) * unit


def _read_from_start(f: File, view: memoryview, size: int) -> int:
    """Read the first ``size`` bytes of ``f`` into ``view`` (which may be longer, as O_DIRECT
    needs); returns the bytes read, fewer if the file was cut short while read. One read
    returns at most about 2 GiB, a multiple of pages, so the next starts aligned."""
    n = 0
    while n < size:
        got = f.pread(view[n:], n)
        if got == 0:
            break
        n += got
    return min(n, size)


def _read_open(f: File, limit: int | None) -> bytearray:
    """All bytes of the open file ``f``, or its first ``limit`` (buffered reads)."""
    size = f.size()
    data = bytearray(size if limit is None else min(size, limit))
    with memoryview(data) as view:
        n = _read_from_start(f, view, len(data))
    del data[n:]
    return data


class File:
    """One open file of a ``FileIO``; offsets and lengths must be block multiples with O_DIRECT."""

    def __init__(self, io: FileIO, path: Path, fd: int, direct: bool, flags: int = os.O_RDWR):
        self.io = io
        self.path = path
        self.fd = fd
        self.direct = direct
        self.flags = flags  # the access it was opened with, O_DIRECT aside

    def pread(self, buf: Any, offset: int) -> int:
        """Fill ``buf`` from ``offset``; returns the bytes read (fewer at end of file)."""
        return self.io._pread(self, buf, offset)

    def pwrite(self, buf: Any, offset: int) -> None:
        """Write all of ``buf`` at ``offset``."""
        self.io._pwrite(self, buf, offset)

    def fdatasync(self) -> None:
        """Make the file's written data (and its size, if changed) durable; not other metadata.
        A failure is remembered for the directory's next open (``FileIO.redo_failed_syncs``)."""
        self.io._sync_in_place(self, data_only=True)

    def fsync(self) -> None:
        """Make the file's data and all its metadata durable (its name needs ``fsync_dir``);
        a failure is remembered as for ``fdatasync``."""
        self.io._sync_in_place(self, data_only=False)

    def truncate(self, size: int) -> None:
        """Cut or extend the file to ``size`` bytes (durable only after a sync)."""
        self.io._truncate(self, size)

    def size(self) -> int:
        """The file's current length in bytes (unsynced writes included)."""
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        """Close the descriptor without syncing; closing twice is harmless."""
        self.io._close(self)


class FileIO:
    """Opens files and counts every read, write and sync made through them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters = dict.fromkeys(
            ("reads", "writes", "bytes_read", "bytes_written", "fsyncs", "fdatasyncs",
             "dir_fsyncs"), 0)
        self.direct_fallbacks = 0
        #: the files this FileIO opened and has not seen collected: a rename renames them
        self._open_files: weakref.WeakSet[File] = weakref.WeakSet()

    def _add(self, **deltas: int) -> None:
        with self._lock:
            for name, d in deltas.items():
                self.counters[name] += d

    # -- opening -------------------------------------------------------------------------
    def open(self, path: str | Path, direct: bool, create: bool = True, *,
             read_only: bool = False) -> File:
        """Open ``path`` read-write (created if asked), or ``read_only`` (an existing file),
        with O_DIRECT if ``direct`` and possible."""
        p = Path(path)
        flags = os.O_RDONLY if read_only else os.O_RDWR | (os.O_CREAT if create else 0)
        f = None
        if direct and _O_DIRECT:
            try:
                f = File(self, p, os.open(p, flags | _O_DIRECT, 0o644), True, flags)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self._warn_fallback(p)
        if f is None:
            f = File(self, p, os.open(p, flags, 0o644), False, flags)
        with self._lock:
            self._open_files.add(f)
        return f

    def lock(self, directory: str | Path, what: str) -> File:
        """Lock ``directory`` for one handle: an exclusive ``flock`` of its LOCK file, held
        until the returned file is closed or the process ends (even by kill -9). A second
        lock, from this process or another, raises ``StoreLockedError`` naming ``what``."""
        f = self.open(Path(directory) / LOCK_FILE, direct=False)
        try:
            fcntl.flock(f.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise StoreLockedError(f"{what} at {str(directory)!r} is already open (in this "
                                   "or another process); close it first") from None
        return f

    def read_whole(self, path: str | Path, limit: int | None = None) -> bytearray:
        """All bytes of the existing file ``path``, or its first ``limit`` (buffered:
        superblocks, WAL files, file headers)."""
        f = self.open(path, direct=False, read_only=True)
        try:
            return _read_open(f, limit)
        finally:
            f.close()

    def _warn_fallback(self, path: Path) -> None:
        self.direct_fallbacks += 1
        warnings.warn(f"O_DIRECT refused for {str(path)!r}; using buffered I/O",
                      RuntimeWarning, stacklevel=4)

    def _buffered(self, f: File) -> None:
        """Switch ``f`` to buffered I/O after the file system rejected an O_DIRECT transfer.
        The buffered descriptor takes the place of the direct one under the same number
        (``dup2``), so a thread reading through ``f`` meanwhile never uses a closed one."""
        self._warn_fallback(f.path)
        fd = os.open(f.path, f.flags & ~os.O_CREAT)
        try:
            os.dup2(fd, f.fd, inheritable=False)
        finally:
            os.close(fd)
        f.direct = False

    def _direct_or_buffered(self, f: File, transfer: Callable[[], int]) -> int:
        """``transfer()`` on ``f``; if the file system rejects it as an O_DIRECT transfer
        (EINVAL), again once ``f`` is switched to buffered I/O (``transfer`` reads ``f.fd``
        when called)."""
        try:
            return transfer()
        except OSError as e:
            if not (f.direct and e.errno == errno.EINVAL):
                raise
            self._buffered(f)
            return transfer()

    # -- data ----------------------------------------------------------------------------
    def _pread(self, f: File, buf: Any, offset: int) -> int:
        n = self._direct_or_buffered(f, lambda: os.preadv(f.fd, [buf], offset))
        self._add(reads=1, bytes_read=n)
        return n

    def _pwrite(self, f: File, buf: Any, offset: int) -> None:
        view = memoryview(buf)
        n = self._direct_or_buffered(f, lambda: os.pwritev(f.fd, [view], offset))
        while n < len(view):  # short writes: only on full disks and signals
            n += os.pwritev(f.fd, [view[n:]], offset + n)
        self._add(writes=1, bytes_written=len(view))

    def _sync_in_place(self, f: File, data_only: bool) -> None:
        """Sync ``f``; if that fails, name it in its directory's SYNC_FAILED file.

        Linux may mark the pages it failed to write clean: they read back whole until the
        next reboot, and no later sync writes them. A process that reopens the file would take
        them for durable data. The file is written next to them, without a sync (it only has
        to outlive the process, not a power cut, which drops those pages anyway).
        """
        try:
            self._sync(f, data_only)
        except SyncFailedError:
            try:
                marker = self.open(f.path.parent / SYNC_FAILED_FILE, direct=False)
                try:
                    marker.pwrite((f.path.name + "\n").encode(), marker.size())
                finally:
                    marker.close()
            except OSError:
                pass  # the failing device: the sync's failure is raised all the same
            raise

    def redo_failed_syncs(self, directory: str | Path) -> int:
        """Make durable what the files named in ``directory``'s SYNC_FAILED file hold now.

        Called by an open that holds the directory's lock, before it reads anything there.
        The SYNC_FAILED file is made durable first, so that a power cut during the redo
        leaves it to the next open, whose redo replaces any copy left half made. Each named
        file that exists is then copied whole to a new file, synced and renamed over it, so
        that no page a failed sync left clean but unwritten is taken for durable; once the
        directory is synced, the SYNC_FAILED file is removed. Names that are not plain file
        names of the directory (or name its LOCK) are ignored. Returns the number of files
        redone.

        Without a SYNC_FAILED file the directory is synced: an earlier session's directory
        sync may have failed after a rename (a journal rewritten, a file published), and what
        this session writes must not build on an entry a power cut can still take back.
        """
        d = Path(directory)
        marker = d / SYNC_FAILED_FILE
        if not marker.exists():
            self.fsync_dir(d)
            return 0
        f = self.open(marker, direct=False, create=False)
        try:
            self._sync(f, data_only=False)
            text = bytes(_read_open(f, None)).decode("utf-8", "replace")
        finally:
            f.close()
        self.fsync_dir(d)
        names = set(text.split("\n"))
        files = [d / n for n in sorted(names) if n and n == Path(n).name
                 and n not in (LOCK_FILE, SYNC_FAILED_FILE, ".", "..") and (d / n).is_file()]
        for p in files:
            self._copy_in_place(p)
        self.fsync_dir(d)
        self.unlink(marker)  # not synced: if it comes back after a power cut, a redo is harmless
        return len(files)

    def _copy_in_place(self, path: Path) -> None:
        """Replace ``path`` by a synced copy of itself (holes kept: all-zero chunks are not
        written); the caller syncs the directory."""
        tmp = path.with_name(path.name + ".redo")
        src = self.open(path, direct=False, read_only=True)
        try:
            dst = self.open(tmp, direct=False)
            try:
                size = src.size()
                dst.truncate(0)
                dst.truncate(size)
                buf = bytearray(REDO_CHUNK)
                zeros = bytes(REDO_CHUNK)
                with memoryview(buf) as view:
                    for offset in range(0, size, REDO_CHUNK):
                        n = src.pread(view, offset)
                        if buf[:n] != zeros[:n]:  # compared by memcmp
                            dst.pwrite(view[:n], offset)
                self._sync(dst, data_only=False)
            finally:
                dst.close()
        finally:
            src.close()
        self.rename(tmp, path)

    def _sync(self, f: File, data_only: bool) -> None:
        sync, counter = (os.fdatasync, "fdatasyncs") if data_only else (os.fsync, "fsyncs")
        try:
            sync(f.fd)
        except OSError as e:
            raise SyncFailedError(e.errno, f"sync of {f.path.name} failed: {e.strerror}") from e
        self._add(**{counter: 1})

    def _truncate(self, f: File, size: int) -> None:
        os.ftruncate(f.fd, size)
        self._add(writes=1)

    def _close(self, f: File) -> None:
        if f.fd >= 0:
            os.close(f.fd)
            f.fd = -1

    def read_private(self, path: str | Path, direct: bool) -> memoryview:
        """All of ``path`` in a page-aligned, writable buffer of its own, read in one
        sequential pass, with O_DIRECT if ``direct`` and the file system allows it (from the
        disk, with no copy through the page cache). The caller may adopt arrays in it: no
        later change to the file, a truncation included, can reach them."""
        f = self.open(path, direct=direct, read_only=True)
        try:
            size = f.size()
            view = memoryview(aligned_buffer(round_up(size, block_size(Path(path).parent))))
            n = _read_from_start(f, view, size)
        finally:
            f.close()
        return view[:n]

    # -- directories -----------------------------------------------------------------------
    def fsync_dir(self, path: str | Path) -> None:
        """fsync the directory ``path`` so that creates, renames and unlinks in it are durable.

        A failure raises SyncFailedError, as for a file: whether the entries are on the
        device is then unknown (a file just published may be missing after a power cut)."""
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise SyncFailedError(e.errno, f"sync of directory {Path(path).name} failed: "
                                           f"{e.strerror}") from e
        self._add(dir_fsyncs=1)

    def make_dirs(self, path: str | Path) -> list[Path]:
        """Create directory ``path`` and its missing parents; returns those it created, the
        innermost first (durable once each one's parent is synced)."""
        p = Path(path)
        missing = [d for d in (p, *p.parents) if not d.exists()]
        p.mkdir(parents=True, exist_ok=True)
        return missing

    def publish(self, path: str | Path, data: bytes) -> None:
        """Write ``path`` whole or not at all: temporary file, fsync, rename, fsync of the dir.

        A write or sync that fails (a full disk) leaves ``path`` as it was and removes the
        temporary file, so failed attempts do not hold the space they took; only a crash
        leaves one (``<name>.tmp``)."""
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        f = self.open(tmp, direct=False)
        try:
            try:
                f.truncate(0)
                f.pwrite(data, 0)
                self._sync(f, data_only=False)
            finally:
                f.close()
        except BaseException:
            with contextlib.suppress(OSError):
                self.unlink(tmp)
            raise
        self.rename(tmp, p)
        self.fsync_dir(p.parent)

    def rename(self, src: str | Path, dst: str | Path) -> None:
        """Atomically replace ``dst`` by ``src`` (durable after ``fsync_dir``); the files this
        FileIO has open at ``src`` are then named ``dst`` (as a failed sync names them)."""
        os.replace(src, dst)
        src, dst = Path(src), Path(dst)
        with self._lock:
            for f in list(self._open_files):
                if f.path == src:
                    f.path = dst

    def unlink(self, path: str | Path) -> None:
        """Remove ``path`` if it exists (durable after ``fsync_dir``); not counted."""
        Path(path).unlink(missing_ok=True)

    def stats(self) -> dict[str, int]:
        """A copy of the counters: reads, writes, bytes read/written and each kind of sync."""
        with self._lock:
            return dict(self.counters)

    @property
    def syncs(self) -> int:
        """File and directory syncs so far."""
        c = self.counters
        return c["fsyncs"] + c["fdatasyncs"] + c["dir_fsyncs"]
