"""The benchmark harness on a tiny synthetic workload, with the memory backend but where a
metric needs a device (the I/O calls: odirect and flashlog)."""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

import sarp.bench.scaling as scaling_mod
from sarp.bench import metrics
from sarp.bench.catalog import load_workload
from sarp.bench.designs import DESIGNS, Setup
from sarp.bench.harness import RunOptions, run
from sarp.bench.measure import measure_once
from sarp.bench.metrics import FIELDS
from sarp.bench.progress import Progress
from sarp.bench.recovery_bench import mix
from sarp.bench.replay import (
    BLOCK_TOKENS,
    ENTRY_BYTES,
    Prepared,
    Trace,
    prepare,
    replay,
    store_budget,
)
from sarp.bench.report import _budget_share, ratios, render
from sarp.bench.results import load_results, write_results
from sarp.bench.targets import paired_ratio, paired_ratios, verdicts

WORKLOAD = "synthetic/ultrachat"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    opts = RunOptions(workloads=[WORKLOAD], designs=list(DESIGNS), backends=["memory"],
                      scale=0.05, repeat=1, threads=[1, 2], sweep=[1, 0])
    res = run(opts, out, Progress(False))
    write_results(out, res)
    render(res, out)
    return out, res


def test_every_design_has_a_row(results):
    _, res = results
    assert sorted(r["design"] for r in res["rows"]) == sorted(DESIGNS)


def test_every_field_is_a_value_or_an_explicit_na(results):
    _, res = results
    for row in res["rows"]:
        for name in FIELDS:
            assert name in row, name
            if row[name] is None:
                assert row["na"].get(name), f"{row['design']}: {name} is None without reason"


def test_sarp_rows_count_their_refinements_and_the_report_judges_the_targets(results):
    out, res = results
    for row in res["rows"]:
        sarp_kind = row["design"].startswith("sarp")
        for name in ("refinements", "rematerializations"):
            assert isinstance(row[name], int) if sarp_kind else row[name] is None, name
    report = (out / "report.md").read_text()
    assert "## Targets" in report and "- SARP over ssd-blockhash, at least 3.7x: met on" in report
    assert "Refinements and rematerializations of full SARP" in report


def test_rows_keep_each_repetitions_throughput(results):
    _, res = results
    for row in res["rows"]:  # one repetition: its throughput is the row's
        assert row["throughput_rps_reps"] == [row["throughput_rps"]], row["design"]


def _row(design, rps, reps, workload="w", loss=0.0):
    return {"workload": workload, "design": design, "backend": "b", "throughput_rps": rps,
            "throughput_rps_reps": reps, "match_mean_us": 10.0, "hit_loss_vs_exact": loss}


def test_throughput_ratios_are_the_median_of_paired_repetitions():
    sarp = _row("sarp", 300.0, [200.0, 300.0, 400.0])
    radix = _row("segment-radix-capped", 150.0, [100.0, 200.0, 100.0])  # pairs: 2, 1.5, 4
    old = _row("segment-hash", 100.0, None)  # a results file written before the field
    assert paired_ratios(sarp, radix) == [2.0, 1.5, 4.0] and paired_ratio(sarp, radix) == 2.0
    assert paired_ratio(sarp, old) == 3.0  # without repetitions: the rows' ratio
    assert paired_ratio(sarp, {**old, "throughput_rps": None}) is None  # a failed row
    # a row repeated more to reach min_time: only the repetitions both rows have pair up,
    # where the ratio of the medians (300 / 150 = 2 here, 400 / 150 with two more) would not
    longer = _row("sarp", 400.0, [200.0, 300.0, 400.0, 900.0, 950.0])
    assert paired_ratio(longer, radix) == 2.0
    assert paired_ratio(radix, longer) == 0.5
    text = ratios([longer, radix, old], "throughput_rps", False)
    assert "| w | b | n/a | 2 (1.5-4) | 4 (4-4) | 0 |" in text  # old: 400 / 100
    assert "(" not in ratios([sarp, radix], "match_mean_us", True).split("\n")[2]


