"""The Redis recovery anchor (paper 6.3: 621 s for 10^9 entries): load block entries into a real
``redis-server`` on loopback, SAVE, restart it and time until it answers a query.

The client speaks RESP over a socket (no dependency). The server runs in a temporary directory
with a free loopback port; every wait is bounded, and the process is killed on any error.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from sarp.bench.disk import drop_page_cache
from sarp.errors import RedisError

BATCH = 10_000  # key-value pairs per MSET
NOT_FOUND = "redis-server not found"


def find_server() -> str | None:
    """The redis-server binary on PATH, or None."""
    return shutil.which("redis-server")


class Resp:
    """A minimal RESP2 client: one connection, commands of bytes arguments."""

    def __init__(self, port: int, timeout: float):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, *args: bytes) -> bytes | None:
        """Send one command, return its reply (simple string, integer, bulk or None)."""
        self.send(encode(*args))
        return self.reply()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RedisError("connection closed by redis-server")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self) -> bytes | None:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RedisError(rest.decode(errors="replace"))
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise RedisError("connection closed by redis-server")
                self.buf += chunk
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        raise RedisError(f"unexpected reply {line[:40]!r}")


def encode(*args: bytes) -> bytes:
    """One RESP command."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def mset(keys: np.ndarray, values: np.ndarray) -> bytes:
    """An MSET of uint64 ``keys`` (8-byte little-endian) and fixed-width ``values`` rows."""
    n, width = values.shape
    rec = np.dtype([("h1", "S4"), ("k", "S8"), ("h2", f"S{5 + len(str(width))}"),
                    ("v", f"S{width}"), ("t", "S2")])
    out = np.empty(n, rec)
    out["h1"], out["h2"], out["t"] = b"$8\r\n", b"\r\n$%d\r\n" % width, b"\r\n"
    out["k"] = keys.astype("<u8").view("S8")
    out["v"] = np.ascontiguousarray(values).view(f"S{width}").reshape(n)
    return b"*%d\r\n$4\r\nMSET\r\n" % (2 * n + 1) + out.tobytes()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _server(binary: str, directory: Path, port: int) -> Iterator[subprocess.Popen]:
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
            "--protected-mode", "yes", "--daemonize", "no",
            "--logfile", str(directory / "redis.log")]
    # what it says before its log file is open (a bad argument, a missing file) goes here
    with open(directory / "redis.stderr", "wb") as err:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _check_alive(proc: subprocess.Popen, directory: Path) -> None:
    """Raise at once, with the end of its log, if the server has exited."""
    if proc.poll() is not None:
        tail: list[str] = []
        for name in ("redis.log", "redis.stderr"):
            log = directory / name
            tail = tail or (log.read_text().strip().splitlines()[-1:] if log.exists() else [])
        raise RedisError(f"redis-server exited with code {proc.returncode}: "
                         f"{tail[0] if tail else 'no log'}")


def _ready(proc: subprocess.Popen, directory: Path, port: int, timeout: float,
           key: bytes | None = None, value: bytes | None = None) -> float:
    """Seconds until PING answers and, if ``key`` is given, GET ``key`` returns ``value``
    (polling every ms; a server still loading its snapshot answers LOADING)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            c = Resp(port, timeout)
        except OSError:
            _check_alive(proc, directory)
            time.sleep(0.001)
            continue
        try:
            while time.perf_counter() - t0 < timeout:
                try:
                    c.command(b"PING")
                    got = c.command(b"GET", key) if key is not None else value
                except RedisError as exc:
                    if "LOADING" not in str(exc):
                        raise
                    time.sleep(0.001)
                    continue
                if got != value:
                    raise RedisError(f"GET of a loaded key returned {got!r}")
                return time.perf_counter() - t0
        finally:
            c.close()
    raise RedisError(f"redis-server not ready after {timeout} s")


def redis_recovery(keys: np.ndarray, values: np.ndarray, directory: Path,
                   timeout: float = 900.0) -> dict[str, float]:
    """Load ``keys`` -> ``values`` rows into a fresh redis-server, SAVE, restart it, and time
    until it serves a GET: {"load_s", "save_s", "recovery_s", "snapshot_bytes"}."""
    binary = find_server()
    if binary is None:
        raise FileNotFoundError(NOT_FOUND)
    directory.mkdir(parents=True, exist_ok=True)
    directory = directory.resolve()  # redis-server opens its log after changing into --dir
    port = _free_port()
    probe_key, probe_value = keys[len(keys) // 2 : len(keys) // 2 + 1], values[len(keys) // 2]
    with _server(binary, directory, port) as proc:
        _ready(proc, directory, port, timeout)
        c = Resp(port, timeout)
        t0 = time.perf_counter()
        for i in range(0, len(keys), BATCH):
            c.send(mset(keys[i:i + BATCH], values[i:i + BATCH]))
            c.reply()
        t1 = time.perf_counter()
        c.command(b"SAVE")
        t2 = time.perf_counter()
        try:
            c.command(b"SHUTDOWN", b"NOSAVE")
        except (RedisError, OSError):
            pass  # the server closes the connection as it exits
        c.close()
        proc.wait(timeout=timeout)
    rdb = (directory / "dump.rdb").stat().st_size
    drop_page_cache(directory / "dump.rdb")  # read from the device, as the indexes' files are
    with _server(binary, directory, port) as proc:
        recovery = _ready(proc, directory, port, timeout, probe_key.astype("<u8").tobytes(),
                          probe_value.tobytes())
    return {"load_s": t1 - t0, "save_s": t2 - t1, "recovery_s": recovery,
            "snapshot_bytes": rdb}
