"""The code checks the project holds itself to, run with the tests so that CI enforces them:
ruff (lint) on everything, mypy (types, configured in pyproject.toml) on the package and
the tests, and stubtest: the compiled modules against their .pyi stubs."""

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


def test_the_stubs_of_the_compiled_modules_match_them() -> None:
    """Every name in a ``sarp/_core`` stub exists at runtime with a compatible signature, and
    every public runtime name is in the stub (tests/stubtest_allowlist.txt: what Cython adds;
    disjoint bases, which every cdef class is, are not marked)."""
    modules = sorted(f"sarp._core.{p.stem}" for p in (ROOT / "sarp" / "_core").glob("*.pyi"))
    r = _run("mypy.stubtest", *modules, "--allowlist", "tests/stubtest_allowlist.txt",
             "--mypy-config-file", "pyproject.toml", "--ignore-disjoint-bases", "--concise")
    assert r.returncode == 0, r.stdout + r.stderr
