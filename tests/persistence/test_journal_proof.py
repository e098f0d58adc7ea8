"""What a journal record proves (format 5): a record that a sync is shown to have covered names
segments the store held durably, so recovery refuses a store that lacks one. These tests
check that every path that lets recovery take a record as proven really made its segments
durable first, and that the cut and relog of unproven records keeps what the store holds."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

import sarp
from sarp import journal, recovery, snapshot
from storage_backends import open_store
from storage_backends.io import FileIO, PowerLossIO

from .power import killed, snapshot_cut_by_power
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
