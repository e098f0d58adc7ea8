"""An acknowledged insert that builds on another insert's segments survives a crash even
when that other insert has not returned: the segments' journal record is written with the
placement that made them visible, so the acknowledging sync covers it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sarp
from tests.backends.conftest import kind_params

from . import shared_segment_writer as writer
from .workload import CONFIG


@pytest.mark.parametrize("durability", ["sync", "group"])
@pytest.mark.parametrize("backend", kind_params(persistent_only=True))
def test_insert_on_segments_of_an_unfinished_insert_survives_kill(tmp_path: Path, backend: str,
                                                                  durability: str) -> None:
    path = tmp_path / "index"
    proc = subprocess.Popen([sys.executable, writer.__file__, backend, str(path), durability],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
    finally:
        watchdog.cancel()
    assert line.strip() == "ack", err
    _, b = writer.sequences()
    with sarp.open(path) as index:
        m = index.match(tokens=b, max_retrieval=0)
        assert m.num_blocks == len(b) // CONFIG["block_size"], index.recovery
