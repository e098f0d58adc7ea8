"""Each index has an id (sarp.json) that its snapshots and journals carry: files of another
index are never taken for its own; indexes written before ids still open."""

from __future__ import annotations

import json
import shutil
import struct
import time

import pytest

import sarp
import storage_backends
from sarp import journal, snapshot
from sarp._core.hashing import xxh64
from sarp.errors import (
    ConfigMismatchError,
    CorruptionError,
    RecoveryError,
    StoreKindError,
    StoreLockedError,
)
from storage_backends.io import FileIO

from .old_formats import downgrade
from .refusal import assert_open_refused
from .test_damage import assert_all_match, build
from .workload import CONFIG, check_match, insert, sequence

B = CONFIG["block_size"]


def index_id(path) -> str:
    return json.loads((path / "sarp.json").read_text())["index_id"]


def test_each_new_index_gets_its_own_id_which_its_files_carry(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build(a, 0, 5, snapshots_at={2})
    build(b, 0, 5, snapshots_at={2})
    assert index_id(a) != index_id(b)
    ident = int(index_id(a), 16)
    assert ident and json.loads((a / "sarp.json").read_text())["format"] == 3
    assert snapshot.load(FileIO(), snapshot.candidates(a)[0][1], True).state.index_id == ident
    for _, p in journal.files(a):
        assert journal.FILE_HEADER.unpack_from(p.read_bytes())[5] == ident


def test_a_snapshot_of_another_index_is_skipped(tmp_path):
    """Another index's snapshot under the same name (a copy, a restore into the wrong
    directory) would route to its segments; it is a fault, and recovery falls back to the
    snapshot before it with the journals after that."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    build(ours, 0, 20, snapshots_at={5, 12})
    build(theirs, 100, 120, snapshots_at={105, 112})
    foreign = snapshot.candidates(theirs)[0][1]
    shutil.copyfile(foreign, ours / foreign.name)
    report = assert_all_match(ours, 20)
    assert report["snapshot"] != foreign.name
    assert any("a snapshot of another index" in f for f in report["faults"])


def test_a_snapshot_under_another_number_is_skipped(tmp_path):
    """An old snapshot restored under a newer number than it holds (renamed by hand) would be
    taken first, and the journals after it are gone: recovery skips it as a fault and loads
    the newest snapshot whose name agrees with its content."""
    path = tmp_path / "i"
    build(path, 0, 10, snapshots_at={5})
    (seq_old, first), = snapshot.candidates(path)
    saved = first.read_bytes()
    build(path, 10, 20, snapshots_at={12, 16})
    (seq_new, newest), _ = snapshot.candidates(path)
    assert not (path / first.name).exists() and seq_new > seq_old
    renamed = snapshot.FILES.name(seq_new + 1)
    (path / renamed).write_bytes(saved)
    report = assert_all_match(path, 20)
    assert report["snapshot"] == newest.name
    assert f"{renamed}: holds snapshot {seq_old}" in report["faults"]


def test_a_journal_of_another_index_is_refused_and_rebuild_recovers(tmp_path):
    """Another index's journal would replay its records against this index's store (segment
    ids naming other segments); recovery refuses it, naming the file, and `sarp rebuild`
    restores every sequence from the segments."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    build(ours, 0, 12, snapshots_at={5})
    build(theirs, 100, 112, snapshots_at={105})
    seq, foreign = journal.files(theirs)[-1]
    assert journal.files(ours)[-1][0] == seq
    shutil.copyfile(foreign, ours / foreign.name)
    with pytest.raises(RecoveryError, match=f"{foreign.name}: a journal of another index"):
        sarp.open(ours, backend="wiredtiger")
    sarp.rebuild(ours)
    assert_all_match(ours, 12)


def test_a_leftover_first_journal_of_a_creation_cut_short_takes_the_new_id(tmp_path):
    """A creation cut short after journal 0 leaves it without sarp.json; the next creation
    writes it again with the id of the index it creates."""
    other = tmp_path / "other"
    build(other, 0, 0)  # journal 0 holds its header only
    path = tmp_path / "i"
    path.mkdir()
    shutil.copyfile(other / journal.FILES.name(0), path / journal.FILES.name(0))
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        insert(index, 0)
    assert index_id(path) != index_id(other)
    assert_all_match(path, 1)


@pytest.mark.parametrize("field, value", [
    ("index_id", "0" * 16), ("index_id", "A" * 16), ("index_id", "-" + "0" * 14 + "1"),
    ("index_id", "1" * 15), ("index_id", 5), ("format", 3.0)])
def test_a_malformed_index_id_in_sarp_json_is_refused(tmp_path, field, value):
    """Checked past the checksum (made good here): a file written so is refused, naming
    sarp.json, and the index is left as it was."""
    path = tmp_path / "i"
    build(path, 0, 2)
    data = json.loads((path / "sarp.json").read_text())
    data[field] = value
    signed = {"config": data["config"], "index_id": data["index_id"]}
    data["checksum"] = f"{xxh64(json.dumps(signed, sort_keys=True).encode()):016x}"
    (path / "sarp.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    assert_open_refused(path, (CorruptionError, ConfigMismatchError), "sarp.json",
                        backend="wiredtiger")


@pytest.mark.parametrize("change, named", [
    (lambda cfg: cfg.pop("tau"), "missing: tau"),
    (lambda cfg: cfg.pop("namespace"), "missing: namespace"),
    (lambda cfg: cfg.update(spare=1), "spare"),
], ids=["tau_missing", "namespace_missing", "unknown"])
def test_a_configuration_missing_or_adding_a_parameter_is_refused(tmp_path, change, named):
    """Checked past the checksum (made good here): a parameter missing is never taken at its
    default, nor an unknown one ignored; the open names the parameter."""
    path = tmp_path / "i"
    build(path, 0, 2)
    data = json.loads((path / "sarp.json").read_text())
    change(data["config"])
    signed = {"config": data["config"], "index_id": data["index_id"]}
    data["checksum"] = f"{xxh64(json.dumps(signed, sort_keys=True).encode()):016x}"
    (path / "sarp.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    assert_open_refused(path, CorruptionError, named, backend="wiredtiger")


def test_a_sarp_json_that_is_not_a_file_is_damage_to_open_and_to_the_command(tmp_path,
                                                                              capsys):
    from sarp.cli import main

    path = tmp_path / "i"
    build(path, 0, 2)
    (path / "sarp.json").unlink()
    (path / "sarp.json").mkdir()
    assert_open_refused(path, CorruptionError, "sarp.json' is not a file", backend="wiredtiger")
    assert main(["stats", str(path)]) == 1
    assert "sarp.json' is not a file" in capsys.readouterr().err


def test_a_changed_index_id_fails_the_checksum(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 2)
    data = json.loads((path / "sarp.json").read_text())
    data["index_id"] = f"{int(data['index_id'], 16) ^ 1:016x}"
    (path / "sarp.json").write_text(json.dumps(data, indent=1, sort_keys=True))
    with pytest.raises(CorruptionError, match="checksum"):
        sarp.open(path, backend="wiredtiger")


@pytest.mark.parametrize("journal_version", [3, 2])
def test_an_index_of_the_formats_before_ids_opens_and_goes_on(tmp_path, journal_version):
    """An index written before ids (sarp.json format 2, snapshot version 2, journal version 3
    or 2) recovers, takes inserts and snapshots, and keeps sarp.json as it is: its new files
    carry id 0, as its old ones do."""
    path = tmp_path / "i"
    build(path, 0, 10, snapshots_at={4})
    downgrade(path, journal_version)
    old_json = (path / "sarp.json").read_bytes()
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        assert index.recovery["snapshot"] == snapshot.FILES.name(1)
        assert index.index_id == 0
        for i in range(10):
            assert check_match(index, i) == len(sequence(i)) // B
        insert(index, 10)
        index.snapshot()
        insert(index, 11)
    assert (path / "sarp.json").read_bytes() == old_json
    assert snapshot.load(FileIO(), snapshot.candidates(path)[0][1], True).state.index_id == 0
    assert assert_all_match(path, 12)["snapshot"] == snapshot.FILES.name(2)


def test_records_appended_to_a_journal_of_version_2_keep_its_padding_zero(tmp_path):
    """Version 2 has padding, 0, where later versions name the synced bytes: records this
    build appends to such a journal, also after its syncs, keep it 0."""
    path = tmp_path / "i"
    build(path, 0, 4)
    downgrade(path, 2)
    with sarp.open(path, backend="wiredtiger", snapshot_on_close=False) as index:
        for i in range(4, 8):
            insert(index, i)
            index.flush()
        raw = journal.files(path)[-1][1].read_bytes()
    assert struct.unpack_from("<I", raw, 8)[0] == 2
    off, padding = journal.HEADERS[2].size, []
    while off < len(raw):
        length = journal.RECORD_HEADER.unpack_from(raw, off)[0]
        padding.append(journal.PAYLOAD_HEADER.unpack_from(raw, off + journal.RECORD_HEADER.size)[4])
        off += journal.RECORD_HEADER.size + length
    assert off == len(raw) and padding == [0] * 8
    assert_all_match(path, 8)


def test_a_file_of_an_index_before_ids_is_refused_by_an_index_with_one(tmp_path):
    """A snapshot or journal without an id was written by an index without one: another index
    than one that has an id."""
    ours, old = tmp_path / "ours", tmp_path / "old"
    build(ours, 0, 12, snapshots_at={5})
    build(old, 100, 112, snapshots_at={105})
    downgrade(old)
    seq, foreign = journal.files(old)[-1]
    shutil.copyfile(foreign, ours / foreign.name)
    with pytest.raises(RecoveryError, match="index id 0000000000000000, this index"):
        sarp.open(ours, backend="wiredtiger")


def test_a_snapshot_header_of_version_2_is_read(tmp_path):
    path = tmp_path / "i"
    build(path, 0, 3, snapshots_at={1})
    downgrade(path)
    raw = snapshot.candidates(path)[0][1].read_bytes()
    assert struct.unpack_from("<II", raw, 8) == (2, snapshot.HEADERS[2].size)
    state = snapshot.decode(raw, "s")
    assert state.index_id == 0 and state.seq == 1


def test_rebuild_gives_an_index_from_before_ids_its_id(tmp_path):
    """`sarp rebuild` writes sarp.json again, in format 3 with a new id and the configuration
    it held (not the handle's max_retrieval); the index's files then carry that id."""
    path = tmp_path / "i"
    build(path, 0, 10, snapshots_at={4})
    downgrade(path)
    stored = json.loads((path / "sarp.json").read_text())["config"]
    sarp.rebuild(path, max_retrieval=7)
    data = json.loads((path / "sarp.json").read_text())
    assert data["format"] == 3 and data["config"] == stored
    ident = int(data["index_id"], 16)
    assert ident and all(journal.FILE_HEADER.unpack_from(p.read_bytes())[5] == ident
                         for _, p in journal.files(path))
    assert assert_all_match(path, 10)["snapshot"] == snapshot.candidates(path)[0][1].name
    sarp.rebuild(path)  # an index with an id keeps it
    assert index_id(path) == data["index_id"]


@pytest.mark.parametrize("left", ["store", "journal", "snapshot"])
def test_no_index_is_created_over_one_that_lost_its_sarp_json(tmp_path, left):
    """An index whose sarp.json is gone (deleted, not restored from a backup) is no creation
    cut short: creating one there would write journal 0 again and overwrite its segments.
    The open refuses, naming what it found, and changes nothing; with sarp.json back, the
    index opens whole."""
    path = tmp_path / "i"
    build(path, 0, 6, snapshots_at={3} if left == "snapshot" else ())
    saved = (path / "sarp.json").read_bytes()
    (path / "sarp.json").unlink()
    if left == "journal":  # journal 0 with records over an empty store
        shutil.rmtree(path / "store")
        build(tmp_path / "empty", 0, 0)
        shutil.copytree(tmp_path / "empty" / "store", path / "store")
    says = {"store": "segments in store/", "journal": "journal-0+.log with records",
            "snapshot": "journal-0+.log, journal-0+1.log, snapshot-0+1.snap"}[left]
    assert_open_refused(path, ValueError, f"holds {says} but no sarp.json: restore",
                        backend="wiredtiger", **CONFIG)
    if left != "journal":
        (path / "sarp.json").write_bytes(saved)
        assert_all_match(path, 6)


def test_a_creation_that_finds_the_store_locked_removes_nothing(tmp_path, monkeypatch):
    """Two opens creating one index: the one that finds the store locked by the other leaves
    the other's files alone, also the directories it saw missing when it started."""
    path = tmp_path / "i"
    real = storage_backends.open_store
    held = []

    def racing(kind, store_path, **kw):  # the other open creates the store first
        held.append(real(kind, store_path, **kw))
        return real(kind, store_path, **kw)

    monkeypatch.setattr(storage_backends, "open_store", racing)
    with pytest.raises(StoreLockedError):
        sarp.open(path, backend="wiredtiger", **CONFIG)
    assert (path / "store" / "STORE_KIND").exists()
    held[0].close()


def _race(monkeypatch, other, fail: bool = False) -> None:
    """Make the next store open first run ``other`` (another open, given the store's path),
    then open the store, or fail with OSError: the race in which an open decides to create an
    index, and another open works there before this one takes the store's lock."""
    real = storage_backends.open_store

    def racing(kind, store_path, **kw):
        monkeypatch.setattr(storage_backends, "open_store", real)
        other(store_path)
        if fail:
            raise OSError("injected: the store cannot be opened")
        return real(kind, store_path, **kw)

    monkeypatch.setattr(storage_backends, "open_store", racing)


def _created_meanwhile(path, monkeypatch, backend: str = "wiredtiger", fail: bool = False):
    """``_race`` with another open that creates an index at ``path`` on ``backend``, holding
    sequences 0 to 2, and closes it."""
    _race(monkeypatch, lambda _: build(path, 0, 3, backend=backend), fail)


def test_a_creation_finds_an_index_created_meanwhile(tmp_path, monkeypatch):
    """An index another open created (and closed) between this open's first look and its
    store lock is not overwritten: the open opens that index instead, as a later one would.
    Its recovery report's total_s covers both attempts, the other open's work included."""
    path = tmp_path / "i"
    other: list[float] = []

    def timed_build(_: object) -> None:
        t = time.perf_counter()
        build(path, 0, 3, backend="wiredtiger")
        other.append(time.perf_counter() - t)

    _race(monkeypatch, timed_build)
    with sarp.open(path, backend="wiredtiger", **CONFIG) as index:
        ident = index_id(path)
        for s in range(3):
            assert check_match(index, s) == len(sequence(s)) // B
        assert index.recovery["journal_records"] == 3  # recovered, not created
        assert index.recovery["total_s"] >= other[0] + index.recovery["store_open_s"]
    assert index_id(path) == ident
    assert_all_match(path, 3)


def test_a_creation_that_finds_an_index_created_meanwhile_checks_its_config(tmp_path,
                                                                            monkeypatch):
    """The index created meanwhile is opened as any existing one: a conflicting parameter
    of this open raises, and the index is kept."""
    path = tmp_path / "i"
    _created_meanwhile(path, monkeypatch)
    with pytest.raises(ConfigMismatchError):
        sarp.open(path, backend="wiredtiger", **{**CONFIG, "tau": 5})
    assert_all_match(path, 3)


def test_a_creation_finds_an_index_of_another_backend_created_meanwhile(tmp_path, monkeypatch):
    """The other open made a store of another kind: with no backend named, this open opens
    that index, as a later open would; naming its own backend, it raises StoreKindError.
    Either way the other index is kept whole (before, this open deleted it as its own)."""
    path = tmp_path / "i"
    _created_meanwhile(path, monkeypatch, backend="flashlog")
    with sarp.open(path, **CONFIG) as index:
        assert index.store.kind == "flashlog"
        for s in range(3):
            assert check_match(index, s) == len(sequence(s)) // B
    other = tmp_path / "j"
    _created_meanwhile(other, monkeypatch, backend="flashlog")
    with pytest.raises(StoreKindError):
        sarp.open(other, backend="wiredtiger", **CONFIG)
    with sarp.open(other) as index:
        for s in range(3):
            assert check_match(index, s) == len(sequence(s)) // B


def test_a_creation_leaves_a_store_of_another_kind_made_meanwhile(tmp_path, monkeypatch):
    """Another open, creating an index on another backend, has made its store but not yet
    its sarp.json: this open raises StoreKindError and removes nothing of it."""
    path = tmp_path / "i"
    real = storage_backends.open_store
    _race(monkeypatch, lambda store: real("flashlog", store, dense_keys=True).close())
    with pytest.raises(StoreKindError):
        sarp.open(path, backend="wiredtiger", **CONFIG)
    assert storage_backends.stored_kind(path / "store") == "flashlog"


def test_a_failed_creation_keeps_an_index_created_meanwhile(tmp_path, monkeypatch):
    """This open's store fails to open after another open created the index there: the
    error is raised, and nothing of that index is removed as this open's leftovers."""
    path = tmp_path / "i"
    _created_meanwhile(path, monkeypatch, fail=True)
    with pytest.raises(OSError, match="injected"):
        sarp.open(path, backend="wiredtiger", **CONFIG)
    assert_all_match(path, 3)
