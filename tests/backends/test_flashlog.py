"""flashlog specifics: DRAM per key, reads of one block, compaction, recovery from headers."""

from __future__ import annotations

import errno
import os
import random
import stat
from pathlib import Path
from typing import Any

import pytest

from sarp.errors import (
    ConfigMismatchError,
    CorruptionError,
    StoreError,
    SyncFailedError,
    WritesStoppedError,
)
from storage_backends import open_store
from storage_backends.flashlog import FlashLogStore
from storage_backends.flashlog_log import BATCH_END, MAX_PAGE_KEYS, PUT, REC, PageLog
from storage_backends.io import FileIO
from storage_backends.power_loss import PowerLossIO

from .conftest import open_flashlog

VALUE = 1576  # a full SARP segment record


def _load(s: FlashLogStore, n: int, rng: random.Random) -> dict[int, bytes]:
    values = {rng.getrandbits(64): rng.randbytes(VALUE) for _ in range(n)}
    items = list(values.items())
    for i in range(0, n, 1000):
        s.put_many(items[i:i + 1000])
    return values


def test_dram_under_4_bytes_per_key_and_one_block_per_get(tmp_path: Path) -> None:
    io = FileIO()
    with open_flashlog(tmp_path / "s", io=io) as s:
        values = _load(s, 20_000, random.Random(1))
        st = s.stats()
        assert st["log_records"] > 15_000
        assert st["dram_bytes_per_key"] < 4
        keys = random.Random(2).sample(sorted(values), 500)
        before = io.stats()
        assert s.get_many(keys) == [values[k] for k in keys]
        after = io.stats()
        reads = after["reads"] - before["reads"]
        assert reads <= 1.1 * len(keys)
        assert after["bytes_read"] - before["bytes_read"] <= reads * 2 * 4096


def test_tombstone_shadows_older_pages(tmp_path: Path) -> None:
    with open_flashlog(tmp_path / "s") as s:
        values = _load(s, 3000, random.Random(3))
        k = next(iter(values))
        s.delete(k)
        _load(s, 3000, random.Random(4))  # pushes the tombstone into a page
        assert s.get(k) is None
        s.put(k, b"back")
        assert s.get(k) == b"back"


def test_compaction_bounds_the_log(tmp_path: Path) -> None:
    rng = random.Random(5)
    keys = list(range(2000))
    with open_flashlog(tmp_path / "s") as s:
        for _ in range(8):
            s.put_many((k, rng.randbytes(VALUE)) for k in keys)
        last = {k: rng.randbytes(VALUE) for k in keys}
        s.put_many(last.items())
        st = s.stats()
        assert st["compactions"] >= 1
        live = len(keys) * (VALUE + 13)
        assert st["log_record_bytes"] <= 2 * live + 4 * st["page_target_bytes"]
    with open_flashlog(tmp_path / "s") as s:
        assert dict(s.scan()) == last
        assert len(list((tmp_path / "s").glob("log.*"))) == 1


def test_recovery_reads_headers_not_records(tmp_path: Path) -> None:
    path = tmp_path / "s"
    # pages of 64 blocks: the buffered records (read back from the WAL) stay a small part
    with open_flashlog(path, memory_budget=2 << 20) as s:
        values = _load(s, 5000, random.Random(6))
        pages = s.stats()["pages"]
    io = FileIO()
    with open_flashlog(path, io=io, memory_budget=2 << 20) as s:
        st = io.stats()
        assert st["reads"] <= pages + 8
        assert st["bytes_read"] < 0.2 * len(values) * VALUE
        k = next(iter(values))
        assert s.get(k) == values[k]


def test_instances_are_fixed_at_creation(tmp_path: Path) -> None:
    open_flashlog(tmp_path / "s", instances=8).close()
    with pytest.raises(ConfigMismatchError):
        open_flashlog(tmp_path / "s", instances=16)
    with open_flashlog(tmp_path / "s", instances=None) as s:
        assert s.stats()["instances"] == 8


