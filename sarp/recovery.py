"""Recovery (paper Section 5): newest valid snapshot, then the journals after it, then serve.

Damage is detected, never trusted: a snapshot that fails its checks is skipped for the one
before it (its journals replayed on top); the store must still hold the newest writes the
snapshot names (``check_probes``), and none of the segments it names may be among those the
store's open found absent after a crash (``check_absent``); journal records must be numbered
without a gap; when no verified state can be reached the error names every file and fault.
Segments stored past the last journaled id are then registered and journaled
(``roll_forward``). ``rebuild`` is the slow path: a full scan of the segment store.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sarp import journal, snapshot
from sarp._core import routing_table as rt
from sarp.errors import CorruptionError, RecoveryError
from sarp.routing import Build, Events

if TYPE_CHECKING:
    from sarp.index import Index


def recover(index: Index) -> dict[str, Any]:
    """Restore ``index``'s routing directory from its files; returns the recovery report."""
    t0 = time.perf_counter()
    root, io = index.path, index.io
    report: dict[str, Any] = dict(snapshot=None, snapshot_load_s=0.0, deserialize_s=0.0,
                                  rebuild_s=0.0, journal_replay_s=0.0, bytes_read=0,
                                  journal_records=0, missing_segments=0, short_segments=0,
                                  rewritten_records=0, torn_tail_bytes=0, rolled_forward=0,
                                  redone_builds=0, probed_segments=0, faults=[])
    loaded = None
    for seq, path in snapshot.candidates(root):
        index.unusable_snapshots.add(seq)  # unless it loads (below)
        try:
            got = snapshot.load(io, path, index.store.direct_io)
        except CorruptionError as exc:
            report["faults"].append(str(exc))
            continue
        if got.state.config_digest != index.config_digest:
            report["faults"].append(f"{path.name}: written with another configuration")
            continue
        if got.state.index_id != index.index_id:
            report["faults"].append(f"{path.name}: a snapshot of another index (index id "
                                    f"{got.state.index_id:016x}, this index "
                                    f"{index.index_id:016x})")
            continue
        s = got.state
        if s.seq != seq:  # renamed or copied by hand: its journals are not the ones it names
            report["faults"].append(f"{path.name}: holds snapshot {s.seq}")
            continue
        t1 = time.perf_counter()
        try:
            table = rt.RoutingTable.from_arrays(s.entry_keys, s.entry_flags, s.list_lengths,
                                                s.ref_segments, s.ref_filters, s.table_slots)
        except ValueError as exc:  # passed its checksum, yet not a table we wrote
            report["faults"].append(f"{path.name}: {exc}")
            continue
        index.unusable_snapshots.discard(seq)
        loaded = got
        index.directory.table = table
        index.segments.advance_past(s.next_segment_id - 1)
        index.counters["indexed_blocks"] = s.indexed_blocks
        report.update(snapshot=path.name, snapshot_load_s=got.load_s,
                      deserialize_s=got.deserialize_s, bytes_read=got.bytes_read,
                      rebuild_s=time.perf_counter() - t1)
        break
    base = 0 if loaded is None else loaded.state.seq
    if loaded is not None:
        check_probes(index, loaded, report)
        check_absent(index, loaded)

    t2 = time.perf_counter()
    chain = [(seq, p) for seq, p in journal.files(root) if seq >= base]
    if not chain or chain[0][0] != base or [q for q, _ in chain] != list(
            range(base, base + len(chain))):
        faults = "; ".join(report["faults"]) or "none"
        raise RecoveryError(f"index at {str(root)!r}: no verified snapshot with its journals "
                            f"(journals found from {base}: {[q for q, _ in chain]}; "
                            f"faults: {faults}); run `sarp rebuild`")
    last_seq = 0
    replays = [journal.read(io, path, last=i == len(chain) - 1, index_id=index.index_id)
               for i, (_, path) in enumerate(chain)]
    for i, ((_, path), replay) in enumerate(zip(chain, replays, strict=True)):
        report["bytes_read"] += replay.bytes_read
        report["torn_tail_bytes"] += replay.torn_tail
        if i and replay.after_record != last_seq:
            raise RecoveryError(
                f"index at {str(root)!r}: {path.name} starts after record "
                f"{replay.after_record}, but the journals before it end at record {last_seq}: "
                "the journal records between them are missing; run `sarp rebuild`")
        last_seq = replay.after_record
        for rec in replay.records:
            if rec.record_seq != last_seq + 1:
                raise RecoveryError(
                    f"index at {str(root)!r}: {path.name} holds record {rec.record_seq} after "
                    f"record {last_seq}: the journal records between them are missing; run "
                    "`sarp rebuild`")
            last_seq = rec.record_seq
        newest = i == len(chain) - 1
        # a journal that the next one says was synced whole before it began: all proven
        proven = replay.proven if newest or not replays[i + 1].previous_synced \
            else len(replay.records)
        _replay_journal(index, path, replay, proven, newest, report)
    index.record_seq = last_seq  # numbering goes on from there, also after empty journals
    redo_pending(index, report)
    report["journal_replay_s"] = time.perf_counter() - t2
    index.epoch = chain[-1][0]
    report["total_s"] = time.perf_counter() - t0
    return report


