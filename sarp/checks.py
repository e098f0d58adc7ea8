"""Argument checks shared by the index and the record stores, so that a bad value raises an
error naming the argument before anything is created or changed."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: the largest integer option: what fits a signed 64-bit field
MAX_INT = (1 << 63) - 1


def check_int(value: object, name: str, lo: int, hi: int = MAX_INT) -> int:
    """Return ``value`` as an int in [lo, hi], or raise naming the argument: TypeError for a
    non-integer (bools included), ValueError for one out of range."""
    if type(value) is int and lo <= value <= hi:  # the common case, checked first
        return value
    try:
        n = None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:  # a numpy array's raises unless it holds one integer
        n = None
    if n is None:
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if not lo <= n <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {n}")
    return n


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool, or raise TypeError naming the argument (a 0 or 1, a
    string or None is not taken for one)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


#: the longest name of one file or directory that Linux file systems take, in bytes
NAME_MAX = 255


def check_path(path: object, name: str = "path") -> Path:
    """``path`` (a str or os.PathLike) as a Path, or raise naming the argument: TypeError for
    another type, ValueError for an empty path (it would mean the working directory), one
    holding a NUL byte, one the file system's encoding cannot encode, or one with a name
    longer than ``NAME_MAX`` bytes (refused before any directory above it is made)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"{name} must name a path as text, got {type(text).__name__}")
    if not text or "\0" in text:
        raise ValueError(f"{name} must be a non-empty path without NUL bytes, got {text!r}")
    try:
        longest = max(len(part) for part in os.fsencode(text).split(b"/"))
    except UnicodeEncodeError:
        raise ValueError(f"{name} cannot be encoded as a file name, got {text!r}") from None
    if longest > NAME_MAX:
        raise ValueError(f"{name} holds a name of {longest} bytes, longer than the "
                         f"{NAME_MAX} a file system takes")
    return Path(text)


_TEXT = (str, bytes, bytearray, memoryview)


def check_iterable(value: object, name: str, what: str,
                   exclude: tuple[type, ...] = ()) -> Iterable[Any]:
    """Return ``value``, or raise TypeError naming the argument (``name`` must be ``what``)
    unless it is an iterable other than text and the types in ``exclude``."""
    if isinstance(value, _TEXT + exclude) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def listed(value: Iterable[Any], name: str) -> list[Any]:
    """The items of the iterable ``value`` in a list; ValueError naming the argument when
    they are more than a list can hold (``range(2**64)``)."""
    try:
        return list(value)
    except OverflowError:
        raise ValueError(f"{name} holds more items than a list can") from None


def check_directory(path: Path, is_file: str, cannot_create: str) -> None:
    """Raise ValueError unless ``path`` is a directory or can be created as one: ``is_file``
    when ``path`` is a file, ``cannot_create`` (with the file named) when a file stands where
    one of its missing parents would be."""
    if path.exists():
        if not path.is_dir():
            raise ValueError(is_file)
        return
    if path.is_symlink():  # to nothing, or in a loop: it cannot become a directory
        raise ValueError(f"{cannot_create}: it is a symbolic link that leads to no directory")
    above = next(a for a in path.absolute().parents if a.exists())
    if not above.is_dir():
        raise ValueError(f"{cannot_create}: {str(above)!r} is a file")
