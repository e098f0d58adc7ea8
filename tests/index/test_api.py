"""The public API: configuration storage, bad input, short sequences, closed indexes."""

from __future__ import annotations

import errno
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarp
from sarp.errors import ConfigMismatchError, IndexClosedError, StoreLockedError
from storage_backends.io import FileIO


@pytest.fixture
def index(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory", background=False) as idx:
        yield idx


def tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 32000, n)


def snapshot_of(index) -> tuple:
    st = index.stats()
    return st["segments"], st["routing_entries"], st["store"]["logical_writes"]


def test_match_returns_blocks_tokens_ids_and_metadata(index):
    t = tokens(100)
    meta = np.zeros(6, sarp.DEFAULT_METADATA_DTYPE)
    meta["node"] = np.arange(6)
    meta["address"] = 7 * np.arange(6)
    index.insert(tokens=t, metadata=meta)
    m = index.match(tokens=t)
    assert (m.num_blocks, m.num_tokens) == (6, 96)
    assert np.array_equal(m.block_ids, sarp.block_ids(t))
    assert np.array_equal(m.metadata, meta)
    assert m.stats["segments_retrieved"] == 1
    # block IDs computed by an inference engine work the same way
    assert index.match(block_ids=sarp.block_ids(t)).num_blocks == 6


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        (dict(tokens=np.arange(64), metadata=np.zeros(3, sarp.DEFAULT_METADATA_DTYPE)),
         ValueError, "metadata"),
        (dict(tokens=np.arange(64), metadata=np.zeros(4, np.uint64)), TypeError, "metadata"),
        (dict(tokens=np.arange(64.0)), TypeError, "tokens"),
        (dict(tokens=[1, 2, -3] * 20), ValueError, "tokens"),
        (dict(tokens=np.arange(64), namespace=b"other-model"), ValueError, "namespace"),
        (dict(tokens=np.arange(64), namespace=""), TypeError, "namespace must be bytes"),
        (dict(tokens=np.arange(64), block_ids=np.arange(4, dtype=np.uint64)), TypeError,
         "block_ids"),
        (dict(block_ids=[1.5, 2.5]), TypeError, "block_ids"),
        (dict(tokens=set(range(64))), TypeError, "tokens must be a sequence"),
        (dict(tokens=dict.fromkeys(range(64))), TypeError, "tokens must be a sequence"),
        (dict(tokens=np.ma.masked_array(np.arange(64), mask=np.arange(64) == 3)), TypeError,
         "tokens must not be a masked array"),
        # arrays of Python objects are checked as arrays are: one dimension first
        (dict(tokens=np.array(5, dtype=object)), ValueError, "tokens must be one-dimensional"),
        (dict(block_ids=np.array(None, dtype=object)), ValueError,
         "block_ids must be one-dimensional"),
        (dict(block_ids=np.array([[1, 2]], dtype=object)), ValueError,
         "block_ids must be one-dimensional"),
        (dict(block_ids=range(2**64)), ValueError, "block_ids holds more items than a list"),
        (dict(tokens=range(2**63)), ValueError, "tokens holds more items than a list"),
    ],
)
def test_bad_input_raises_and_leaves_the_index_unchanged(index, kwargs, exc, word):
    index.insert(tokens=tokens(64, 1))
    before = snapshot_of(index)
    with pytest.raises(exc, match=word):
        index.insert(**kwargs)
    assert snapshot_of(index) == before
    assert index.match(tokens=np.arange(64)).num_blocks == 0


def test_sequence_shorter_than_one_block_matches_nothing_and_inserts_nothing(index):
    before = snapshot_of(index)
    index.insert(tokens=np.arange(15))
    assert snapshot_of(index) == before
    assert index.match(tokens=np.arange(15)).num_blocks == 0
    assert index.match(tokens=[]).num_blocks == 0


def test_configuration_is_stored_and_conflicts_are_refused(tmp_path):
    path = tmp_path / "i"
    with sarp.open(path, backend="wiredtiger", tau=17, segment_blocks=32) as idx:
        idx.insert(tokens=tokens(600))
    with pytest.raises(ConfigMismatchError, match="tau"):
        sarp.open(path, backend="wiredtiger", tau=18)
    with pytest.raises(ConfigMismatchError, match="segment_blocks"):
        sarp.open(path, backend="wiredtiger", segment_blocks=64)
    # the stored configuration is used when none is given; max_retrieval only steers queries
    with sarp.open(path, backend="wiredtiger", max_retrieval=1) as idx:
        assert (idx.config.tau, idx.config.segment_blocks, idx.config.max_retrieval) == (17, 32, 1)
        assert idx.match(tokens=tokens(600)).num_blocks == 600 // 16