def test_verdicts_judge_each_target_on_paired_repetitions():
    rows = [_row("sarp", 0.0, [400.0, 400.0], "a"), _row("ssd-blockhash", 0.0, [100.0, 100.0], "a"),
            _row("segment-radix-capped", 0.0, [150.0, 250.0], "a"),  # 2.67, 1.6: median 2.13
            _row("sarp", 0.0, [300.0], "c", loss=0.0004),
            _row("segment-radix-capped", 0.0, [200.0], "c"),  # 1.5: a miss
            _row("sarp", 0.0, [300.0], "d", loss=None),
            {**_row("segment-hash", 0.0, None, "a"), "error": "failed"}]
    rec = {"rows": [{"blocks": 10**6, "design": "sarp", "recovery_s": 0.01},
                    {"blocks": 10**6, "design": "dram-blockhash", "recovery_s": 0.5},
                    {"blocks": 10**6, "design": "redis", "recovery_s": 0.4}]}
    lines = verdicts({"rows": rows, "recovery": rec})
    assert lines[0] == "- SARP over ssd-blockhash, at least 3.7x: met on 1 of 1 rows"
    assert lines[1] == ("- SARP over segment-radix-capped, at least 2x: met on 1 of 2 rows; "
                        "misses: c on b (1.50)")
    assert "largest 0.0400% (c on b); over it: c on b; not measured on 1 rows" in lines[2]
    assert "SARP over dram-blockhash, at least 30x: 50.0x" in lines[3]
    assert "not judged: the target is stated at 10,000,000 blocks" in lines[3]
    assert len(lines) == 5  # segment-hash failed: nothing to judge
    rec["rows"] = [{**r, "blocks": 10**7} for r in rec["rows"]]
    lines = verdicts({"recovery": rec})
    assert lines[0].endswith("50.0x (0.01 s against 0.5 s), met")
    assert lines[1].endswith("40.0x (0.01 s against 0.4 s), missed")
    assert verdicts({}) == ["- nothing to judge: the run measured none of SARP's targets"]


def test_exact_oracle_matches_the_longest_inserted_prefix(results):
    """The oracle's hit rate, the reference of every loss, against one computed here from the
    requests alone: chained block IDs make a block stored iff its prefix was inserted, so a
    context's longest stored prefix is its longest run of IDs seen in earlier inserts. The
    designs that match exactly lose nothing against it."""
    _, res = results
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    seen: set[int] = set()
    hit = 0
    for ctx, full in zip(p.contexts, p.fulls, strict=True):
        n = 0
        while n < len(ctx) and int(ctx[n]) in seen:
            n += 1
        hit += n * BLOCK_TOKENS
        seen.update(full.tolist())
    rows = {r["design"]: r for r in res["rows"]}
    assert hit > 0
    assert rows["exact"]["token_hit_rate"] == pytest.approx(hit / p.context_tokens.sum())
    for design in ("exact", "dram-blockhash", "ssd-blockhash", "segment-radix",
                   "segment-radix-capped"):
        assert rows[design]["hit_loss_vs_exact"] == 0, design


def test_store_reads_counted_for_store_designs_only(results):
    _, res = results
    rows = {r["design"]: r for r in res["rows"]}
    assert rows["ssd-blockhash"]["store_reads_per_match"] > 0
    assert rows["sarp"]["store_reads_per_match"] > 0
    for design in ("dram-blockhash", "exact"):  # n/a, as their reads per request are
        assert rows[design]["store_reads_per_match"] is None
        assert rows[design]["na"]["store_reads_per_match"] == "the design keeps no record store"


def test_store_reads_per_request_count_every_read_of_the_stores(results):
    _, res = results
    rows = {r["design"]: r for r in res["rows"]}
    for design in ("sarp", "ssd-blockhash", "segment-hash", "segment-radix-capped"):
        row = rows[design]  # a request's reads: its match's, its insert's, background work's
        assert row["store_reads_per_request"] >= row["store_reads_per_match"] > 0, design
    assert rows["dram-blockhash"]["store_reads_per_request"] is None
    assert rows["dram-blockhash"]["na"]["store_reads_per_request"]


