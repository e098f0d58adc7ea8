"""Each mechanism on its own: refinement, the registration bound, pruning, rematerialization."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

import sarp
from sarp._core import routing_table as rt
from sarp._core.filters import filters_at
from sarp.config import config_from_kwargs
from sarp.errors import CorruptionError
from sarp.routing import FIXED, Build, Events, RoutingDirectory

from .helpers import SMALL, metadata_for, shared_prefix_workload

# 8-block segments, two base points (offsets 0 and 4), midpoints at 2 and 6, last block 7.
BASE: dict[str, Any] = dict(block_size=1, segment_blocks=8, routing_points=2, filter_fields=4,
                            field_bits=16, stride=1)


def divergent(shared: int, i: int, length: int = 8) -> np.ndarray:
    """Token sequence i: ``shared`` common tokens, then tokens unique to i."""
    return np.concatenate((np.arange(shared), 1000 + 100 * i + np.arange(length - shared)))


def entry_of(index, key) -> int:
    return index.directory.table.find(int(key))


def members(index, key) -> set[int]:
    e = entry_of(index, key)
    return set() if e < 0 else set(index.directory.table.refs(e)[0].tolist())


def test_refinement_fires_above_tau_and_not_at_tau(tmp_path):
    tau = 5
    with sarp.open(tmp_path / "i", backend="memory", background=False, pruning=False, tau=tau,
                   **BASE) as index:
        seqs = [divergent(1, i) for i in range(tau + 1)]
        for s in seqs[:tau]:
            index.insert(tokens=s)
        p0 = entry_of(index, sarp.block_ids(seqs[0], 1)[0])
        assert index.directory.table.list_len(p0) == tau
        assert not index.directory.table.flags(p0) & (rt.REFINED | rt.REFINING)
        mids = [sarp.block_ids(s, 1)[2] for s in seqs]
        assert all(entry_of(index, m) < 0 for m in mids)

        index.insert(tokens=seqs[tau])
        assert index.directory.table.flags(p0) & rt.REFINED
        # every segment of the refined entry is registered at its midpoint, visibly
        for m in mids:
            e = index.directory.table.probe(int(m))
            assert e >= 0 and index.directory.table.list_len(e) == 1


def test_background_work_runs_on_the_inserting_thread_by_default(tmp_path):
    """Without ``background=True`` the refinement and the rematerialization an insert triggers
    have run when it returns, and no worker thread is started (threads an earlier test left,
    such as the worker of an index it ended as kill -9 would, are not this index's)."""
    before = set(threading.enumerate())
    with sarp.open(tmp_path / "i", backend="memory", tau=2, pruning_threshold=2,
                   **BASE) as index:
        seqs = [divergent(1, i) for i in range(3)]
        for s in seqs:
            index.insert(tokens=s)
        p0 = entry_of(index, sarp.block_ids(seqs[0], 1)[0])
        assert index.directory.table.flags(p0) & rt.REFINED
        st = index.stats()
        assert st["backfills"] == 1 and st["rematerializations"] >= 1, st
        assert not any(t.name == "sarp-background" for t in set(threading.enumerate()) - before)


def test_entries_below_an_entry_being_back_filled_stay_private_until_published():
    """A segment placed while its base entry's back-fill runs registers at the midpoint in a
    private entry: a probe must not find a midpoint list without the older members."""
    tau = 3
    d = RoutingDirectory(config_from_kwargs(dict(BASE, pruning=False, tau=tau)))
    t = d.table
    ids = [sarp.block_ids(divergent(1, i), 1) for i in range(tau + 2)]
    events = Events()
    for sid in range(tau + 1):
        d.place(sid, ids[sid], events=events)
    root = t.find(int(ids[0][0]))
    assert events.refine == [root] and t.flags(root) & rt.REFINING  # back-fill not run yet
    d.place(tau + 1, ids[tau + 1], events=Events())
    mid = int(ids[tau + 1][2])
    assert t.find(mid) >= 0 and t.probe(mid) < 0  # created, private
    assert t.find(mid) in d.backfills[root].private
    for sid in range(tau + 1):
        d.backfill_member(d.backfills[root], sid, ids[sid], Events())
    d.publish(d.backfills[root])
    assert t.probe(mid) == t.find(mid) and t.flags(root) & rt.REFINED


def test_last_block_point_needs_a_refined_final_midpoint(tmp_path):
    tau = 3
    with sarp.open(tmp_path / "i", backend="memory", background=False, pruning=False, tau=tau,
                   **BASE) as index:
        # share the first 7 blocks: the final interval's midpoint (offset 6) list grows
        seqs = [divergent(7, i) for i in range(2 * tau + 2)]
        for s in seqs:
            index.insert(tokens=s)
        ids = [sarp.block_ids(s, 1) for s in seqs]
        t = index.directory.table
        assert t.flags(entry_of(index, ids[0][6])) & rt.REFINED
        assert all(t.probe(int(q[7])) >= 0 for q in ids)


def test_registrations_per_segment_are_bounded_and_first_point_kept(tmp_path):
    R = SMALL["routing_points"]
    with sarp.open(tmp_path / "i", backend="memory", background=False, block_size=1,
                   **SMALL) as index:
        for tag, (_, full) in enumerate(shared_prefix_workload(7)):
            ids = sarp.block_ids(full, 1)
            index.insert(block_ids=ids, metadata=metadata_for(ids, tag))
        keys, flags, lengths, segs, _ = index.directory.table.export()
        per_segment = Counter(segs.tolist())
        assert max(per_segment.values()) <= 2 * R + 1
        assert sum(lengths) == len(segs)
        refined = sum(1 for f in flags.tolist() if f & rt.REFINED)
        assert refined > 0  # the workload exercised refinement
        for seg in index.segments.scan():
            assert seg.segment_id in members(index, seg.block_ids[0])


def test_pruning_follows_the_preceding_list_size(tmp_path):
    threshold = 3
    with sarp.open(tmp_path / "i", backend="memory", background=False, refinement=False,
                   pruning_threshold=threshold, **BASE) as index:
        # share blocks 0..5: every segment has base points 0 and 4 with the same keys
        seqs = [divergent(6, i) for i in range(threshold + 1)]
        k0, k4 = sarp.block_ids(seqs[0], 1)[[0, 4]]
        for n, s in enumerate(seqs[:threshold], 1):
            index.insert(tokens=s)
            assert len(members(index, k0)) == n
            assert entry_of(index, k4) < 0  # pruned: the list at point 0 is small
        assert index.directory.table.flags(entry_of(index, k0)) & rt.PRUNED
        index.insert(tokens=seqs[threshold])
        # the list at 0 exceeded the threshold: point 4 is rematerialized for every member
        assert members(index, k4) == members(index, k0)
        assert index.directory.table.probe(int(k4)) >= 0


@pytest.mark.parametrize("background", [False, True])
def test_rematerialization_of_a_missing_member_raises_corruption(tmp_path, background):
    """Inline, the insert that triggers the rematerialization raises; on the worker thread,
    the next ``drain()`` does (once), so the error is never lost."""
    threshold = 3
    with sarp.open(tmp_path / "i", backend="memory", background=background, refinement=False,
                   pruning_threshold=threshold, **BASE) as index:
        seqs = [divergent(6, i) for i in range(threshold + 1)]
        k0 = sarp.block_ids(seqs[0], 1)[0]
        for s in seqs[:threshold]:
            index.insert(tokens=s)
        lost = min(members(index, k0))
        index.store.delete(lost)
        error = pytest.raises(CorruptionError, match=rf"segments \[{lost}\] of routing entry")
        if not background:
            with error:
                index.insert(tokens=seqs[threshold])  # its rematerialization reads every member
            return
        index.insert(tokens=seqs[threshold])
        with error:
            index.drain()
        index.drain()  # reported once
        # the insert that triggered it was acknowledged, and matches whole
        s = seqs[threshold]
        assert index.match(tokens=s, max_retrieval=0).num_blocks == len(s)


def routing_state(index) -> dict[int, tuple]:
    """Every routing entry by key: its flags and its members with their filters."""
    t = index.directory.table
    state = {}
    for e in range(t.n_entries):
        segs, filters = t.refs(e)
        state[t.key_of(e)] = (t.flags(e), sorted(zip(segs.tolist(), filters.tolist(),
                                                     strict=True)))
    return state


@pytest.mark.parametrize("build", ["refine", "remat"])
def test_builds_in_flight_at_a_crash_are_redone_by_recovery(tmp_path, build):
    """A snapshot taken while a back-fill or a rematerialization waits for the worker holds
    the entry's pending flag and the build's entries unpublished. A recovery from it (here
    from a copy of the index made then, as a crash would leave it) redoes the build before
    serving, and ends with the routing state that the finished build gave."""
    opts: dict[str, Any]
    if build == "refine":
        opts, flag, seqs = dict(pruning=False, tau=3), rt.REFINING, [divergent(1, i)
                                                                     for i in range(4)]
    else:
        opts, flag, seqs = dict(refinement=False, pruning_threshold=3), rt.REMAT, [
            divergent(6, i) for i in range(4)]
    index = sarp.open(tmp_path / "i", backend="odirect", background=True, **opts, **BASE)
    release = threading.Event()
    try:
        for s in seqs[:-1]:
            index.insert(tokens=s)
        index.drain()
        index._worker.submit(lambda: release.wait(30))  # the worker lags behind the inserts
        index.insert(tokens=seqs[-1])  # triggers the build, which waits
        assert (index.directory.table.entry_flags() & flag).any()
        index.snapshot()
        shutil.copytree(tmp_path / "i", tmp_path / "crashed")
        release.set()
        index.drain()
        finished = routing_state(index)
    finally:
        release.set()
        index.close()
    with sarp.open(tmp_path / "crashed") as recovered:
        assert recovered.recovery["redone_builds"] == 1
        assert routing_state(recovered) == finished
        for s in seqs:
            assert recovered.match(tokens=s).num_blocks == len(s)


@pytest.mark.parametrize("seed", range(3))
def test_matches_stay_exact_while_background_builds_wait(tmp_path, seed):
    """The worker is held while sequences that share prompts and branches are inserted, so
    back-fills and rematerializations queue up; every inserted sequence still matches whole
    with MaxRetrieval unbounded. Fails if a walk that meets a pruned or rematerializing entry
    skips an entry that already exists below it (a match routes through the deepest entry)."""
    from tests.persistence.workload import CONFIG, sequence

    index = sarp.open(tmp_path / "i", backend="memory", background=True, **CONFIG)
    release = threading.Event()
    rng = np.random.default_rng(seed)
    try:
        inserted = []
        for i in rng.permutation(60).tolist():
            if i % 20 == 0:
                index._worker.submit(lambda: release.wait(30))  # hold the worker from here
            index.insert(tokens=sequence(i))
            inserted.append(i)
            for j in inserted:
                tokens = sequence(j)
                m = index.match(tokens=tokens, max_retrieval=0)
                assert m.num_blocks == len(tokens) // CONFIG["block_size"], (i, j)
            if i % 20 == 19:
                release.set()
                index.drain()
                release.clear()
    finally:
        release.set()
        index.close()


def test_queued_rematerialization_lifts_max_retrieval_at_its_entry(tmp_path):
    """While a pruned entry waits for its rematerialization, its members tie (their filters
    cover only the shared blocks): every one is read, so the oldest is not missed."""
    threshold = 3
    index = sarp.open(tmp_path / "i", backend="memory", background=True, refinement=False,
                      pruning_threshold=threshold, max_retrieval=1, **BASE)
    try:
        seqs = [divergent(6, i) for i in range(threshold + 2)]
        k0, k4 = (int(k) for k in sarp.block_ids(seqs[0], 1)[[0, 4]])
        for s in seqs[:threshold]:
            index.insert(tokens=s)
        index.drain()
        release = threading.Event()
        index._worker.submit(lambda: release.wait(30))  # the worker lags behind the inserts
        index.insert(tokens=seqs[threshold])
        t = index.directory.table
        assert t.remat_pending(t.find(k0))
        index.insert(tokens=seqs[threshold + 1])  # joins the list, waits for the rebuild
        assert t.find(k4) < 0  # no deeper entry holding only the newest segments
        got = [index.match(tokens=s) for s in seqs]
        assert [m.num_blocks for m in got] == [8] * len(seqs)
        assert got[0].stats["segments_retrieved"] == len(seqs)  # newest first, oldest last
        release.set()
        index.drain()
        assert not t.remat_pending(t.find(k0))
        assert t.list_len(t.find(k4)) == len(seqs)  # the rematerialization placed them all
        m = index.match(tokens=seqs[0])
        assert m.num_blocks == 8 and m.stats["segments_retrieved"] == 1  # routed deeper now
    finally:
        release.set()
        index.close()


def test_reader_racing_a_rematerialization_sees_old_or_new_complete_state(tmp_path):
    threshold = 3
    index = sarp.open(tmp_path / "i", backend="memory", background=True, refinement=False,
                      pruning_threshold=threshold, max_retrieval=0, **BASE)
    seqs = [divergent(6, i) for i in range(threshold + 1)]
    k4 = int(sarp.block_ids(seqs[0], 1)[4])
    for s in seqs[:threshold]:
        index.insert(tokens=s)
    index.drain()
    expected = [index.match(tokens=s).num_blocks for s in seqs[:threshold]]

    reached, release = threading.Event(), threading.Event()
    real_place = index.directory.place
    calls = []

    def slow_place(*args, **kwargs):
        if threading.current_thread().name == "sarp-background":
            calls.append(args[0])
            if len(calls) == 3:  # two members placed privately, the third not yet
                reached.set()
                assert release.wait(30)
        return real_place(*args, **kwargs)

    index.directory.place = slow_place  # type: ignore[method-assign]
    index.insert(tokens=seqs[threshold])
    assert reached.wait(30)
    t = index.directory.table
    e4 = t.find(k4)
    assert e4 >= 0 and t.probe(k4) < 0  # built privately, not yet visible
    # readers keep routing through the authoritative point-0 entry, complete and correct
    assert [index.match(tokens=s).num_blocks for s in seqs[:threshold]] == expected
    release.set()
    index.drain()
    assert t.probe(k4) >= 0 and t.list_len(t.find(k4)) == threshold + 1
    assert [index.match(tokens=s).num_blocks for s in seqs] == [8] * (threshold + 1)
    index.close()


@pytest.mark.parametrize("flag", ["refinement", "filtering", "pruning"])
def test_design_switches_keep_matches_exact(tmp_path, flag):
    with sarp.open(tmp_path / "i", backend="memory", background=False, block_size=1,
                   max_retrieval=0, **{**SMALL, flag: False}) as index:
        for tag, (_, full) in enumerate(shared_prefix_workload(8, sessions=15, turns=3)):
            index.insert(tokens=full, metadata=metadata_for(sarp.block_ids(full, 1), tag))
            assert index.match(tokens=full).num_blocks == len(full)


# -- compiled placement kernels against the Python (numpy) code they replaced ----------------

def ref_publish(lists: dict, e: int, seg: int, filt: int, drop: int | None) -> None:
    """The reference list update: delete position ``drop``, insert at the filter's upper bound."""
    segs, filters = lists[e]
    if drop is not None:
        segs, filters = np.delete(segs, drop), np.delete(filters, drop)
    i = int(np.searchsorted(filters, np.uint64(filt), side="right"))
    lists[e] = (np.insert(segs, i, np.uint64(seg)), np.insert(filters, i, np.uint64(filt)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("segments, new_entry", [(40, 0.05), (1500, 0.001)],
                         ids=["short lists", "long lists"])
def test_member_kernels_match_reference_and_keep_old_lists(seed, segments, new_entry):
    """Random additions and filter changes against the one-run reference. With long lists
    (past DELTA_MIN) the table keeps a main and a delta run, and changes members of both;
    ``refs``, ``export`` and a table restored from it give the reference lists all the same,
    and ``runs`` two sorted runs that together hold the reference list."""
    rng = np.random.default_rng(seed)
    t = rt.RoutingTable(4)
    lists: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    merged = 0  # refs() of a list kept in two runs (a fresh array, not a view of the arena)
    for _ in range(3000):
        if not lists or rng.random() < new_entry:
            e = t.add_entry(int(rng.integers(1, 2**63)), rt.VISIBLE)
            lists[e] = (np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        e = int(rng.choice(list(lists)))
        seg, filt = int(rng.integers(0, segments)), int(rng.integers(0, 6)) << 60
        before = [(x, a.copy(), b.copy(), *t.refs(x)) for x, (a, b) in lists.items()]
        merged += sum(old_segs.base is None for *_, old_segs, _ in before)
        hit = np.flatnonzero(lists[e][0] == np.uint64(seg))
        if len(hit):
            assert t.update_member(e, seg, filt) is True
            if int(lists[e][1][hit[0]]) != filt:
                ref_publish(lists, e, seg, filt, int(hit[0]))
        else:
            assert t.update_member(e, seg, filt) is False
            if rng.random() < 0.7:
                t.add_member(e, seg, filt)
                ref_publish(lists, e, seg, filt, None)
        for _, a, b, old_segs, old_filters in before:
            # copy-on-write: views captured before the update still hold the old list
            assert np.array_equal(old_segs, a) and np.array_equal(old_filters, b)
        for x, (a, b) in lists.items():
            segs, filters = t.refs(x)
            assert np.array_equal(segs, a) and np.array_equal(filters, b)
            assert t.list_len(x) == len(a)
    assert t.live_refs == sum(len(a) for a, _ in lists.values())
    assert (merged > 0) == (segments > rt.DELTA_MIN)
    order = sorted(lists)
    want = [np.concatenate([lists[x][i] for x in order]) for i in (0, 1)]
    arrays = t.export()
    assert arrays[2].tolist() == [len(lists[x][0]) for x in order]
    assert np.array_equal(arrays[3], want[0]) and np.array_equal(arrays[4], want[1])
    restored = rt.RoutingTable.from_arrays(*arrays, slots=t.table_slots())
    assert restored.longest_list() == t.longest_list() == max(len(a) for a, _ in lists.values())
    for x in order:
        assert all(np.array_equal(u, v) for u, v in zip(restored.refs(x), lists[x], strict=True))
        runs = t.runs(x)  # what candidate selection reads: one or two runs
        assert len(runs) in (2, 4) and all(np.all(f[:-1] <= f[1:]) for f in runs[1::2])
        pairs = sorted(zip(np.concatenate(runs[0::2]).tolist(),
                           np.concatenate(runs[1::2]).tolist(), strict=True))
        assert pairs == sorted(zip(*(a.tolist() for a in lists[x]), strict=True))


class ReferenceDirectory(RoutingDirectory):
    """The placement walk as it was written in Python, one table call per step."""

    def place(self, seg_id, ids, build=None, events=None):
        c, t = self.cfg, self.table
        events = Events() if events is None else events
        prev, blocked = -1, False
        root = -1 if build is None else build.root
        for o, role, parent_o in self.points(len(ids)):
            # a queued rematerialization (not this build's) keeps the rest of the walk from
            # creating entries: it places this segment below its entry with the older ones
            blocked = blocked or (prev >= 0 and prev != root and bool(t.flags(prev) & rt.REMAT))
            parent = -1
            if role != FIXED:
                parent = t.find(int(ids[parent_o]))
                if parent < 0 or not t.flags(parent) & (rt.REFINED | rt.REFINING):
                    continue
            key = int(ids[o])
            e = t.find(key)
            filt = self.filter_at(ids, o, len(ids))
            if e >= 0 and self._reference_update(e, seg_id, filt):
                prev = e
                continue
            # pruning only keeps the walk from creating entries
            if e < 0 and prev >= 0 and c.pruning and t.list_len(prev) <= c.pruning_threshold:
                t.set_flags(prev, t.flags(prev) | rt.PRUNED)
                continue
            if e < 0 and blocked:
                continue
            if e < 0:
                e = self._new_entry(key, parent, build)
            segs, filters = t.refs(e)
            lists = {e: (segs, filters)}
            ref_publish(lists, e, seg_id, filt, None)
            t.publish(e, *lists[e])
            self._check_triggers(e, role == FIXED or o == self.final_mid, events)
            prev = e
        return events

    def _reference_update(self, e, seg_id, filt):
        segs, filters = self.table.refs(e)
        hit = np.flatnonzero(segs == np.uint64(seg_id))
        if not len(hit):
            return False
        if int(filters[hit[0]]) != filt:
            lists = {e: (segs, filters)}
            ref_publish(lists, e, seg_id, filt, int(hit[0]))
            self.table.publish(e, *lists[e])
        return True


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("flags", [{}, {"pruning": False}, {"refinement": False}])
@pytest.mark.parametrize("segments", [400, 2000])
def test_compiled_walk_places_like_the_python_walk(seed, flags, segments):
    """Random segments with heavy sharing, extensions and background builds (refinement
    back-fills and rematerializations run at random later times): the same routing state.
    With 2000 segments the shared keys' lists pass DELTA_MIN: the compiled table keeps them
    in two runs, the reference in one."""
    cfg = config_from_kwargs({**SMALL, "block_size": 1, **flags})
    rng = np.random.default_rng(seed)
    dirs = [RoutingDirectory(cfg), ReferenceDirectory(cfg)]
    stored: dict[int, np.ndarray] = {}
    jobs: list[tuple[str, int]] = []
    prefixes = [rng.integers(1, 2**63, 8, dtype=np.uint64) for _ in range(3)]
    for sid in range(segments):
        if stored and rng.random() < 0.3:  # extend a stored segment
            sid = int(rng.choice(list(stored)))
            n = len(stored[sid])
            if n == cfg.segment_blocks:
                continue
            ids = np.concatenate((stored[sid], rng.integers(1, 2**63, int(rng.integers(1, 9 - n)),
                                                            dtype=np.uint64)))[:cfg.segment_blocks]
        else:
            shared = int(rng.integers(0, 9))
            ids = np.concatenate((prefixes[int(rng.integers(3))][:shared],
                                  rng.integers(1, 2**63, 8 - shared, dtype=np.uint64)))
            ids = ids[:int(rng.integers(1, 9))]
        stored[sid] = ids
        for d in dirs:
            ev = d.place(sid, ids)
        jobs += [("refine", e) for e in ev.refine] + [("remat", e) for e in ev.remat]
        while jobs and rng.random() < 0.5:  # a background job finishes
            kind, root = jobs.pop(int(rng.integers(len(jobs))))
            for d in dirs:
                if kind == "refine":
                    build, ev = d.backfills[root], Events()
                    for s in d.table.refs(root)[0].tolist():
                        d.backfill_member(build, s, stored[s], ev)
                else:
                    build, ev = Build("remat", root), Events()
                    for s in d.table.refs(root)[0].tolist():
                        d.place(s, stored[s], build, ev)
                d.publish(build)
            jobs += [("refine", e) for e in ev.refine] + [("remat", e) for e in ev.remat]
    got, want = (d.table.export() for d in dirs)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)  # type: ignore[arg-type]
    assert len(got[0]) > 10
    assert (dirs[0].table.longest_list() > rt.DELTA_MIN) == (segments > 400)


def test_table_restored_from_its_slots_probes_like_a_rebuilt_one():
    rng = np.random.default_rng(5)
    t = rt.RoutingTable()
    keys = rng.integers(1, 2**63, 3000, dtype=np.uint64)
    for k in keys.tolist():
        e = t.add_entry(k, rt.VISIBLE)
        t.add_member(e, e, k & 0xFF)
    arrays = t.export()
    restored = rt.RoutingTable.from_arrays(*arrays, slots=t.table_slots())
    rebuilt = rt.RoutingTable.from_arrays(*arrays)
    assert np.array_equal(restored.table_slots(), t.table_slots())
    probes = [*keys.tolist(), *rng.integers(1, 2**63, 200, dtype=np.uint64).tolist()]
    assert [restored.probe(k) for k in probes] == [t.probe(k) for k in probes] \
        == [rebuilt.probe(k) for k in probes]
    e = restored.add_entry(7, rt.VISIBLE)  # the restored table takes new entries
    assert restored.probe(7) == e == len(keys)


def test_restored_table_adopts_the_arena_and_copies_it_before_writing():
    t = rt.RoutingTable()
    for k in range(1, 200):
        e = t.add_entry(k * 7919, rt.VISIBLE)
        for s in range(k % 5 + 1):
            t.add_member(e, 1000 * k + s, s)
    keys, flags, lengths, segs, filters = t.export()
    kept = segs.copy(), filters.copy()
    restored = rt.RoutingTable.from_arrays(keys, flags, lengths, segs, filters,
                                           slots=t.table_slots())
    first = restored.refs(restored.probe(7919))[0]
    assert np.shares_memory(first, segs)  # recovery did not copy the lists
    e = restored.probe(5 * 7919)
    restored.add_member(e, 5, 99)  # the first write moves the arena, never into ``segs``
    assert restored.refs(e)[0].tolist() == [5000, 5]
    assert np.array_equal(segs, kept[0]) and np.array_equal(filters, kept[1])
    assert [restored.refs(restored.probe(k * 7919))[0].tolist() for k in range(1, 200)
            if k != 5] == [t.refs(t.probe(k * 7919))[0].tolist() for k in range(1, 200) if k != 5]



def test_longest_list_is_the_longest_exported_list_also_after_a_restore():
    t = rt.RoutingTable()
    assert t.longest_list() == 0
    for k in range(1, 50):
        e = t.add_entry(k * 7919, rt.VISIBLE)
        for s in range(k % 7 + 1):
            t.add_member(e, 1000 * k + s, s)
    arrays = t.export()
    assert t.longest_list() == arrays[2].max() == 7
    assert rt.RoutingTable.from_arrays(*arrays).longest_list() == 7

def test_restore_refuses_lists_that_disagree_with_their_lengths():
    t = rt.RoutingTable()
    for k in range(1, 20):
        t.add_member(t.add_entry(k, rt.VISIBLE), k, 0)
    keys, flags, lengths, segs, filters = t.export()
    with pytest.raises(ValueError, match="references"):
        rt.RoutingTable.from_arrays(keys, flags, lengths, segs[:-1], filters[:-1])
    with pytest.raises(ValueError, match="lengths"):
        rt.RoutingTable.from_arrays(keys, flags, lengths[:-1], segs, filters)


@pytest.mark.parametrize("damage", ["capacity", "range", "missing", "extra", "twice"])
def test_inconsistent_table_slots_are_refused(damage):
    """Slots a snapshot holds pass its checksum, yet are checked: each entry in one slot."""
    t = rt.RoutingTable()
    for k in range(1, 40):
        t.add_entry(k * 7919, rt.VISIBLE)
    keys, *lists = t.export()
    slots = t.table_slots()
    used = np.flatnonzero(slots != rt.EMPTY_SLOT)
    if damage == "capacity":
        slots = slots[:-1]
    elif damage == "range":
        slots[used[0]] = 39
    elif damage == "missing":
        slots[used[0]] = rt.EMPTY_SLOT
    elif damage == "extra":
        slots[np.flatnonzero(slots == rt.EMPTY_SLOT)[0]] = 0
    else:
        slots[used[1]] = slots[used[0]]
    with pytest.raises(ValueError, match="table"):
        rt.RoutingTable.from_arrays(keys, *lists, slots=slots)  # type: ignore[arg-type, misc]


def test_a_list_not_sorted_by_filter_is_refused():
    """Candidate selection reads a list in filter order: an unsorted one could put the exact
    match behind MaxRetrieval's bound."""
    t = rt.RoutingTable()
    for k in range(1, 5):
        e = t.add_entry(k, rt.VISIBLE)
        t.add_member(e, 10 * k, 5)
        t.add_member(e, 10 * k + 1, 9)
    keys, flags, lengths, segs, filters = t.export()
    rt.RoutingTable.from_arrays(keys, flags, lengths, segs, filters, slots=t.table_slots())
    filters[[4, 5]] = filters[[5, 4]]  # the third list
    with pytest.raises(ValueError, match="entry 2 is not sorted"):
        rt.RoutingTable.from_arrays(keys, flags, lengths, segs, filters, slots=t.table_slots())


def test_entry_ids_out_of_range_raise_instead_of_reading_past_the_arrays():
    t = rt.RoutingTable()
    e = t.add_entry(5, rt.VISIBLE)
    t.add_member(e, 1, 2)
    calls = [("refs", ()), ("list_len", ()), ("key_of", ()), ("flags", ()),
             ("remat_pending", ()), ("set_flags", (1,)), ("publish", ([1], [2])),
             ("update_member", (1, 2)), ("add_member", (1, 2))]
    for bad in (-1, 1, 10**12):
        for name, rest in calls:
            with pytest.raises(IndexError, match=f"entry {bad} is not in a table of 1"):
                getattr(t, name)(bad, *rest)
        with pytest.raises(IndexError, match=f"entry {bad} is not in a table of 1"):
            t.make_visible([e, bad])
    assert t.refs(e)[0].tolist() == [1] and t.flags(e) == rt.VISIBLE  # nothing changed


def test_runs_are_read_only_views_that_outlive_the_arena_growing():
    """``runs`` hands out read-only views of one version of a list, which stay valid (the
    arena they view kept alive) after later additions grow the arena into a new one."""
    t = rt.RoutingTable(capacity=1)
    e = t.add_entry(5, rt.VISIBLE)
    for seg in range(3):
        t.add_member(e, seg, 100 - seg)
    runs = t.runs(e)
    assert [a.tolist() for a in runs] == [[2, 1, 0], [98, 99, 100]]
    assert not any(a.flags.writeable for a in runs)
    for seg in range(3, 2000):
        t.add_member(t.add_entry(10 + seg, rt.VISIBLE), seg, seg)
    assert [a.tolist() for a in runs] == [[2, 1, 0], [98, 99, 100]]


def test_points_filters_are_filters_at_each_point():
    """``Points.filters``, the compiled placement's filters, against ``filters_at``."""
    rng = np.random.default_rng(3)
    offsets, parents = np.array([0, 3, 5, 7], np.int64), np.array([-1, 0, -1, 5], np.int64)
    for n_fields, bits, stride in [(8, 8, 2), (4, 16, 1), (2, 32, 3)]:
        pts = rt.Points(8, offsets, parents, np.ones(4, np.uint8), pruning=True, threshold=3,
                        refinement=True, tau=4, n_fields=n_fields, bits=bits, stride=stride)
        ids = rng.integers(1, 2**63, 8, dtype=np.uint64)
        want = filters_at(ids, offsets, 8, n_fields, bits, stride)
        assert pts.filters(ids).tolist() == want.tolist()


@pytest.mark.parametrize("bad, message", [
    ("offset", "offset 8"), ("parent", "parent 8"), ("lengths", "of one length"),
    ("empty rows", "must be 1-D"),
    ("layout", "n_fields \\* bits must be 64"), ("bits", "bits must be in 1..32"),
    ("stride", "stride must be positive"),
])
def test_points_out_of_range_raise(bad, message):
    args: dict[str, Any] = dict(offsets=[0, 4], parents=[-1, 0], refinable=[1, 1], n_fields=8,
                                bits=8, stride=2)
    if bad == "offset":
        args["offsets"] = [0, 8]
    elif bad == "parent":
        args["parents"] = [-1, 8]
    elif bad == "lengths":
        args["refinable"] = [1]
    elif bad == "empty rows":  # two rows of nothing: no flag to read
        args["refinable"] = np.zeros((2, 0), np.uint8)
    elif bad == "layout":
        args["bits"] = 7
    elif bad == "bits":
        args["n_fields"], args["bits"] = 1, 64
    else:
        args["stride"] = 0
    with pytest.raises(ValueError, match=message):
        rt.Points(8, args["offsets"], args["parents"], args["refinable"], pruning=True,
                  threshold=3, refinement=True, tau=4, n_fields=args["n_fields"],
                  bits=args["bits"], stride=args["stride"])


def test_table_arguments_out_of_range_raise():
    """A capacity whose table size would wrap, flags past a byte, and a list to publish that
    is not uint64, out of order, repeats a segment or passes the limit: refused, nothing changed."""
    for capacity in (-1, 9 * 10**17):
        with pytest.raises(ValueError, match="capacity must be in"):
            rt.RoutingTable(capacity)
    t = rt.RoutingTable()
    e = t.add_entry(5)
    with pytest.raises(ValueError, match="flags must be in"):
        t.set_flags(e, 256)
    t.max_list = 2
    for segs, error, says in [(np.array([-1]), TypeError, "segs must be a 1-D uint64"),
                              (np.array([1.7]), TypeError, "segs must be a 1-D uint64"),
                              (np.array([2, 2], np.uint64), ValueError, "unique segment ids"),
                              (np.arange(3, dtype=np.uint64), ValueError, "exceeds the limit 2")]:
        with pytest.raises(error, match=says):
            t.publish(e, segs, np.zeros(len(segs), np.uint64))
    with pytest.raises(ValueError, match="filters must be ascending"):
        t.publish(e, np.array([1, 2], np.uint64), np.array([9, 2], np.uint64))
    assert t.list_len(e) == 0 and t.flags(e) == 0  # as add_entry made it


@pytest.mark.parametrize("bad", ["ids", "filters", "dtype", "point", "prev", "root"])
def test_a_walk_over_points_with_arguments_out_of_range_raises(bad):
    t = rt.RoutingTable()
    pts = rt.Points(8, [0, 4], [-1, -1], [1, 1], pruning=True, threshold=3, refinement=True,
                    tau=4, n_fields=8, bits=8, stride=2)
    ids = np.arange(1, 9, dtype=np.uint64)
    args: dict[str, Any] = dict(ids=ids, filters=pts.filters(ids), i=0, prev=-1, root=-1)
    if bad == "ids":
        args["ids"] = ids[:7].copy()
    elif bad == "filters":
        args["filters"] = np.zeros(3, np.uint64)
    elif bad == "dtype":
        args["ids"] = ids.astype(np.int64)
    elif bad == "point":
        args["i"] = -1
    else:
        args[bad] = 10**12
    with pytest.raises((ValueError, TypeError)):
        t.walk_points(pts, args["ids"], args["filters"], 7, args["i"], args["prev"], True,
                      args["root"])
    assert t.n_entries == 0


class CheckedTable:
    """The routing table, with ``check()`` run after every change made by a background job:
    a lock-free match may run between any two of them."""

    CHANGES = {"add_member", "add_entry", "update_member", "set_flags", "make_visible",
               "walk_points", "publish"}

    def __init__(self, table, check):
        self._table, self._check = table, check

    def __getattr__(self, name):
        attr = getattr(self._table, name)
        if name not in self.CHANGES:
            return attr

        def changed(*args, **kwargs):
            out = attr(*args, **kwargs)
            if threading.current_thread().name == "sarp-background":
                self._check(name)
            return out
        return changed


@pytest.mark.parametrize("seed", [2, 8])
def test_every_step_of_a_background_build_keeps_matches_exact(tmp_path, seed):
    """Random prefix trees inserted while the worker is held for spans of inserts, so that
    back-fills and rematerializations queue up behind each other. After every change a
    background build makes to the routing table, every inserted sequence still matches whole
    with MaxRetrieval unbounded. Fails if a rematerialization publishes an entry below another
    entry whose own rematerialization is still queued: that entry lists only the members
    that were placed after the trigger."""
    config = {2: dict(block_size=1, segment_blocks=16, routing_points=4, filter_fields=8,
                      field_bits=8, stride=2, tau=4, pruning_threshold=3),
              8: dict(BASE, tau=3, pruning_threshold=1)}[seed]
    rng = np.random.default_rng(seed)
    vocab = int(rng.choice([2, 3, 50]))
    index = sarp.open(tmp_path / "i", backend="memory", background=True, max_retrieval=0,
                      **config)
    inserted: list[np.ndarray] = []
    failures: list[str] = []

    def check(change: str) -> None:
        if failures:
            return
        index.directory.table = table  # the matcher takes the compiled table
        try:
            for tokens in inserted:
                got = index.match(tokens=tokens).num_blocks
                if got != len(tokens):
                    failures.append(f"after {change}: {got} of {len(tokens)} blocks")
                    return
        finally:
            index.directory.table = checked  # type: ignore[assignment]

    table = index.directory.table
    checked = CheckedTable(table, check)
    index.directory.table = checked  # type: ignore[assignment]
    release = threading.Event()
    S = config["segment_blocks"]
    try:
        for k in range(120):
            if k % 30 == 5:
                release.clear()
                index._worker.submit(lambda: release.wait(60))  # hold the worker from here
            if k % 30 == 25:
                release.set()
                index.drain()
            if inserted and rng.random() < 0.8:
                s = inserted[int(rng.integers(len(inserted)))]
                tokens = np.concatenate((s[:int(rng.integers(0, len(s) + 1))],
                                         rng.integers(0, vocab, int(rng.integers(0, 3 * S)))))
            else:
                tokens = rng.integers(0, vocab, int(rng.integers(1, 4 * S)))
            index.insert(tokens=tokens)
            inserted.append(tokens)
            assert not failures, failures[0]
        release.set()
        index.drain()
        assert not failures, failures[0]
    finally:
        release.set()
        index.directory.table = table
        index.close()


def test_a_full_posting_list_skips_new_members_and_matches_stay_verified(tmp_path):
    """A posting list holds at most ``max_list`` references: segments placed at a full entry
    are not listed there (counted in ``routing_refs_skipped``) and every insert succeeds. A
    match then may stop short, never past what it verified; a limit of 2**24 - 1 cannot be
    reached in a test, so it is lowered here."""
    index = sarp.open(tmp_path / "i", "odirect", direct_io=False, max_retrieval=0,
                      snapshot_on_close=False, **BASE)
    with pytest.raises(ValueError, match="max_list"):
        index.directory.table.max_list = 0
    index.directory.table.max_list = 3
    seqs = [divergent(2, i) for i in range(10)]  # all share blocks 0-1: one entry at p0
    for t in seqs:
        index.insert(tokens=t)
    assert len(members(index, sarp.block_ids(seqs[0], 1)[0])) == 3
    assert index.stats()["routing_refs_skipped"] >= 7
    got = [index.match(tokens=t) for t in seqs]
    for t, m in zip(seqs, got, strict=True):
        ids = sarp.block_ids(t, 1)
        assert np.array_equal(m.block_ids, ids[:m.num_blocks])  # a verified prefix
    assert [m.num_blocks for m in got[:3]] == [8, 8, 8]
    assert all(m.num_blocks >= 2 for m in got)  # the shared blocks are stored either way
    index.close()
    with sarp.open(tmp_path / "i", direct_io=False) as again:  # the journal replays
        assert again.stats()["routing_refs_skipped"] == 0  # without the lowered limit
        assert [again.match(tokens=t).num_blocks for t in seqs] == [8] * 10


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "journal"])
def test_lists_past_delta_min_route_every_copy_also_after_a_restart(tmp_path, snapshot):
    """Many sequences sharing a prefix that ends inside a window: each copies it into its own
    segment, listed under the shared keys, whose lists pass DELTA_MIN and take a delta run.
    Every sequence is then matched whole, before a restart and after it (restored from the
    snapshot written at close, which holds each list as one run, or from the journal), and
    the restored directory lists the same references in the same order."""
    rng = np.random.default_rng(0)
    prefix = rng.integers(1, 2**62, 100, dtype=np.uint64)
    seqs = [np.concatenate((prefix, rng.integers(1, 2**62, 28, dtype=np.uint64)))
            for _ in range(2 * rt.DELTA_MIN)]
    opts = dict(backend="flashlog", memory_budget=8 << 20, background=False,
                snapshot_on_close=snapshot)
    with sarp.open(tmp_path / "i", **opts) as index:
        for q in seqs:
            index.insert(block_ids=q)
        assert index.directory.table.longest_list() == len(seqs)
        assert [index.match(block_ids=q).num_blocks for q in seqs] == [128] * len(seqs)
        before = index.directory.table.export()
    with sarp.open(tmp_path / "i", **opts) as index:
        after = index.directory.table.export()
        assert all(np.array_equal(a, b)  # type: ignore[arg-type]
                   for a, b in zip(before, after, strict=True))
        assert [index.match(block_ids=q).num_blocks for q in seqs] == [128] * len(seqs)
        other = np.concatenate((prefix, rng.integers(1, 2**62, 28, dtype=np.uint64)))
        assert index.match(block_ids=other).num_blocks == 100


@pytest.mark.parametrize("restart", [False, True])
def test_an_extension_is_listed_once_where_its_segment_was_listed(tmp_path, restart):
    """A new segment's walk skips the search for itself in the lists it joins (its id is above
    every listed one); an extension keeps its segment's id, below the newest, so its walk
    finds its references and refreshes them. Also in a table restored from a snapshot, which
    learns the largest listed id from its arena."""
    opts = dict(backend="flashlog", memory_budget=8 << 20, background=False, **BASE)
    seq = divergent(0, 1)
    index = sarp.open(tmp_path / "i", **opts)
    try:
        for s in (divergent(0, 0), seq[:3], divergent(0, 2)):  # segments 0, 1 and 2
            index.insert(tokens=s)
        if restart:
            index.close()
            index = sarp.open(tmp_path / "i", **opts)
        index.insert(tokens=seq)  # extends segment 1
        first = sarp.block_ids(seq, 1)[0]
        assert index.directory.table.list_len(entry_of(index, first)) == 1
        assert index.match(tokens=seq).num_blocks == len(seq)
    finally:
        index.close()