#: how a refusal for segments the store lost ends: what it means, and the remedy
LOST_INSERTS = ("the store lost acknowledged inserts; `sarp rebuild` rebuilds the index from the "
                "segments it holds")


def lost_text(lost: list[tuple[int, int, Any]]) -> str:
    """``lost`` (segment id, block count written, the segment as stored or None) as text:
    each id with both counts."""
    return ", ".join(f"{sid} ({n} blocks, {'none' if seg is None else seg.block_count} stored)"
                     for sid, n, seg in lost)


def check_probes(index: Index, loaded: snapshot.Loaded, report: dict[str, Any]) -> None:
    """Check that the store holds the newest segment writes the snapshot names, each at least
    as long as it was; they were made durable before the snapshot was published.

    After a crash a store takes the end of what it finds for a torn tail, so damage that cut
    or spoiled its newest writes (a flashlog WAL cut short or deleted, an odirect slot file
    cut short, a damaged newest copy) would otherwise pass as one and lose acknowledged
    inserts without an error (docs/durability.md, "Damage after a crash"). A probe the store
    lacks, or holds shorter, raises ``CorruptionError`` and nothing is changed; the probes
    read become the newest writes the next snapshot names."""
    probes = loaded.state.probes
    if not len(probes):
        return
    ids = probes[:, 0].tolist()
    held = index.segments.read_many(ids)
    lost = [(sid, n, seg) for (sid, n), seg in zip(probes.tolist(), held, strict=True)
            if seg is None or seg.block_count < n]
    if lost:
        raise CorruptionError(
            f"{loaded.path.name}: the store at {str(index.store.path)!r} lacks segments the "
            f"snapshot names as written and made durable before it: {lost_text(lost)}; "
            + LOST_INSERTS)
    index.segments.note_stored(seg for seg in held if seg is not None)
    report["probed_segments"] = len(ids)


def check_absent(index: Index, loaded: snapshot.Loaded) -> None:
    """Check that no segment the snapshot's routing directory names is among the keys the
    store's open scanned after a crash and found holding no record
    (``RecordStore.absent_after_crash``): each was stored before it was placed, and made
    durable before the snapshot was written, so none can be a write the crash cut off.

    The probes cover only the newest writes; this covers every segment in the part of the
    store the open scanned (for odirect, the regions written since its last checkpoint), at
    the cost of a membership test of the snapshot's posting lists in memory. A segment found
    absent there raises ``CorruptionError`` and no file of the index is changed
    (``sarp.open`` then abandons the store, so that its next open lists the segment again):
    a match would otherwise count it missing and serve the prefix before it, losing
    acknowledged inserts without an error."""
    absent = index.store.absent_after_crash()
    if not len(absent):
        return
    named = loaded.state.ref_segments
    lost = np.unique(named[np.isin(named, absent)])  # numpy takes a lookup table if it is small
    if len(lost):
        shown = ", ".join(map(str, lost[:8].tolist())) + (", ..." if len(lost) > 8 else "")
        raise CorruptionError(
            f"{loaded.path.name}: the store at {str(index.store.path)!r} holds no record of "
            f"{len(lost)} of the segments the snapshot's routing directory names (ids "
            f"{shown}), all made durable before it: " + LOST_INSERTS)