def test_io_calls_are_counted_where_the_store_does_its_io_through_the_io_layer(results,
                                                                            tmp_path):
    _, res = results
    for row in res["rows"]:  # the memory backend, and the DRAM-only designs: nothing to count
        for name in ("io_reads_per_request", "io_writes_per_request"):
            assert row[name] is None, (row["design"], name)
            assert row["na"][name] in ("the memory backend does no I/O",
                                       "the design keeps no record store"), row["design"]
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    for backend in ("odirect", "flashlog"):
        for design in ("sarp", "segment-radix-capped"):
            setup = Setup(backend, 1 << 20, "sync", True, 4096)  # every write reaches a file
            row, _ = measure_once(DESIGNS[design], setup, p, rep=0, workdir=tmp_path,
                                  exact=None, time_limit=None, progress=Progress(False))
            if backend == "odirect":  # no cache: one call per record read, one per version
                assert row["io_reads_per_request"] == row["store_reads_per_request"], design
                assert row["io_writes_per_request"] > 0, design
            else:  # a record in a page buffer is read without a call, and written with its page
                assert 0 <= row["io_reads_per_request"] <= row["store_reads_per_request"], design
                assert row["io_writes_per_request"] > 0, design  # the WAL's, at least


@pytest.mark.parametrize("backend, logs", [("wiredtiger", 8 << 20), ("odirect", 0)])
def test_space_compares_the_files_that_hold_records(tmp_path, backend, logs):
    """store_data_bytes leaves out what holds no record after a clean close (WiredTiger's two
    preallocated 4 MiB log files; odirect has none), and the space ratio compares those."""
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    rows = []
    for design in ("sarp", "ssd-blockhash"):
        setup = Setup(backend, 1 << 20, "group", True)
        row, _ = measure_once(DESIGNS[design], setup, p, rep=0, workdir=tmp_path,
                              exact=None, time_limit=None, progress=Progress(False))
        assert row["store_bytes"] - row["store_data_bytes"] == logs, design
        rows.append(row)
    metrics.space_ratios(rows)
    sarp, ssd = rows
    assert ssd["space_vs_ssd_blockhash"] == 1.0
    assert sarp["space_vs_ssd_blockhash"] == sarp["store_data_bytes"] / ssd["store_data_bytes"]


def test_verdicts_count_the_rows_that_compare_a_replay_cut_short():
    rows = [_row("sarp", 0.0, [400.0], "a"), {**_row("ssd-blockhash", 0.0, [50.0], "a"),
                                             "truncated": True},
            _row("sarp", 0.0, [400.0], "c"), _row("ssd-blockhash", 0.0, [100.0], "c")]
    assert verdicts({"rows": rows})[0] == (
        "- SARP over ssd-blockhash, at least 3.7x: met on 2 of 2 rows; 1 of the rows compare a "
        "replay cut short by the time limit (its first requests only)")


@pytest.mark.parametrize("cut, says", [
    ((False, False), None),
    ((True, False), "its replay was cut short"),
    ((False, True), "SSD-BlockHash's replay was cut short"),
])
def test_space_is_compared_only_between_stores_of_whole_replays(cut, says):
    """A replay cut short by the time limit stored only its first requests: its store's size
    is no measure of the workload's, against SSD-BlockHash's or as SSD-BlockHash's."""
    rows = []
    for design, nbytes, truncated in zip(("sarp", "ssd-blockhash"), (3000, 1000), cut,
                                         strict=True):
        row = metrics.new_row("w", design, "odirect")
        row.update(store_data_bytes=nbytes, truncated=truncated)
        rows.append(row)
    metrics.space_ratios(rows)
    sarp = rows[0]
    if says is None:
        assert sarp["space_vs_ssd_blockhash"] == 3.0
    else:
        assert sarp["space_vs_ssd_blockhash"] is None
        assert sarp["na"]["space_vs_ssd_blockhash"].startswith(says)


def test_io_calls_sum_the_stores_and_the_designs_own_files_or_say_why_not():
    trace = Trace(np.zeros(4, np.int64), np.zeros(4, np.int64), np.zeros(4, np.int64), 1.0)

    def io(reads, writes):
        return {"reads": reads, "writes": writes}

    row = metrics.new_row("w", "segment-radix-capped", "odirect")
    metrics.request_io(row, {"store": {"kind": "odirect", "io": io(1, 1)},
                             "spill_store": {"kind": "odirect", "io": io(0, 2)}},
                       {"store": {"kind": "odirect", "io": io(9, 5)},
                        "spill_store": {"kind": "odirect", "io": io(4, 6)}}, trace)
    assert (row["io_reads_per_request"], row["io_writes_per_request"]) == (3.0, 2.0)
    row = metrics.new_row("w", "sarp", "odirect")  # the journal's writes count too
    metrics.request_io(row, {"store": {"kind": "odirect", "io": io(0, 0)}, "io": io(0, 1)},
                       {"store": {"kind": "odirect", "io": io(4, 4)}, "io": io(0, 5)}, trace)
    assert (row["io_reads_per_request"], row["io_writes_per_request"]) == (1.0, 2.0)
    row = metrics.new_row("w", "sarp", "wiredtiger")
    metrics.request_io(row, {"store": {"kind": "wiredtiger"}, "io": io(0, 0)},
                       {"store": {"kind": "wiredtiger"}, "io": io(0, 8)}, trace)
    assert row["io_writes_per_request"] is None
    assert row["na"]["io_writes_per_request"] == ("the wiredtiger engine does its own I/O, "
                                                  "outside the I/O layer")


