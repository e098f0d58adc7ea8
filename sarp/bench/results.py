"""The results directory: ``results.json`` (rows plus the sweep, threads and recovery sections),
``report.md`` and the plots."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from sarp.bench.metrics import FIELDS, KEYS, LATER_FIELDS

RESULTS_FILE = "results.json"


def default_dir(root: Path = Path("results")) -> Path:
    """``results/<timestamp>``: where a run writes when no --out is given."""
    return root / time.strftime("%Y%m%d-%H%M%S")


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to {RESULTS_FILE}")


def write_results(out: Path, results: dict[str, Any]) -> Path:
    """Write ``results.json`` in ``out``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    path.write_text(json.dumps(results, indent=1, default=_plain) + "\n")
    return path


def load_results(out: Path) -> dict[str, Any]:
    """The results of the directory ``out``; ValueError if its results.json is not one."""
    path = out / RESULTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {RESULTS_FILE} in {str(out)!r}")
    try:
        results = json.loads(path.read_text())
    except ValueError:  # not JSON, or not text
        results = None
    if not (isinstance(results, dict) and isinstance(results.get("meta"), dict)
            and isinstance(results.get("rows"), list)
            and isinstance(results.get("sweep", []), list)
            and isinstance(results.get("threads", []), list)
            and isinstance(results.get("recovery", {}), dict)):
        raise ValueError(f"{str(path)!r} is not a sarp-bench results file")
    for i, row in enumerate(results["rows"]):
        if not (isinstance(row, dict) and all(isinstance(row.get(k), str) for k in KEYS)):
            raise ValueError(f"{str(path)!r}: row {i} lacks its workload, design or backend")
        for name in LATER_FIELDS:  # a file from before the metric: n/a, with the reason
            if name not in row:
                row[name] = None
                row.setdefault("na", {})[name] = "not measured: the file predates the metric"
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise ValueError(f"{str(path)!r}: row {i} lacks {', '.join(missing[:3])}"
                             + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    return results
