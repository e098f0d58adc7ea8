"""The I/O layer: aligned buffers, counters, the O_DIRECT fallback, simulated power loss and
superblocks."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from sarp.errors import (
    BadLengthError,
    BadMagicError,
    ChecksumError,
    StoreLockedError,
    SyncFailedError,
)
from storage_backends import io as sio
from storage_backends.io import FileIO, aligned_buffer, block_size
from storage_backends.power_loss import PowerLossIO
from storage_backends.superblock import read_superblock, write_superblock


def test_block_size_is_at_least_4096(tmp_path: Path) -> None:
    assert block_size(tmp_path) >= 4096
    assert block_size(tmp_path) % 4096 == 0
    assert sio.is_block_size(block_size(tmp_path))


def test_a_block_size_that_is_not_a_power_of_two_is_refused_at_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store's header naming such a block size is refused at open (odirect's HEADER,
    flashlog's MANIFEST), so no store is made with one: the file system's is refused first."""
    real = os.statvfs(tmp_path)

    class Odd:
        f_bsize = 12288

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    monkeypatch.setattr(sio.os, "statvfs", lambda path: Odd())
    with pytest.raises(OSError, match="block size of 12288, not a power of two") as exc:
        block_size(tmp_path)
    assert exc.value.errno == errno.EINVAL
    assert [sio.is_block_size(n) for n in (2048, 4096, 12288, 65536)] == [False, True, False,
                                                                          True]


def test_aligned_buffer_is_page_aligned() -> None:
    buf = aligned_buffer(8192)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert addr % 4096 == 0 and len(buf) == 8192


def test_counters(tmp_path: Path) -> None:
    io = FileIO()
    f = io.open(tmp_path / "f", direct=True)
    buf = aligned_buffer(4096)
    buf[:5] = b"hello"
    f.pwrite(buf, 4096)
    f.fdatasync()
    out = aligned_buffer(4096)
    assert f.pread(out, 4096) == 4096 and out[:5] == b"hello"
    f.fsync()
    io.fsync_dir(tmp_path)
    f.close()
    assert io.stats() == {"reads": 1, "writes": 1, "bytes_read": 4096, "bytes_written": 4096,
                          "fsyncs": 1, "fdatasyncs": 1, "dir_fsyncs": 1}
    assert io.syncs == 3


@pytest.mark.parametrize("size", [6000, 4096, 1, 0])
@pytest.mark.parametrize("direct", [True, False])
def test_read_private_reads_the_file_into_a_buffer_of_its_own(tmp_path: Path, size,
                                                              direct) -> None:
    """A buffer the caller may write and keep: neither a write to it nor a later truncation
    of the file (which would fault a reader of a mapping) reaches the other. The file is
    opened read-only."""
    io = FileIO()
    path = tmp_path / "snap"
    data = (b"abcdef" * 1000)[:size]
    path.write_bytes(data)
    opened = []
    real_open = io.open

    def recording_open(*a: Any, **k: Any) -> Any:
        opened.append(k)
        return real_open(*a, **k)

    io.open = recording_open  # type: ignore[method-assign]
    m = io.read_private(path, direct)
    assert opened == [{"direct": direct, "read_only": True}]
    assert bytes(m) == data and len(m) == size
    assert io.stats()["reads"] == (1 if size else 0) and io.stats()["bytes_read"] == size
    if size:
        m[:1] = b"x"
        assert path.read_bytes() == data
        path.write_bytes(b"")  # truncated under the reader
        assert bytes(m[1:]) == data[1:]
    with pytest.raises(FileNotFoundError):
        io.read_private(tmp_path / "missing", direct)
    lost = PowerLossIO()
    lost.crash()
    with pytest.raises(OSError):
        lost.read_private(tmp_path / "snap", direct)


def test_lock_is_exclusive_until_closed_or_power_lost(tmp_path: Path) -> None:
    held = FileIO().lock(tmp_path, "the thing")
    with pytest.raises(StoreLockedError, match="the thing"):
        FileIO().lock(tmp_path, "the thing")  # another handle, even in this process
    held.close()
    lost = PowerLossIO()
    lost.lock(tmp_path, "the thing")
    lost.crash()  # the process is gone: its lock with it
    FileIO().lock(tmp_path, "the thing").close()


def test_o_direct_refused_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_direct(path, flags, mode=0o777):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(sio.os, "open", no_direct)
    io = FileIO()
    with pytest.warns(RuntimeWarning, match="O_DIRECT"):
        f = io.open(tmp_path / "f", direct=True)
    assert not f.direct and io.direct_fallbacks == 1
    f.pwrite(b"abc", 0)
    f.close()
    assert (tmp_path / "f").read_bytes() == b"abc"