@pytest.mark.parametrize("budget, instances", [
    (64 << 20, 64), (2 << 20, 64), (1 << 20, 32), (100_000, 3), (28_000, 1), (1, 1)])
def test_a_small_budget_makes_fewer_instances(tmp_path: Path, budget: int,
                                              instances: int) -> None:
    """Each instance keeps a page buffer of at least 4 blocks: a new store has as many as half
    its budget holds (64 at most, one at least), so that its buffers keep to the budget."""
    with open_flashlog(tmp_path / "s", instances=None, memory_budget=budget) as s:
        assert s.stats()["instances"] == instances
        _load(s, 300, random.Random(1))
        assert max(s._buffered) * s.stats()["instances"] <= max(budget // 2, 4 * 4096)
    with open_flashlog(tmp_path / "s", instances=None, memory_budget=64 << 20) as s:
        assert s.stats()["instances"] == instances  # fixed at creation


class _FullDisk(FileIO):
    """Fails the first write of MANIFEST once armed (a full disk); ``keep`` names files whose
    unlink does nothing (as if it failed)."""

    armed = False
    keep: tuple[str, ...] = ()
    failed: list[str]

    def _pwrite(self, f, buf, offset):
        if self.armed and f.path.name == "MANIFEST.tmp":
            self.armed = False
            self.failed.append("MANIFEST")
            raise OSError(errno.ENOSPC, "No space left on device")
        super()._pwrite(f, buf, offset)

    def unlink(self, p):
        if Path(p).name not in self.keep:
            super().unlink(p)


@pytest.mark.parametrize("fail_at", ["copy", "manifest"])
def test_a_failed_compaction_removes_its_new_log_and_loses_nothing(
        fail_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction that fails before MANIFEST names its new log (the disk is full while live
    records are copied, or while MANIFEST is written) raises from the put that triggered it,
    removes that log, keeps every record (that put's included), and the next compaction
    succeeds."""
    path = tmp_path / "s"
    real_append = PageLog.append
    io = _FullDisk()
    io.failed = []

    def append(log: PageLog, inst: int, recs: list) -> None:
        if log.number > 1 and not io.failed:  # the first compaction's new log (log.2)
            io.failed.append("copy")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(log, inst, recs)

    if fail_at == "copy":
        monkeypatch.setattr(PageLog, "append", append)
    rng = random.Random(7)
    keys = list(range(2000))
    last: dict[int, bytes] = {}
    with open_flashlog(path, io=io) as s:
        io.armed = fail_at == "manifest"
        with pytest.raises(OSError, match="No space left"):
            for _ in range(8):
                last = {k: rng.randbytes(VALUE) for k in keys}
                s.put_many(last.items())
        assert io.failed == [fail_at.upper() if fail_at == "manifest" else fail_at]
        assert not (path / "log.2").exists()
        assert s.stats()["compactions"] == 0
        assert dict(s.scan()) == last  # the put that raised was applied whole
        for _ in range(8):
            last = {k: rng.randbytes(VALUE) for k in keys}
            s.put_many(last.items())
        assert s.stats()["compactions"] >= 1
    with open_flashlog(path) as s:
        assert dict(s.scan()) == last
        assert len(list(path.glob("log.*"))) == 1


def test_a_compaction_log_left_behind_is_started_empty(tmp_path: Path) -> None:
    """A failed compaction whose log could not be removed either leaves it under the next
    log number. The next compaction starts that file empty, so none of its pages is left past
    the new end: one that starts at a page boundary there would pass its checks at open (same
    log number, same seeds) and be read as the newest version of its keys."""
    path = tmp_path / "s"
    io = _FullDisk()
    io.failed, io.keep = [], ("log.2",)
    # sync: a compaction leaves out the records that buffered writes replace (every one is in
    # a synced WAL block), so the next one writes fewer pages than the one that failed
    with open_flashlog(path, io=io, instances=1, memory_budget=1 << 20, durability="sync") as s:
        size = s.stats()["page_target_bytes"] - 13  # one record fills one page
        value = [bytes([v]) * size for v in range(256)]
        last = {k: value[k] for k in range(10)}
        s.put_many(last.items())
        io.armed = True
        with pytest.raises(OSError, match="No space left"):
            for v in range(10, 256):  # until the compaction that fails
                last[v % 10] = value[v]
                s.put(v % 10, value[v])
        assert (path / "log.2").exists()
        left = (path / "log.2").stat().st_size
        for k in range(5, 10):
            s.delete(k)
            del last[k]
        v = 200
        while s.stats()["compactions"] == 0:  # the next compaction writes log.2 again
            last[v % 5] = value[v]
            s.put(v % 5, value[v])
            v += 1
        assert (path / "log.2").stat().st_size < left
    with open_flashlog(path, instances=1, memory_budget=1 << 20) as s:
        assert dict(s.scan()) == last


@pytest.mark.parametrize("rename_survives", [True, False])
@pytest.mark.parametrize("failure", ["fsync", "open"])
def test_a_compaction_whose_manifest_directory_sync_fails_stops_writes(
        rename_survives: bool, failure: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """MANIFEST is renamed, then the fsync of its directory fails (the fsync itself, or
    opening the directory: too many open files): whether it names the new log after a power
    cut is unknown. Writes stop, both logs stay, and the next open serves every acknowledged
    record whichever MANIFEST the device kept."""

    class DirSyncFails(FileIO):
        armed = False
        fail_next = False

        def rename(self, src, dst):
            super().rename(src, dst)
            self.fail_next = self.armed and Path(dst).name == "MANIFEST"

    real_fsync, real_open = os.fsync, os.open

    def fsync(fd: int) -> None:
        if io.fail_next and stat.S_ISDIR(os.fstat(fd).st_mode):
            io.armed = io.fail_next = False
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    def open_dir(p, flags, *args):
        if io.fail_next and Path(p).is_dir():
            io.armed = io.fail_next = False
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(p, flags, *args)

    if failure == "fsync":
        monkeypatch.setattr(os, "fsync", fsync)
    else:
        monkeypatch.setattr(os, "open", open_dir)
    path = tmp_path / "s"
    io = DirSyncFails()
    rng = random.Random(9)
    keys = list(range(2000))
    acked: dict[int, bytes] = {}
    s = open_store("flashlog", path, durability="sync", memory_budget=4 << 20, instances=4,
                   io=io)
    before = (path / "MANIFEST").read_bytes()
    io.armed = True
    with pytest.raises(SyncFailedError):
        for _ in range(8):
            batch = {k: rng.randbytes(VALUE) for k in keys}
            s.put_many(batch.items())
            acked = batch
    with pytest.raises(WritesStoppedError):
        s.put(1, b"x")
    assert s.stats()["writes_stopped"]
    s.close()
    assert sorted(p.name for p in path.glob("log.*")) == ["log.1", "log.2"]
    if not rename_survives:
        (path / "MANIFEST").write_bytes(before)
    with open_flashlog(path) as s:
        got = dict(s.scan())
        assert sorted(got) == keys
        assert all(got[k] in (acked[k], batch[k]) for k in keys)
        assert len(list(path.glob("log.*"))) == 1


@pytest.mark.parametrize("seed", range(4))
def test_wal_blocks_written_behind_and_lost_out_of_order_are_a_torn_tail(
        tmp_path: Path, seed: int) -> None:
    """Under ``group`` the WAL writes 64 KiB of stream out, unsynced, between flushes. A power
    cut during the next flush can keep that flush's write and lose an earlier one: a damaged
    block before valid ones, none of them synced. The store opens with every acknowledged
    record instead of reporting corruption."""

    class CutAtWalSync(PowerLossIO):
        armed = False

        def _sync(self, f, data_only):
            if self.armed and f.path.name.startswith("wal."):
                self.crash("reorder")
                raise OSError(errno.EIO, "power cut (simulated)")
            return super()._sync(f, data_only)

    io = CutAtWalSync(seed)
    path = tmp_path / "s"
    s = open_store("flashlog", path, durability="group", memory_budget=64 << 20, instances=4,
                   io=io)
    rng = random.Random(seed)
    acked = {k: rng.randbytes(VALUE) for k in range(40)}
    s.put_many(list(acked.items()))
    s.flush()
    for k in range(40, 400):  # several spills of the WAL, then a tail for the flush
        s.put(k, rng.randbytes(VALUE))
    io.armed = True
    with pytest.raises(OSError, match="power cut"):
        s.flush()
    with open_store("flashlog", path, durability="group", memory_budget=64 << 20) as again:
        assert {k: again.get(k) for k in acked} == acked


def test_a_wal_of_version_1_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store last written by the version before (WAL blocks without the synced field)
    opens with its records, the ones still only in the WAL included."""
    from storage_backends import flashlog_wal

    rng = random.Random(3)
    with monkeypatch.context() as m:
        m.setattr(flashlog_wal, "WAL_VERSION", 1)
        with open_flashlog(tmp_path / "s") as s:
            values = _load(s, 50, rng)
            s.put(1, b"last")  # stays in a page buffer: the WAL alone holds it
            values[1] = b"last"
            assert s.stats()["instances"] == 4
        wal, = (tmp_path / "s").glob("wal.*")
        assert wal.read_bytes()[4] == 1  # the version byte
    with open_flashlog(tmp_path / "s") as s:
        assert {k: s.get(k) for k in values} == values


@pytest.mark.parametrize("byte", range(8, 16))
def test_a_damaged_wal_number_is_corruption(byte: int, tmp_path: Path) -> None:
    """The WAL number in the header (bytes 8-15) picks the seed its checksum is checked with;
    a damaged one, however large, is a bad header (not an overflow of the 64-bit seed)."""
    path = tmp_path / "s"
    with open_flashlog(path) as s:
        _load(s, 50, random.Random(10))
    (wal,) = path.glob("wal.*")
    data = bytearray(wal.read_bytes())
    data[byte] ^= 1
    wal.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match=f"{wal.name}: bad WAL header"):
        open_flashlog(path)


def test_a_store_without_its_wal_is_corruption(tmp_path: Path) -> None:
    """MANIFEST is written after the first WAL, so a store with MANIFEST and no WAL is damaged."""
    path = tmp_path / "s"
    with open_flashlog(path) as s:
        _load(s, 50, random.Random(11))
    for wal in path.glob("wal.*"):
        wal.unlink()
    with pytest.raises(CorruptionError, match="MANIFEST but no WAL"):
        open_flashlog(path)


def test_a_wal_under_another_number_is_corruption(tmp_path: Path) -> None:
    """A WAL's header names its number: a WAL copied or renamed over another number is refused
    (its blocks would be checked with the other number's seeds)."""
    path = tmp_path / "s"
    with open_flashlog(path) as s:
        _load(s, 50, random.Random(12))
    (newest,) = sorted(path.glob("wal.*"))[-1:]
    newest.rename(path / f"wal.{int(newest.name[4:]) + 5}")
    with pytest.raises(CorruptionError, match="its header names wal"):
        open_flashlog(path)


@pytest.mark.parametrize("payload, fault", [
    (b"x", "payload of 1 bytes"), ((0, 4096, 1, 0, 0, 0), "0 instances"),
    ((1 << 16 | 1, 4096, 1, 0, 0, 0), "65537 instances"), ((4, 1000, 1, 0, 0, 0), "1000-byte"),
    ((4, 2048, 1, 0, 0, 0), "2048-byte"),
    ((1, 4096, 1 << 24, 0, 1, 0), "log 16777216"), ((1, 4096, 1, 0, 1 << 24, 0), "WAL 16777216")])
def test_a_checksummed_manifest_of_bad_fields_is_corruption(
        tmp_path: Path, payload: bytes | tuple[int, ...], fault: str) -> None:
    """MANIFEST passes its checksum but its payload has another length, an instance count or
    block size no store is created with, or a log or WAL number no writer gives: damage (a
    file made that way), raised by name instead of a struct, division or overflow error, or
    of a fault found later in the files it would misread."""
    from storage_backends.flashlog import _MANIFEST, MANIFEST_MAGIC
    from storage_backends.superblock import write_superblock

    path = tmp_path / "s"
    with open_flashlog(path) as s:
        _load(s, 20, random.Random(13))
    body = payload if isinstance(payload, bytes) else _MANIFEST.pack(*payload)
    write_superblock(FileIO(), path / "MANIFEST", MANIFEST_MAGIC, body)
    with pytest.raises(CorruptionError, match=fault):
        open_flashlog(path)


@pytest.mark.parametrize("fault", ["stream length", "record type"])
def test_a_checksummed_wal_block_that_breaks_its_format_is_corruption(fault: str,
                                                                      tmp_path: Path) -> None:
    """A WAL block that passes its checksum but claims more stream bytes than a block holds,
    or carries a record type no writer gives, raises CorruptionError at open: replayed, its
    bytes would be taken for records (an unknown type for a put)."""
    from storage_backends.blockframe import seal
    from storage_backends.flashlog_wal import _BLOCK_HEAD, _seed

    path = tmp_path / "s"
    with open_flashlog(path) as s:
        _load(s, 20, random.Random(14))  # buffered at the close: the new WAL's first blocks
        B = s._block
    (wal,) = sorted(path.glob("wal.*"))[-1:]
    data = bytearray(wal.read_bytes())
    head = _BLOCK_HEAD[2]
    used, synced = head.unpack_from(data, B)
    assert used > 0
    if fault == "stream length":
        head.pack_into(data, B, B, synced)
        expect = "says it holds"
    else:
        data[B + head.size] = 9  # the type of the stream's first record
        expect = "a record of type 9"
    seal(data, B, B, _seed(int(wal.name[4:]), 1))
    wal.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match=f"{wal.name}: .*{expect}"):
        open_flashlog(path)


@pytest.mark.parametrize("state", ["closed", "records in the WAL only", "empty, closed"])
def test_a_store_without_its_manifest_is_corruption(state: str, tmp_path: Path) -> None:
    """A directory holding a store's log or WAL files but no MANIFEST is not taken for a new
    store (whose instance count may differ, routing keys to the wrong pages)."""

    path = tmp_path / "s"
    io = PowerLossIO()
    s = open_store("flashlog", path, durability="sync", memory_budget=64 << 20, instances=4,
                   io=io)
    if state != "empty, closed":
        s.put_many((k, bytes([k]) * 100) for k in range(20))  # stays in page buffers
    if state == "records in the WAL only":
        io.crash("drop")
        assert (path / "log.1").stat().st_size == 0
    else:
        s.close()
    (path / "MANIFEST").unlink()
    with pytest.raises(CorruptionError, match="no MANIFEST, but .*wal"):
        open_flashlog(path, instances=8)


@pytest.mark.parametrize("entries_synced", [False, True])
@pytest.mark.parametrize("cut_at", ["wal.1.tmp", "MANIFEST.tmp"])
def test_a_creation_cut_short_is_started_again(cut_at: str, entries_synced: bool,
                                               tmp_path: Path) -> None:
    """Creation writes an empty log.1, then wal.1, then MANIFEST: a power cut before MANIFEST
    leaves a directory that the next open creates a store in, as it was asked to, whether
    the file system had committed the new files' entries (log.1 is there) or not."""

    class CutAt(PowerLossIO):
        def open(self, p, direct, create=True, *, read_only=False):
            if Path(p).name == cut_at:
                if entries_synced:
                    self.fsync_dir(Path(p).parent)
                self.crash("drop")
                raise OSError(errno.EIO, "power cut (simulated)")
            return super().open(p, direct, create, read_only=read_only)

    path = tmp_path / "s"
    with pytest.raises(OSError, match="power cut"):
        open_flashlog(path, io=CutAt())
    assert not (path / "MANIFEST").exists()
    # wal.1 is published (its directory synced) before MANIFEST.tmp is opened
    assert (path / "log.1").exists() == (entries_synced or cut_at == "MANIFEST.tmp")
    with open_flashlog(path, instances=8) as s:
        assert s.stats()["instances"] == 8
        s.put(1, b"x")
    with open_flashlog(path, instances=None) as s:
        assert s.get(1) == b"x"


WAL_LIMIT, LOG_LIMIT = 1 << 24, 1 << 23  # the numbers' limits (docs/flashlog_format.txt)


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name != "LOCK"}


