"""What a journal record proves (format 5): a record that a sync is shown to have covered names
segments the store held durably, so recovery refuses a store that lacks one. These tests
check that every path that lets recovery take a record as proven really made its segments
durable first, and that the cut and relog of unproven records keeps what the store holds."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp import journal, recovery, snapshot
from sarp._core.hashing import xxh64
from sarp.errors import CorruptionError
from storage_backends import open_store
from storage_backends.io import FileIO
from storage_backends.power_loss import PowerLossIO

from .old_formats import journal_as_version, record_flags
from .power import killed, open_through, snapshot_cut_by_power
from .refusal import assert_open_refused
from .workload import CONFIG, assert_holds, check_match, full_blocks, insert

ODIRECT: dict[str, Any] = dict(backend="odirect", direct_io=False)


def test_a_rebuild_stopped_before_its_snapshot_leaves_an_index_that_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A power cut left the newest journal with a record no sync covered, naming a segment
    the store lost (an insert never acknowledged). A rebuild publishes a new journal after it
    without syncing it, and stops before its snapshot (a full disk): the files must still
    recover (docs/journal_format.txt), and the unproven record's segment is counted
    missing, not taken as lost by the store."""
    path = tmp_path / "i"
    with sarp.open(path, snapshot_on_close=False, **ODIRECT, **CONFIG) as index:
        for i in range(6):
            insert(index, i)
    seq, jpath = journal.files(path)[-1]
    last = journal.read(FileIO(), jpath, last=True).records[-1]
    writer = journal.JournalWriter(FileIO(), jpath, seq, last.record_seq, index_id=0)
    writer.append(journal.Record(last.record_seq + 1, last.next_segment_id + 1, 3,
                                 [last.next_segment_id], [3]))
    writer.close()  # a reopened writer's records name no sync: unproven

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(snapshot, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        sarp.rebuild(path, **ODIRECT)
    monkeypatch.undo()
    with sarp.open(path, snapshot_on_close=False, **ODIRECT) as index:
        assert index.recovery["missing_segments"] == 1
        assert_holds(index, 6)


@pytest.mark.parametrize("then", ["insert", "snapshot"])
def test_a_reopen_under_sync_makes_the_segments_of_a_killed_session_durable(
        tmp_path: Path, then: str) -> None:
    """A ``group`` session is killed with inserts it never flushed: their segments are in
    the store, not durable, and roll-forward journals them at the reopen. Reopened under
    ``sync``, the index serves them once its journal sync has proven them, "the store
    first" (docs/index_format.txt, Recovery step 5); the store must then be durable. An
    insert that finds them stored writes nothing and is acknowledged; a snapshot switches
    to a new journal, which proves the old one whole. After a power cut the acknowledged
    insert must be there, and the index must open."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = sarp.open(path, durability="group", store_options={"io": io}, _io=io,
                      snapshot_on_close=False, **ODIRECT, **CONFIG)
    for i in range(5):
        insert(index, i)
    index.flush()
    for i in range(5, 8):
        insert(index, i)  # not flushed: not acknowledged
    killed(index)
    again = sarp.open(path, durability="sync", store_options={"io": io}, _io=io,
                      snapshot_on_close=False, **ODIRECT)
    assert again.recovery["rolled_forward"] > 0
    if then == "insert":
        insert(again, 6)  # acknowledged: durable under sync
        io.crash("drop")
    else:
        snapshot_cut_by_power(again, io)
    with sarp.open(path, **ODIRECT) as index:
        assert_holds(index, 5)
        if then == "insert":
            assert check_match(index, 6) == full_blocks(6)


def test_a_crash_before_the_relog_is_written_leaves_no_stored_id_to_allocate_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery cuts the newest journal before an unproven record naming a segment the store
    lacks, durably, and appends the records from it on again only once the journal is open.
    A crash in between loses the records of segments the store holds past the lost one:
    roll-forward stops at the lost id, and the allocator would hand out theirs again (before
    the cut, their records kept the allocator past them)."""
    path = tmp_path / "i"
    index = sarp.open(path, durability="group", snapshot_on_close=False, **ODIRECT, **CONFIG)
    for i in range(3):
        insert(index, i)
    index.flush()
    lost = index.segments.next_id
    for i in range(3, 6):
        insert(index, i)  # not flushed; their records written behind
    index._journal._write_pending()
    killed(index)
    with open_store("odirect", path / "store", direct_io=False, dense_keys=True) as store:
        store.delete(lost)  # the power cut lost it, and kept the later ones
        stored = [k for k, _ in store.scan()]
    assert max(stored) > lost

    def crash(*args: object) -> None:
        raise KeyboardInterrupt("crash")

    monkeypatch.setattr(recovery, "roll_forward", crash)
    with pytest.raises(KeyboardInterrupt):
        sarp.open(path, snapshot_on_close=False, **ODIRECT)
    monkeypatch.undo()
    with sarp.open(path, snapshot_on_close=False, **ODIRECT) as index:
        assert index.segments.next_id > max(stored)


def flushed_then_lost(path: Path) -> tuple[Path, journal.Record]:
    """An index whose last three inserts were acknowledged by one flush, no record after
    them; then its store loses a segment that the middle one wrote. Returns the journal and
    that record."""
    with sarp.open(path, backend="wiredtiger", durability="group", snapshot_on_close=False,
                   **CONFIG) as index:
        for i in range(3):
            insert(index, i)
        index.flush()
        for i in range(3, 6):
            insert(index, i)
        index.flush()
    jpath = journal.files(path)[-1][1]
    rec = journal.read(FileIO(), jpath, last=True).records[4]
    with open_store("wiredtiger", path / "store") as store:
        store.delete(int(rec.segment_ids[0]))
    return jpath, rec


def test_the_last_record_of_a_sync_proves_the_segments_of_the_records_up_to_it(
        tmp_path: Path) -> None:
    """Each journal sync makes the store durable, then writes its records, the last one
    flagged ``STORE_DURABLE`` (format 7). No later record shows the last sync of a session,
    but its flagged record, read back whole, proves that the store held the segments of every
    record up to it: a segment lost there is refused (CorruptionError, no file changed). A
    format-6 journal of the same records has no flag: the lost segment passes for an
    unacknowledged insert's, counted missing, and its acknowledged prefix is served short."""
    path = tmp_path / "i"
    jpath, rec = flushed_then_lost(path)
    assert record_flags(jpath) == [0, 0, journal.STORE_DURABLE] * 2
    replay = journal.read(FileIO(), jpath, last=True)
    assert (replay.proven, replay.flagged) == (3, 6)
    assert_open_refused(path, CorruptionError,
                        rf"record {rec.record_seq} names segments .* though record "
                        rf"{rec.record_seq + 1} was written after a sync of the store",
                        backend="wiredtiger")
    journal_as_version(jpath, 6)
    assert journal.read(FileIO(), jpath, last=True).flagged == 0
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        assert index.recovery["missing_segments"] == 1
        assert check_match(index, 4) < full_blocks(4)


def test_a_sync_writes_its_records_only_once_the_store_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the flag claims rests on order: at a journal sync the store's durable flush
    returns before the queued records, the last one flagged, are written, and the journal's
    fdatasync follows them."""
    events: list[tuple[str, dict[str, Any]]] = []  # (call, its keyword arguments)
    with sarp.open(tmp_path / "i", backend="wiredtiger", durability="group",
                   snapshot_on_close=False, **CONFIG) as index:
        for i in range(3):
            insert(index, i)
        jfile = index._journal._file

        def logged(call: Any, event: str) -> Any:
            def run(*args: Any, **kwargs: Any) -> Any:
                result = call(*args, **kwargs)
                events.append((event, kwargs))
                return result
            return run

        for obj, name, event in [(index.store, "flush", "store flush"),
                                 (jfile, "pwrite", "journal write"),
                                 (jfile, "fdatasync", "journal sync")]:
            monkeypatch.setattr(obj, name, logged(getattr(obj, name), event))
        index.flush()
        monkeypatch.undo()
    assert events == [("store flush", {"durable": True}), ("journal write", {}),
                      ("journal sync", {})]
    assert record_flags(jfile.path) == [0, 0, journal.STORE_DURABLE]


@pytest.mark.parametrize("flags", [journal.STORE_DURABLE, 2])
def test_a_record_flag_that_damage_set_fails_the_checksum(tmp_path: Path, flags: int) -> None:
    """The checksum of a record is seeded with its flags: damage that sets the flag of an
    unflagged record fails it, and so does an unknown flag with a matching checksum. Either
    is a damaged record, cut as a torn tail where no sync is shown to have covered it."""
    path = tmp_path / "i"
    jpath, _ = flushed_then_lost(path)
    raw = bytearray(jpath.read_bytes())
    off = journal.read(FileIO(), jpath, last=True).offsets[3]
    length = journal.RECORD_HEADER.unpack_from(raw, off)[0]
    start = off + journal.RECORD_HEADER.size
    digest = xxh64(bytes(raw[start:start + length]), flags) if flags != journal.STORE_DURABLE else \
        journal.RECORD_HEADER.unpack_from(raw, off)[2]
    journal.RECORD_HEADER.pack_into(raw, off, length, flags, digest)
    jpath.write_bytes(bytes(raw))
    got = journal.read(FileIO(), jpath, last=True)
    assert len(got.records) == 3 and got.torn_tail == len(raw) - off


def test_a_format_6_journal_takes_records_without_flags(tmp_path: Path) -> None:
    """An index appends to a format-6 journal in format 6: no flags, which a build that
    reads only format 6 would take for damage."""
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False, **CONFIG) as index:
        insert(index, 0)
    jpath = journal.files(path)[-1][1]
    journal_as_version(jpath, 6)
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        insert(index, 1)
        index.flush()
        insert(index, 2)
    assert journal.version_of(FileIO(), jpath) == 6
    assert record_flags(jpath) == [0, 0, 0]
    with sarp.open(path, backend="wiredtiger") as index:
        assert_holds(index, 3)


def test_damage_to_the_last_flushed_writes_of_a_flash_log_is_refused(tmp_path: Path) -> None:
    """A flashlog index under ``none`` flushes (its WAL synced, then the journal's records
    written, the last one flagged) and takes one more insert, unacknowledged; a power cut,
    then random bytes over the WAL's bytes that the flush wrote. The flash log takes them for
    a torn tail, as no later write shows them synced; the journal's flagged record proves its
    segments durable, so the open refuses instead of serving the acknowledged inserts short."""
    io = PowerLossIO(0)
    path = tmp_path / "i"
    index = open_through(io, path, "flashlog", durability="none", **CONFIG)
    for i in range(3):
        insert(index, i)
    index.flush()
    (wal,) = (path / "store").glob("wal.*")  # rotated only at open and close
    before = wal.stat().st_size
    for i in range(3, 6):
        insert(index, i)
    index.flush()
    end = wal.stat().st_size
    insert(index, 6)  # not acknowledged
    io.crash("drop")
    assert wal.stat().st_size == end > before
    raw = bytearray(wal.read_bytes())
    raw[before:end] = np.random.default_rng(0).integers(0, 256, end - before, np.uint8).tobytes()
    wal.write_bytes(bytes(raw))
    assert_open_refused(path, CorruptionError, "was written after a sync of the store",
                        backend="flashlog", direct_io=False, snapshot_on_close=False)