def _write(io: FileIO, path: Path, chunks: list[tuple[int, bytes]], sync_after: int) -> None:
    f = io.open(path, direct=False)
    io.fsync_dir(path.parent)  # the file's entry is durable: only its writes are at stake
    for i, (off, data) in enumerate(chunks):
        f.pwrite(data, off)
        if i == sync_after:
            f.fdatasync()


def test_power_loss_drop_undoes_unsynced_writes(tmp_path: Path) -> None:
    io = PowerLossIO()
    path = tmp_path / "f"
    _write(io, path, [(0, b"a" * 1024), (0, b"b" * 2048), (2048, b"c" * 1024)], sync_after=0)
    assert io.unsynced_writes() == 2
    io.crash("drop")
    assert path.read_bytes() == b"a" * 1024
    with pytest.raises(OSError):
        io.open(path, direct=False)


def test_power_loss_tear_cuts_the_last_write_at_a_sector(tmp_path: Path) -> None:
    io = PowerLossIO(seed=3)
    path = tmp_path / "f"
    _write(io, path, [(0, b"a" * 4096), (0, b"b" * 4096)], sync_after=0)
    io.crash("tear")
    data = path.read_bytes()
    cut = data.count(b"b")
    assert cut % 512 == 0 and cut < 4096
    assert data == b"b" * cut + b"a" * (4096 - cut)


@pytest.mark.parametrize("seed", range(4))
def test_power_loss_reorder_keeps_only_a_prefix_of_the_newest_write(seed: int,
                                                                    tmp_path: Path) -> None:
    io = PowerLossIO(seed)
    path = tmp_path / "f"
    _write(io, path, [(0, b"a" * 4096), (0, b"b" * 4096), (4096, b"c" * 2048),
                      (0, b"d" * 4096)], sync_after=0)
    io.crash("reorder")
    data = path.read_bytes()
    cut = data.count(b"d")
    assert cut % 512 == 0 and cut <= 4096
    assert data == b"d" * cut + b"a" * (4096 - cut)


@pytest.mark.parametrize("mode", ["tear", "reorder"])
@pytest.mark.parametrize("unit", [512, 4096])
def test_power_loss_with_sectors_keeps_any_subset_of_the_newest_write(mode: str, unit: int,
                                                                      tmp_path: Path) -> None:
    """With ``sectors``, a torn write keeps any subset of its aligned sectors (a later one
    without an earlier one too), each whole; ``tear`` never keeps them all. A write that
    extended the file leaves it ending at its last sector kept, zeros in the lost ones."""
    offset, size, end = 1024, 16384, 17408
    pieces = [(max(offset, s), min(end, s + unit)) for s in range(0, end, unit)
              if s + unit > offset]
    old = b"a" * 4096 + bytes(end - 4096)
    subsets = set()
    for seed in range(200):  # a write kept whole: about 1 in as many as its sectors + 1
        io = PowerLossIO(seed, sectors=unit)
        path = tmp_path / f"f{seed}"
        _write(io, path, [(0, b"a" * 4096), (offset, b"b" * size)], sync_after=0)
        io.crash(mode)
        data = path.read_bytes()
        padded = data + bytes(end - len(data))
        kept = tuple(padded[s:e] == b"b" * (e - s) for s, e in pieces)
        assert all(k or padded[s:e] == old[s:e] for k, (s, e) in zip(kept, pieces, strict=True))
        assert padded[:offset] == old[:offset]
        assert len(data) == max([4096] + [e for k, (_, e) in zip(kept, pieces, strict=True) if k])
        subsets.add(kept)
    assert any(any(k) and not k[0] for k in subsets)  # a later sector kept, the first lost
    assert ((True,) * len(pieces) in subsets) == (mode == "reorder")