def _refused(s: FlashLogStore, what: str, limit: int, acked: dict[int, bytes]) -> None:
    """Every write raises StoreError naming the used-up numbers and their limit, and writes
    nothing: the store holds ``acked`` after it. A flush still works."""
    before = _files(s.path)
    key = next(iter(acked))
    for write in (lambda: s.put(key, b"refused"), lambda: s.delete(key)):
        with pytest.raises(StoreError, match=f"no more writes: its {what} numbers are used up "
                                             f"\\(they stay below {limit}\\).*new store"):
            write()
    s.flush(durable=True)
    assert _files(s.path) == before
    assert dict(s.scan()) == acked


@pytest.mark.parametrize("last_wal_by", ["rotation", "close"])
def test_a_store_out_of_wal_numbers_refuses_writes_and_keeps_its_records(
        last_wal_by: str, tmp_path: Path) -> None:
    """WAL numbers stay below 2^24, their checksum seeds' limit: a store whose WAL has the last
    number (started by a write's rotation, or by a close) refuses every write before writing
    anything, and keeps every acknowledged record through any number of reopens."""
    path = tmp_path / "s"
    with open_flashlog(path) as s:
        acked = _load(s, 300, random.Random(14))
        assert s._wal is not None
        s._wal.header.number = WAL_LIMIT - 2  # as after 16 million rotations
        if last_wal_by == "rotation":
            s._wal_limit = 0  # the next write rotates the WAL
            s.put(1, b"rotated")
            acked[1] = b"rotated"
            assert (path / f"wal.{WAL_LIMIT - 1}").exists()
            _refused(s, "WAL", WAL_LIMIT, acked)
    for _ in range(2):
        with open_flashlog(path) as s:
            assert [p.name for p in path.glob("wal.*")] == [f"wal.{WAL_LIMIT - 1}"]
            _refused(s, "WAL", WAL_LIMIT, acked)


