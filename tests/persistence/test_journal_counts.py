"""Journal records name each segment's block count (format 6): a segment that the store holds
shorter than a synced record names (an older version served in place of a lost extension) is
refused at open; one shorter than a record no sync covered is an extension never
acknowledged, and its record is written again at the length the store holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp import journal
from sarp.errors import CorruptionError
from storage_backends import open_store
from storage_backends.io import FileIO

from .old_formats import journal_as_version
from .refusal import assert_open_refused
from .workload import CONFIG

S = CONFIG["segment_blocks"]
OPTS: dict[str, Any] = dict(backend="wiredtiger", durability="group", snapshot_on_close=False)


def ids(n: int, base: int = 1) -> np.ndarray:
    """n chained-looking block IDs of one sequence: a new sequence for each ``base``."""
    return np.arange(base << 32, (base << 32) + n, dtype=np.uint64)


def extended(path: Path, prove: bool) -> tuple[int, bytes, journal.Record]:
    """An index whose segment 0 holds S // 2 blocks, then is extended to S, with the raw
    record of its first version; ``prove``: a later insert and flush show the extension's
    record synced; otherwise it is written behind, unflagged, as a crash may leave it, and
    no sync is shown to have covered it. Returns (segment id, first raw record, the
    extension's journal record)."""
    with sarp.open(path, **OPTS, **CONFIG) as index:
        index.insert(block_ids=ids(S // 2))
        index.flush()
        first = index.store.get(0)
        assert first is not None
        index.insert(block_ids=ids(S))  # an extension: segment 0 is written again, longer
        if prove:
            index.flush()
            index.insert(block_ids=ids(S, base=2))
            index.flush()
        else:
            index._journal._write_pending()
    records = journal.read(FileIO(), journal.files(path)[-1][1], last=True).records
    ext = next(r for r in records if r.segment_ids == [0] and counts(r) == [S])
    return 0, first, ext


def counts(record: journal.Record) -> list[int]:
    """The block counts ``record`` names (format 6)."""
    assert record.block_counts is not None
    return record.block_counts


def put_back(path: Path, sid: int, raw: bytes) -> None:
    """Put ``raw`` under ``sid`` in the index's store (an older version served in its place)."""
    store = open_store("wiredtiger", path / "store")
    store.put(sid, raw)
    store.close()


def test_records_name_the_block_count_of_each_segment_they_write(tmp_path):
    path = tmp_path / "i"
    sid, first, ext = extended(path, prove=False)
    records = journal.read(FileIO(), journal.files(path)[-1][1], last=True).records
    assert [counts(r) for r in records[:2]] == [[S // 2], [S]]
    assert ext.record_seq == records[1].record_seq


def test_a_segment_held_shorter_than_a_proven_record_names_is_refused(tmp_path):
    """The store serves the extension's older version (damage after a crash, a store restored
    from an older copy): the open raises CorruptionError naming the record, the segment and
    both block counts, and changes no file; ``sarp rebuild`` rebuilds from what is held."""
    path = tmp_path / "i"
    sid, first, ext = extended(path, prove=True)
    put_back(path, sid, first)
    assert_open_refused(path, CorruptionError,
                        rf"record {ext.record_seq} names segments that the store .* lacks or "
                        rf"holds shorter: {sid} \({S} blocks, {S // 2} stored\)", **OPTS)
    sarp.rebuild(path, backend="wiredtiger")
    with sarp.open(path, **OPTS) as index:
        assert index.match(block_ids=ids(S)).num_blocks == S // 2


def test_a_segment_held_shorter_than_an_unproven_record_names_is_written_again(tmp_path):
    """No sync is shown to have covered the extension's record: its insert may not have been
    acknowledged, so the older version is the index's. Recovery counts the segment in
    ``short_segments`` and writes the record again at the length held, so that the next sync
    proves the length held, and the open after it takes the index."""
    path = tmp_path / "i"
    sid, first, ext = extended(path, prove=False)
    put_back(path, sid, first)
    with sarp.open(path, **OPTS) as index:
        r = index.recovery
        assert (r["short_segments"], r["missing_segments"], r["rewritten_records"]) == (1, 0, 1)
        assert index.match(block_ids=ids(S)).num_blocks == S // 2
        index.insert(block_ids=ids(S, base=3))
        index.flush()
    kept = journal.read(FileIO(), journal.files(path)[-1][1], last=True).records
    again = next(r for r in kept if r.record_seq == ext.record_seq)
    assert again.segment_ids == [sid] and counts(again) == [S // 2]
    assert again.new_blocks == ext.new_blocks
    with sarp.open(path, **OPTS) as index:
        assert index.recovery["short_segments"] == 0
        assert index.match(block_ids=ids(S)).num_blocks == S // 2


@pytest.mark.parametrize("version", [5, 4])
def test_a_journal_of_an_earlier_format_takes_records_in_its_own(tmp_path, version):
    """An index appends to its newest journal in that file's format: records of format 5 or
    4 without block counts, which recovery reads (and cannot check the length of)."""
    path = tmp_path / "i"
    sid, first, ext = extended(path, prove=True)
    jpath = journal.files(path)[-1][1]
    journal_as_version(jpath, version)
    with sarp.open(path, **OPTS) as index:
        assert index.recovery["journal_records"] == 3
        index.insert(block_ids=ids(S, base=4))
        index.flush()
    assert journal.version_of(FileIO(), jpath) == version
    records = journal.read(FileIO(), jpath, last=True).records
    assert len(records) == 4 and all(r.block_counts is None for r in records)
    put_back(path, sid, first)  # without counts, nothing tells the older version apart
    with sarp.open(path, **OPTS) as index:
        assert index.recovery["short_segments"] == 0
        assert index.match(block_ids=ids(S)).num_blocks == S // 2
        assert index.match(block_ids=ids(S, base=4)).num_blocks == S


def test_a_record_whose_counts_disagree_with_its_ids_is_not_written(tmp_path):
    rec = journal.Record(1, 2, 3, [0, 1], [4])
    with pytest.raises(ValueError, match="one count per segment id"):
        journal.encode_record(rec)
    assert len(journal.encode_record(rec, version=5)) == journal.RECORD_HEADER.size + \
        journal.PAYLOAD_HEADER.size + 16


@pytest.mark.parametrize("count", [1, 2, 3])
def test_format_6_records_end_on_8_bytes_and_read_back(tmp_path, count):
    path = tmp_path / journal.FILES.name(0)
    w = journal.JournalWriter(FileIO(), path, 0, 0, index_id=7)
    recs = [journal.Record(k + 1, 10 + k, k, list(range(k, k + count)),
                           list(range(5, 5 + count))) for k in range(3)]
    for r in recs:
        w.append(r)
    w.close()
    got = journal.read(FileIO(), path, last=True)
    assert all(off % 8 == 0 for off in got.offsets)
    assert [(r.segment_ids, r.block_counts) for r in got.records] == [
        (r.segment_ids, r.block_counts) for r in recs]
