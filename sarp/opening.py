"""Opening an index: ``sarp.open`` creates an index directory or reopens (recovers) the one
there, ``sarp.rebuild`` rebuilds its routing directory from the segment store.

Every argument is checked before anything is created or changed. A creation that fails
removes what it made, and one cut short by a crash is redone by the next open: the index
exists once its sarp.json does, which is published last (docs/index_format.txt).
"""

from __future__ import annotations

import math
import numbers
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, SupportsFloat, SupportsIndex

import storage_backends
from sarp import journal, snapshot
from sarp._core.segment_codec import encoded_size
from sarp.checks import check_bool, check_directory, check_int, check_path
from sarp.config import Config, config_from_kwargs, dumps, loads, new_index_id
from sarp.errors import CorruptionError, RecoveryError, StoreKindError, StoreLockedError
from sarp.index import CONFIG_FILE, STORE_DIR, Index
from storage_backends.base import check_io
from storage_backends.io import SYNC_FAILED_FILE, FileIO

DEFAULT_BACKEND = "wiredtiger"


def open(path: str | os.PathLike, backend: str | None = None, *,
         memory_budget: SupportsIndex = 64 << 20, durability: str = "sync",
         direct_io: bool = True, background: bool = False,
         snapshot_every_inserts: SupportsIndex = 0, snapshot_every_seconds: SupportsFloat = 0.0,
         snapshot_on_close: bool = True,
         store_options: Mapping[str, Any] | None = None, _rebuild: bool = False,
         _salvage: bool = False, _io: FileIO | None = None, **config: Any) -> Index:
    """Create an index at ``path``, or reopen (recover) the one there.

    ``backend``: the record store's kind (``storage_backends.KINDS``); by default the kind of
    the index already at ``path``, else ``DEFAULT_BACKEND``. ``config`` takes the paper's
    parameters (see ``sarp.config.Config``); on reopen, a given parameter that conflicts with
    the stored configuration raises ``ConfigMismatchError`` (except ``max_retrieval``, which
    only changes how queries search). After a reopen, ``index.recovery`` reports the time of
    each recovery step and the bytes read. One handle at a time: a second open of an open
    index raises ``StoreLockedError``. Every argument is checked before anything is created
    or changed; an index whose creation fails leaves nothing behind.

    ``background``: run refinement back-fills, rematerializations and periodic snapshots on a
    worker thread. By default they run on the inserting thread, before its insert returns:
    under CPython's GIL a worker cannot run them beside the request threads, and handing each
    job to it costs thread switches (docs/architecture.md, "Where background work runs").

    A failed journal sync stops inserts until the index is reopened; later ones raise
    ``WritesStoppedError`` (docs/durability.md, "Failed writes"). ``_io``: the
    ``FileIO`` of the index's own files (the fault-injection tests pass one).
    """
    t0 = time.perf_counter()
    io = check_io(_io)
    root = _index_path(path)
    snapshot_every_inserts, snapshot_every_seconds = _check_open_options(
        snapshot_every_inserts, snapshot_every_seconds, background=background,
        snapshot_on_close=snapshot_on_close)
    store_options = _store_options(store_options)
    memory_budget = storage_backends.check_store_args(memory_budget, durability, direct_io)
    wanted = config_from_kwargs(config)
    cfg_file = root / CONFIG_FILE
    existing = cfg_file.exists()
    # a creation cut short by a crash may have left store/, the first journal and the
    # temporary files of it and of sarp.json (published last)
    first_journal = journal.FILES.name(0)
    if not existing and root.exists() and {p.name for p in root.iterdir()} - {
            STORE_DIR, CONFIG_FILE + ".tmp", first_journal, first_journal + ".tmp",
            SYNC_FAILED_FILE}:
        numbered = journal.files(root) + snapshot.candidates(root)
        if numbered:
            raise _without_config(root, ", ".join(sorted(p.name for _, p in numbered)))
        raise ValueError(f"path {str(root)!r} is not empty and holds no SARP index")
    if existing:
        if not cfg_file.is_file():
            raise CorruptionError(f"{str(cfg_file)!r} is not a file")
        stored, index_id = loads(cfg_file.read_bytes(), str(cfg_file))
        cfg = wanted.merged_with_stored(stored, set(config))
    else:
        stored, index_id = wanted, new_index_id()
        cfg = stored
    kind = _store_kind(root, backend, existing)
    storage_backends.store_class(kind, store_options)
    # a new store takes the engine's options for dense keys (segment ids); an existing one
    # keeps what it was created with, whatever store_options made it (given ones are checked)
    dense = not existing
    salvage_s = None
    if _salvage:
        t1 = time.perf_counter()
        storage_backends.salvage(root / STORE_DIR, kind, dense_keys=dense, **store_options)
        salvage_s = time.perf_counter() - t1

    def created_meanwhile() -> Index:
        """Open the index another open created (and closed) since this one first looked,
        as an open a moment later would: nothing is created. Its ``total_s`` counts this
        open's first attempt too."""
        index = open(path, backend, memory_budget=memory_budget, durability=durability,
                     direct_io=direct_io, background=background,
                     snapshot_every_inserts=snapshot_every_inserts,
                     snapshot_every_seconds=snapshot_every_seconds,
                     snapshot_on_close=snapshot_on_close, store_options=store_options,
                     _rebuild=_rebuild, _salvage=_salvage, _io=_io, **config)
        index.recovery["total_s"] = time.perf_counter() - t0
        return index

    created = [p for p in (root, root / STORE_DIR) if not p.exists()]
    above = _missing_parents(root)  # made by the store's creation
    # a failed creation also removes what it added to a directory that was there (sarp.json,
    # the first journal), which would otherwise name an index whose store is gone
    before = None if existing or not root.exists() else {p.name for p in root.iterdir()}
    try:
        store = storage_backends.open_store(
            kind, root / STORE_DIR, memory_budget=memory_budget, durability=durability,
            direct_io=direct_io, dense_keys=dense, **store_options)
    except StoreLockedError:
        raise  # another open holds the store: nothing there is this one's to remove
    except StoreKindError:
        # another open made a store of another kind there since this one looked: nothing
        # there is this one's to remove
        if not existing and cfg_file.exists():
            return created_meanwhile()
        raise
    except BaseException:
        if existing or not cfg_file.exists():  # else what is there is another open's index
            _remove_created(created, above, root, before, io)
        raise
    store_open_s = time.perf_counter() - t0
    if not existing and cfg_file.exists():  # checked again under the store's lock
        store.close()
        return created_meanwhile()
    try:
        # under the store's lock, before a journal is read (docs/durability.md)
        redone = io.redo_failed_syncs(root) + store.redone_files
        if not existing:  # checked once, when the index is created
            _check_nothing_stored(root, store, io)
            _check_segments_fit(cfg, store)
        index = Index(root, cfg, store, index_id=index_id, background=background,
                      snapshot_every_inserts=snapshot_every_inserts,
                      snapshot_every_seconds=snapshot_every_seconds,
                      snapshot_on_close=snapshot_on_close, io=io)
        recover = existing
        if existing and not store.persistent:
            # The store kept nothing across close(): the routing files name segments that
            # are gone, so the index starts empty (with its stored configuration).
            index._remove_older_than(math.inf)
            recover = False
        if _rebuild:
            index._publish_rebuild(stored)
        else:
            index._start(recover)
        if not existing:
            # last: the index exists once sarp.json does, and a creation cut short before
            # it is redone by the next open
            index.io.publish(cfg_file, dumps(cfg, index_id).encode())
    except BaseException as exc:
        if isinstance(exc, CorruptionError):
            store.abandon()  # the damage it found stays for the next open to find again
        else:
            store.close()
        _remove_created(created, above, root, before, io)
        raise
    index.recovery["store_open_s"] = store_open_s
    index.recovery["redone_files"] = redone
    if salvage_s is not None:
        index.recovery["salvage_s"] = salvage_s
    index.recovery["total_s"] = time.perf_counter() - t0
    return index


