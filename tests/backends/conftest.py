"""Fixtures shared by the storage-backend suites.

Every kind in ``storage_backends.KINDS`` whose module exists takes part; a kind whose module
is not written yet is skipped, and one whose module fails to import fails its tests.
"""

from __future__ import annotations

import importlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from storage_backends import KINDS, RecordStore, open_store

if TYPE_CHECKING:
    from storage_backends.flashlog import FlashLogStore

BUDGET = 8 << 20


def _load(kind: str) -> type[RecordStore] | Exception | None:
    """The engine class of ``kind``; None if its module does not exist; the import error."""
    module, cls = KINDS[kind]
    try:
        return getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as e:
        if e.name == module:
            return None
        return e
    except Exception as e:  # a broken engine must fail its own tests, not the collection
        return e


ENGINES = {kind: _load(kind) for kind in KINDS}


def kind_params(persistent_only: bool = False) -> list[Any]:
    """pytest params for every kind (only persistent engines if asked)."""
    params: list[Any] = []
    for kind, engine in ENGINES.items():
        if engine is None:
            params.append(pytest.param(kind, marks=pytest.mark.skip(
                reason=f"{KINDS[kind][0]} does not exist yet")))
        elif isinstance(engine, Exception) or not persistent_only or engine.persistent:
            params.append(kind)
    return params


def _engine(kind: str) -> type[RecordStore]:
    engine = ENGINES[kind]
    if isinstance(engine, Exception):
        raise engine
    assert engine is not None
    return engine


@pytest.fixture(params=kind_params())
def kind(request: pytest.FixtureRequest) -> str:
    """Every available kind."""
    _engine(request.param)
    return request.param


@pytest.fixture(params=kind_params(persistent_only=True))
def durable_kind(request: pytest.FixtureRequest) -> str:
    """Every available kind whose contents survive close()."""
    _engine(request.param)
    return request.param


def supports_o_direct(directory: Path) -> bool:
    """Whether files in ``directory`` can be opened and written with O_DIRECT (not tmpfs)."""
    probe = directory / "o_direct_probe"
    buf = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | getattr(os, "O_DIRECT", 0), 0o600)
        try:
            os.pwritev(fd, [buf], 0)
        finally:
            os.close(fd)
        return hasattr(os, "O_DIRECT")
    except OSError:
        return False
    finally:
        buf.close()
        probe.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def direct_io(tmp_path_factory: pytest.TempPathFactory) -> bool:
    """direct_io for the stores under test: on, unless the temp file system refuses O_DIRECT."""
    return supports_o_direct(tmp_path_factory.mktemp("probe"))


@pytest.fixture
def open_kind(direct_io: bool) -> Iterator[Any]:
    """``open_kind(kind, path, **options)``: open a test store; all are closed at teardown."""
    opened: list[RecordStore] = []

    def opener(kind: str, path: Path, **options: Any) -> RecordStore:
        options.setdefault("memory_budget", BUDGET)
        options.setdefault("direct_io", direct_io)
        store = open_store(kind, path, **options)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(kind: str, open_kind: Any, tmp_path: Path) -> RecordStore:
    """A fresh store of ``kind`` with ``group`` durability (fast, still logged)."""
    return open_kind(kind, tmp_path / "store", durability="group")


def value_limit(kind: str, size: int) -> dict[str, int]:
    """Open options declaring values up to ``size`` bytes, for engines with fixed slots."""
    return {"max_value_size": size} if kind == "odirect" else {}


def payload(key: int, size: int = 24) -> bytes:
    """A value that names its key: distinct per key and checkable after any round trip."""
    unit = key.to_bytes(8, "little")
    return (unit * (size // 8 + 1))[:size]


def open_flashlog(path: Path, **options: Any) -> FlashLogStore:
    """A flash-log store at ``path``: 4 instances, durability ``none`` and a 4 MiB budget
    unless ``options`` say otherwise. (Imported here: a broken engine fails its own tests,
    not the collection.)"""
    from storage_backends.flashlog import FlashLogStore

    options = {"memory_budget": 4 << 20, "instances": 4, "durability": "none", **options}
    store = open_store("flashlog", path, **options)
    assert isinstance(store, FlashLogStore)
    return store
