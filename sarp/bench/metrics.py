"""One results row per (workload, design, backend): the metrics of paper Section 6, by plain name.

A metric a design cannot report is None in the row, with the reason in ``row["na"][name]``;
no number is ever filled in for it.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from sarp.bench.designs import is_sarp
from sarp.bench.replay import Prepared, Trace

RECOVERY_STAGES = ("store_open_s", "snapshot_load_s", "deserialize_s", "rebuild_s",
                   "journal_replay_s", "bytes_read")
RECOVERY_FIELDS = tuple(f"recovery_{s}" for s in RECOVERY_STAGES)
FIELDS = (
    "workload", "design", "backend", "requests", "throughput_rps",
    "match_mean_us", "match_p50_us", "match_p99_us",
    "insert_mean_us", "insert_p50_us", "insert_p99_us",
    "token_hit_rate", "hit_loss_vs_exact", "store_reads_per_match", "store_reads_per_request",
    "io_reads_per_request", "io_writes_per_request",
    "segment_retrievals_per_window", "candidates_before", "candidates_after",
    "candidates_retrieved", "refinements", "rematerializations",
    "routing_entries", "routing_bytes", "routing_bytes_per_block",
    "dram_bytes", "store_dram_bytes", "snapshot_bytes", "recovery_s", *RECOVERY_FIELDS,
    "store_bytes", "store_data_bytes", "space_vs_ssd_blockhash",
)
#: fields added after results files were first written: a file without them still loads, with
#: each marked n/a (``sarp.bench.results.load_results``)
LATER_FIELDS = ("io_reads_per_request", "io_writes_per_request", "store_dram_bytes",
                "refinements", "rematerializations", "store_data_bytes")
#: fields that identify a row (never aggregated across repetitions)
KEYS = ("workload", "design", "backend")
SARP_ONLY = "a SARP routing-entry metric"


def new_row(workload: str, design: str, backend: str) -> dict[str, Any]:
    """A row with every field None and no reasons yet."""
    row: dict[str, Any] = dict.fromkeys(FIELDS)
    row.update(workload=workload, design=design, backend=backend, na={})
    return row


def failed_row(workload: str, design: str, backend: str, exc: BaseException) -> dict[str, Any]:
    """The row of a design that raised ``exc``: every metric n/a, the error named."""
    cause = exc.__context__
    error = f"{type(exc).__name__}: {exc}" + (
        f" (while handling {type(cause).__name__}: {cause})" if cause is not None else "")
    row = new_row(workload, design, backend)
    for name in FIELDS:
        if name not in KEYS:
            mark_na(row, name, "the run failed")
    row["error"] = error
    return row


def mark_na(row: dict[str, Any], name: str, reason: str) -> None:
    """Set ``name`` to n/a with ``reason``."""
    row[name] = None
    row["na"][name] = reason


def timing(row: dict[str, Any], trace: Trace) -> None:
    """Throughput (requests / wall time of the replay) and match / insert latency."""
    row["requests"] = trace.completed
    row["throughput_rps"] = trace.completed / trace.wall_s if trace.wall_s > 0 else None
    for op, ns in (("match", trace.match_ns), ("insert", trace.insert_ns)):
        us = ns / 1e3
        row[f"{op}_mean_us"] = float(us.mean()) if len(us) else None
        row[f"{op}_p50_us"] = float(np.percentile(us, 50)) if len(us) else None
        row[f"{op}_p99_us"] = float(np.percentile(us, 99)) if len(us) else None


def hit_rate(row: dict[str, Any], trace: Trace, p: Prepared, exact: Trace | None) -> None:
    """Token hit rate, and its relative loss against the exact oracle on the same requests."""
    k = trace.completed
    context = int(p.context_tokens[:k].sum())
    mine = int(trace.matched_tokens.sum())
    row["token_hit_rate"] = mine / context if context else None
    if exact is None or exact.completed < k:
        mark_na(row, "hit_loss_vs_exact", "the exact oracle did not run on these requests")
        return
    ref = int(exact.matched_tokens[:k].sum())
    if ref == 0:
        mark_na(row, "hit_loss_vs_exact", "the exact oracle matched no tokens")
    else:
        row["hit_loss_vs_exact"] = (ref - mine) / ref


def reads(row: dict[str, Any], design: str, trace: Trace) -> None:
    """Store reads per match and, for SARP, the candidates per query window (Table 4); a
    design without a record store gets n/a from ``request_reads``."""
    st, n = trace.stats, max(trace.completed, 1)
    if is_sarp(design):
        retrieved = st.get("segments_retrieved", 0)
        row["store_reads_per_match"] = retrieved / n
        windows = st.get("windows", 0)  # each routes through at most one entry
        row["segment_retrievals_per_window"] = retrieved / windows if windows else None
        for name, key in (("candidates_before", "candidates_before"),
                          ("candidates_after", "candidates_after"),
                          ("candidates_retrieved", "segments_retrieved")):
            row[name] = st.get(key, 0) / windows if windows else None
        return
    row["store_reads_per_match"] = st.get("store_reads", 0) / n
    for name in ("segment_retrievals_per_window", "candidates_before", "candidates_after",
                 "candidates_retrieved"):
        mark_na(row, name, SARP_ONLY)


def request_reads(row: dict[str, Any], stats: dict[str, Any], trace: Trace) -> None:
    """Every logical read of the design's record stores (its matches, inserts and background
    work, a spill store's included) per replayed request. A design without one has no store
    reads, per request or per match: both are n/a."""
    stores = [s for s in (stats.get("store"), stats.get("spill_store")) if s]
    if not stores:
        for name in ("store_reads_per_match", "store_reads_per_request"):
            mark_na(row, name, "the design keeps no record store")
        return
    row["store_reads_per_request"] = (sum(s["logical_reads"] for s in stores)
                                      / max(trace.completed, 1))


def request_io(row: dict[str, Any], before: dict[str, Any], after: dict[str, Any],
               trace: Trace) -> None:
    """Read and write calls through the I/O layer (``storage_backends.io``) during the replay,
    per request: the record stores' (a spill store's included) and the design's own files
    (SARP's journal). Counted only where every store does its I/O through that layer (flashlog,
    odirect); a read or write there is one system call on the device's files."""
    names = ("io_reads_per_request", "io_writes_per_request")
    stores = [k for k in ("store", "spill_store") if after.get(k)]
    blind = [after[k]["kind"] for k in stores if "io" not in after[k]]
    if not stores or blind:
        reason = ("the design keeps no record store" if not blind
                  else "the memory backend does no I/O" if blind[0] == "memory"
                  else f"the {blind[0]} engine does its own I/O, outside the I/O layer")
        for name in names:
            mark_na(row, name, reason)
        return
    layers = [(before[k]["io"], after[k]["io"]) for k in stores]
    if "io" in after:
        layers.append((before["io"], after["io"]))
    n = max(trace.completed, 1)
    for name, counter in zip(names, ("reads", "writes"), strict=True):
        row[name] = sum(a[counter] - b[counter] for b, a in layers) / n