def test_dram_bytes_count_what_the_stores_keep_beside_their_budget():
    """odirect's sparse key table (SSD-BlockHash) and SARP's newest-copy bits count in
    dram_bytes beside the index's own state; engines that report none leave it n/a."""
    p = cast(Prepared, SimpleNamespace(unique_blocks=100))  # the one field state() reads
    row = metrics.new_row("w", "ssd-blockhash", "odirect")
    metrics.state(row, "ssd-blockhash", {"entries": 0, "dram_bytes": 0,
                                         "store": {"kind": "odirect", "dram_bytes": 700}}, p)
    assert (row["routing_bytes"], row["store_dram_bytes"], row["dram_bytes"]) == (0, 700, 700)
    row = metrics.new_row("w", "sarp", "odirect")
    metrics.state(row, "sarp", {"routing_entries": 3, "routing_bytes": 50,
                                "store": {"kind": "odirect", "dram_bytes": 4}}, p)
    assert (row["routing_bytes"], row["store_dram_bytes"], row["dram_bytes"]) == (50, 4, 54)
    row = metrics.new_row("w", "segment-radix-capped", "wiredtiger")
    metrics.state(row, "segment-radix-capped", {"entries": 9, "dram_bytes": 80,
                                                "resident_nodes": 4,
                                                "store": {"kind": "wiredtiger"}}, p)
    assert row["store_dram_bytes"] is None and row["dram_bytes"] == 80
    assert row["routing_entries"] == 4  # the nodes in DRAM, not the 5 spilled
    assert "store_dram_bytes" in row["na"] and "direct_io_refused" not in row
    row = metrics.new_row("w", "sarp", "flashlog")  # the file system refused O_DIRECT
    metrics.state(row, "sarp", {"routing_bytes": 5, "store": {
        "kind": "flashlog", "dram_bytes": 1, "direct_io_effective": False}}, p)
    assert row["direct_io_refused"] == ["flashlog"]


def test_memory_backend_reports_recovery_as_na(results):
    _, res = results
    row = next(r for r in res["rows"] if r["design"] == "sarp")
    assert row["recovery_s"] is None and "not persistent" in row["na"]["recovery_s"]
    dram = next(r for r in res["rows"] if r["design"] == "dram-blockhash")
    assert dram["recovery_s"] is not None


def test_sweep_and_threads_sections(results):
    _, res = results
    assert [r["max_retrieval"] for r in res["sweep"]] == [1, 0]
    assert {r["threads"] for r in res["threads"]} == {1, 2}


def test_files_are_written_and_reload(results):
    out, res = results
    for name in ("results.json", "report.md", "throughput.png", "latency.png",
                 "maxretrieval.png"):
        assert (out / name).is_file(), name
    assert load_results(out)["rows"] == res["rows"]
    report = (out / "report.md").read_text()
    assert "SSD-BlockHash" in report and "n/a" in report
    assert "time limit per replay: none;" in report  # no --time-limit: not "n/a s"


def test_progress_bars_stay_out_of_a_log_but_notes_do_not(capsys):
    with Progress().bar(3, "replay") as tick:  # capsys's stderr is not a terminal
        for _ in range(3):
            tick()
    Progress().note("one line")
    Progress(False).note("silenced")
    assert capsys.readouterr().err == "one line\n"


