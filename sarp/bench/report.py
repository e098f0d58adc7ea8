"""``report.md`` of a results directory: markdown tables, ratios from rows of the same run."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sarp.bench.designs import BREAKDOWN, DESIGNS
from sarp.bench.metrics import RECOVERY_FIELDS
from sarp.bench.plots import write_plots
from sarp.bench.replay import ENTRY_BYTES
from sarp.bench.targets import THROUGHPUT, paired_ratios, verdicts
from storage_backends import flashlog, rocksdb_store, wiredtiger_store
from storage_backends.io import MIN_BLOCK

REPORT_FILE = "report.md"


def _rocksdb_held(budget: int) -> int:
    cache, buffer = rocksdb_store.memory_sizes(budget)
    return cache + rocksdb_store.WRITE_BUFFERS * buffer


#: engine -> (the bytes of records it may keep in memory for a budget, whatever that budget;
#: the share of the budget meant for them): WiredTiger's cache, RocksDB's block cache and
#: write buffers, and the flash log's page buffers (at least one instance's page of 4 KiB
#: device blocks; records stay there until it fills; its filters take the rest)
MEMORY_HELD = {"wiredtiger": (wiredtiger_store.cache_size, 1.0),
               "rocksdb": (_rocksdb_held, 1.0),
               "flashlog": (lambda b: max(flashlog.MIN_PAGE_BLOCKS * MIN_BLOCK, b // 2), 0.5)}
RATIO_BASELINES = tuple(THROUGHPUT)  # the baselines of the throughput targets


def fmt(value: Any) -> str:
    """A cell: n/a for a missing value, 4 significant digits for a float."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _label(design: str) -> str:
    return DESIGNS[design].label if design in DESIGNS else design


def row_table(rows: list[dict[str, Any]], fields: list[str]) -> str:
    """Rows of results as a table of ``fields`` after workload, design and backend."""
    return table(["workload", "design", "backend", *fields],
                 [[r["workload"], _label(r["design"]), r["backend"], *(r.get(f) for f in fields)]
                  for r in rows])


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def ratios(rows: list[dict[str, Any]], field: str, invert: bool) -> str:
    """SARP against each baseline on the same workload and backend, from this run's rows:
    SARP's ``field`` over the baseline's, or the baseline's over SARP's (``invert``). For
    throughput, the median of the per-repetition ratios, then their range
    (``targets.paired_ratios``)."""
    index = {(r["workload"], r["design"], r["backend"]): r for r in rows}
    out = []
    for r in rows:
        if r["design"] != "sarp":
            continue
        cells: list[Any] = [r["workload"], r["backend"]]
        for base in RATIO_BASELINES:
            br = index.get((r["workload"], base, r["backend"]), {})
            if field == "throughput_rps":
                rs = paired_ratios(r, br)
                cells.append(f"{fmt(statistics.median(rs))} ({fmt(min(rs))}-{fmt(max(rs))})"
                             if rs else None)
                continue
            b = br.get(field)
            cells.append(_ratio(b, r[field]) if invert else _ratio(r[field], b))
        out.append([*cells, r["hit_loss_vs_exact"]])
    return table(["workload", "backend", *(f"vs {_label(b)}" for b in RATIO_BASELINES),
                  "SARP hit loss vs exact"], out)


def breakdown(rows: list[dict[str, Any]]) -> str:
    """Each design-breakdown variant with full SARP's change against it (paper 6.5)."""
    index = {(r["workload"], r["design"], r["backend"]): r for r in rows}
    fields = ("candidates_before", "candidates_after", "candidates_retrieved", "routing_bytes",
              "segment_retrievals_per_window")
    out = []
    for r in rows:
        full = index.get((r["workload"], "sarp", r["backend"]))
        if r["design"] not in BREAKDOWN or full is None:
            continue
        cells: list[Any] = [r["workload"], r["backend"], _label(r["design"])]
        for f in fields:
            ch = _ratio(full.get(f), r.get(f))
            cells.append(f"{fmt(r.get(f))} -> {fmt(full.get(f))}"
                         + ("" if ch is None else f" ({100 * (ch - 1):+.1f}%)"))
        out.append(cells)
    return table(["workload", "backend", "variant", *fields], out)


def na_reasons(rows: list[dict[str, Any]]) -> str:
    """Every n/a of the rows with its reason, grouped by reason."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r.get("error"):
            continue  # listed under Failures
        for name, reason in r.get("na", {}).items():
            seen.setdefault((reason, name), set()).add(_label(r["design"]))
    return "\n".join(f"- `{name}`: {reason} ({', '.join(sorted(ds))})"
                     for (reason, name), ds in sorted(seen.items())) or "- none"


def _repetitions(o: dict[str, Any]) -> str:
    """How many repetitions a row got, from the run's options (older results: no minimum)."""
    text = f"{o.get('repeat')} repetition(s)"
    if o.get("min_time"):
        text += (f", more (up to {o.get('max_repeat')}) while its replays add up to less than "
                 f"{fmt(o['min_time'])} s (a row's count is its `repeats`)")
    return text


