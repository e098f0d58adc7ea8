"""The LMCache agent trace: reading its text form, and the compact tokenized form shipped here.

The trace (LMCache/lmcache-agent-trace, Apache-2.0) has three sub-datasets of agent
sessions. Each request's input is (mostly) the session's history so far, so consecutive
contexts share long prefixes. The shipped file ``data/lmcache_agent_trace.npz`` stores
each turn as the length of its shared prefix with the previous turn's full sequence
(context + output) plus the new tokens, as ``uint16`` (32k vocabulary); see
``data/README.md`` and ``tools/tokenize_trace.py``, which produced it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from sarp.bench.workloads import Session, Workload, frozen

SUBSETS = ("miniswe", "magagent", "taubench")
DATA_FILE = "lmcache_agent_trace.npz"


@dataclass(frozen=True)
class TextTurn:
    """One request of the text trace."""

    timestamp: int
    input: str
    output: str


def read_text_trace(trace_dir: str | Path, subset: str) -> dict[str, list[TextTurn]]:
    """Sessions of one sub-dataset by session_id, turns ordered by timestamp.

    Blank lines and empty files are skipped; files and sessions keep a sorted order so
    that the result, and anything derived from it, is reproducible.
    """
    _check_subset(subset)
    sessions: dict[str, list[TextTurn]] = {}
    for path in sorted((Path(trace_dir) / subset).glob("*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    record = json.loads(line)
                    turn = TextTurn(int(record["timestamp"]), record["input"], record["output"])
                    sessions.setdefault(str(record["session_id"]), []).append(turn)
    for turns in sessions.values():
        turns.sort(key=lambda turn: turn.timestamp)
    return dict(sorted(sessions.items()))


def tokenize_sessions(
    sessions: dict[str, list[TextTurn]], encode: Callable[[str], Sequence[int]]
) -> Workload:
    """Token workload of text sessions, in the given session order."""
    return [
        [
            (
                frozen(np.array(encode(t.input), np.uint32)),
                frozen(np.array(encode(t.output), np.uint32)),
            )
            for t in turns
        ]
        for turns in sessions.values()
    ]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def encode_workload(workload: Workload) -> dict[str, np.ndarray]:
    """Delta-code a token workload: per turn, a prefix length and the tokens after it.

    ``prefix[i]`` tokens of turn i's context come from the previous turn's context +
    output (0 for a session's first turn); ``fresh[i]`` context tokens and ``out[i]``
    output tokens follow in ``tokens``.
    """
    prefix, fresh, out, turns, tokens = [], [], [], [], []
    for session in workload:
        turns.append(len(session))
        previous = np.empty(0, np.uint32)
        for context, output in session:
            shared = _common_prefix(previous, context)
            prefix.append(shared)
            fresh.append(len(context) - shared)
            out.append(len(output))
            tokens += [context[shared:], output]
            previous = np.concatenate((context, output))
    flat = np.concatenate(tokens) if tokens else np.empty(0, np.uint32)
    if len(flat) and flat.max() > np.iinfo(np.uint16).max:
        raise ValueError("encode_workload: token IDs must fit in uint16")
    return {
        "turns": np.array(turns, np.int32),
        "prefix": np.array(prefix, np.int32),
        "fresh": np.array(fresh, np.int32),
        "out": np.array(out, np.int32),
        "tokens": flat.astype(np.uint16),
    }


def decode_workload(arrays: dict[str, np.ndarray]) -> Workload:
    """Inverse of :func:`encode_workload`."""
    tokens = arrays["tokens"].astype(np.uint32)
    prefix, fresh, out = arrays["prefix"], arrays["fresh"], arrays["out"]
    workload: Workload = []
    cursor = request = 0
    for count in arrays["turns"].tolist():
        session: Session = []
        previous = np.empty(0, np.uint32)
        for _ in range(count):
            end = cursor + int(fresh[request])
            context = np.concatenate((previous[: prefix[request]], tokens[cursor:end]))
            cursor, end = end, end + int(out[request])
            output = tokens[cursor:end].copy()
            cursor = end
            session.append((frozen(context), frozen(output)))
            previous = np.concatenate((context, output))
            request += 1
        workload.append(session)
    return workload


def load_trace(subset: str | None = None) -> Workload:
    """The tokenized LMCache agent trace shipped with the package.

    ``subset`` is one of ``SUBSETS`` or None for all three, concatenated in that order.
    Sessions are in session_id order, turns in timestamp order.
    """
    with resources.as_file(resources.files("sarp.bench") / "data" / DATA_FILE) as path:
        return read_trace_file(path, subset)


def read_trace_file(path: str | Path, subset: str | None = None) -> Workload:
    """Like :func:`load_trace`, from a file written by ``tools/tokenize_trace.py``."""
    names = SUBSETS if subset is None else (_check_subset(subset),)
    with np.load(path, allow_pickle=False) as data:
        return [
            session
            for name in names
            for session in decode_workload(
                {
                    key[len(name) + 1 :]: data[key]
                    for key in data.files
                    if key.startswith(name + ".")
                }
            )
        ]


def _check_subset(subset: str) -> str:
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {', '.join(SUBSETS)} or None, got {subset!r}")
    return subset
