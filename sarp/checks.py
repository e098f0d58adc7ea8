"""Argument checks shared by the index and the record stores, so that a bad value raises an
error naming the argument before anything is created or changed."""

from __future__ import annotations

#: the largest integer option: what fits a signed 64-bit field
MAX_INT = (1 << 63) - 1


def check_int(value: object, name: str, lo: int, hi: int = MAX_INT) -> int:
    """Return ``value`` as an int in [lo, hi], or raise naming the argument: TypeError for a
    non-integer (bools included), ValueError for one out of range."""
    if type(value) is int and lo <= value <= hi:  # the common case, checked first
        return value
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    n = value.__index__()  # type: ignore[union-attr]
    if not lo <= n <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {n}")
    return n
