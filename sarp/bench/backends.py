"""Which storage backends can be used on this machine: each kind is tried once."""

from __future__ import annotations

import tempfile
from pathlib import Path

import sarp  # noqa: F401  (imports sarp before storage_backends, which needs it first)
from storage_backends import KINDS, open_store


def check_backend(kind: str) -> str:
    """Return ``kind`` if it is a known backend, else raise ValueError naming it."""
    if kind not in KINDS:
        raise ValueError(f"unknown backend {kind!r} (choose from {', '.join(KINDS)})")
    return kind


def unavailable(kinds: list[str]) -> dict[str, str]:
    """The kinds among ``kinds`` that cannot open a store here, with the reason."""
    out = {}
    for kind in kinds:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                store = open_store(kind, Path(tmp) / "probe", memory_budget=1 << 20,
                                   durability="none")
                store.put(1, b"x")
                store.close()
            except Exception as exc:  # an engine that does not import or open is left out
                out[kind] = f"{type(exc).__name__}: {exc}"
    return out


def engine_builds(kinds: list[str]) -> dict[str, str]:
    """The build of each engine among ``kinds`` (usable here) whose build changes what it
    measures: WiredTiger's version and whether it is a diagnostic (Debug) build."""
    if "wiredtiger" not in kinds:
        return {}
    from storage_backends import wiredtiger_store  # only where the engine imports
    return {"wiredtiger": wiredtiger_store.build()}
