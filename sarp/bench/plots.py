"""The plots of a results directory (PNG, matplotlib's Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)
import numpy as np  # noqa: E402

from sarp.bench.designs import DESIGNS  # noqa: E402


def _label(design: str) -> str:
    return DESIGNS[design].label if design in DESIGNS else design


def _grouped(ax: Any, rows: list[dict[str, Any]], field: str, title: str) -> None:
    """Bars of ``field``: one group per workload, one bar per design."""
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    designs = list(dict.fromkeys(r["design"] for r in rows))
    width = 0.8 / max(len(designs), 1)
    drawn = False
    for j, d in enumerate(designs):
        # a value of 0 (a replay the time limit cut before its first request) has no bar on
        # the log scale
        vals = [next((r[field] for r in rows if r["workload"] == w and r["design"] == d
                      and (r.get(field) or 0) > 0), np.nan) for w in workloads]
        drawn = drawn or not all(np.isnan(vals))
        ax.bar(np.arange(len(workloads)) + j * width, vals, width, label=_label(d))
    ax.set_xticks(np.arange(len(workloads)) + 0.4 - width / 2)
    ax.set_xticklabels([w.split("/")[-1] for w in workloads], rotation=20, fontsize=8)
    if drawn:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=9)


def _by_backend(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows per storage backend; DRAM-only designs appear beside every backend."""
    dram = [r for r in rows if r["backend"] == "dram"]
    backends = list(dict.fromkeys(r["backend"] for r in rows if r["backend"] != "dram"))
    return {b: [r for r in rows if r["backend"] == b] + dram for b in backends} or {"dram": dram}


def _save(fig: Any, legend_ax: Any, path: Path, **legend: Any) -> None:
    """Put the legend on ``legend_ax``, write the figure to ``path`` and free it."""
    legend_ax.legend(**{"fontsize": 8, **legend})
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput(rows: list[dict[str, Any]], path: Path) -> None:
    """Plot request throughput per workload and design, one panel per backend, to ``path``."""
    groups = _by_backend(rows)
    fig, axes = plt.subplots(len(groups), 1, figsize=(10, 3.2 * len(groups)), squeeze=False)
    for ax, (backend, rs) in zip(axes[:, 0], groups.items(), strict=True):
        _grouped(ax, rs, "throughput_rps", f"request throughput (req/s), backend {backend}")
    _save(fig, axes[0, 0], path, fontsize=7, ncol=4)


def latency(rows: list[dict[str, Any]], path: Path) -> None:
    """Plot mean match and insert latency per workload and design, a row per backend."""
    groups = _by_backend(rows)
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 3.2 * len(groups)), squeeze=False)
    for i, (backend, rs) in enumerate(groups.items()):
        _grouped(axes[i, 0], rs, "match_mean_us", f"mean match latency (us), {backend}")
        _grouped(axes[i, 1], rs, "insert_mean_us", f"mean insert latency (us), {backend}")
    _save(fig, axes[0, 0], path, fontsize=7, ncol=3)


def recovery(rows: list[dict[str, Any]], path: Path) -> None:
    """Plot recovery time against unique blocks per design, with the time to read SARP's
    snapshot at sequential bandwidth as a reference line."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for design in dict.fromkeys(r["design"] for r in rows):
        pts = sorted((r["blocks"], r["recovery_s"]) for r in rows
                     if r["design"] == design and (r.get("recovery_s") or 0) > 0)
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=_label(design))
    ref = sorted((r["blocks"], r["physical_s"]) for r in rows
                 if r["design"] == "sarp" and r.get("physical_s") is not None)
    if ref:
        ax.plot(*zip(*ref, strict=True), ls="--", color="gray",
                label="SARP snapshot / sequential read bandwidth")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("unique blocks")
    ax.set_ylabel("recovery time (s)")
    _save(fig, ax, path)


def sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """Plot the token hit-rate loss vs exact matching per MaxRetrieval, a line per workload."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    order = sorted({r["max_retrieval"] for r in rows}, key=lambda k: (k == 0, k))
    for w in dict.fromkeys(r["workload"] for r in rows):
        vals = {r["max_retrieval"]: r["hit_loss_vs_exact"] for r in rows if r["workload"] == w}
        ys = [100 * vals[k] if vals.get(k) is not None else np.nan for k in order]
        ax.plot(range(len(order)), ys, marker="o", label=w)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([str(k) if k else "unbounded" for k in order])
    ax.set_xlabel("MaxRetrieval")
    ax.set_ylabel("token hit-rate loss vs exact (%)")
    _save(fig, ax, path)


def write_plots(results: dict[str, Any], out: Path) -> tuple[list[str], dict[str, str]]:
    """Write every plot the results have data for: (files written, {file: why skipped})."""
    rec = results.get("recovery", {}).get("rows", [])
    plan = [("throughput.png", throughput, results["rows"]),
            ("latency.png", latency, results["rows"]),
            ("recovery.png", recovery, rec),
            ("maxretrieval.png", sweep, results.get("sweep", []))]
    written, skipped = [], {}
    for name, draw, rows in plan:
        if rows:
            draw(rows, out / name)
            written.append(name)
        else:
            skipped[name] = "no data in this run"
    return written, skipped