def state(row: dict[str, Any], design: str, stats: dict[str, Any], p: Prepared) -> None:
    """In-DRAM state: the index's (entries, bytes, bytes per unique block), and what its
    record stores keep in DRAM beside their memory budget (odirect's newest-copy bits and
    sparse key table, flashlog's filters and fences), as the engines report it."""
    if is_sarp(design):
        row["routing_entries"] = stats.get("routing_entries")
        row["routing_bytes"] = stats.get("routing_bytes")
        row["refinements"] = stats.get("backfills")
        row["rematerializations"] = stats.get("rematerializations")
    else:  # the tree's nodes in DRAM: a capped one spills the others to its store
        for name in ("refinements", "rematerializations"):
            mark_na(row, name, SARP_ONLY)
        entries = stats.get("resident_nodes", stats.get("entries"))
        if entries is None:
            mark_na(row, "routing_entries", "the design keeps no in-DRAM index")
        row["routing_entries"] = entries
        row["routing_bytes"] = stats.get("dram_bytes")
    stores = [s for s in (stats.get("store"), stats.get("spill_store")) if s]
    if stores and all("dram_bytes" in s for s in stores):
        row["store_dram_bytes"] = sum(s["dram_bytes"] for s in stores)
    else:
        mark_na(row, "store_dram_bytes", "no record store, or one that reports no DRAM of its "
                "own (memory, wiredtiger, rocksdb: within the budget)")
    row["dram_bytes"] = (row["routing_bytes"] or 0) + (row["store_dram_bytes"] or 0)
    refused = [s["kind"] for s in stores if s.get("direct_io_effective") is False]
    if refused:  # the file system refused O_DIRECT: those reads went through the page cache
        row["direct_io_refused"] = refused
    nbytes = row["routing_bytes"]
    row["routing_bytes_per_block"] = nbytes / p.unique_blocks if nbytes and p.unique_blocks \
        else (0.0 if nbytes == 0 else None)


