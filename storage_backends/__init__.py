"""Storage backends: one interface (``RecordStore``) over several durable engines.

``open_store(kind, path, ...)`` opens or creates a store; kinds are imported lazily so that
an engine's dependency is only needed when that engine is used.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sarp.checks import check_bool
from sarp.errors import StoreKindError
from storage_backends.base import DURABILITY_MODES, RecordStore, check_store_args, stored_kind

# kind -> (module, class name)
KINDS: dict[str, tuple[str, str]] = {
    "memory": ("storage_backends.memory", "MemoryStore"),
    "wiredtiger": ("storage_backends.wiredtiger_store", "WiredTigerStore"),
    "rocksdb": ("storage_backends.rocksdb_store", "RocksDBStore"),
    "flashlog": ("storage_backends.flashlog", "FlashLogStore"),
    "odirect": ("storage_backends.odirect", "ODirectStore"),
}
#: the kinds with a repair tool: kind -> the module of its ``salvage(path)``
SALVAGE: dict[str, str] = {kind: KINDS[kind][0] for kind in ("wiredtiger", "rocksdb", "odirect")}


def open_store(
    kind: str,
    path: str | Path,
    memory_budget: int = 64 << 20,
    durability: str = "sync",
    direct_io: bool = True,
    dense_keys: bool = False,
    **options: Any,
) -> RecordStore:
    """Open (or create) the store of ``kind`` at ``path``.

    ``dense_keys``: the caller's keys are small integers allocated densely from 0 (SARP's
    segment ids), so an engine that can address records by key does (odirect's dense mode),
    and WiredTiger keeps larger pages; explicit ``options`` take precedence.
    """
    store_cls, options = _engine(kind, dense_keys, options)
    return store_cls(path, memory_budget=memory_budget, durability=durability,
                     direct_io=direct_io, **options)


def _engine(kind: object, dense_keys: bool,
            options: Mapping[str, Any]) -> tuple[type[RecordStore], dict[str, Any]]:
    """The engine class of ``kind`` and the options it is opened with (``open_store``)."""
    check_bool(dense_keys, "dense_keys")
    store_cls = store_class(kind, options)
    return store_cls, {**store_cls.DENSE_KEYS, **options} if dense_keys else dict(options)


def store_class(kind: object, options: Mapping[str, Any]) -> type[RecordStore]:
    """The engine class of ``kind``, after checking that it takes every name in ``options``
    (the engine checks their values when it opens)."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    module, cls = KINDS[kind]
    store_cls = getattr(importlib.import_module(module), cls)
    takes = [name for name in inspect.signature(store_cls).parameters if name != "path"]
    unknown = sorted(map(str, set(options) - set(takes)))
    if unknown:
        raise TypeError(f"unknown option(s) of the {kind} store: {', '.join(unknown)} "
                        f"(it takes: {', '.join(takes)})")
    return store_cls


def salvage(path: str | Path, kind: str | None = None, dense_keys: bool = False,
            **options: Any) -> str:
    """Repair the damaged store at ``path`` with its kind's repair tool (``SALVAGE``), after a
    read raised CorruptionError, keeping the records it can still read; returns the store's
    kind. What each engine loses: docs/durability.md. ``kind``: the kind the caller expects
    (None: any). ``dense_keys`` and ``options``: as ``open_store`` will open the store after
    the repair; they are checked, against the store's own settings too, before anything is
    repaired, so that an open refused for them leaves the store as it was. The store must
    not be open: its lock is taken."""
    found = stored_kind(path)
    holds = f"{str(path)!r} holds " + ("no store" if found is None else f"a {found!r} store")
    if kind is not None and found != kind:
        raise StoreKindError(f"path {holds}, not {kind!r}")
    if found not in SALVAGE:
        *some, last = SALVAGE
        raise ValueError(f"salvage needs a {', '.join(some)} or {last} store; {holds}")
    _, options = _engine(found, dense_keys, options)
    importlib.import_module(SALVAGE[found]).salvage(path, **options)
    return found


__all__ = ["DURABILITY_MODES", "KINDS", "SALVAGE", "RecordStore", "check_store_args",
           "open_store", "salvage", "store_class", "stored_kind"]