def test_unknown_parameters_and_bad_paths(tmp_path):
    with pytest.raises(TypeError, match="segment_size"):
        sarp.open(tmp_path / "i", backend="memory", segment_size=64)
    with pytest.raises(ValueError, match="field_bits"):
        sarp.open(tmp_path / "j", backend="memory", filter_fields=8, field_bits=4)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        sarp.open(f, backend="memory")
    with sarp.open(tmp_path / "k", backend="memory") as idx:
        for bad, exc in [(-1, ValueError), (2**70, ValueError), (1.0, TypeError),
                         (np.array([3]), TypeError)]:
            with pytest.raises(exc, match="max_retrieval"):
                idx.match(tokens=np.arange(32), max_retrieval=bad)


def test_closed_index_raises(tmp_path):
    idx = sarp.open(tmp_path / "i", backend="memory")
    idx.close()
    idx.close()  # idempotent
    with pytest.raises(IndexClosedError):
        idx.match(tokens=np.arange(32))
    with pytest.raises(IndexClosedError):
        idx.insert(tokens=np.arange(32))
    with pytest.raises(IndexClosedError):
        with idx:
            pass


@pytest.mark.parametrize(
    "kwargs, exc, word",
    [
        (dict(backend="nosuch"), ValueError, "backend must be one of"),
        (dict(backend="flashlog", store_options={"bogus": 1}), TypeError, "bogus"),
        (dict(snapshot_every_inserts=-5), ValueError, "snapshot_every_inserts"),
        (dict(snapshot_every_inserts=2.5), TypeError, "snapshot_every_inserts"),
        (dict(snapshot_every_seconds=-1), ValueError, "snapshot_every_seconds"),
        (dict(snapshot_every_seconds="10"), TypeError, "snapshot_every_seconds"),
        (dict(snapshot_every_seconds=float("nan")), ValueError, "snapshot_every_seconds"),
        (dict(snapshot_every_seconds=True), TypeError, "snapshot_every_seconds"),
        (dict(snapshot_every_seconds=10**400), ValueError, "snapshot_every_seconds"),
        (dict(memory_budget=np.array([1 << 20])), TypeError, "memory_budget"),
        (dict(block_size=np.array([16])), TypeError, "block_size must be an integer"),
        (dict(direct_io="no"), TypeError, "direct_io"),
        (dict(background=1), TypeError, "background"),
        (dict(snapshot_on_close=None), TypeError, "snapshot_on_close"),
        (dict(backend=["memory"]), ValueError, "backend must be one of"),
        (dict(backend="flashlog", store_options=[("instances", 2)]), TypeError,
         "store_options must be a mapping"),
        (dict(backend="odirect", store_options={"max_value_size": "x"}), TypeError,
         "max_value_size"),
        (dict(backend="odirect", store_options={"io": 5}), TypeError, "io must be"),
        (dict(backend="flashlog", store_options={"instances": 0}), ValueError, "instances"),
        (dict(backend="wiredtiger", store_options={"checkpoint_seconds": -1}), ValueError,
         "checkpoint_seconds"),
        (dict(backend="wiredtiger", store_options={"checkpoint_seconds": "x"}), TypeError,
         "checkpoint_seconds"),
        (dict(backend="rocksdb", memory_budget=2**80), ValueError, "memory_budget"),
        # WiredTiger's largest cache: refused by name before the engine is asked
        (dict(backend="wiredtiger", memory_budget=(10 << 40) + 1), ValueError, "memory_budget"),
        (dict(store_options={"memory_budget": 1}), ValueError,
         "store_options must not set memory_budget"),
        (dict(store_options={1: 2}), TypeError, "store_options must be a mapping"),
        # a full segment (64 blocks of 64-byte metadata) would not fit an odirect slot: the
        # store is created to learn its limit, then removed with the rest
        (dict(backend="odirect", metadata_dtype="V64"), ValueError,
         "segment_blocks=64 blocks with 64-byte metadata_dtype"),
        (dict(tau=2**70), ValueError, "tau"),
        (dict(pruning_threshold=2**63), ValueError, "pruning_threshold"),
        (dict(max_retrieval=2**64), ValueError, "max_retrieval"),
        (dict(filter_fields=1, field_bits=64), ValueError, "field_bits at most 32"),
        (dict(tau=0), ValueError, "tau"),
        (dict(tau=2.0), TypeError, "tau must be an integer"),
        (dict(block_size=True), TypeError, "block_size must be an integer"),
        (dict(pruning_threshold=-1), ValueError, "pruning_threshold"),
        (dict(segment_blocks=63), ValueError, "segment_blocks must be a multiple of "
         "routing_points"),
        (dict(routing_points=32), ValueError, "segment_blocks / routing_points must be even"),
        (dict(segment_blocks=12, routing_points=2), ValueError,
         "filter_fields \\* stride must not exceed segment_blocks"),
        (dict(segment_blocks=65540, routing_points=5), ValueError,
         "segment_blocks must be at most 65535"),
        (dict(refinement=1), TypeError, "refinement must be a bool"),
        (dict(pruning="yes"), TypeError, "pruning must be a bool"),
        (dict(namespace="model-a"), TypeError, "namespace must be bytes"),
        (dict(metadata_dtype=None), TypeError, "metadata_dtype"),
        (dict(metadata_dtype="garbage"), TypeError, "metadata_dtype"),
        (dict(metadata_dtype=np.dtype(("u1", (4,)))), ValueError, "subarray"),
        (dict(metadata_dtype=np.dtype({"names": ["a", "b"], "formats": ["<u4", "<u2"],
                                       "offsets": [4, 0]})), ValueError,
         "metadata_dtype .* cannot be stored in sarp.json"),
    ],
)
def test_bad_open_options_raise_and_create_nothing(tmp_path, kwargs, exc, word):
    """Nothing is left, not even the missing directories above the index's."""
    with pytest.raises(exc, match=word):
        sarp.open(tmp_path / "new" / "deeper" / "i", **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend, created_with, kept", [
    ("odirect", {"key_mode": "sparse"}, ("key_mode", "sparse")),
    ("wiredtiger", {"leaf_page_kb": 8}, ("leaf_page_kb", 8)),
])
def test_a_store_keeps_the_options_it_was_created_with(tmp_path, capsys, backend,
                                                        created_with, kept):
    """The engines' options for dense keys apply when the store is created: a store created
    with other store_options reopens, recovers (``sarp stats``) and rebuilds with none given,
    and keeps its own."""
    from sarp.cli import main

    path = tmp_path / "i"
    t = tokens(3000)
    with sarp.open(path, backend=backend, store_options=created_with) as index:
        index.insert(tokens=t)
    with sarp.open(path) as index:
        assert index.match(tokens=t).num_blocks == len(t) // 16
        assert index.stats()["store"][kept[0]] == kept[1]
    assert main(["stats", str(path)]) == 0
    assert main(["rebuild", str(path), "--salvage"]) == 0
    capsys.readouterr()
    with sarp.open(path) as index:
        assert index.match(tokens=t).num_blocks == len(t) // 16
        assert index.stats()["store"][kept[0]] == kept[1]