def _index_path(path: object) -> Path:
    """``path`` as a Path to a directory that is, or can become, an index directory."""
    root = check_path(path)
    check_directory(root, f"path {str(root)!r} is a file, not an index directory",
                    f"path {str(root)!r} cannot be created")
    return root


def _missing_parents(path: Path) -> list[Path]:
    """The parents of ``path`` that do not exist, innermost first."""
    missing = []
    for parent in path.absolute().parents:
        if parent.exists():
            break
        missing.append(parent)
    return missing


#: names ``open`` passes to the store itself, which ``store_options`` must not repeat
_OPEN_STORE_ARGS = ("kind", "path", "memory_budget", "durability", "direct_io", "dense_keys")


def _store_options(options: object) -> Mapping[str, Any]:
    """``store_options`` checked: a mapping of engine option names other than ``open``'s."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(f"store_options must be a mapping of option names to values, "
                        f"got {options!r}")
    clash = sorted(set(options) & set(_OPEN_STORE_ARGS))
    if clash:
        raise ValueError(f"store_options must not set {', '.join(clash)}: pass "
                         f"{'them' if len(clash) > 1 else 'it'} to open itself")
    return options


def _store_kind(root: Path, backend: object, existing: bool) -> str:
    """The store kind to open: ``backend`` checked against the store there, if any."""
    if backend is not None and (not isinstance(backend, str)
                                or backend not in storage_backends.KINDS):
        raise ValueError(f"backend must be one of {sorted(storage_backends.KINDS)}, "
                         f"got {backend!r}")
    found = storage_backends.stored_kind(root / STORE_DIR)
    if existing and found is None:
        raise RecoveryError(f"index at {str(root)!r} has no store: {STORE_DIR}/ or its kind "
                            "marker is missing, and with it every segment; restore it, or "
                            "delete the index to start over")
    if found is not None and found not in storage_backends.KINDS:
        raise CorruptionError(f"{str(root / STORE_DIR)!r} names an unknown store kind "
                              f"{found!r}")
    if backend is not None and found is not None and backend != found:
        raise StoreKindError(f"backend={backend!r}: path {str(root / STORE_DIR)!r} holds a "
                             f"{found!r} store, not {backend!r}")
    return backend or found or DEFAULT_BACKEND


def _check_nothing_stored(root: Path, store: storage_backends.RecordStore, io: FileIO) -> None:
    """A creation may only redo one cut short, which left no record: refuse to create an
    index over what an index without its sarp.json left (a file lost or not restored), whose
    journal 0 would be written again and its segments overwritten. Checked under the
    store's lock."""
    first = root / journal.FILES.name(0)
    if next(iter(store.scan()), None) is not None:
        found = f"segments in {STORE_DIR}/"
    elif first.exists() and not journal.holds_no_record(io, first):
        found = f"{first.name} with records"
    else:
        return
    raise _without_config(root, found)


