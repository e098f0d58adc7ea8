"""The Redis recovery anchor against a real redis-server (skipped where none is installed)."""

from pathlib import Path

import numpy as np
import pytest

from sarp.bench.redis_anchor import (
    Resp,
    _free_port,
    _ready,
    _server,
    encode,
    find_server,
    mset,
    redis_recovery,
)
from sarp.errors import RedisError

needs_redis = pytest.mark.skipif(find_server() is None, reason="redis-server not installed")


def _binary() -> str:
    """The redis-server binary (the tests that call this are skipped without one)."""
    path = find_server()
    assert path is not None
    return path


def test_encode_is_resp2():
    assert encode(b"GET", b"k") == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"


def test_mset_encodes_every_pair():
    keys = np.array([1, 2**64 - 1], np.uint64)
    values = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)
    expected = encode(b"MSET", keys[:1].astype("<u8").tobytes(), bytes([1, 2, 3]),
                      keys[1:].astype("<u8").tobytes(), bytes([4, 5, 6]))
    assert mset(keys, values) == expected


@needs_redis
def test_recovery_restores_every_entry(tmp_path):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    values = rng.integers(0, 256, (3000, 16), dtype=np.uint8)
    out = redis_recovery(keys, values, tmp_path, timeout=60)
    assert out["recovery_s"] > 0 and out["load_s"] > 0 and out["snapshot_bytes"] > 0
    # the restarted server holds every loaded entry, byte for byte
    port = _free_port()
    with _server(_binary(), tmp_path, port) as proc:
        _ready(proc, tmp_path, port, 60)
        c = Resp(port, 60)
        try:
            assert c.command(b"DBSIZE") == b"3000"
            for i in (0, 1234, 2999):
                got = c.command(b"GET", keys[i : i + 1].astype("<u8").tobytes())
                assert got == values[i].tobytes()
        finally:
            c.close()


@needs_redis
def test_a_relative_directory_works(tmp_path, monkeypatch):
    # sarp-bench's default results directory is relative; redis-server changes into --dir
    # before it opens its log file, so a relative log path would name a missing file
    monkeypatch.chdir(tmp_path)
    keys = np.arange(100, dtype=np.uint64)
    values = np.zeros((100, 16), np.uint8)
    out = redis_recovery(keys, values, Path("results") / "redis", timeout=60)
    assert out["recovery_s"] > 0 and (tmp_path / "results" / "redis" / "dump.rdb").exists()


@needs_redis
def test_a_server_that_cannot_start_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = Path("a") / "b"  # relative: the log path is missing once it has changed into --dir
    relative.mkdir(parents=True)
    port = _free_port()
    with _server(_binary(), relative, port) as proc:
        with pytest.raises(RedisError, match="Can't open the log file"):
            _ready(proc, relative, port, 60)


@needs_redis
def test_the_restart_reads_the_dump_from_the_device(tmp_path, monkeypatch):
    """The timed restart follows dropping the dump from the page cache, as the indexes'
    files are dropped before each of their reopens."""
    from sarp.bench import redis_anchor

    events: list[str] = []
    real_drop, real_server = redis_anchor.drop_page_cache, redis_anchor._server

    def drop(path):
        events.append(f"drop {path.name}")
        real_drop(path)

    def server(*args, **kwargs):
        events.append("start")
        return real_server(*args, **kwargs)

    monkeypatch.setattr(redis_anchor, "drop_page_cache", drop)
    monkeypatch.setattr(redis_anchor, "_server", server)
    keys = np.arange(100, dtype=np.uint64)
    redis_recovery(keys, np.zeros((100, 16), np.uint8), tmp_path, timeout=60)
    assert events == ["start", "drop dump.rdb", "start"]