def persistence(row: dict[str, Any], snap: dict[str, Any], store: tuple[int, int] | None,
                store_reason: str, recovery: dict[str, Any] | None, recovery_reason: str) -> None:
    """Snapshot bytes, the store's on-disk size (all its files, and those holding records:
    ``store``), recovery time and its breakdown."""
    row["snapshot_bytes"] = snap.get("bytes", snap.get("bytes_written"))
    row["snapshot_s"] = snap.get("seconds")
    if store is None:
        for name in ("store_bytes", "store_data_bytes"):
            mark_na(row, name, store_reason)
    else:
        row["store_bytes"], row["store_data_bytes"] = store
    if recovery is None:
        for name in ("recovery_s", *RECOVERY_FIELDS):
            mark_na(row, name, recovery_reason)
        return
    row["recovery_s"] = recovery.get("total_s", recovery.get("seconds"))
    for stage, name in zip(RECOVERY_STAGES, RECOVERY_FIELDS, strict=True):
        if stage in recovery:
            row[name] = recovery[stage]
        else:
            mark_na(row, name, f"the design's recovery report has no {stage}")


def space_ratios(rows: list[dict[str, Any]]) -> None:
    """space_vs_ssd_blockhash: the store's data bytes over SSD-BlockHash's, same workload and
    backend, where both stores hold the whole workload: a replay cut short by the time limit
    stored only its first requests."""
    ref = {(r["workload"], r["backend"]): r for r in rows if r["design"] == "ssd-blockhash"}
    for r in rows:
        base = ref.get((r["workload"], r["backend"]))
        if r["store_data_bytes"] is None:
            mark_na(r, "space_vs_ssd_blockhash", "no on-disk store size")
        elif base is None or not base["store_data_bytes"]:
            mark_na(r, "space_vs_ssd_blockhash", "no SSD-BlockHash row on this backend")
        elif r.get("truncated"):
            mark_na(r, "space_vs_ssd_blockhash", "its replay was cut short: its store holds "
                    "the first requests only")
        elif base.get("truncated"):
            mark_na(r, "space_vs_ssd_blockhash", "SSD-BlockHash's replay was cut short: its "
                    "store holds the first requests only")
        else:
            r["space_vs_ssd_blockhash"] = r["store_data_bytes"] / base["store_data_bytes"]


def median_row(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The repetitions of one row combined: the median of each number (a number every
    repetition gave alike, such as the memory budget, as it is), the fewest requests."""
    out = dict(reps[0])
    out["na"] = {k: v for r in reps for k, v in r["na"].items()}
    for name, value in reps[0].items():
        if name in KEYS or name == "na" or isinstance(value, (str, bool, list)):
            continue
        values = [r[name] for r in reps if isinstance(r.get(name), (int, float))]
        if not values:
            out[name] = None
        elif len(set(values)) == 1:
            out[name] = values[0]  # no mean of two middle values turns an int into a float
        else:
            out[name] = statistics.median(values)
    refused = sorted({kind for r in reps for kind in r.get("direct_io_refused", [])})
    if refused:  # in any repetition: that one read through the page cache
        out["direct_io_refused"] = refused
    out["requests"] = min(r["requests"] for r in reps)
    out["repeats"] = len(reps)
    # in repetition order: repetition r of every design on a backend ran side by side
    out["throughput_rps_reps"] = [r["throughput_rps"] for r in reps]
    out["truncated"] = any(r.get("truncated") for r in reps)
    return out
