"""The code checks the project holds itself to, run with the tests so that CI enforces them:
ruff (lint) on everything, and mypy (types, configured in pyproject.toml) on the package and
the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    r = _run("ruff", "check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_finds_nothing(tmp_path: Path) -> None:
    r = _run("mypy", "--cache-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
