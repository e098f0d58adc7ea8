"""Fixtures shared by the baseline suites: every design, on every backend it can use."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sarp.baselines import DESIGNS, BaselineIndex

S = 8  # small segments: many windows and partial segments
CAP = 1500  # bytes: a few radix nodes, so the capped tree spills constantly

HAVE_WT = importlib.util.find_spec("wiredtiger") is not None
BACKENDS = ["memory", pytest.param("wiredtiger", marks=pytest.mark.skipif(
    not HAVE_WT, reason="wiredtiger is not installed"))]

#: (id, design name, extra open() options)
VARIANTS = [
    ("dram_blockhash", "dram_blockhash", {}),
    ("ssd_blockhash", "ssd_blockhash", {}),
    ("segment_hash", "segment_hash", {}),
    ("segment_radix", "segment_radix", {}),
    ("segment_radix_capped", "segment_radix", {"capped": CAP}),
]
#: variants whose state lives in the record store (the backend matters to them)
STORE_VARIANTS = [v for v in VARIANTS if DESIGNS[v[1]].uses_store]

Opener = Callable[..., BaselineIndex]


def variant_params(variants: list[tuple[str, str, dict[str, Any]]]) -> list[Any]:
    return [pytest.param(v, id=v[0]) for v in variants]


@pytest.fixture
def opener(tmp_path: Path) -> Iterator[Callable[..., BaselineIndex]]:
    """``opener(name, sub, **kwargs)`` opens design ``name`` under tmp_path/sub; every index
    it opened is closed at teardown."""
    opened: list[BaselineIndex] = []

    def open_(name: str, sub: str = "idx", **kwargs: Any) -> BaselineIndex:
        idx = DESIGNS[name].open(tmp_path / sub, **kwargs)
        opened.append(idx)
        return idx

    yield open_
    for idx in opened:
        idx.close()