def test_a_failed_creation_leaves_the_directories_above_that_others_use(tmp_path):
    """The directories a failed creation made above its index are removed only while empty:
    another index may be created beside it."""
    with sarp.open(tmp_path / "new" / "other", backend="memory"):
        with pytest.raises(ValueError, match="segment_blocks"):
            sarp.open(tmp_path / "new" / "i", backend="odirect", metadata_dtype="V64")
        assert [p.name for p in (tmp_path / "new").iterdir()] == ["other"]


@pytest.mark.parametrize("backend", ["memory", "odirect"])
def test_a_path_no_file_system_takes_is_refused_by_name(tmp_path, monkeypatch, backend):
    """Refused before anything is made: an empty path, a NUL byte, a name the file system's
    encoding cannot hold, a name longer than 255 bytes (under directories still to make)."""
    monkeypatch.chdir(tmp_path)  # an empty path would mean the working directory
    for bad, says in [("", "path must be a non-empty path"), ("i\0", "path must be a non-empty"),
                      ("a/\ud800", "path cannot be encoded"),
                      ("a/b/" + "x" * 256, "path holds a name of 256 bytes")]:
        with pytest.raises(ValueError, match=says):
            sarp.open(bad, backend=backend)
    assert list(tmp_path.iterdir()) == []
    with sarp.open("a/b/" + "x" * 255, backend=backend):  # the longest name is taken
        pass


class _Int:
    """An integer by ``__index__`` only."""

    def __init__(self, n):
        self.n = n

    def __index__(self) -> int:
        return self.n