def _replay_journal(index: Index, path: Path, replay: journal.Replay, proven: int,
                    newest: bool, report: dict[str, Any]) -> None:
    """Re-register the segments that the records of one journal name.

    A segment the store lacks, or holds with fewer blocks than its record names (formats 6
    and 7; segments only grow), was stored after the last sync that the journal proves, by an
    insert never acknowledged; it is counted in ``missing_segments`` or ``short_segments``.
    Under one of the first ``proven`` records (format 5 on: each sync makes the store durable
    first), or at or before a record flagged as written after a sync of the store (format 7:
    ``replay.flagged``), the store lost it: ``CorruptionError``, and nothing is changed. In
    the newest journal, the records from the first that names such a segment on are written
    again, at once, each naming only the segments the store holds, at most at the length it
    holds (their numbers, allocator ids and new block counts kept): left as they were, the
    next sync would prove them.
    """
    rewritten: list[journal.Record] = []
    for k, rec in enumerate(replay.records):
        index.segments.advance_past(rec.next_segment_id - 1)
        index.counters["indexed_blocks"] += rec.new_blocks
        ids = rec.segment_ids
        counts = [0] * len(ids) if rec.block_counts is None else rec.block_counts
        found = index.segments.read_many(ids)
        lost = [(sid, n, seg) for sid, n, seg in zip(ids, counts, found, strict=True)
                if seg is None or seg.block_count < n]
        if lost and k < max(proven, replay.flagged):
            why = ("a sync covered the record after its segments were made durable"
                   if k < proven else f"record {replay.records[replay.flagged - 1].record_seq} "
                   "was written after a sync of the store that followed this record's writes")
            raise CorruptionError(
                f"{path.name}: record {rec.record_seq} names segments that the store at "
                f"{str(index.store.path)!r} lacks or holds shorter: {lost_text(lost)}, though "
                f"{why}: " + LOST_INSERTS)
        stored = [seg for seg in found if seg is not None]
        missing = len(ids) - len(stored)
        report["journal_records"] += 1
        report["missing_segments"] += missing
        report["short_segments"] += len(lost) - missing  # the others held, but shorter
        if newest and (rewritten or lost):
            rewritten.append(journal.Record(
                rec.record_seq, rec.next_segment_id, rec.new_blocks,
                [seg.segment_id for seg in stored],
                [min(n, seg.block_count) for n, seg in zip(counts, found, strict=True)
                 if seg is not None]))
        index.segments.note_stored(stored)
        for seg in stored:
            index._run_inline(index.directory.place(seg.segment_id, seg.block_ids))
    if rewritten:
        journal.rewrite(index.io, path, replay.offsets[len(replay.records) - len(rewritten)],
                        rewritten, replay.version)
        report["rewritten_records"] = len(rewritten)


def roll_forward(index: Index, report: dict[str, Any]) -> None:
    """Register the segments stored under the ids that follow the last one journaled, each
    with a journal record of its own. Then the store is made durable, in every mode (an
    earlier session, in another mode or killed, may have left writes unsynced), and the
    journal synced, before the index serves: that sync proves its records.

    An insert stores its segments before it appends their journal record, so a crash in
    between leaves them stored, unjournaled and unacknowledged; a journal cut at a record
    boundary loses records with no torn tail to show for it. Either way the segments are
    whole and checksummed (a damaged one raises ``CorruptionError``), so they are placed
    rather than lost, and their ids are never allocated again. The record matters: an insert
    acknowledged later may rely on them without writing them, and once later inserts move
    the allocator past them only a record brings them back at the next recovery. Their blocks
    count in ``indexed_blocks`` as stored blocks, as in ``rebuild``. This finds the new
    segments of lost records up to the first id the store lacks. An extension lost with its
    record keeps the segment's earlier placement: matches may stop short of the appended
    blocks, and never return an unverified one.

    Runs once the journal writer is open (``Index._start``), after ``recover``."""
    t0 = time.perf_counter()
    segs = index.segments
    while (seg := segs.read(segs.next_id)) is not None:
        segs.advance_past(seg.segment_id)
        segs.note_stored([seg])
        index._journal_append([seg], seg.block_count)
        index._run_inline(index.directory.place(seg.segment_id, seg.block_ids))
        report["rolled_forward"] += 1
    if index.store.durability == "sync":  # in the other modes the journal's sync does it
        index.store.flush(durable=True)
    index._journal.sync()  # an existing file's first: it syncs even with nothing appended
    report["journal_replay_s"] += time.perf_counter() - t0


def redo_pending(index: Index, report: dict[str, Any]) -> None:
    """Finish the back-fills and rematerializations that were in flight, then publish what
    they built: until then those entries stayed private, so nothing unverified was served."""
    d = index.directory
    t = d.table
    for e in np.flatnonzero(t.entry_flags() & rt.REFINING).tolist():
        d.backfills.setdefault(e, Build("refine", e))
        index._run_inline(Events(refine=[e]))
        report["redone_builds"] += 1
    for e in np.flatnonzero(t.entry_flags() & rt.REMAT).tolist():
        index._run_inline(Events(remat=[e]))
        report["redone_builds"] += 1
    hidden = np.flatnonzero((t.entry_flags() & rt.VISIBLE) == 0)
    t.make_visible(hidden.astype(np.int64))


def rebuild(index: Index) -> dict[str, Any]:
    """Re-register every stored segment in id order (no snapshot or journal is read).

    ``indexed_blocks`` becomes the stored block count: unlike the count inserts keep, it
    includes the copies of shared prefixes that diverging inserts wrote, which a scan cannot
    tell from the blocks they copy without matching every segment."""
    t0 = time.perf_counter()
    blocks = 0
    for seg in index.segments.scan():
        index.segments.advance_past(seg.segment_id)
        index.segments.note_stored([seg])
        index._run_inline(index.directory.place(seg.segment_id, seg.block_ids))
        blocks += seg.block_count
    index.counters["indexed_blocks"] = blocks
    return {"rebuild_s": time.perf_counter() - t0, "segments": index.segments.next_id,
            "blocks": blocks}
