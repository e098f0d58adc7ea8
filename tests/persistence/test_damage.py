"""Damaged snapshots and journals are detected; recovery falls back or names the fault."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import numpy as np
import pytest

import sarp
from sarp import journal, snapshot
from sarp._core import routing_table as rt
from sarp._core import segment_codec
from sarp._core.hashing import xxh64
from sarp.errors import ConfigMismatchError, CorruptionError, RecoveryError
from storage_backends import open_store
from storage_backends.io import FileIO

from .old_formats import downgrade, journal_as_version, record_flags
from .refusal import assert_open_refused
from .workload import CONFIG, assert_holds, check_match, full_blocks, insert, sequence

B = CONFIG["block_size"]


def build(path, first: int, last: int, snapshots_at=(), backend: str = "wiredtiger") -> None:
    with sarp.open(path, backend=backend, snapshot_on_close=False, **CONFIG) as index:
        for i in range(first, last):
            insert(index, i)
            if i in snapshots_at:
                index.snapshot()


def assert_all_match(path, n: int) -> dict:
    with sarp.open(path, backend="wiredtiger") as index:
        assert_holds(index, n)
        return index.recovery


def newest_snapshot(path):
    return snapshot.candidates(path)[0][1]


def flip(path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x40
    path.write_bytes(bytes(raw))


#: the fault a damage names, where the test pins it
SNAPSHOT_FAULTS = {"magic": "not a snapshot", "cut-in-header": "shorter than a snapshot header"}


@pytest.mark.parametrize("damage", ["truncate", "flip-body", "flip-header", "version", "config",
                                    "table", "magic", "cut-in-header"])
def test_damaged_newest_snapshot_falls_back_to_the_previous_one(tmp_path, damage):
    path = tmp_path / "i"
    build(path, 0, 30, snapshots_at={9, 19})
    snap = newest_snapshot(path)
    raw = snap.read_bytes()
    if damage == "truncate":
        snap.write_bytes(raw[: len(raw) // 2])
    elif damage == "magic":
        flip(snap, 0)
    elif damage == "cut-in-header":  # past the fixed fields, short of the version's header
        snap.write_bytes(raw[:snapshot.HEADERS[snapshot.VERSION].size + 7])
    elif damage == "flip-body":
        flip(snap, len(raw) // 2)
    elif damage == "flip-header":
        flip(snap, 20)
    else:  # a well-formed snapshot of another version or configuration
        state = snapshot.decode(raw, snap.name)
        if damage in ("config", "table"):
            if damage == "config":
                state.config_digest ^= 1
            else:  # a checksummed hash table naming an entry that does not exist
                slots = state.table_slots.copy()
                slots[np.flatnonzero(slots != rt.EMPTY_SLOT)[0]] = len(state.entry_keys)
                state.table_slots = slots
            snap.write_bytes(snapshot.encode(state))
        else:
            body = bytearray(raw[:-8])
            struct.pack_into("<I", body, 8, snapshot.VERSION + 1)
            snap.write_bytes(bytes(body) + struct.pack("<Q", xxh64(bytes(body))))
    report = assert_all_match(path, 30)
    assert report["snapshot"] != snap.name and report["snapshot"] is not None
    assert len(report["faults"]) == 1 and snap.name in report["faults"][0]
    assert SNAPSHOT_FAULTS.get(damage, "") in report["faults"][0]


def test_after_a_fallback_the_next_snapshot_keeps_a_usable_one(tmp_path):
    """Recovery skipped the damaged snapshot 2 for snapshot 1: the next snapshot keeps
    snapshot 1 and its journals as its fallback, not the damaged file."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={3, 7})
    flip(newest_snapshot(path), 100)
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["snapshot"] == snapshot.FILES.name(1)
        insert(index, 12)
        index.snapshot()
    assert [s for s, _ in snapshot.candidates(path)] == [3, 2, 1]
    assert [seq for seq, _ in journal.files(path)] == [1, 2, 3]
    flip(newest_snapshot(path), 100)  # snapshot 3: recovery goes back to 1 again
    report = assert_all_match(path, 13)
    assert report["snapshot"] == snapshot.FILES.name(1)


def test_no_verifiable_state_fails_naming_file_and_fault(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 30, snapshots_at={9, 19})  # journal 0 is gone after the second snapshot
    for _, snap in snapshot.candidates(path):
        flip(snap, 100)
    with pytest.raises(RecoveryError, match=r"snapshot-0+2\.snap: checksum mismatch"):
        sarp.open(path, backend="wiredtiger")
    # the slow path rebuilds from the segment store, and the index serves again
    report = sarp.rebuild(path, backend="wiredtiger")
    assert report["segments"] > 0
    assert_all_match(path, 30)