def _header(meta: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    o = meta.get("options", {})
    lines = ["# SARP benchmark report", ""]
    if o:
        truncated = [f"{r['workload']} {r['design']} {r['backend']}" for r in rows
                     if r.get("truncated")]
        buffered = [f"{r['workload']} {r['design']} {r['backend']}" for r in rows
                    if r.get("direct_io_refused")]
        limit = o.get("time_limit")
        lines += [
            f"- started {meta.get('started')}, {fmt(meta.get('seconds'))} s, "
            f"{'`--quick`' if o.get('quick') else 'full run'}; {_repetitions(o)} per row, "
            "interleaved across the designs of a backend (repetition r of each before "
            "r + 1 of any), medians reported", f"- scale {o.get('scale')}, seed {o.get('seed')}, "
            f"durability `{o.get('durability')}`, Python {meta.get('python')}, "
            f"{meta.get('cpus')} CPUs", f"- time limit per replay: "
            f"{'none' if limit is None else f'{fmt(limit)} s'}; cut short: "
            f"{', '.join(truncated) or 'none'}",
            f"- backends: {', '.join(o.get('backends', []))}; skipped: "
            + (", ".join(f"{k} ({v})" for k, v in meta.get("skipped_backends", {}).items())
               or "none")
            + "".join(f"; {k}: {v}" for k, v in meta.get("engine_builds", {}).items()),
            "- method (paper 6.1): sessions round-robin; each request matches its context, then "
            "inserts context + output; block IDs are computed once, untimed; throughput is "
            "requests over the replay's wall time (SARP's background work drained at the end)",
            "- SSD-backed designs: direct I/O and a memory budget of 10% of SSD-BlockHash's "
            f"uncompressed store size (unique blocks x {ENTRY_BYTES} bytes); "
            "DRAM-only designs show backend `dram`; direct I/O refused by the file system "
            f"(reads through the page cache): {', '.join(buffered) or 'none'}",
        ]
        for name, w in meta.get("workloads", {}).items():
            scale = f" (scale {w['scale']:g})" if "scale" in w else ""
            lines.append(f"- {name}{scale}: {w['requests']} requests, {w['unique_blocks']} unique "
                         f"blocks, memory budget {w['memory_budget']} bytes"
                         + _budget_share(w))
        caps: dict[str, set[int]] = {}
        for key, cap in meta.get("radix_caps", {}).items():
            caps.setdefault(key.rsplit(" ", 1)[0], set()).add(cap)
        for workload, values in caps.items():
            lines.append(f"- Segment-Radix (capped) cap on {workload}: "
                         f"{', '.join(map(str, sorted(values)))} bytes")
        lines += [f"- {n}" for n in meta.get("notes", [])]
    return lines


def _budget_share(w: dict[str, Any]) -> str:
    """The budget against SSD-BlockHash's store, and the engines that keep more in memory than
    the budget gives them (``MEMORY_HELD``), with a warning when that can hold the whole
    store (their rows then measure reads from DRAM)."""
    store = w["unique_blocks"] * ENTRY_BYTES
    if not store:
        return ""
    budget = w["memory_budget"]
    text = f" ({budget / store:.0%} of SSD-BlockHash's store)"
    raised = []
    for kind, (held, part) in MEMORY_HELD.items():
        least = held(int(budget))
        if least > budget * part:
            raised.append((kind, least))
    if raised:
        text += "; engines that keep more in memory whatever the budget: " + ", ".join(
            f"{kind} {least >> 10} KiB ({least / store:.0%} of the store)"
            for kind, least in raised)
        full = [kind for kind, least in raised if least >= store]
        if full:
            text += (f" ({', '.join(full)} can hold the whole store in memory: those rows "
                     "measure reads from DRAM)")
    return text


def render(results: dict[str, Any], out: Path) -> Path:
    """Write ``report.md`` and the plots of ``results`` into ``out``."""
    rows = results.get("rows", [])
    written, skipped = write_plots(results, out)
    parts = _header(results.get("meta", {}), rows)
    parts += ["", "## Targets", "", *verdicts(results)]
    if rows:
        parts += ["", "## SARP over the baselines (same run, same workload and backend)", "",
                  "Request throughput, SARP over the baseline (x): the median of the ratios of "
                  "one repetition of SARP over the same repetition of the baseline, which ran "
                  "side by side, then, in parentheses, the lowest and highest of them (over the "
                  "repetitions both rows have: one that got more to reach --min-time adds "
                  "none):", "",
                  ratios(rows, "throughput_rps", False), "",
                  "Mean match latency, the baseline's over SARP's (x):", "",
                  ratios(rows, "match_mean_us", True), "",
                  "Mean insert latency, the baseline's over SARP's (x):", "",
                  ratios(rows, "insert_mean_us", True), "", "## Throughput and latency", "",
                  row_table(rows, ["requests", "throughput_rps", "match_mean_us", "match_p50_us",
                                   "match_p99_us", "insert_mean_us", "insert_p50_us",
                                   "insert_p99_us"]),
                  "", "## Hit rate, store reads, candidates per query window", "",
                  "The candidate columns are per query window, windows that route nowhere "
                  "included, and after filtering at most MaxRetrieval: the paper's Table 4 "
                  "counts per routing entry, before that bound.", "",
                  row_table(rows, ["token_hit_rate", "hit_loss_vs_exact",
                                   "store_reads_per_match", "store_reads_per_request",
                                   "io_reads_per_request", "io_writes_per_request",
                                   "segment_retrievals_per_window",
                                   "candidates_before", "candidates_after",
                                   "candidates_retrieved"]),
                  "", "## In-DRAM state, snapshot, recovery and space", "",
                  row_table(rows, ["routing_entries", "routing_bytes", "routing_bytes_per_block",
                                   "dram_bytes", "snapshot_bytes", "recovery_s", "store_bytes",
                                   "store_data_bytes", "space_vs_ssd_blockhash"]),
                  "", "## Recovery breakdown after reopen (s, bytes)", "",
                  row_table([r for r in rows if r.get("recovery_s") is not None],
                            ["recovery_s", *RECOVERY_FIELDS])]
        bd = breakdown(rows)
        if bd.count("\n") > 1:
            parts += ["", "## Design breakdown (paper 6.5)", "",
                      "Each cell: variant -> full SARP (SARP's change against the variant).",
                      "", bd, "", "Refinements and rematerializations of full SARP in these "
                      "replays (none: the variant without that mechanism is the same index "
                      "at this scale):", "",
                      row_table([r for r in rows if r["design"] == "sarp"],
                                ["refinements", "rematerializations"])]
    if results.get("sweep"):
        parts += ["", "## Hit-rate loss against MaxRetrieval (SARP; 0 = unbounded)", "",
                  table(["workload", "backend", "MaxRetrieval", "token_hit_rate",
                         "hit_loss_vs_exact", "retrievals/match", "retrievals/window"],
                        [[r["workload"], r["backend"], r["max_retrieval"], r["token_hit_rate"],
                          r["hit_loss_vs_exact"], r["segment_retrievals_per_match"],
                          r["segment_retrievals_per_window"]] for r in results["sweep"]])]
    if results.get("threads"):
        parts += ["", "## Throughput against request threads", "",
                  table(["workload", "design", "backend", "threads", "throughput_rps",
                         "speedup"],
                        [[r["workload"], _label(r["design"]), r["backend"], r["threads"],
                          r["throughput_rps"], r["speedup"]] for r in results["threads"]])]
    parts += _recovery_section(results.get("recovery", {}))
    failed = [r for r in rows if r.get("error")]
    if failed:
        parts += ["", "## Failures (every metric of these rows is n/a)", ""]
        parts += [f"- {r['workload']} {_label(r['design'])} on {r['backend']}: {r['error']}"
                  for r in failed]
    parts += ["", "## Not available (n/a) and why", "", na_reasons(rows), "", "## Plots", ""]
    parts += [f"![{p}]({p})" for p in written] + [f"- {p}: {why}" for p, why in skipped.items()]
    path = out / REPORT_FILE
    path.write_text("\n".join(parts) + "\n")
    return path


def _recovery_section(rec: dict[str, Any]) -> list[str]:
    if not rec:
        return []
    lines = ["", "## Recovery anchor: restart until ready, at the same number of blocks", ""]
    lines += [f"- {n}" for n in rec.get("notes", [])]
    fields = ["recovery_s", "store_open_s", "snapshot_load_s", "deserialize_s", "rebuild_s",
              "journal_replay_s", "bytes_read", "store_bytes_read", "snapshot_bytes",
              "physical_s", "first_insert_s", "build_s", "crash_recovery_s",
              "crash_store_open_s", "crash_journal_replay_s", "crash_journal_records",
              "crash_store_bytes_read"]
    lines += ["", table(["blocks", "design", "backend", *fields],
                        [[r["blocks"], _label(r["design"]), r.get("backend"),
                          *(r.get(f) for f in fields)] for r in rec.get("rows", [])])]
    if rec.get("disk"):
        lines += ["", table(["blocks", "file bytes", "sequential O_DIRECT read MB/s"],
                            [[d["blocks"], d["bytes"], d["mb_per_s"]] for d in rec["disk"]])]
    return lines