def _without_config(root: Path, found: str) -> ValueError:
    """The error of a directory that holds an index's files (``found``) but no sarp.json."""
    return ValueError(f"path {str(root)!r} holds {found} but no {CONFIG_FILE}: restore "
                      f"{CONFIG_FILE} to reopen that index, or remove the directory to start "
                      "over")


def _check_segments_fit(cfg: Config, store: storage_backends.RecordStore) -> None:
    """A full segment must fit the store's largest value (odirect's slot), or inserts would
    fail once a segment grows past it."""
    limit = store.stats().get("max_value_size")
    full = encoded_size(cfg.segment_blocks, cfg.meta_width)
    if limit is not None and full > limit:
        raise ValueError(f"a segment of segment_blocks={cfg.segment_blocks} blocks with "
                         f"{cfg.meta_width}-byte metadata_dtype is {full} bytes, more than "
                         f"the {store.kind} store's largest value ({limit} bytes); lower "
                         "either, or raise the store's max_value_size")


def _remove_created(paths: list[Path], above: list[Path], root: Path, before: set[str] | None,
                    io: FileIO) -> None:
    """Remove what a failed open created. Given ``before`` (the names ``root`` held before a
    creation in it), every entry added to ``root`` since, store/ included, then ``root`` is
    synced, so that a crash does not bring them back; else the first of ``paths`` that
    exists, with all in it, then the directories ``above`` it that the open made (innermost
    first) while they are empty: another open may be creating an index beside it."""
    if before is None:
        for p in paths:
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)
                break
        for p in above:
            try:
                p.rmdir()
            except OSError:
                return  # not empty, or gone: what is above it is not this open's alone
        return
    for p in root.iterdir():
        if p.name not in before:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    try:
        io.fsync_dir(root)
    except OSError:
        pass  # the open's own error is the one raised; a crash now leaves a creation to redo


def _check_open_options(every_inserts: object, every_seconds: object,
                        **flags: object) -> tuple[int, float]:
    """The snapshot schedule and the on/off options of ``open``, checked by name (the store's
    own: ``storage_backends.check_store_args``); returns the schedule as (int, float)."""
    n = check_int(every_inserts, "snapshot_every_inserts (0: never)", 0)
    if isinstance(every_seconds, bool) or not isinstance(every_seconds, numbers.Real):
        raise TypeError("snapshot_every_seconds must be a number (0: never), "
                        f"got {every_seconds!r}")
    try:
        seconds = float(every_seconds)
    except OverflowError:  # an int past the floats: not finite
        seconds = math.inf
    if not 0 <= seconds < math.inf:
        raise ValueError("snapshot_every_seconds must be a non-negative finite number "
                         f"(0: never), got {every_seconds!r}")
    for name, value in flags.items():
        check_bool(value, name)
    return n, seconds


def require_index(path: str | os.PathLike) -> None:
    """Raise ValueError unless ``path`` holds a SARP index (``open`` would create one); one
    whose sarp.json is not a file is left for ``open`` to refuse as damaged."""
    if not (check_path(path) / CONFIG_FILE).exists():
        raise ValueError(f"path {str(path)!r} holds no SARP index")


def rebuild(path: str | os.PathLike, backend: str | None = None, *, salvage: bool = False,
            **kwargs: Any) -> dict[str, Any]:
    """The slow path: rebuild the routing directory from a full scan of the segment store and
    publish it as a new snapshot (for when no usable snapshot exists). Returns a report.

    ``salvage``: first repair the segment store with its repair tool
    (``storage_backends.salvage``: wiredtiger, rocksdb or odirect), after a read found it damaged;
    segments on damaged parts are lost, which only shortens matches."""
    require_index(path)
    check_bool(salvage, "salvage")
    with open(path, backend, _rebuild=True, _salvage=salvage, snapshot_on_close=False,
              **kwargs) as index:
        return {**index.recovery, **index.directory.stats()}