def test_a_store_out_of_log_numbers_refuses_writes_and_keeps_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Log numbers stay below 2^23, so that no log block's seed is a WAL block's: once a
    compaction has taken the last one, every write is refused before it writes anything, and
    every acknowledged record is kept."""
    from storage_backends import flashlog

    monkeypatch.setattr(flashlog, "COMPACT_FLOOR", 0)
    path = tmp_path / "s"
    rng = random.Random(15)
    with open_flashlog(path, instances=1, memory_budget=1) as s:  # pages of 4 blocks
        s._log.number = LOG_LIMIT - 2  # as after 8 million compactions (log still empty)
        acked: dict[int, bytes] = {}
        for _ in range(10):  # rewrites: garbage, until the compaction to the last log number
            batch = {k: rng.randbytes(VALUE) for k in range(20)}
            s.put_many(batch.items())
            acked.update(batch)
            if s.stats()["compactions"]:
                break
        assert [p.name for p in path.glob("log.*")] == [f"log.{LOG_LIMIT - 1}"]
        _refused(s, "log", LOG_LIMIT, acked)
    with open_flashlog(path, instances=1, memory_budget=1) as s:
        _refused(s, "log", LOG_LIMIT, acked)


@pytest.mark.parametrize("durability", ["group", "none"])
@pytest.mark.parametrize("cut", ["directory sync", "power"])
def test_a_compaction_cut_short_keeps_the_records_that_buffered_writes_replace(
        durability: str, cut: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record in the log, durable after a clean close, is overwritten by a write still in
    the buffer (group, none: in no durable WAL block yet) when a compaction starts. The
    compaction is cut short after MANIFEST names the new log: its directory sync fails, or
    the power fails before the new WAL exists. The reopened store serves the old record or
    the new one, never neither: the new log holds the old record too."""
    from storage_backends import flashlog

    class CutBeforeNewWal(PowerLossIO):
        armed = False

        def open(self, path, direct, create=True, *, read_only=False):
            if self.armed and Path(path).name.startswith("wal.") and str(path).endswith(".tmp"):
                self.armed = False
                self.crash("drop")
            return super().open(path, direct, create, read_only=read_only)

    monkeypatch.setattr(flashlog, "COMPACT_FLOOR", 0)
    path = tmp_path / "s"
    io = CutBeforeNewWal()
    options: dict[str, Any] = dict(durability=durability, memory_budget=1 << 15, instances=1)
    old, new = b"v1" * 50, b"v2" * 50
    with open_store("flashlog", path, io=io, **options) as s:
        s.put(7, old)
        s.put(1, b"f" * 8000)
        s.put(2, b"g" * 9000)  # the page fills: key 7 is written to the log
    s = open_store("flashlog", path, io=io, **options)
    if cut == "directory sync":
        io.fail_dir_syncs(1)  # the sync after MANIFEST's rename
        error = "simulated failed sync of directory"
    else:
        io.armed = True
        error = "simulated power loss"  # every later call of the store's files raises it
    with pytest.raises(OSError, match=error):
        s.put_many([(7, new), (1, b"F" * 16000)])  # garbage enough for a compaction
    assert s.stats()["compactions"] == 0  # cut short
    if cut == "directory sync":
        s.close()  # writes stopped: it closes without writing
    else:
        with pytest.raises(OSError, match=error):
            s.close()
    with open_store("flashlog", path, **options) as again:
        assert again.get(7) in (old, new)


