"""The ``sarp`` maintenance command: finds the backend, refuses paths that hold no index."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import sarp
from sarp.cli import main


@pytest.fixture
def index_path(tmp_path):
    path = tmp_path / "i"
    with sarp.open(path, backend="odirect") as index:
        index.insert(tokens=np.arange(640))
    return path


def test_stats_uses_the_index_backend(index_path, capsys):
    assert main(["stats", str(index_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["store"]["kind"] == "odirect" and report["indexed_blocks"] == 40


def test_rebuild_uses_the_index_backend(index_path, capsys):
    assert main(["rebuild", str(index_path)]) == 0
    assert json.loads(capsys.readouterr().out)["blocks"] == 40
    with sarp.open(index_path) as index:
        assert index.store.kind == "odirect"
        assert index.match(tokens=np.arange(640)).num_blocks == 40


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_a_path_without_an_index_is_refused_and_left_alone(command, tmp_path, capsys):
    assert main([command, str(tmp_path / "typo")]) == 1
    assert "holds no SARP index" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_a_memory_backend_index_is_refused_and_left_alone(command, tmp_path, capsys):
    """Its store kept nothing across close; opening it would delete its stale routing files."""
    path = tmp_path / "i"
    with sarp.open(path, backend="memory") as index:
        index.insert(tokens=np.arange(640))
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    assert main([command, str(path)]) == 1
    assert "is on the memory backend, which kept nothing" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()} == before


def test_a_mismatched_backend_is_refused(index_path, capsys):
    assert main(["stats", str(index_path), "--backend", "rocksdb"]) == 1
    assert "'odirect' store, not 'rocksdb'" in capsys.readouterr().err


def test_a_closed_pipe_is_not_an_error(index_path):
    proc = subprocess.Popen([sys.executable, "-m", "sarp.cli", "stats", str(index_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader leaves before the report is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("command", ["stats", "rebuild"])
def test_an_os_error_is_reported_in_one_line(index_path, command, capsys):
    """A file of the index the system cannot open (here a journal that became a directory)."""
    journal = sorted(index_path.glob("journal-*"))[-1]
    journal.unlink()
    journal.mkdir()
    assert main([command, str(index_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sarp {command}: ") and "Is a directory" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_stats_recovers_and_cuts_a_torn_journal_tail(tmp_path, capsys):
    """``sarp stats`` opens the index as ``sarp.open`` does: a torn tail of the newest journal
    (bytes a crash left after its last record) is cut, and the report says how many bytes."""
    path = tmp_path / "i"
    with sarp.open(path, backend="odirect", snapshot_on_close=False) as index:
        index.insert(tokens=np.arange(640))
    journal = max(path.glob("journal-*.log"))
    whole = journal.stat().st_size
    with open(journal, "ab") as f:
        f.write(b"\x07" * 37)  # a record cut short by a crash
    assert main(["stats", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recovery"]["torn_tail_bytes"] == 37
    assert report["recovery"]["journal_records"] >= 1 and report["indexed_blocks"] == 40
    assert journal.stat().st_size == whole