def test_the_budget_is_a_tenth_of_the_store_and_the_report_names_raised_caches(results):
    """No floor of the harness's own: an engine keeps its smallest cache itself, and the report
    says which did and whether that cache holds the whole store."""
    _, res = results
    w = next(iter(res["meta"]["workloads"].values()))
    assert w["memory_budget"] == w["unique_blocks"] * ENTRY_BYTES // 10
    line = _budget_share(w)
    assert "(10% of SSD-BlockHash's store)" in line
    assert "wiredtiger 1024 KiB" in line and "rocksdb 192 KiB" in line and "flashlog" in line
    assert "wiredtiger, rocksdb, flashlog can hold the whole store in memory" in line
    mid = {"unique_blocks": 200_000, "memory_budget": 480_000}  # 4.8 MB store
    line = _budget_share(mid)
    assert "wiredtiger 1024 KiB (22% of the store)" in line and "rocksdb" not in line
    assert "flashlog" not in line and "from DRAM" not in line
    # RocksDB's cache and two write buffers keep at least 64 KiB each: more than a budget
    # below 256 KiB, as budget / 2 + 2 x budget / 4 past it
    line = _budget_share({"unique_blocks": 200_000, "memory_budget": 199_999})
    assert "rocksdb 225 KiB" in line
    assert "rocksdb" not in _budget_share({"unique_blocks": 200_000, "memory_budget": 262_144})
    big = {"unique_blocks": 1_000_000, "memory_budget": 2_400_000}
    assert _budget_share(big) == " (10% of SSD-BlockHash's store)"


def test_replication_keeps_prefix_structure_with_fresh_ids():
    ids = np.array([5, 7, 9], np.uint64)
    a, b = mix(ids, 0), mix(ids, 1)
    assert np.array_equal(a, mix(ids, 0))
    assert not set(a.tolist()) & set(b.tolist())
    assert len(set(a.tolist())) == 3


def test_no_work_directory_left(results):
    out, _ = results
    assert not [p for p in Path(out).iterdir() if p.name.startswith("work-")]


def test_missing_redis_is_reported_not_fatal(tmp_path, monkeypatch):
    from sarp.bench import recovery_bench
    from sarp.bench.catalog import load_workload
    from sarp.bench.replay import prepare

    monkeypatch.setattr(recovery_bench, "find_server", lambda: None)
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    section = recovery_bench.recovery(p, [10], ["redis"], "wiredtiger", tmp_path, "none",
                                      Progress(False))
    assert section["rows"] == []
    assert any("redis-server not found" in n for n in section["notes"])


def test_recovery_of_a_workload_without_a_full_block_is_a_note(tmp_path):
    from sarp.bench import recovery_bench
    from sarp.bench.catalog import load_workload
    from sarp.bench.replay import prepare

    trace = tmp_path / "short.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": 100, "output_length": 5,
                                         "hash_ids": [1]}) + "\n" for t in range(3)))
    name = f"mooncake:{trace}"
    p = prepare(name, load_workload(name))
    section = recovery_bench.recovery(p, [10], ["sarp", "redis"], "wiredtiger", tmp_path,
                                      "none", Progress(False))
    assert section["rows"] == [] and any("no full block" in n for n in section["notes"])


def test_repetitions_interleave_across_designs_and_a_failure_is_an_na_row(tmp_path, monkeypatch):
    from sarp.bench import harness, measure

    calls = []

    def recording(design, setup, p, *, rep, **kw):
        calls.append((rep, design.name))
        if design.name == "segment-hash" and rep == 1 or design.name == "dram-blockhash":
            raise RuntimeError("engine gave up")
        return measure.measure_once(design, setup, p, rep=rep, **kw)

    monkeypatch.setattr(harness, "measure_once", recording)
    designs = ["sarp", "segment-hash", "segment-radix-capped", "dram-blockhash"]
    opts = RunOptions(workloads=[WORKLOAD], designs=designs, backends=["memory"], scale=0.05,
                      repeat=3, threads=[], sweep=[])
    res = run(opts, tmp_path, Progress(False))
    ssd = [c for c in calls if c[1] not in ("exact", "dram-blockhash")]
    assert ssd == [(0, "sarp"), (0, "segment-hash"), (0, "segment-radix-capped"),
                   (1, "sarp"), (1, "segment-hash"), (1, "segment-radix-capped"),
                   (2, "sarp"), (2, "segment-radix-capped")]
    rows = {r["design"]: r for r in res["rows"]}
    assert rows["segment-hash"]["error"] and "engine gave up" in rows["segment-hash"]["error"]
    assert rows["dram-blockhash"]["error"] and rows["dram-blockhash"]["backend"] == "dram"
    assert rows["segment-hash"]["backend"] == "memory"
    assert rows["sarp"]["repeats"] == 3 and rows["segment-radix-capped"]["repeats"] == 3
    # the cap is SARP's routing bytes in its first repetition (background timing may move
    # the median by a few superseded list versions)
    cap = rows["segment-radix-capped"]["radix_cap"]
    assert cap == res["meta"]["radix_caps"][f"{WORKLOAD} memory"]
    assert abs(cap - rows["sarp"]["routing_bytes"]) <= 0.1 * cap


