"""Seeded synthetic workloads shaped after the paper's four datasets (Table 2, Section 3.2).

Each session is one token sequence: shared prefixes (system prompt, task template or
popular opener), a first user message, then per turn the model output followed by new
user or tool tokens. Turn t's context is a prefix of that sequence, so the context of
turn t+1 is exactly the context of turn t + its output + the new tokens, as in real
chats. Token IDs are uniform in [0, 32000). Sessions are drawn from their own seeded
generators, so a larger scale extends a smaller one: ``synthetic(n, 2)[:k] ==
synthetic(n, 1)`` for the sessions they share.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from sarp.bench.workloads import Session, Workload, frozen

VOCAB = 32000
_SHARED = 2**32 - 1  # generator stream of the prefixes shared between sessions


@dataclass(frozen=True)
class _Shape:
    """Per-dataset shape; token lengths are (low, high) inclusive ranges."""

    sessions: int  # at scale 1.0
    prompts: tuple[int, ...]  # lengths of the shared system prompts; a session takes one
    openers: int  # shared second-level prefixes (task templates, popular first prompts)
    opener_len: tuple[int, int]
    opener_share: float  # fraction of sessions that start with an opener
    turns: tuple[int, int]
    first: tuple[int, int]  # first user message
    output: tuple[int, int]
    follow: tuple[int, int]  # user message or tool output appended after each output


# fmt: off
_NONE: dict[str, Any] = {"openers": 0, "opener_len": (0, 0), "opener_share": 0.0}
SHAPES: dict[str, _Shape] = {
    # one long system prompt for everyone, a few task templates, then diverse code and
    # execution output: long shared prefixes, then many alternatives
    "codeact": _Shape(
        sessions=80, prompts=(1500,), openers=8, opener_len=(200, 400), opener_share=1.0,
        turns=(2, 6), first=(50, 250), output=(60, 300), follow=(30, 400),
    ),
    # long agent sessions growing by tool output each turn; little sharing past the prompt
    "lmcache_agent": _Shape(
        sessions=10, prompts=(2000, 1200, 600), **_NONE,
        turns=(6, 24), first=(200, 1500), output=(50, 400), follow=(100, 1000),
    ),
    # long ShareGPT-like conversations, a few popular first prompts, otherwise private
    "eabf": _Shape(
        sessions=16, prompts=(), openers=6, opener_len=(60, 160), opener_share=0.08,
        turns=(10, 30), first=(30, 300), output=(80, 400), follow=(20, 150),
    ),
    # many short chats under several system prompts: many alternatives after a short prefix
    "ultrachat": _Shape(
        sessions=120, prompts=(64, 96, 128, 160, 200, 256, 320, 400), **_NONE,
        turns=(3, 6), first=(20, 150), output=(100, 400), follow=(20, 150),
    ),
}
# fmt: on
NAMES = tuple(SHAPES)


def synthetic(name: str, scale: float = 1.0, seed: int = 0) -> Workload:
    """A synthetic token workload; ``scale`` multiplies the number of sessions.

    At scale 1.0 each dataset has a few hundred requests and about 0.5-1.5 M context
    tokens, which a Python index replays in tens of seconds. Deterministic for a seed.
    """
    if name not in SHAPES:
        raise ValueError(f"name must be one of {', '.join(NAMES)}, got {name!r}")
    if not (isinstance(scale, numbers.Real) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if not (isinstance(seed, numbers.Integral) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    shape = SHAPES[name]
    stream = NAMES.index(name)
    shared = np.random.default_rng([int(seed), stream, _SHARED])
    prompts = [_tokens(shared, n) for n in shape.prompts]
    openers = [_tokens(shared, _length(shared, shape.opener_len)) for _ in range(shape.openers)]
    count = max(1, round(shape.sessions * scale))
    return [
        _session(np.random.default_rng([int(seed), stream, i]), shape, prompts, openers)
        for i in range(count)
    ]


def _session(
    rng: np.random.Generator, shape: _Shape, prompts: list[np.ndarray], openers: list[np.ndarray]
) -> Session:
    parts = []
    if prompts:
        parts.append(prompts[rng.integers(len(prompts))])
    if openers and rng.random() < shape.opener_share:
        parts.append(openers[rng.integers(len(openers))])
    parts.append(_tokens(rng, _length(rng, shape.first)))
    bounds = []  # (context end, output end) per turn
    end = sum(len(p) for p in parts)
    turns = _length(rng, shape.turns)
    for turn in range(turns):
        output = _tokens(rng, _length(rng, shape.output))
        bounds.append((end, end + len(output)))
        parts.append(output)
        end += len(output)
        if turn + 1 < turns:
            follow = _tokens(rng, _length(rng, shape.follow))
            parts.append(follow)
            end += len(follow)
    sequence = frozen(np.concatenate(parts))
    return [(sequence[:c], sequence[c:o]) for c, o in bounds]


def _length(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def _tokens(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.integers(0, VOCAB, count, dtype=np.uint32)
