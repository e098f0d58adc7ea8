"""The code checks the project holds itself to, run with the tests so that CI enforces them:
ruff (lint) on everything, mypy (types, configured in pyproject.toml) on the package and
the tests, and stubtest: the compiled modules against their .pyi stubs, with a check of
which attributes they make read-only."""

from __future__ import annotations

import ast
import re
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


def _declared(pyx: str) -> dict[tuple[str, str], bool]:
    """(class, attribute) -> whether Python code may set it, for each attribute a ``cdef
    class`` of ``pyx`` shows to Python: ``cdef public`` (settable), ``cdef readonly`` and a
    ``@property`` (settable only with an ``@x.setter``)."""
    out: dict[tuple[str, str], bool] = {}
    cls = ""
    for line in pyx.splitlines():
        if m := re.match(r"cdef class (\w+)", line):
            cls = m[1]
        elif m := re.match(r"    cdef (public|readonly) \w+ ([\w, ]+)$", line):
            for name in m[2].split(","):
                out[cls, name.strip()] = m[1] == "public"
        elif line.strip() == "@property":
            out[cls, ""] = False  # the next def names it
        elif (m := re.match(r"    def (\w+)\(", line)) and (cls, "") in out:
            del out[cls, ""]
            out[cls, m[1]] = False
        elif m := re.match(r"    @(\w+)\.setter", line):
            out[cls, m[1]] = True
    return out


def _stubbed(pyi: str) -> dict[tuple[str, str], bool]:
    """(class, attribute) -> whether the stub lets code set it: a plain annotated attribute
    or a property with a setter, not a property without one."""
    out: dict[tuple[str, str], bool] = {}
    for cls in ast.parse(pyi).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out[cls.name, node.target.id] = True
            elif isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if isinstance(d, ast.Name) and d.id == "property":
                        out[cls.name, node.name] = False
                    elif isinstance(d, ast.Attribute) and d.attr == "setter":
                        out[cls.name, node.name] = True
    return out


def test_the_stubs_make_read_only_what_the_compiled_modules_make_read_only() -> None:
    """stubtest checks names and signatures, not whether an attribute can be set: each
    attribute a stub lists is settable there exactly where its module lets Python set it."""
    wrong = []
    for pyi in sorted((ROOT / "sarp" / "_core").glob("*.pyi")):
        stub = _stubbed(pyi.read_text())
        for key, settable in _declared(pyi.with_suffix(".pyx").read_text()).items():
            if key in stub and stub[key] != settable:
                wrong.append(f"{pyi.name}: {'.'.join(key)} is "
                             f"{'settable' if settable else 'read-only'} at runtime")
    assert not wrong
