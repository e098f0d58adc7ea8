"""An open that refuses an index: it raises, and changes none of the index's own files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sarp


def _index_files(path: Path) -> dict[str, bytes]:
    """The index's own files (its store's engines write theirs at every open)."""
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


def assert_open_refused(path: Path, error: type[BaseException] | tuple[type[BaseException], ...],
                        match: str, **options: Any) -> None:
    """``sarp.open(path, **options)`` raises ``error`` matching ``match``, and the index's
    own files are as they were."""
    files = _index_files(path)
    with pytest.raises(error, match=match):
        sarp.open(path, **options)
    assert _index_files(path) == files