def test_short_rows_repeat_interleaved_until_min_time_or_max_repeat(tmp_path, monkeypatch):
    """A row whose replays add up to less than min_time is repeated after ``repeat``, with the
    other short rows, up to max_repeat; a row past min_time stops at ``repeat``."""
    from sarp.bench import harness, measure

    wall = {"exact": 1.0, "sarp": 0.1, "segment-hash": 0.3, "segment-radix-capped": 2.0}
    calls = []

    def timed(design, setup, p, *, rep, **kw):
        calls.append((rep, design.name))
        row, trace = measure.measure_once(design, setup, p, rep=rep, **kw)
        return row, dataclasses.replace(trace, wall_s=wall[design.name])

    monkeypatch.setattr(harness, "measure_once", timed)
    designs = ["sarp", "segment-hash", "segment-radix-capped"]
    opts = RunOptions(workloads=[WORKLOAD], designs=designs, backends=["memory"], scale=0.05,
                      repeat=2, min_time=1.0, max_repeat=6, threads=[], sweep=[])
    res = run(opts, tmp_path, Progress(False))
    ssd = [c for c in calls if c[1] != "exact"]
    both = ["sarp", "segment-hash", "segment-radix-capped"]
    assert ssd == ([(0, d) for d in both] + [(1, d) for d in both]
                   + [(2, "sarp"), (2, "segment-hash"), (3, "sarp"), (3, "segment-hash")]
                   + [(4, "sarp"), (5, "sarp")])  # 0.3 s x 4 reaches 1 s; 0.1 s x 6 does not
    assert [c for c in calls if c[1] == "exact"] == [(0, "exact"), (1, "exact")]
    rows = {r["design"]: r for r in res["rows"]}
    assert {d: rows[d]["repeats"] for d in both} == {"sarp": 6, "segment-hash": 4,
                                                     "segment-radix-capped": 2}
    assert len(rows["sarp"]["throughput_rps_reps"]) == 6
    render(res, tmp_path)
    assert ("2 repetition(s), more (up to 6) while its replays add up to less than 1 s"
            in (tmp_path / "report.md").read_text())


def test_the_radix_cap_is_the_given_share_of_sarps_routing_bytes(tmp_path):
    opts = RunOptions(workloads=[WORKLOAD], designs=["sarp", "segment-radix-capped"],
                      backends=["memory"], scale=0.05, repeat=1, threads=[], sweep=[],
                      radix_cap_share=0.25)
    res = run(opts, tmp_path, Progress(False))
    rows = {r["design"]: r for r in res["rows"]}
    cap = rows["segment-radix-capped"]["radix_cap"]
    assert cap == res["meta"]["radix_caps"][f"{WORKLOAD} memory"]
    assert cap == int(0.25 * rows["sarp"]["routing_bytes"])
    assert rows["segment-radix-capped"]["routing_bytes"] <= cap  # the tree keeps to it
    assert any("0.25x SARP's routing bytes" in n for n in res["meta"]["notes"])


def test_the_radix_cap_comes_from_a_whole_replay_when_the_time_limit_cuts_sarps(tmp_path):
    """SARP's routing bytes after part of the workload would hold the tree to less than
    "SARP's routing bytes on the same workload": the cap is then probed by a whole replay."""
    opts = RunOptions(workloads=[WORKLOAD], designs=["sarp", "segment-radix-capped"],
                      backends=["memory"], scale=0.3, repeat=1, threads=[], sweep=[],
                      time_limit=1e-9)
    res = run(opts, tmp_path / "run", Progress(False))
    rows = {r["design"]: r for r in res["rows"]}
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.3, 0))
    assert rows["sarp"]["requests"] < len(p.contexts)  # cut short
    index = DESIGNS["sarp"].open(tmp_path / "whole", Setup("memory", store_budget(p), "group",
                                                           True))
    replay(index, p)
    whole = int(index.stats()["routing_bytes"])
    index.close()
    assert rows["sarp"]["routing_bytes"] < whole
    assert rows["segment-radix-capped"]["radix_cap"] == whole


