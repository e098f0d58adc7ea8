"""Produce sarp/bench/data/ from the text LMCache agent trace and a SentencePiece model.

Usage: python tools/tokenize_trace.py --trace-dir DIR --model FILE [--out FILE]

DIR holds the trace's JSON-lines files and its LICENSE; FILE is the SentencePiece model the
trace is tokenized with (32k vocabulary). Writes the delta-coded,
compressed token form read by sarp.bench.trace.load_trace, copies the trace's LICENSE
next to it, checks that loading reproduces the tokenization, and prints the per-subset
statistics (16-token blocks, unbounded-cache prefix hit ratio).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import numpy as np
import sentencepiece

from sarp.bench.trace import (
    SUBSETS,
    encode_workload,
    read_text_trace,
    read_trace_file,
    tokenize_sessions,
)
from sarp.bench.workloads import format_stats, same_workload, workload_stats

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "sarp" / "bench" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, required=True,
                        help="the text trace: its JSON-lines files and LICENSE")
    parser.add_argument("--model", type=Path, required=True, help="the SentencePiece model")
    parser.add_argument("--out", type=Path, default=DATA / "lmcache_agent_trace.npz")
    args = parser.parse_args()

    processor = sentencepiece.SentencePieceProcessor(model_file=str(args.model))
    if processor.get_piece_size() > np.iinfo(np.uint16).max + 1:
        raise SystemExit("the model's vocabulary does not fit in uint16")
    arrays: dict[str, np.ndarray] = {
        "model_sha256": np.array(hashlib.sha256(args.model.read_bytes()).hexdigest())
    }
    workloads = {}
    for subset in SUBSETS:
        workloads[subset] = tokenize_sessions(
            read_text_trace(args.trace_dir, subset), processor.encode
        )
        for key, array in encode_workload(workloads[subset]).items():
            arrays[f"{subset}.{key}"] = array
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    shutil.copyfile(args.trace_dir / "LICENSE", args.out.parent / "LICENSE-lmcache-agent-trace")
    print(f"wrote {args.out.name}: {args.out.stat().st_size / 2**20:.2f} MiB")
    _check_round_trip(args.out, workloads)
    print(format_stats({s: workload_stats(w) for s, w in workloads.items()}))


def _check_round_trip(path: Path, workloads: dict) -> None:
    for subset, expected in workloads.items():
        if not same_workload(read_trace_file(path, subset), expected):
            raise SystemExit(f"{subset}: the loaded data differs from the tokenization")


if __name__ == "__main__":
    main()