def test_the_snapshot_schedule_is_used_as_checked(tmp_path):
    """An ``__index__`` object or numpy number for the schedule is taken as the int or float
    it was checked as: the insert it makes due takes a snapshot, never a TypeError after the
    insert was applied."""
    with sarp.open(tmp_path / "i", backend="memory", snapshot_every_inserts=_Int(2),
                   memory_budget=np.int64(1 << 20),
                   snapshot_every_seconds=np.float32(3600)) as idx:
        for i in range(4):
            idx.insert(tokens=np.arange(i * 1000, i * 1000 + 64))
        assert idx.counters["snapshots"] == 2


def test_a_failed_creation_in_an_empty_directory_leaves_it_empty(tmp_path):
    with pytest.raises(ValueError, match="segment_blocks"):
        sarp.open(tmp_path, backend="odirect", metadata_dtype="V64")
    assert list(tmp_path.iterdir()) == []


class _NoRoomForConfig(FileIO):
    """Publishing sarp.json fails, as on a full device: after the first journal is written."""

    def publish(self, path, data):
        if Path(path).name == "sarp.json":
            raise OSError(errno.ENOSPC, "No space left on device (injected)", str(path))
        return super().publish(path, data)


@pytest.mark.parametrize("there", [False, True])
def test_a_creation_that_fails_at_its_last_step_leaves_nothing(tmp_path, there):
    """In a directory that was there too: what it wrote (the store, journal 0) is removed."""
    path = tmp_path / "i"
    if there:
        path.mkdir()
    with pytest.raises(OSError, match="injected"):
        sarp.open(path, backend="wiredtiger", _io=_NoRoomForConfig())
    assert (sorted(p.name for p in path.iterdir()) == []) if there else not path.exists()
    with sarp.open(path, backend="wiredtiger") as index:
        index.insert(tokens=tokens(64))
        assert index.match(tokens=tokens(64)).num_blocks == 4


@pytest.mark.parametrize("path, exc, word", [
    (None, TypeError, "path must be a str or os.PathLike"),
    (123, TypeError, "path must be a str or os.PathLike"),
    ("afile/sub", ValueError, "cannot be created: .*afile' is a file"),
    ("broken", ValueError, "'broken' cannot be created: it is a symbolic link that leads to no"),
    ("loop", ValueError, "'loop' cannot be created: it is a symbolic link that leads to no"),
])
def test_a_bad_path_is_refused_by_name(tmp_path, monkeypatch, path, exc, word):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(exc, match=word):
        sarp.open(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "broken", "loop"]