def test_torn_journal_tail_is_dropped_and_earlier_records_kept(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    jpath = journal.files(path)[-1][1]
    raw = jpath.read_bytes()
    jpath.write_bytes(raw[:-5])  # the last insert's record was cut by a crash
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["torn_tail_bytes"] > 0
        # the cut record's segments are in the store: rolled forward, not lost
        assert index.recovery["rolled_forward"] > 0
        assert_holds(index, 12)


def record_ends(jpath) -> list[int]:
    """The end offset of each record of journal ``jpath``."""
    return journal.read(FileIO(), jpath, last=True).offsets[1:]


@pytest.mark.parametrize("backend", ["wiredtiger", "flashlog", "odirect"])
def test_a_journal_cut_at_a_record_boundary_loses_no_stored_segment(tmp_path, backend):
    """Records removed whole leave no torn tail; the segments they named follow the last
    journaled id in the store, so recovery registers them, and new ids come after them."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5}, backend=backend)
    jpath = journal.files(path)[-1][1]
    ends = record_ends(jpath)
    jpath.write_bytes(jpath.read_bytes()[:ends[len(ends) // 2 - 1]])
    with sarp.open(path, backend=backend) as index:
        report = index.recovery
        assert report["torn_tail_bytes"] == 0 and report["faults"] == []
        assert report["journal_records"] == len(ends) // 2
        assert report["rolled_forward"] > 0
        assert_holds(index, 12)
        insert(index, 12)
        assert check_match(index, 12) == full_blocks(12)
    with sarp.open(path, backend=backend) as index:
        assert index.recovery["rolled_forward"] == 0  # the close's snapshot holds them all
        assert_holds(index, 13)


def test_rolled_forward_segments_survive_the_next_recovery(tmp_path):
    """Segments registered by a roll-forward get a journal record: an insert acknowledged
    afterwards that relies on them (it finds them stored and writes nothing) still matches
    after the next crash, before any snapshot, though later inserts have moved the segment
    allocator past them (so no roll-forward finds them again)."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    jpath = journal.files(path)[-1][1]
    jpath.write_bytes(jpath.read_bytes()[:record_ends(jpath)[-2]])  # the last insert's record
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        assert index.recovery["rolled_forward"] > 0
        assert index.io.stats()["fdatasyncs"] == 1  # their records, before the index serves
        before = index.stats()["segments_written"]
        insert(index, 11)  # acknowledged now; its segments are already stored
        assert index.stats()["segments_written"] == before
        insert(index, 12)  # new segments, past the rolled-forward ones
    report = assert_all_match(path, 13)  # no snapshot since: the journal alone must hold them
    assert report["rolled_forward"] == 0


@pytest.mark.parametrize("cut, message", [
    ("tail", r"journal-0+1\.log starts after record 6, but the journals before it end at "
             r"record 5: the journal records between them are missing"),
    ("middle", r"journal-0+\.log holds record 5 after record 3: the journal records between "
               r"them are missing")])
def test_a_gap_in_the_journal_records_is_refused(tmp_path, cut, message):
    """Records removed whole from journal 0, read on the way to journal 1 (the newest
    snapshot is damaged): at its end, journal 1's header names the record it follows; in its
    middle, the next record's number jumps. Recovery refuses and names the gap."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    (_, j0), _ = journal.files(path)
    raw, ends = j0.read_bytes(), record_ends(j0)
    assert len(ends) == 6  # one record per insert before the snapshot
    if cut == "tail":
        j0.write_bytes(raw[:ends[-2]])
    else:  # record 4
        j0.write_bytes(raw[:ends[2]] + raw[ends[3]:])
    flip(newest_snapshot(path), 100)
    with pytest.raises(RecoveryError, match=message):
        sarp.open(path, backend="wiredtiger")
    sarp.rebuild(path, backend="wiredtiger")
    assert_all_match(path, 12)


def test_record_numbers_go_on_across_reopens_so_the_fallback_replays(tmp_path):
    """Each session ends with a snapshot and an empty journal; the next session's records
    follow the last one written before it, so when the newest snapshot is damaged, the
    previous one and every journal after it replay without a gap."""
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        for i in range(0, 8):
            insert(index, i)
    with sarp.open(path, backend="wiredtiger") as index:
        for i in range(8, 16):
            insert(index, i)
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        for i in range(16, 20):
            insert(index, i)
    numbers = [[r.record_seq for r in journal.read(FileIO(), p, last=True).records]
               for _, p in journal.files(path)]
    flat = [n for ns in numbers for n in ns]
    assert flat == list(range(flat[0], flat[0] + len(flat))) and len(numbers) == 2
    flip(newest_snapshot(path), 100)
    report = assert_all_match(path, 20)
    assert report["journal_records"] == len(flat)
    with sarp.open(path, backend="wiredtiger") as index:  # and the numbering goes on
        insert(index, 20)
        assert index.record_seq == flat[-1] + 1


def test_journal_record_naming_unstored_segments_is_skipped(tmp_path):
    """A record whose segments never reached the store (its insert was not acknowledged)
    re-registers nothing: recovery counts them and serves every stored sequence."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    seq, jpath = journal.files(path)[-1]
    records = journal.read(FileIO(), jpath, last=True).records
    last = records[-1]
    missing = [last.next_segment_id, last.next_segment_id + 1]
    w = journal.JournalWriter(FileIO(), jpath, seq, 0, index_id=0)  # an existing journal: kept
    w.append(journal.Record(last.record_seq + 1, last.next_segment_id + 2, 7,
                            missing, [4, 3]))
    w.close()
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["missing_segments"] == 2
        assert index.recovery["journal_records"] == len(records) + 1
        assert_holds(index, 12)
        insert(index, 12)  # new segments get ids past the record's, never a reused one
        assert check_match(index, 12) == full_blocks(12)
    assert_all_match(path, 13)


def test_a_segment_the_store_lost_under_a_proven_record_is_refused(tmp_path):
    """Every journal sync makes the store durable first (format 5), so a record that a later
    record shows synced names segments the store held durably. One the store lacks was lost
    after its insert was acknowledged: the open raises CorruptionError naming the record and
    the segment, and changes no file; ``sarp rebuild`` rebuilds from what the store holds."""
    path = tmp_path / "i"
    build(path, 0, 6)
    records = journal.read(FileIO(), journal.files(path)[-1][1], last=True).records
    lost = int(records[1].segment_ids[0])
    store = open_store("wiredtiger", path / "store")
    store.delete(lost)
    store.close()
    assert_open_refused(path, CorruptionError,
                        rf"record {records[1].record_seq} names segments that the store .* "
                        rf"lacks or holds shorter: {lost} \(\d+ blocks, none stored\)",
                        backend="wiredtiger")
    sarp.rebuild(path, backend="wiredtiger")
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["missing_segments"] == 0
        assert check_match(index, 5) == full_blocks(5)


def test_unproven_records_of_unstored_segments_are_written_again_without_them(tmp_path):
    """A record naming segments the store lacks, which no sync is shown to have covered,
    belongs to an insert never acknowledged. Recovery writes the newest journal again from
    that record on, each record naming the segments the store holds only (numbers kept):
    left as they were, the next sync would prove them, and the open after it would refuse
    the index."""
    path = tmp_path / "i"
    build(path, 0, 6)
    seq, jpath = journal.files(path)[-1]
    records = journal.read(FileIO(), jpath, last=True).records
    last = records[-1]
    missing = [last.next_segment_id, last.next_segment_id + 1]
    w = journal.JournalWriter(FileIO(), jpath, seq, last.record_seq, index_id=0)  # kept
    w.append(journal.Record(last.record_seq + 1, last.next_segment_id + 2, 7,
                            missing, [4, 3]))
    w.append(journal.Record(last.record_seq + 2, last.next_segment_id + 2, 0,
                            records[2].segment_ids,  # stored segments, named again
                            records[2].block_counts))
    w.close()
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["missing_segments"] == 2
        assert index.recovery["rewritten_records"] == 2
        insert(index, 6)  # a sync that proves every record before its own
    kept = journal.read(FileIO(), jpath, last=True).records
    assert [r.record_seq for r in kept] == list(range(1, len(kept) + 1))
    assert not set(missing) & {int(i) for r in kept for i in r.segment_ids}
    assert len(kept[-3].segment_ids) == 0 and kept[-3].new_blocks == 7
    assert [int(i) for i in kept[-2].segment_ids] == [int(i) for i in records[2].segment_ids]
    report = assert_all_match(path, 7)
    assert (report["missing_segments"], report["rewritten_records"]) == (0, 0)


def test_damaged_journal_record_before_valid_ones_is_refused(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 12)
    jpath = journal.files(path)[-1][1]
    flip(jpath, journal.FILE_HEADER.size + journal.RECORD_HEADER.size + 3)
    with pytest.raises(RecoveryError, match=jpath.name):
        sarp.open(path, backend="wiredtiger")


def test_sync_inserts_fsync_the_journal_and_group_waits_for_flush(tmp_path):
    with sarp.open(tmp_path / "s", backend="wiredtiger", durability="sync", **CONFIG) as index:
        before = index.io.stats()["fdatasyncs"]
        for i in range(5):
            insert(index, i)
        assert index.io.stats()["fdatasyncs"] - before == 5
    with sarp.open(tmp_path / "g", backend="wiredtiger", durability="group", **CONFIG) as index:
        before = index.io.stats()["fdatasyncs"]
        for i in range(5):
            insert(index, i)
        assert index.io.stats()["fdatasyncs"] == before
        index.flush()
        assert index.io.stats()["fdatasyncs"] == before + 1


def journal_bytes(path) -> int:
    return journal.files(path)[-1][1].stat().st_size


def test_group_commit_writes_journal_records_at_flush(tmp_path):
    """Under ``group`` the journal records of inserts wait in memory for the next flush (one
    write and one sync for all of them); a crash before it loses only unflushed inserts."""
    path = tmp_path / "g"
    with sarp.open(path, backend="wiredtiger", durability="group", snapshot_on_close=False,
                   **CONFIG) as index:
        empty = journal_bytes(path)
        for i in range(5):
            insert(index, i)
        assert journal_bytes(path) == empty
        index.flush()
        flushed = journal_bytes(path)
        assert flushed > empty
        records = journal.read(FileIO(), journal.files(path)[-1][1], last=True).records
        assert [r.record_seq for r in records] == [1, 2, 3, 4, 5]
        insert(index, 5)
        assert journal_bytes(path) == flushed
    assert assert_all_match(path, 6)["journal_records"] == 6  # close wrote the last one


def test_journal_writes_behind_once_enough_records_wait(tmp_path):
    """Records are written, unsynced, once WRITE_BEHIND bytes wait: memory stays bounded
    when a ``group`` index is never flushed. The last one appended stays queued, for the next
    sync to flag (format 7)."""
    path = tmp_path / journal.FILES.name(0)
    w = journal.JournalWriter(FileIO(), path, 0, 0, index_id=7)
    header = path.stat().st_size
    rec = journal.Record(1, 4, 3, [0, 1, 2, 3], [9] * 4)
    size = len(journal.encode_record(rec))
    per_write = -(-journal.WRITE_BEHIND // size)
    for _ in range(per_write - 1):
        w.append(rec)
    assert path.stat().st_size == header
    w.append(rec)
    assert path.stat().st_size == header + (per_write - 1) * size
    assert w.unsynced
    w.append(rec)
    w.close()
    assert path.stat().st_size == header + (per_write + 1) * size
    assert len(journal.read(FileIO(), path, last=True).records) == per_write + 1


def test_snapshot_publication_fsyncs_file_and_directory(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory", **CONFIG) as index:
        insert(index, 0)
        io = index.io.stats()
        info = index.snapshot()
        after = index.io.stats()
        assert after["fsyncs"] - io["fsyncs"] >= 2  # snapshot file, new journal
        assert after["dir_fsyncs"] - io["dir_fsyncs"] >= 2  # rename published, cleanup
        published = tmp_path / "i" / snapshot.FILES.name(info["seq"])
        assert info["bytes"] == published.stat().st_size


def test_snapshots_while_readers_and_writers_work(tmp_path):
    path = tmp_path / "i"
    stop = threading.Event()
    errors: list[BaseException] = []
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        for i in range(10):
            insert(index, i)

        def reader():
            try:
                while not stop.is_set():
                    assert_holds(index, 10)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        for i in range(10, 40):
            insert(index, i)
            if i % 5 == 0:
                index.snapshot()
        stop.set()
        t.join(60)
        assert not t.is_alive() and not errors
    report = assert_all_match(path, 40)
    assert report["snapshot"] is not None


def test_periodic_snapshots_by_inserts(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory", background=False, snapshot_every_inserts=4,
                   **CONFIG) as index:
        for i in range(13):
            insert(index, i)
        assert index.stats()["snapshots"] == 3
        assert np.all([check_match(index, i) for i in range(13)])


def test_rebuild_command(tmp_path, capsys):
    from sarp.cli import main

    path = tmp_path / "i"
    build(path, 0, 8)
    assert main(["rebuild", str(path), "--backend", "wiredtiger"]) == 0
    assert '"segments"' in capsys.readouterr().out
    assert_all_match(path, 8)
    assert main(["rebuild", str(tmp_path / "none")]) == 1
    assert "holds no SARP index" in capsys.readouterr().err


def test_a_rebuild_stopped_before_its_snapshot_leaves_the_index_openable(tmp_path,
                                                                          monkeypatch):
    """A rebuild creates its journals before it publishes its snapshot; stopped in between,
    it leaves them after the old snapshot's journals, numbered on from their records, so a
    plain open still recovers from the old files."""
    path = tmp_path / "i"
    build(path, 0, 8, snapshots_at={3})

    def stopped(*args, **kwargs):
        raise OSError("stopped")

    monkeypatch.setattr(snapshot, "write", stopped)
    with pytest.raises(OSError, match="stopped"):
        sarp.rebuild(path, backend="wiredtiger")
    monkeypatch.undo()
    assert len(journal.files(path)) > 2
    report = assert_all_match(path, 8)
    assert report["snapshot"] == snapshot.FILES.name(1)


def test_query_only_parameters_do_not_invalidate_snapshots(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 6, snapshots_at={5})
    with sarp.open(path, backend="wiredtiger", max_retrieval=0) as index:
        assert index.recovery["snapshot"] is not None and not index.recovery["faults"]
        assert_holds(index, 6)


def test_a_segment_lost_from_the_store_is_counted_never_served(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 3)
    with sarp.open(path, backend="wiredtiger") as index:
        assert_holds(index, 3)
        assert index.stats()["match_segments_missing"] == 0
        index.store.delete(0)  # the first segment of sequence 0
        m = index.match(tokens=sequence(0))
        assert m.num_blocks == 0 and m.stats["segments_missing"] == 1
        assert index.stats()["match_segments_missing"] == 1


def test_every_bit_flip_in_the_configuration_is_refused(tmp_path, capsys):
    """sarp.json carries a checksum: a flipped bit anywhere is never taken for another
    configuration (a flipped metadata byte order, block size or segment size would serve
    wrong records or miss everything), by an open or by ``sarp rebuild``."""
    from sarp.cli import main

    path = tmp_path / "i"
    build(path, 0, 2)
    cfg_file = path / "sarp.json"
    good = cfg_file.read_bytes()
    for bit in range(8 * len(good)):
        bad = bytearray(good)
        bad[bit // 8] ^= 1 << (bit % 8)
        cfg_file.write_bytes(bytes(bad))
        with pytest.raises((CorruptionError, ConfigMismatchError), match="sarp.json"):
            sarp.open(path)
    assert main(["rebuild", str(path)]) == 1
    assert "sarp.json is damaged" in capsys.readouterr().err
    cfg_file.write_bytes(good)
    assert_all_match(path, 2)


def test_a_damaged_store_kind_marker_is_corruption(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 1)
    (path / "store" / "STORE_KIND").write_bytes(b"\xffiredtiger\n")
    with pytest.raises(CorruptionError, match="STORE_KIND"):
        sarp.open(path)
    (path / "store" / "STORE_KIND").write_bytes(b"wiredtigeR\n")
    with pytest.raises(CorruptionError, match="unknown store kind 'wiredtigeR'"):
        sarp.open(path)


@pytest.mark.parametrize("damage, fault", [
    ("short", "shorter than a journal header"),
    ("version", "not a journal of format version"),
    ("count", "has a bad segment count"),
    ("huge count", "has a bad segment count"),
    ("padding", "has a bad segment count"),
    ("short record", "has a bad segment count"),
    ("next id", "not below its next segment id"),
])
def test_a_damaged_journal_is_refused_naming_file_and_fault(tmp_path, damage, fault):
    """A journal that is not one (cut inside its header, another format version) or holds a
    checksummed record whose segment count disagrees with its length, whose padding is not
    zero, or whose next segment id is not past its segments', is never replayed; nor one
    shorter than a payload header (no writer makes one: a torn write fails its checksum)."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    jpath = journal.files(path)[-1][1]
    raw = jpath.read_bytes()
    if damage == "short":
        jpath.write_bytes(raw[:journal.FILE_HEADER.size - 1])
    elif damage == "version":
        jpath.write_bytes(raw[:8] + struct.pack("<I", journal.VERSION + 1) + raw[12:])
    else:  # the first record (an odd count: 4 bytes of padding), checksum made good
        off = journal.FILE_HEADER.size
        length, _, _ = journal.RECORD_HEADER.unpack_from(raw, off)
        start = off + journal.RECORD_HEADER.size
        payload = bytearray(raw[start:start + length])
        seq, next_id, blocks, n, synced = journal.PAYLOAD_HEADER.unpack_from(payload)
        assert n % 2 == 1 and payload[-4:] == bytes(4)
        n = {"count": n + 1, "huge count": (1 << 32) - 1}.get(damage, n)
        if damage == "next id":  # the record's own first segment, not below it
            next_id = struct.unpack_from("<Q", payload, journal.PAYLOAD_HEADER.size)[0]
        journal.PAYLOAD_HEADER.pack_into(payload, 0, seq, next_id, blocks, n, synced)
        payload[-1] |= damage == "padding"
        if damage == "short record":  # shorter than a payload header, the rest left behind
            payload = payload[:journal.PAYLOAD_HEADER.size - 8]
        head = journal.RECORD_HEADER.pack(len(payload), 0, xxh64(bytes(payload)))
        jpath.write_bytes(raw[:off] + head + bytes(payload) + raw[start + length:])
    with pytest.raises(RecoveryError, match=f"{jpath.name}: .*{fault}"):
        sarp.open(path, backend="wiredtiger")


def test_a_torn_tail_in_a_journal_that_a_newer_one_follows_is_refused(tmp_path):
    """Only the newest journal can end in a torn record (the crash cut its last append); an
    older one that does has lost acknowledged inserts, so recovery names it instead."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={5})
    files = journal.files(path)
    assert [seq for seq, _ in files] == [0, 1]
    older_path = files[0][1]
    for _, snap in snapshot.candidates(path):  # no snapshot: replay journal 0, then journal 1
        snap.unlink()
    raw = older_path.read_bytes()
    older_path.write_bytes(raw[:-5])
    with pytest.raises(RecoveryError, match=f"{older_path.name}: damaged record at offset .* "
                                            "that a newer one follows"):
        sarp.open(path, backend="wiredtiger")


# Opens the index at argv[1] and matches sequence argv[2] in a subprocess, so that a WiredTiger
# abort fails the test rather than the test run; prints the CorruptionError's message (the
# open raises it when recovery reads the damaged block, else the match).
_DAMAGED_MATCH = """
import sys
import sarp
from sarp.errors import CorruptionError
from tests.persistence.workload import sequence
try:
    with sarp.open(sys.argv[1]) as index:
        index.match(tokens=sequence(int(sys.argv[2])), max_retrieval=0)
except CorruptionError as exc:
    print(exc)
"""


def tail_segment_bytes(i: int) -> bytes:
    """The stored block IDs of the new segment that sequence i's own tail starts."""
    ids = sarp.block_ids(sequence(i), B)
    s = CONFIG["segment_blocks"]
    return ids[-(len(ids) % s or s):].astype("<u8").tobytes()


def salvage_then_check(path, n: int, damaged: int, segments: int, backend: str,
                       capsys) -> None:
    """``sarp rebuild --salvage`` of a damaged index of sequences 0..n-1 (``segments`` stored
    before the damage): some segments are lost, every match returns only inserted blocks and
    records, sequence ``damaged`` no longer matches whole, some others still do, and new
    inserts match."""
    from sarp.cli import main

    capsys.readouterr()
    assert main(["rebuild", str(path), "--salvage"]) == 0
    assert '"salvage_s"' in capsys.readouterr().out
    with sarp.open(path) as index:
        assert 0 < sum(1 for _ in index.store.scan()) < segments  # the damaged ones are lost
        matched = [check_match(index, i) == full_blocks(i) for i in range(n)]
    assert not matched[damaged] and 0 < sum(matched) < n
    build(path, n, n + 2, backend=backend)  # and the index takes inserts again
    with sarp.open(path) as index:
        assert all(check_match(index, i) == full_blocks(i) for i in (n, n + 1))


def test_a_damaged_wiredtiger_store_is_corruption_then_salvaged_and_rebuilt(tmp_path, capsys):
    import subprocess
    import sys
    from pathlib import Path

    path, n, damaged = tmp_path / "i", 120, 119
    build(path, 0, n)
    with sarp.open(path, backend="wiredtiger") as index:
        segments = sum(1 for _ in index.store.scan())
    needle = tail_segment_bytes(damaged)
    table = path / "store" / "wt" / "records.wt"
    assert table.read_bytes().count(needle) == 1
    flip(table, table.read_bytes().find(needle) + 3)
    run = subprocess.run([sys.executable, "-c", _DAMAGED_MATCH, str(path), str(damaged)],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    assert "WiredTiger found damaged data" in run.stdout
    salvage_then_check(path, n, damaged, segments, "wiredtiger", capsys)


def test_a_damaged_rocksdb_store_is_corruption_then_salvaged_and_rebuilt(tmp_path, capsys):
    path, n, damaged = tmp_path / "i", 120, 119
    for first in range(0, n, 40):  # each close writes one table file: three, too few to compact
        build(path, first, first + 40, backend="rocksdb")
    with sarp.open(path) as index:
        segments = sum(1 for _ in index.store.scan())
    needle = tail_segment_bytes(damaged)
    tables = [t for t in sorted(path.rglob("*.sst")) if needle in t.read_bytes()]
    assert len(tables) == 1 and len(list(path.rglob("*.sst"))) > 1
    flip(tables[0], tables[0].read_bytes().find(needle) + 3)
    with pytest.raises(CorruptionError, match="block checksum"):  # the journal replay reads it
        with sarp.open(path) as index:
            index.match(tokens=sequence(damaged), max_retrieval=0)
    salvage_then_check(path, n, damaged, segments, "rocksdb", capsys)
    assert [t.name for t in (path / "store" / "db" / "lost").rglob("*.sst")] == [tables[0].name]


def test_a_damaged_odirect_store_is_corruption_then_salvaged_and_rebuilt(tmp_path, capsys):
    """odirect's salvage clears the copies that fail their checks; the store then serves the
    older version of a damaged record, or loses one that had no other."""
    path, n, damaged = tmp_path / "i", 120, 119
    build(path, 0, n, backend="odirect")
    with sarp.open(path) as index:
        segments = sum(1 for _ in index.store.scan())
    needle = tail_segment_bytes(damaged)  # the new segment's only version
    slots = path / "store" / "slots.dat"
    assert slots.read_bytes().count(needle) == 1
    flip(slots, slots.read_bytes().find(needle) + 3)
    with pytest.raises(CorruptionError, match="passes its checks.*sarp rebuild INDEX --salvage"):
        with sarp.open(path) as index:  # the open's store probes, or the match, read it
            index.match(tokens=sequence(damaged), max_retrieval=0)
    salvage_then_check(path, n, damaged, segments, "odirect", capsys)


def test_salvage_needs_a_store_with_a_repair_tool(tmp_path, capsys):
    from sarp.cli import main
    from sarp.errors import StoreKindError

    path = tmp_path / "i"
    with sarp.open(path, backend="flashlog", **CONFIG) as index:
        insert(index, 0)
    assert main(["rebuild", str(path), "--salvage"]) == 1
    assert "salvage needs a wiredtiger, rocksdb or odirect store" in capsys.readouterr().err
    with pytest.raises(TypeError, match="salvage must be a bool"):
        sarp.rebuild(path, salvage=1)  # type: ignore[arg-type]
    with pytest.raises(StoreKindError, match="holds a 'flashlog' store, not 'rocksdb'"):
        sarp.rebuild(path, backend="rocksdb", salvage=True)
    with sarp.open(path) as index:  # refused before anything changed
        assert check_match(index, 0) == full_blocks(0)


def store_files(path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes()
            for f in sorted((path / "store").rglob("*")) if f.is_file()}


@pytest.mark.parametrize("backend, bad, exc, word", [
    ("wiredtiger", dict(memory_budget=-1), ValueError, "memory_budget"),
    ("wiredtiger", dict(durability="fast"), ValueError, "durability"),
    ("wiredtiger", dict(block_size=8), ConfigMismatchError, "block_size"),
    ("wiredtiger", dict(store_options={"bogus": 1}), TypeError, "bogus"),
    # the values of the store's own options, and their agreement with what the store was
    # created with, are the engine's to check: before its repair too
    ("wiredtiger", dict(store_options={"leaf_page_kb": 5}), ValueError, "leaf_page_kb"),
    ("wiredtiger", dict(store_options={"checkpoint_seconds": -1}), ValueError,
     "checkpoint_seconds"),
    ("odirect", dict(store_options={"key_mode": "xx"}), ValueError, "key_mode"),
    ("odirect", dict(store_options={"key_mode": "sparse"}), ConfigMismatchError, "key_mode"),
    ("odirect", dict(store_options={"max_value_size": 4000}), ConfigMismatchError,
     "max_value_size"),
])
def test_salvage_checks_every_argument_before_it_repairs(tmp_path, backend, bad, exc, word):
    """A bad argument of ``rebuild(salvage=True)`` is refused before the engine's repair tool
    runs: the store's files are left byte for byte as they were."""
    path = tmp_path / "i"
    build(path, 0, 5, backend=backend)
    before = store_files(path)
    with pytest.raises(exc, match=word):
        sarp.rebuild(path, salvage=True, **bad)
    assert store_files(path) == before
    with sarp.open(path) as index:
        assert_holds(index, 5)


def test_an_index_whose_store_is_gone_is_refused_not_recreated(tmp_path):
    import shutil

    path = tmp_path / "i"
    build(path, 0, 5)
    shutil.rmtree(path / "store")
    for backend in (None, "rocksdb"):
        with pytest.raises(RecoveryError, match="has no store"):
            sarp.open(path, backend=backend)
    assert not (path / "store").exists()


def test_a_backend_other_than_the_stores_is_refused_by_name(tmp_path):
    from sarp.errors import StoreKindError

    path = tmp_path / "i"
    build(path, 0, 2)
    with pytest.raises(StoreKindError, match="backend='rocksdb': .* holds a 'wiredtiger' store"):
        sarp.open(path, backend="rocksdb")
    assert_all_match(path, 2)


def test_a_snapshot_number_a_crash_left_unused_keeps_the_fallback(tmp_path, monkeypatch):
    """A crash after snapshot 2's journal switch, before its file: journal 2 exists, snapshot
    2 never will. The next snapshot (3) must keep snapshot 1 and journals 1-3, so that a
    damaged snapshot 3 still falls back."""
    path = tmp_path / "i"
    build(path, 0, 4, snapshots_at={1})
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        def crash(*args, **kwargs):
            raise OSError("crash before the snapshot file")
        monkeypatch.setattr(snapshot, "write", crash)
        with pytest.raises(OSError, match="crash"):
            index.snapshot()
        monkeypatch.undo()
        for i in range(4, 8):
            insert(index, i)
    assert [s for s, _ in journal.files(path)] == [0, 1, 2]
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        assert index.snapshot()["seq"] == 3
    assert [s for s, _ in snapshot.candidates(path)] == [3, 1]
    assert [s for s, _ in journal.files(path)] == [1, 2, 3]
    flip(newest_snapshot(path), 100)
    report = assert_all_match(path, 8)
    assert report["snapshot"] == snapshot.FILES.name(1)


@pytest.mark.parametrize("left", ["journal", "journal.tmp"])
def test_a_creation_cut_short_after_its_first_journal_is_redone(tmp_path, left):
    """sarp.json is published last, after the store and journal 0: a crash before it leaves
    those (or journal 0's temporary file), which the next open takes as a creation to redo."""
    published = []

    class Recording(FileIO):
        def publish(self, path, data):
            published.append(Path(path).name)
            return super().publish(path, data)

    first = tmp_path / "first"
    with sarp.open(first, backend="wiredtiger", _io=Recording(), **CONFIG):
        pass
    assert published == [journal.FILES.name(0), "sarp.json"]
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", **CONFIG):
        pass
    (path / "sarp.json").unlink()  # as if the crash came just before it was published
    if left == "journal.tmp":
        name = journal.FILES.name(0)
        (path / name).rename(path / (name + ".tmp"))
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        insert(index, 0)
    assert_all_match(path, 1)


def test_a_creation_cut_short_is_redone(tmp_path):
    """A crash while an index was created leaves the store directory with its marker's
    temporary file, and sarp.json's: neither is a foreign file, and the next open creates."""
    path = tmp_path / "i"
    (path / "store").mkdir(parents=True)
    (path / "store" / "STORE_KIND.tmp").write_bytes(b"wiredt")
    (path / "sarp.json.tmp").write_bytes(b'{"form')
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        insert(index, 0)
    assert_all_match(path, 1)
    assert not (path / "sarp.json.tmp").exists() and (path / "sarp.json").exists()


@pytest.mark.parametrize("version, opens", [(7, True), (6, True), (5, True), (4, True),
                                             (3, True), (2, False)])
def test_damage_that_no_sync_covered_is_a_torn_tail_from_format_3_on(tmp_path, version, opens):
    """A damaged record followed by valid ones whose synced fields do not reach it was never
    synced (writes behind a group commit that the device kept out of order): formats 3 to 7
    cut the journal there, also where the record after it is flagged ``STORE_DURABLE`` (format
    7: written by close's sync, which the device may not have finished). Format 2 records
    have no synced field: damage before a valid record stays an error there."""
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", durability="group", snapshot_on_close=False,
                   **CONFIG) as index:
        insert(index, 0)
        index.flush()
        for seed in (1, 2):  # unsynced until close: their synced fields name the flush's end
            insert(index, seed)
        synced = index._journal._synced
    jpath = journal.files(path)[-1][1]
    assert journal.read(FileIO(), jpath, last=True).offsets[1] == synced
    assert record_flags(jpath) == [journal.STORE_DURABLE, 0, journal.STORE_DURABLE]
    if version < 4:
        downgrade(path, version)
    elif version < journal.VERSION:
        journal_as_version(jpath, version)
    synced = journal.read(FileIO(), jpath, last=True).offsets[1]  # in the shorter file
    raw = bytearray(jpath.read_bytes())
    raw[synced + journal.RECORD_HEADER.size] ^= 1  # the first record written after the flush
    jpath.write_bytes(bytes(raw))
    if not opens:
        with pytest.raises(RecoveryError, match=f"damaged record at offset {synced}"):
            sarp.open(path, backend="wiredtiger")
        return
    with sarp.open(path, backend="wiredtiger") as index:
        assert index.recovery["torn_tail_bytes"] == len(raw) - synced
        assert check_match(index, 0) == full_blocks(0)


@pytest.mark.parametrize("field, value, says", [
    (12, 7, "damaged header"), (16, 5, "damaged header \\(journal 5")])
def test_a_journal_header_naming_another_journal_is_refused(tmp_path, field, value, says):
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False, **CONFIG) as index:
        insert(index, 0)
    jpath = journal.files(path)[-1][1]
    raw = bytearray(jpath.read_bytes())
    struct.pack_into("<I" if field == 12 else "<Q", raw, field, value)
    jpath.write_bytes(bytes(raw))
    with pytest.raises(RecoveryError, match=f"{jpath.name}: {says}"):
        sarp.open(path, backend="wiredtiger")


def test_a_file_numbered_in_other_digits_is_not_a_journal(tmp_path):
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        insert(index, 0)
    (path / "journal-\u00b2.log").write_bytes(b"not ours")
    (path / "snapshot-\u0663.snap").write_bytes(b"not ours")
    assert_all_match(path, 1)


@pytest.mark.parametrize("swap", ["another id", "another width"])
def test_a_checksummed_segment_record_of_another_id_or_width_is_never_served(tmp_path, swap):
    """A whole, checksummed record under the wrong key (misplaced, or another index's) would
    serve another segment's blocks, or metadata rows of another width, and an extension of
    it would be written under an id the allocator hands out again: reads refuse it, as
    does a rebuild."""
    path = tmp_path / "i"
    build(path, 0, 6)
    with sarp.open(path, backend="wiredtiger") as index:
        raw, first = index.store.get_many([1, 0])
        assert raw is not None and first is not None
        if swap == "another width":
            seg = segment_codec.decode_segment(first)
            raw = segment_codec.encode_segment(0, seg.start, seg.block_ids,
                                               np.zeros((seg.block_count, 8), np.uint8), 8)
        index.store.put(0, raw)
        with pytest.raises(CorruptionError, match="segment record under key 0 names segment"):
            index.match(tokens=sequence(0), max_retrieval=0)
    with pytest.raises(CorruptionError, match="under key 0"):
        sarp.rebuild(path)


@pytest.mark.parametrize("blocks, start", [(0, 0), (65, 0), (10, 5)])
def test_a_checksummed_segment_record_no_insert_writes_is_never_served(tmp_path, blocks, start):
    """A whole, checksummed record of this index's id and width that no insert writes (no
    block, more than a window's, or a start off a window boundary: a bug's, or another
    configuration's) is refused by the match that reads it, and by the roll-forward of an
    open that finds it past the last journaled segment, instead of being placed: that open
    changes none of the index's files."""
    path = tmp_path / "i"
    build(path, 0, 6)
    with sarp.open(path, backend="wiredtiger") as index:
        width = index.segments.meta_width
        nxt = index.segments.next_id

        def bogus(sid):
            return segment_codec.encode_segment(sid, start, np.arange(1, blocks + 1,
                                                                       dtype=np.uint64),
                                                np.zeros((blocks, width), np.uint8), width)
        good = index.store.get(0)
        assert good is not None
        index.store.put(0, bogus(0))
        with pytest.raises(CorruptionError, match=f"under key 0 holds {blocks} blocks from "
                                                  f"block {start}"):
            index.match(tokens=sequence(0), max_retrieval=0)
        index.store.put(0, good)
        index.store.put(nxt, bogus(nxt))
    assert_open_refused(path, CorruptionError, f"under key {nxt} holds {blocks} blocks",
                        backend="wiredtiger")


def test_an_open_index_serves_after_its_snapshot_file_is_overwritten(tmp_path):
    """Recovery reads the snapshot into a buffer of the index's own: a copy over the file
    while the index is open (a restore from a backup) cannot reach the posting lists it
    adopted (a mapping of the file would fault its reader)."""
    path = tmp_path / "i"
    build(path, 0, 12, snapshots_at={11})
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        assert index.recovery["snapshot"] == newest_snapshot(path).name
        newest_snapshot(path).write_bytes(b"")
        assert_holds(index, 12)