class _FailingWrite(PowerLossIO):
    """Once armed by ``fail``, fails one write of a file whose name starts with ``prefix`` (a
    full disk): the one after ``skip`` others, once it has written its first ``keep`` bytes."""

    prefix = ""
    skip = keep = 0

    def fail(self, prefix: str, skip: int = 0, keep: int = 0) -> None:
        self.prefix, self.skip, self.keep = prefix, skip, keep

    def _pwrite(self, f, buf, offset):
        if self.prefix and f.path.name.startswith(self.prefix):
            if not self.skip:
                self.prefix = ""
                if self.keep:
                    super()._pwrite(f, memoryview(buf)[:self.keep], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
            self.skip -= 1
        super()._pwrite(f, buf, offset)


@pytest.mark.parametrize("durability", ["sync", "group", "none"])
@pytest.mark.parametrize("failing", ["first page", "second page", "WAL"])
@pytest.mark.parametrize("end", ["close", "power cut"])
def test_a_put_many_whose_write_fails_leaves_the_store_as_it_was(
        durability: str, failing: str, end: str, tmp_path: Path) -> None:
    """A put_many whose page write fails part-way through (a full disk: after it wrote a page
    of the batch, or before), or whose WAL write fails, raises and leaves the store as it was:
    no get or scan serves any of the batch, and no later batch, close or power cut makes any
    of it durable."""
    path = tmp_path / "s"
    io = _FailingWrite()
    options: dict[str, Any] = dict(durability=durability, instances=1, memory_budget=1 << 20)
    rng = random.Random(21)
    s = open_flashlog(path, io=io, **options)
    acked = _load(s, 500, rng)  # a page of ~330 records, the rest buffered
    # new keys first: a page of them that came back would show (the WAL replays the others)
    batch = {rng.getrandbits(64): rng.randbytes(VALUE) for _ in range(700)}
    batch.update((k, rng.randbytes(VALUE)) for k in list(acked)[:300])
    counts = ("pages", "log_records", "log_bytes", "buffered_records", "garbage_bytes_estimate")
    before = {c: s.stats()[c] for c in counts}
    io.fail("wal." if failing == "WAL" else "log.", skip=int(failing == "second page"))
    with pytest.raises(OSError, match="No space left"):
        s.put_many(batch.items())
    assert {c: s.stats()[c] for c in counts} == before
    assert s.get_many(batch) == [acked.get(k) for k in batch]
    assert dict(s.scan()) == acked
    s.put(1, b"after")
    acked[1] = b"after"
    if end == "close":
        s.close()
    else:  # the cut keeps every unsynced write but the newest
        s.flush(durable=True)
        io.crash("tear")
        with pytest.raises(OSError, match="simulated power loss"):
            s.close()
    with open_flashlog(path, **options) as s:
        assert dict(s.scan()) == acked


def test_blocks_a_failed_wal_write_left_are_not_read_after_a_shorter_one(
        tmp_path: Path) -> None:
    """A WAL write that fails part-way (a full disk) can leave some of its blocks in the file.
    Its batch is undone, and the next commit, shorter, writes over the first of them only: the
    others must not be read at the next open as the rest of the WAL's stream. Here the value of
    the failed batch holds, where the second of them begins, a whole batch putting a key that
    nothing wrote."""
    path = tmp_path / "s"
    io = _FailingWrite()
    s = open_flashlog(path, io=io, durability="sync")
    assert s._wal is not None
    cap = s._wal.cap  # stream bytes per WAL block; the batch starts a block
    forged = REC.pack(PUT, 666, 4) + b"evil" + REC.pack(BATCH_END, 0, 0)
    value = bytearray(3 * cap)
    value[cap - REC.size:cap - REC.size + len(forged)] = forged
    io.fail("wal.", keep=2 * s._block)
    with pytest.raises(OSError, match="No space left"):
        s.put(1, bytes(value))
    s.put(2, b"after")
    io.crash()  # no close: the next open reads this WAL
    with pytest.raises(OSError, match="simulated power loss"):
        s.close()
    with open_flashlog(path) as s:
        assert dict(s.scan()) == {2: b"after"}


@pytest.mark.parametrize("failing", ["log.", "wal."])
def test_a_delete_whose_write_fails_leaves_the_key(failing: str, tmp_path: Path) -> None:
    """A delete whose tombstone fills its page, and the page write fails (a full disk), or
    whose WAL write fails (after that page was written), raises and leaves the key's value:
    served, and kept through later writes, a close and a reopen."""
    path = tmp_path / "s"
    io = _FailingWrite()
    options: dict[str, Any] = dict(durability="sync", instances=1, memory_budget=1 << 20)
    acked = {k: bytes([k % 256]) for k in range(2 * MAX_PAGE_KEYS - 1)}
    with open_flashlog(path, io=io, **options) as s:
        s.put_many(acked.items())  # a page of MAX_PAGE_KEYS keys; a buffer one key short
        io.fail(failing)
        with pytest.raises(OSError, match="No space left"):
            s.delete(0)
        assert s.get(0) == acked[0]
        s.delete(1)
        del acked[1]
        assert dict(s.scan()) == acked
    with open_flashlog(path, **options) as s:
        assert dict(s.scan()) == acked


def test_a_batch_that_cannot_be_cut_from_the_log_stops_writes(tmp_path: Path) -> None:
    """A put_many whose page write fails, and whose log cannot be synced once cut back: what
    the device holds past the log's end is unknown, so the call raises SyncFailedError and
    writes stop. Reads serve the store as it was, and the reopened store holds every
    acknowledged record and, of the failed batch, at most whole records."""
    path = tmp_path / "s"
    io = _FailingWrite()
    options: dict[str, Any] = dict(durability="sync", instances=1, memory_budget=1 << 20)
    rng = random.Random(22)
    s = open_flashlog(path, io=io, **options)
    acked = _load(s, 500, rng)
    batch = {rng.getrandbits(64): rng.randbytes(VALUE) for _ in range(1000)}
    io.fail("log.", skip=1)  # after a page of the batch was written
    io.fail_syncs(1)  # the sync of the log once cut back
    with pytest.raises(SyncFailedError, match="could not be cut"):
        s.put_many(batch.items())
    assert s.stats()["writes_stopped"]
    with pytest.raises(WritesStoppedError):
        s.put(1, b"refused")
    assert dict(s.scan()) == acked
    s.close()
    with open_flashlog(path, **options) as s:
        got = dict(s.scan())
    assert {k: got.get(k) for k in acked} == acked
    assert all(got[k] == batch[k] for k in got.keys() - acked.keys())