def test_power_loss_undoes_directory_entries_no_directory_sync_made_durable(
        tmp_path: Path) -> None:
    """A create, a rename over a file and an unlink are undone by the power cut until
    ``fsync_dir`` of their directory: the replaced and removed files come back holding their
    durable bytes, without the writes no sync made durable."""
    io = PowerLossIO()
    for name, data in (("new", b"n" * 100), ("old", b"o" * 600), ("gone", b"g" * 700)):
        f = io.open(tmp_path / name, direct=False)
        f.pwrite(data, 0)
        f.fsync()
    io.fsync_dir(tmp_path)
    f = io.open(tmp_path / "gone", direct=False)
    f.pwrite(b"unsynced", 0)  # lost with the file's removal, and at the cut anyway
    io.unlink(tmp_path / "gone")
    io.rename(tmp_path / "new", tmp_path / "old")
    io.open(tmp_path / "more", direct=False)
    io.open(tmp_path / "more.tmp", direct=False)
    io.rename(tmp_path / "more.tmp", tmp_path / "renamed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["more", "old", "renamed"]
    io.crash("drop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "new", "old"]
    assert (tmp_path / "gone").read_bytes() == b"g" * 700
    assert (tmp_path / "old").read_bytes() == b"o" * 600
    assert (tmp_path / "new").read_bytes() == b"n" * 100


def test_power_loss_keeps_entries_once_their_directory_is_synced(tmp_path: Path) -> None:
    """A failed directory sync leaves its entries to the cut; a later one that succeeds
    makes them durable. A sync of another directory does not."""
    io = PowerLossIO()
    (tmp_path / "sub").mkdir()
    io.open(tmp_path / "a", direct=False)
    io.open(tmp_path / "sub" / "b", direct=False)
    io.fail_dir_syncs(1)
    with pytest.raises(SyncFailedError, match="directory"):
        io.fsync_dir(tmp_path)
    io.fsync_dir(tmp_path / "sub")
    assert not (tmp_path / "b").exists()
    io.fsync_dir(tmp_path)
    io.open(tmp_path / "c", direct=False)
    io.crash("drop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "sub"]
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["b"]


def test_power_loss_undoes_directories_whose_parent_no_sync_covered(tmp_path: Path) -> None:
    """``make_dirs`` returns the directories it created, innermost first; each is undone by
    the cut, with all it holds, until its parent is synced."""
    io = PowerLossIO()
    lost, kept = tmp_path / "lost", tmp_path / "kept"
    assert io.make_dirs(lost / "a" / "b") == [lost / "a" / "b", lost / "a", lost]
    assert io.make_dirs(lost / "a" / "b") == []
    f = io.open(lost / "a" / "b" / "f", direct=False)
    f.pwrite(b"x", 0)
    f.fsync()
    io.fsync_dir(lost / "a" / "b")
    io.fsync_dir(lost / "a")  # b's entry is durable, a's is not
    io.make_dirs(kept / "c")
    io.fsync_dir(kept)
    io.fsync_dir(tmp_path)
    io.crash("drop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "lost"]
    assert list(lost.iterdir()) == [] and [p.name for p in kept.iterdir()] == ["c"]


@pytest.mark.parametrize("mode", ["tear", "reorder"])
@pytest.mark.parametrize("seed", range(6))
def test_power_loss_keeps_a_prefix_of_the_unsynced_entries(mode: str, seed: int,
                                                           tmp_path: Path) -> None:
    io = PowerLossIO(seed)
    names = [f"f{i}" for i in range(6)]
    for name in names:
        io.open(tmp_path / name, direct=False)
    io.crash(mode)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == names[:len(left)]


def test_read_whole_reads_on_after_a_short_read(tmp_path: Path) -> None:
    """One read returns at most about 2 GiB on Linux: ``read_whole`` reads until it has
    the whole file (here every read returns at most 1000 bytes)."""

    class ShortReads(FileIO):
        def _pread(self, f, buf, offset):
            return super()._pread(f, memoryview(buf)[:1000], offset)

    data = os.urandom(10_000)
    (tmp_path / "f").write_bytes(data)
    assert ShortReads().read_whole(tmp_path / "f") == data


def test_a_failed_directory_sync_raises_sync_failed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sio.os, "fsync", failing_fsync)
    with pytest.raises(SyncFailedError, match="sync of directory"):
        FileIO().fsync_dir(tmp_path)


def test_power_loss_keeps_renamed_files_tracked(tmp_path: Path) -> None:
    io = PowerLossIO()
    f = io.open(tmp_path / "x.tmp", direct=False)
    f.pwrite(b"new", 0)
    io.rename(tmp_path / "x.tmp", tmp_path / "x")
    io.fsync_dir(tmp_path)
    f.pwrite(b"more", 3)
    io.crash("drop")
    assert (tmp_path / "x").read_bytes() == b""


def test_power_loss_a_file_published_again_after_a_failed_sync_is_durable(
        tmp_path: Path) -> None:
    """A failed sync loses the file's unsynced writes at the crash, whatever later syncs do;
    but a file published again in the same place (truncated to nothing, written, synced)
    holds what the successful sync made durable."""
    io = PowerLossIO()
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        io.publish(tmp_path / "x", b"first")
    io.publish(tmp_path / "x", b"second")
    io.crash("drop")
    assert (tmp_path / "x").read_bytes() == b"second"
    io = PowerLossIO()
    f = io.open(tmp_path / "y", direct=False)
    io.fsync_dir(tmp_path)
    f.pwrite(b"12345678", 0)
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        f.fsync()
    f.truncate(4)  # takes off the end of the lost write only
    f.fsync()
    io.crash("drop")
    assert (tmp_path / "y").read_bytes() == bytes(4)


def test_a_failed_sync_is_redone_by_the_next_open_and_then_survives_a_power_cut(
        tmp_path: Path) -> None:
    """A failed sync names its file in the directory's SYNC_FAILED file; the pages it lost
    still read back until the power cut. ``redo_failed_syncs`` copies the file as it reads
    now, holes kept, and removes the marker: after the power cut the file holds what it read
    at the redo, where without the redo it would lose the failed sync's writes."""
    io = PowerLossIO()
    f = io.open(tmp_path / "data", direct=False)
    f.pwrite(b"a" * 4096, 0)
    f.fsync()
    f.pwrite(b"b" * 4096, 0)
    f.pwrite(b"c" * 4096, 3 * sio.REDO_CHUNK)  # the chunks between stay a hole
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        f.fdatasync()
    f.close()
    marker = tmp_path / sio.SYNC_FAILED_FILE
    assert marker.read_bytes() == b"data\n"
    want = (tmp_path / "data").read_bytes()
    assert io.redo_failed_syncs(tmp_path) == 1
    assert not marker.exists() and not (tmp_path / "data.redo").exists()
    assert io.redo_failed_syncs(tmp_path) == 0
    assert (tmp_path / "data").stat().st_blocks * 512 < 2 * sio.REDO_CHUNK
    io.crash("drop")
    assert (tmp_path / "data").read_bytes() == want


def _lost_write(tmp_path: Path, data: bytes) -> tuple[PowerLossIO, sio.File]:
    """A PowerLossIO and its open file ``data`` holding ``data``, whose sync failed."""
    io = PowerLossIO()
    f = io.open(tmp_path / "data", direct=False)
    io.fsync_dir(tmp_path)
    f.pwrite(data, 0)
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        f.fsync()
    return io, f


def test_without_the_redo_a_failed_sync_loses_its_writes_at_a_power_cut(
        tmp_path: Path) -> None:
    """What the redo prevents: a later sync that succeeds does not make the lost writes
    durable (the model of Linux that the test above relies on)."""
    io, f = _lost_write(tmp_path, b"a" * 4096)
    f.fsync()
    io.crash("drop")
    assert (tmp_path / "data").read_bytes() == bytes(4096)


def test_a_power_cut_during_the_redo_leaves_it_to_the_next_open(tmp_path: Path) -> None:
    """The redo makes SYNC_FAILED durable before it copies: a power cut before its rename
    leaves the marker, and the next open's redo replaces the half-made copy."""
    io, f = _lost_write(tmp_path, b"b" * 4096)
    f.close()

    def cut(src: object, dst: object) -> None:
        io.fsync_dir(tmp_path)  # the copy's entry, committed by the file system meanwhile
        io.crash("drop")
        raise OSError(errno.EIO, "power cut")

    io.rename = cut  # type: ignore[method-assign]
    with pytest.raises(OSError, match="power cut"):
        io.redo_failed_syncs(tmp_path)
    assert (tmp_path / "data.redo").exists()
    assert PowerLossIO().redo_failed_syncs(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_a_failed_sync_names_the_file_as_renamed_and_is_raised_if_no_marker_can_be_written(
        tmp_path: Path) -> None:
    """A file renamed while open (flashlog's new WAL) is named by its new name. If the
    marker cannot be written (the failing device), the sync's own error is raised all the
    same: a SyncFailedError, which stops the writer's writes (``write_stop``)."""

    class FailingSyncs(FileIO):
        full_disk = False

        def _sync(self, f: sio.File, data_only: bool) -> None:
            raise SyncFailedError(errno.EIO, f"failed sync of {f.path.name}")

        def open(self, path: str | Path, direct: bool, create: bool = True, *,
                 read_only: bool = False) -> sio.File:
            if self.full_disk and Path(path).name == sio.SYNC_FAILED_FILE:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().open(path, direct, create, read_only=read_only)

    io = FailingSyncs()
    f = io.open(tmp_path / "wal.tmp", direct=False)
    io.rename(tmp_path / "wal.tmp", tmp_path / "wal")
    with pytest.raises(SyncFailedError):
        f.fdatasync()
    assert (tmp_path / sio.SYNC_FAILED_FILE).read_bytes() == b"wal\n"
    (tmp_path / sio.SYNC_FAILED_FILE).unlink()
    io.full_disk = True
    with pytest.raises(SyncFailedError, match="failed sync of wal"):
        f.fsync()
    assert not (tmp_path / sio.SYNC_FAILED_FILE).exists()
    f.close()


def test_a_failed_publish_names_no_file_and_the_redo_ignores_foreign_names(
        tmp_path: Path) -> None:
    """``publish`` leaves the old file in place when its sync fails, so there is nothing to
    redo. A SYNC_FAILED file's names other than plain files of the directory (a path, the
    LOCK file, a missing file) are ignored; the marker is removed all the same."""
    io = PowerLossIO()
    io.fail_syncs(1)
    with pytest.raises(SyncFailedError):
        io.publish(tmp_path / "x", b"first")
    assert not (tmp_path / sio.SYNC_FAILED_FILE).exists()
    lock = io.lock(tmp_path, "test directory")
    inode = (tmp_path / sio.LOCK_FILE).stat().st_ino
    (tmp_path / "sub").mkdir()
    (tmp_path / sio.SYNC_FAILED_FILE).write_bytes(b"../x\nLOCK\nmissing\nsub\n\n\xff\n")
    assert io.redo_failed_syncs(tmp_path) == 0
    assert (tmp_path / sio.LOCK_FILE).stat().st_ino == inode
    assert not (tmp_path / sio.SYNC_FAILED_FILE).exists()
    lock.close()


@pytest.mark.parametrize("op", ["write", "read"])
def test_a_transfer_o_direct_rejects_switches_the_file_to_buffered_io(tmp_path: Path,
                                                                      op: str) -> None:
    """A file opened with O_DIRECT whose transfer the kernel refuses (EINVAL: here an
    unaligned length) is reopened buffered, with a warning, and the transfer is done. The
    buffered descriptor keeps the number of the direct one, so a thread reading through the
    file meanwhile never uses a closed (or reused) descriptor."""
    (tmp_path / "f").write_bytes(b"xyz" * 10)
    io = FileIO()
    f = io.open(tmp_path / "f", direct=True)
    if not f.direct:
        pytest.skip("this file system refuses O_DIRECT at open")
    fd = f.fd
    with pytest.warns(RuntimeWarning, match="O_DIRECT"):
        if op == "write":
            f.pwrite(b"abc", 0)
        else:
            buf = bytearray(5)
            assert f.pread(buf, 1) == 5 and buf == b"yzxyz"
    assert not f.direct and io.direct_fallbacks == 1
    assert f.fd == fd and not fcntl.fcntl(fd, fcntl.F_GETFL) & sio._O_DIRECT
    assert not os.get_inheritable(fd)
    f.close()
    assert (tmp_path / "f").read_bytes()[:3] == (b"abc" if op == "write" else b"xyz")


@pytest.mark.parametrize("damage, error, words", [
    (lambda raw: raw[:11], BadLengthError, "too short for a superblock"),
    (lambda raw: b"SARPXXXX" + raw[8:], BadMagicError, "magic"),
    (lambda raw: raw + b"\0", BadLengthError, "header says"),
    (lambda raw: raw[:14] + bytes([raw[14] ^ 1]) + raw[15:], ChecksumError, "checksum"),
])
def test_a_damaged_superblock_raises_naming_file_and_fault(tmp_path: Path, damage, error,
                                                           words) -> None:
    """MANIFEST and odirect's HEADER and COPIES are superblocks: a damaged one is refused."""
    path = tmp_path / "MANIFEST"
    write_superblock(FileIO(), path, b"SARPTEST", b"payload!")
    assert read_superblock(FileIO(), path, b"SARPTEST") == b"payload!"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(error, match=f"MANIFEST: .*{words}"):
        read_superblock(FileIO(), path, b"SARPTEST")


@pytest.mark.parametrize("direct", [True, False])
def test_a_file_opened_read_only_takes_no_write(tmp_path: Path, direct) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    f = FileIO().open(path, direct=direct, read_only=True)
    try:
        assert f.flags == os.O_RDONLY
        with pytest.raises(OSError):
            f.pwrite(aligned_buffer(4096), 0)
    finally:
        f.close()
    assert path.read_bytes() == b"x" * 4096
