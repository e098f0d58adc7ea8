"""The parameters a baseline index is created with, stored with it and checked on reopen.

Each open() argument left as None takes the stored value (or the default for a new index);
a given value that conflicts with the stored one raises ``ConfigMismatchError`` naming it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sarp.baselines.sealed import seal, unseal
from sarp.checks import check_int
from sarp.config import DEFAULT_METADATA_DTYPE, check_metadata_dtype
from sarp.errors import ConfigMismatchError, CorruptionError
from storage_backends import KINDS
from storage_backends.io import FileIO

FILE = "baseline.json"
MAGIC = b"SARPBSET"


@dataclass(frozen=True)
class Settings:
    """What the stored state depends on. ``capped`` is Segment-Radix's DRAM cap in bytes."""

    design: str
    backend: str = "memory"
    block_size: int = 16
    segment_blocks: int = 64
    metadata_dtype: np.dtype = DEFAULT_METADATA_DTYPE
    capped: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in KINDS:
            raise ValueError(f"backend must be one of {sorted(KINDS)}, got {self.backend!r}")
        optional = () if self.capped is None else ("capped",)
        for name in ("block_size", "segment_blocks", *optional):
            value = getattr(self, name)
            if not isinstance(value, int):  # the settings file stores Python ints
                raise TypeError(f"{name} must be an integer, got {value!r}")
            check_int(value, name, 1)
        object.__setattr__(self, "metadata_dtype", check_metadata_dtype(self.metadata_dtype))

    @property
    def meta_width(self) -> int:
        """Bytes of one block's metadata record (``metadata_dtype.itemsize``)."""
        return self.metadata_dtype.itemsize

    def encode(self) -> bytes:
        """The settings file's bytes: sorted-key JSON, sealed with its magic and checksum."""
        data = dataclasses.asdict(self)
        data["metadata_dtype"] = np.lib.format.dtype_to_descr(self.metadata_dtype)
        return seal(MAGIC, json.dumps(data, sort_keys=True).encode())

    @classmethod
    def decode(cls, raw: bytes, name: str) -> Settings:
        """The Settings in a file ``encode`` wrote; a damaged file, or a sealed payload that
        is not such settings (not JSON, a key missing or unknown, a value out of range),
        raises a CorruptionError naming ``name``."""
        payload = bytes(unseal(raw, MAGIC, name))
        try:
            data = json.loads(payload)
            keys = {f.name for f in dataclasses.fields(cls)}
            if not isinstance(data, dict) or set(data) != keys:
                found = sorted(data) if isinstance(data, dict) else type(data).__name__
                raise ValueError(f"keys {found}, expected {sorted(keys)}")
            descr = data["metadata_dtype"]
            data["metadata_dtype"] = np.lib.format.descr_to_dtype(
                [tuple(f) for f in descr] if isinstance(descr, list) else descr)
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptionError(f"{name}: the settings are damaged: {exc}") from exc


def resolve(path: Path, design: str, given: dict[str, Any],
            check: Callable[[Settings], None]) -> Settings:
    """The settings of the index at ``path``: stored ones checked against ``given``, or new
    ones built from ``given`` and the defaults, passed to ``check`` and written to ``path``."""
    given = {k: v for k, v in given.items() if v is not None}
    file = path / FILE
    if not file.exists():
        settings = Settings(design=design, **given)
        check(settings)
        path.mkdir(parents=True, exist_ok=True)
        FileIO().publish(file, settings.encode())
        return settings
    stored = Settings.decode(file.read_bytes(), str(file))
    wanted = dataclasses.replace(stored, design=design, **given)
    for f in dataclasses.fields(Settings):
        mine, theirs = getattr(wanted, f.name), getattr(stored, f.name)
        if mine != theirs:
            raise ConfigMismatchError(
                f"{f.name}={mine!r} conflicts with the stored {f.name}={theirs!r} of {str(path)!r}")
    return stored