def test_thread_rows_are_medians_of_interleaved_repetitions(tmp_path, monkeypatch):
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05, 0))
    walls = iter([1.0, 4.0, 3.0, 2.0, 2.0, 1.0])  # threads 1, 2; repetition by repetition
    order = []

    def fake_replay(index, prepared, threads):
        order.append(threads)
        return 10, next(walls)

    monkeypatch.setattr(scaling_mod, "replay_threads", fake_replay)
    rows = scaling_mod.scaling(p, DESIGNS["sarp"], Setup("memory", 1 << 20, "none", False),
                               [1, 2], tmp_path, Progress(False), repeat=3)
    assert order == [1, 2, 1, 2, 1, 2]
    assert [r["threads"] for r in rows] == [1, 2]
    assert rows[0]["throughput_rps"] == 5.0  # walls 1, 3, 2 -> 10, 3.33, 5 req/s
    assert rows[1]["throughput_rps"] == 5.0  # walls 4, 2, 1 -> 2.5, 5, 10 req/s
    assert rows[1]["speedup"] == 1.0


def test_a_refusal_of_direct_io_in_any_repetition_stays_in_the_row():
    reps = []
    for i, refused in enumerate([None, ["odirect"], ["flashlog", "odirect"]]):
        r = metrics.new_row("w", "sarp", "odirect")
        r.update(requests=10, throughput_rps=100.0 + i, truncated=False)
        if refused:
            r["direct_io_refused"] = refused
        reps.append(r)
    assert metrics.median_row(reps)["direct_io_refused"] == ["flashlog", "odirect"]
    assert "direct_io_refused" not in metrics.median_row(reps[:1])


def test_an_even_count_of_repetitions_keeps_a_number_they_all_gave():
    """The median of two is the mean of the middle pair; a number both gave (the budget, the
    routing bytes) stays the integer it was."""
    reps = []
    for rps in (100.0, 103.0):
        r = metrics.new_row("w", "sarp", "odirect")
        r.update(requests=10, throughput_rps=rps, routing_bytes=1536, truncated=False)
        reps.append(r)
    row = metrics.median_row(reps)
    assert row["throughput_rps"] == 101.5
    assert row["routing_bytes"] == 1536 and isinstance(row["routing_bytes"], int)


def test_a_failing_section_is_a_note_and_the_rows_stay(tmp_path, monkeypatch):
    """The threads table, the sweep and the recovery section run after the main rows: one that
    raises must not take those rows with it."""
    from sarp.bench import harness

    def boom(*args, **kw):
        raise RuntimeError("engine gave up")

    for name in ("sweep", "_scaling", "_recovery"):
        monkeypatch.setattr(harness, name, boom)
    opts = RunOptions(workloads=[WORKLOAD], designs=["sarp"], backends=["memory"], scale=0.05,
                      repeat=1, threads=[1, 2], sweep=[1], recovery_blocks=[1000])
    res = run(opts, tmp_path, Progress(False))
    assert {r["design"] for r in res["rows"]} == {"exact", "sarp"}
    assert res["threads"] == [] and res["sweep"] == [] and res["recovery"] == {}
    notes = [n for n in res["meta"]["notes"] if "engine gave up" in n]
    assert [n.split(":")[0] for n in notes] == [f"{WORKLOAD} sweep", f"{WORKLOAD} threads",
                                                 "recovery"]


@pytest.mark.parametrize("name", ["sarp", "dram-blockhash"])
def test_every_timed_reopen_recovers_the_same_index(tmp_path, monkeypatch, name):
    """The first insert after a reopen is timed on one more reopen: one made in a timed reopen
    would grow the index the next one recovers."""
    from sarp.bench import recovery_bench
    from sarp.bench.catalog import load_workload
    from sarp.bench.replay import prepare

    design = recovery_bench.DESIGNS[name]
    recovered = []

    def opener(path, setup):
        index = design.open(path, setup)
        recovered.append(index.recovery.get("bytes_read"))
        return index

    monkeypatch.setitem(recovery_bench.DESIGNS, name,
                        dataclasses.replace(design, opener=opener))
    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    section = recovery_bench.recovery(p, [10], [name], "wiredtiger", tmp_path, "none",
                                      Progress(False), repeat=3)
    row, = section["rows"]
    assert row["first_insert_s"] > 0
    crashed = recovered[5:]  # SARP's reopens after the crash, each of a copy of what it left
    assert len(recovered) == 5 + len(crashed) and recovered[0] in (None, 0)  # the build's
    assert len(set(recovered[1:5])) == 1 and recovered[1] > 0
    assert len(crashed) == (3 if name == "sarp" else 0) and len(set(crashed)) <= 1


