"""The targets of the backend-comparison benchmark, judged from one results file.

Throughput targets compare SARP with a baseline on the same workload and backend by the
median of the per-repetition ratios: repetition r of SARP over repetition r of the baseline,
which ran side by side (the repetitions of a backend's designs are interleaved). A row that
got more repetitions than the other (``--min-time``) adds none: only pairs count. Recovery
targets compare recovery times at one size from the recovery anchor; the targets are stated
at 10^7 blocks, and a run at another size is judged at its own and says so.
"""

from __future__ import annotations

import statistics
from typing import Any

#: SARP's request throughput over each baseline's, at least
THROUGHPUT = {"ssd-blockhash": 3.7, "segment-radix-capped": 2.0, "segment-hash": 1.15}
#: token hit-rate loss against exact matching, at most (a fraction)
HIT_LOSS = 0.0003
#: the baseline's recovery time over SARP's, at least
RECOVERY = {"dram-blockhash": 30.0, "redis": 50.0}
#: the size the recovery targets are stated at
RECOVERY_BLOCKS = 10_000_000


def paired_ratios(a: dict[str, Any], b: dict[str, Any]) -> list[float]:
    """Throughput of each repetition of row ``a`` over the same repetition of row ``b``,
    over the repetitions both rows have (a failed row has none). A results file written
    before rows kept their repetitions gives the ratio of the two rows' throughputs."""
    ra, rb = a.get("throughput_rps_reps"), b.get("throughput_rps_reps")
    if ra is None or rb is None:
        ra, rb = [a.get("throughput_rps")], [b.get("throughput_rps")]
    return [p / q for p, q in zip(ra, rb, strict=False) if p is not None and q]


def paired_ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """The median of ``paired_ratios``, or None without a pair."""
    rs = paired_ratios(a, b)
    return statistics.median(rs) if rs else None


def verdicts(results: dict[str, Any]) -> list[str]:
    """Markdown lines: for each target, the rows that meet it and those that miss."""
    rows = [r for r in results.get("rows", []) if not r.get("error")]
    index = {(r["workload"], r["design"], r["backend"]): r for r in rows}
    sarp = [r for r in rows if r["design"] == "sarp"]
    lines = []
    for base, floor in THROUGHPUT.items():
        judged: list[tuple[dict[str, Any], float]] = []
        cut = 0  # pairs with a replay the time limit cut: it covers the first requests only
        for r in sarp:
            other = index.get((r["workload"], base, r["backend"]))
            if other is None:
                continue
            x = paired_ratio(r, other)
            if x is None:
                continue
            judged.append((r, x))
            cut += bool(r.get("truncated") or other.get("truncated"))
        if not judged:
            continue
        misses = [f"{r['workload']} on {r['backend']} ({x:.2f})" for r, x in judged if x < floor]
        lines.append(f"- SARP over {base}, at least {floor:g}x: met on "
                     f"{len(judged) - len(misses)} of {len(judged)} rows"
                     + (f"; misses: {', '.join(misses)}" if misses else "")
                     + (f"; {cut} of the rows compare a replay cut short by the time limit "
                        "(its first requests only)" if cut else ""))
    known: list[tuple[dict[str, Any], float]] = [
        (r, r["hit_loss_vs_exact"]) for r in sarp if r.get("hit_loss_vs_exact") is not None]
    if known:
        worst, loss = max(known, key=lambda rx: rx[1])
        over = [f"{r['workload']} on {r['backend']}" for r, x in known if x > HIT_LOSS]
        lines.append(f"- token hit-rate loss against exact, at most {HIT_LOSS:.2%}: largest "
                     f"{loss:.4%} ({worst['workload']} on {worst['backend']}); "
                     + (f"over it: {', '.join(over)}" if over else "met on every row")
                     + (f"; not measured on {len(sarp) - len(known)} rows"
                        if len(known) < len(sarp) else ""))
    lines += _recovery(results.get("recovery", {}))
    return lines or ["- nothing to judge: the run measured none of SARP's targets"]


def _recovery(rec: dict[str, Any]) -> list[str]:
    """The recovery targets at the largest size the recovery anchor measured."""
    times: dict[int, dict[str, float]] = {}
    for r in rec.get("rows", []):
        if r.get("recovery_s") is not None:
            times.setdefault(r["blocks"], {})[r["design"]] = r["recovery_s"]
    sized = {blocks: t for blocks, t in times.items() if t.get("sarp")}
    if not sized:
        return []
    blocks = max(sized)
    t = sized[blocks]
    lines = []
    for base, floor in RECOVERY.items():
        if base in t:
            x = t[base] / t["sarp"]
            verdict = ("met" if x >= floor else "missed") if blocks >= RECOVERY_BLOCKS else (
                f"not judged: the target is stated at {RECOVERY_BLOCKS:,} blocks (`sarp-bench "
                f"recovery --blocks {RECOVERY_BLOCKS}`)")
            lines.append(f"- recovery at {blocks:,} blocks, SARP over {base}, at least "
                         f"{floor:g}x: {x:.1f}x ({t['sarp']:.4g} s against {t[base]:.4g} s), "
                         + verdict)
    return lines