def test_an_insert_shorter_than_a_block_returns_the_same_counters(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory") as index:
        full = index.insert(tokens=tokens(160))
        short = index.insert(tokens=tokens(10, 1))
        assert short.keys() == full.keys() and not any(short.values())
        assert index.stats()["inserts"] == 2


@pytest.mark.parametrize("call", [sarp.rebuild, sarp.opening.require_index])
def test_rebuild_names_a_bad_path(call):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got int"):
        call(3)


def test_snapshots_follow_the_time_schedule(tmp_path):
    """``snapshot_every_seconds``: an insert made once the interval has passed since the last
    snapshot takes one; inserts within the interval do not."""
    with sarp.open(tmp_path / "i", backend="memory", snapshot_every_seconds=1.0) as index:
        index.insert(tokens=tokens(64))
        assert index.counters["snapshots"] == 0  # within the interval since the open
        time.sleep(1.1)
        index.insert(tokens=tokens(64) + 1)
        assert index.counters["snapshots"] == 1
        index.insert(tokens=tokens(64) + 2)
        assert index.counters["snapshots"] == 1


def test_a_namespace_keeps_equal_tokens_apart(tmp_path):
    """Block IDs chain from a seed of the index's namespace (model, LoRA, salt): the same
    tokens under another namespace are other blocks, and match nothing here."""
    seq = tokens(320)
    with sarp.open(tmp_path / "i", backend="memory", namespace=b"model-a") as index:
        index.insert(tokens=seq)
        assert index.match(tokens=seq, namespace=b"model-a").num_blocks == 20
        own = sarp.block_ids(seq, 16, b"model-a")
        assert index.match(block_ids=own).num_blocks == 20
        assert index.match(block_ids=sarp.block_ids(seq, 16, b"model-b")).num_blocks == 0
        assert index.match(block_ids=sarp.block_ids(seq, 16)).num_blocks == 0
        with pytest.raises(ValueError, match="namespace differs"):
            index.match(tokens=seq, namespace=b"model-b")


def test_numpy_integers_are_taken_as_integers(tmp_path):
    numbers: dict[str, Any] = dict(block_size=np.int64(4), snapshot_every_inserts=np.int32(5))
    with sarp.open(tmp_path / "i", backend="memory", **numbers) as index:
        assert index.config.block_size == 4 and type(index.config.block_size) is int
        index.insert(tokens=tokens(40))
        assert index.match(tokens=tokens(40), max_retrieval=np.int64(2)).num_blocks == 10


def test_unaligned_block_ids_work_like_aligned_ones(tmp_path):
    """An unaligned uint64 view (from a byte buffer at an odd offset) is copied, never handed
    to the kernels, whichever call this thread made before."""
    ids = sarp.block_ids(tokens(160), 16)
    buf = bytearray(1 + ids.nbytes)
    buf[1:] = ids.tobytes()
    unaligned = np.frombuffer(buf, np.uint64, offset=1)
    assert not unaligned.flags.aligned
    with sarp.open(tmp_path / "i", backend="memory") as index:
        index.insert(block_ids=ids[:5])
        assert index.match(block_ids=unaligned).num_blocks == 5
        index.insert(block_ids=unaligned)  # after a match: its matched prefix is reused
        assert index.match(block_ids=ids).num_blocks == 10


def test_masked_metadata_is_refused(tmp_path):
    with sarp.open(tmp_path / "i", backend="memory") as index:
        t = tokens(64)
        meta = np.zeros(4, sarp.DEFAULT_METADATA_DTYPE)
        with pytest.raises(TypeError, match="metadata must not be a masked array"):
            index.insert(tokens=t, metadata=np.ma.array(meta, mask=True))
        assert index.stats()["indexed_blocks"] == 0


def test_a_directory_holding_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty and holds no SARP index"):
        sarp.open(tmp_path, backend="memory")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_reopen_finds_the_backend(tmp_path):
    t = tokens(200)
    with sarp.open(tmp_path / "i", backend="flashlog") as index:
        index.insert(tokens=t)
    with sarp.open(tmp_path / "i") as index:
        assert index.store.kind == "flashlog" and index.match(tokens=t).num_blocks == 12
    with sarp.open(tmp_path / "new") as index:
        assert index.store.kind == sarp.opening.DEFAULT_BACKEND


@pytest.mark.parametrize("dtype", [
    [(("where the block is", "node"), "<u8")],  # a title: a name pair in the JSON
    [("where", [("node", "<u4"), (("tier of it", "tier"), "u1")]), ("at", "<u8", (2,))],
])
def test_a_structured_metadata_dtype_reopens(tmp_path, dtype):
    dtype = np.dtype(dtype)
    meta = np.zeros(4, dtype)
    meta.view(np.uint8)[:] = np.arange(meta.nbytes) % 251
    with sarp.open(tmp_path / "i", backend="wiredtiger", metadata_dtype=dtype) as index:
        index.insert(tokens=tokens(64), metadata=meta)
    with sarp.open(tmp_path / "i") as index:
        assert index.config.metadata_dtype == dtype
        assert index.match(tokens=tokens(64)).metadata.tobytes() == meta.tobytes()


def test_memory_backend_reopens_empty(tmp_path):
    """The memory store keeps nothing across close(); the routing files it left name segments
    that are gone, so a reopen starts empty instead of reporting blocks it cannot match."""
    with sarp.open(tmp_path / "i", backend="memory") as index:
        index.insert(tokens=tokens(200))
        index.snapshot()
        index.insert(tokens=tokens(200, 1))
    with sarp.open(tmp_path / "i", backend="memory") as index:
        names = sorted(p.name for p in (tmp_path / "i").iterdir())
        assert names == ["journal-0000000000000000.log", "sarp.json", "store"]
        assert index.stats()["indexed_blocks"] == 0 and index.stats()["routing_entries"] == 0
        assert index.match(tokens=tokens(200)).num_blocks == 0
        index.insert(tokens=tokens(200, 2))
        assert index.match(tokens=tokens(200, 2)).num_blocks == 12


@pytest.mark.parametrize("backend", ["memory", "odirect"])
def test_second_open_of_an_open_index_raises(tmp_path, backend):
    """Two handles would each journal and snapshot their own routing state over the other's."""
    t = tokens(200)
    with sarp.open(tmp_path / "i", backend=backend) as first:
        first.insert(tokens=t)
        files = sorted(p.name for p in (tmp_path / "i").iterdir())
        with pytest.raises(StoreLockedError):
            sarp.open(tmp_path / "i", backend=backend)
        assert sorted(p.name for p in (tmp_path / "i").iterdir()) == files
        assert first.match(tokens=t).num_blocks == 12
    with sarp.open(tmp_path / "i", backend=backend) as again:
        assert again.match(tokens=t).num_blocks == (12 if backend == "odirect" else 0)