@pytest.mark.parametrize("backend", ["odirect", "wiredtiger"])
def test_sarp_recovery_after_a_crash_replays_what_the_killed_writer_left(tmp_path, backend):
    """The crash reopens recover what a child process left that ended without closing: the
    journal records of its inserts after the last snapshot are replayed (a close would have
    taken a snapshot of them), and each reopen of a copy recovers the same records."""
    from sarp.bench import recovery_bench

    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    section = recovery_bench.recovery(p, [10], ["sarp"], backend, tmp_path, "group",
                                      Progress(False), repeat=2)
    row, = section["rows"]
    assert row["crash_journal_records"] > 0
    assert row["crash_recovery_s"] >= row["crash_store_open_s"] > 0
    assert row["crash_journal_replay_s"] > 0
    assert not any(tmp_path.rglob("*-crashed"))
    if backend == "odirect":  # a clean open reads what its close saved, an unclean one the slots
        assert row["crash_store_bytes_read"] > 10 * row["store_bytes_read"] > 0
        # the build's open names no region, its first write one; a small store: no checkpoint
        assert row["build_store_dirty_writes"] == 2 and row["build_store_checkpoints"] == 0
    else:  # WiredTiger does its own I/O
        assert row["crash_store_bytes_read"] is None and row["store_bytes_read"] is None
        assert row["build_store_dirty_writes"] is None


def test_a_row_times_its_reopen_from_the_disk(tmp_path, monkeypatch):
    """recovery_s of a row, like the recovery section's, reads the index's files from the disk:
    they are dropped from the page cache between the close and the reopen."""
    from sarp.bench import measure
    from sarp.bench.catalog import load_workload
    from sarp.bench.replay import prepare

    events = []
    monkeypatch.setattr(measure, "drop_page_cache", lambda path: events.append(("drop", path)))
    design = DESIGNS["sarp"]

    def opener(path, setup):
        events.append(("open", path))
        return design.open(path, setup)

    p = prepare(WORKLOAD, load_workload(WORKLOAD, 0.05))
    row, _ = measure.measure_once(dataclasses.replace(design, opener=opener),
                                  Setup("wiredtiger", 1 << 20, "none", True), p, rep=0,
                                  workdir=tmp_path, exact=None, time_limit=None,
                                  progress=Progress(False))
    assert [e[0] for e in events] == ["open", "drop", "open"] and events[1][1] == events[2][1]
    assert row["recovery_s"] > 0


def test_the_run_records_the_wiredtiger_build_and_names_a_diagnostic_one(tmp_path, monkeypatch,
                                                                          results):
    """A diagnostic (Debug) WiredTiger runs at -Og with assertions: a run on it says so in a
    note of report.md, and every run records the build it used."""
    assert results[1]["meta"]["engine_builds"] == {}  # memory only
    opts = RunOptions(workloads=[WORKLOAD], designs=["sarp"], backends=["wiredtiger"],
                      scale=0.05, repeat=1, threads=[], sweep=[], recovery_blocks=[])
    release = run(opts, tmp_path / "release", Progress(False))["meta"]
    assert release["engine_builds"]["wiredtiger"].endswith(", release build")
    assert not any("-Og" in n for n in release["notes"])
    from storage_backends import wiredtiger_store
    monkeypatch.setattr(wiredtiger_store, "build", lambda: "WiredTiger 11.3.1, diagnostic build")
    res = run(opts, tmp_path / "diagnostic", Progress(False))
    render(res, tmp_path / "diagnostic")
    note = ("The wiredtiger rows ran on WiredTiger 11.3.1, diagnostic build: compiled -Og with "
            "assertions")
    assert any(n.startswith(note) for n in res["meta"]["notes"])
    report = (tmp_path / "diagnostic" / "report.md").read_text()
    assert note in report
    assert ("- backends: wiredtiger; skipped: none; "
            "wiredtiger: WiredTiger 11.3.1, diagnostic build\n") in report
