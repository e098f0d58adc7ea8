"""The index configuration: every parameter of the paper, with its default (docs/design.md
section 1).

The configuration is stored with the index (``sarp.json``), with the index's id; reopening
with a conflicting one raises ``ConfigMismatchError``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sarp._core.hashing import xxh64
from sarp.checks import check_bool, check_int
from sarp.errors import ConfigMismatchError, CorruptionError

#: Default block metadata: where a block's KV tensors are (node/worker, storage tier, address).
DEFAULT_METADATA_DTYPE = np.dtype(
    [("node", "<u4"), ("tier", "u1"), ("flags", "u1"), ("reserved", "<u2"), ("address", "<u8")]
)


def check_metadata_dtype(value: Any) -> np.dtype:
    """``value`` as the dtype of one block's metadata record (a fixed-width, scalar or
    structured dtype of 1 to 65535 bytes), or raise naming ``metadata_dtype``."""
    if value is None:  # np.dtype(None) would be float64
        raise TypeError("metadata_dtype must be a numpy dtype, got None")
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata_dtype must be a numpy dtype: {exc}") from None
    if dtype.hasobject or dtype.subdtype is not None or not 0 < dtype.itemsize <= 65535:
        raise ValueError("metadata_dtype must be a fixed-width dtype of 1 to 65535 bytes, "
                         f"not a subarray or object dtype, got {dtype}")
    # sarp.json must give it back, or the index would never reopen
    try:
        stored: object = dtype_of_json(json.loads(json.dumps(dtype_json(dtype))))
    except (TypeError, ValueError) as exc:
        stored = exc
    if stored != dtype:
        raise ValueError(f"metadata_dtype {dtype} cannot be stored in sarp.json ({stored})")
    return dtype


def dtype_json(dtype: np.dtype) -> Any:
    """``dtype`` as a JSON value for ``sarp.json``: its array-interface descr."""
    return np.lib.format.dtype_to_descr(dtype)


def dtype_of_json(descr: Any) -> np.dtype:
    """The dtype of a ``dtype_json`` value read back from JSON, whose tuples became lists."""
    return np.lib.format.descr_to_dtype(_tuples(descr))


def _tuples(descr: Any) -> Any:
    """A descr read from JSON with its fields, titled names and shapes as tuples again."""
    if not isinstance(descr, list):
        return descr
    fields = []
    for name, fmt, *shape in descr:
        field_ = (tuple(name) if isinstance(name, list) else name, _tuples(fmt))
        fields.append(field_ + tuple(tuple(s) for s in shape))
    return fields


#: The format of ``sarp.json`` this version writes (docs/config_format.txt); it also reads
#: format 2, which has no index id
FORMAT = 3
READ_FORMATS = (2, FORMAT)
#: an index id as sarp.json writes it
_INDEX_ID = re.compile("[0-9a-f]{16}")

#: Parameters that only change how queries search, not what is stored: they may differ on reopen.
QUERY_ONLY = ("max_retrieval",)


@dataclass(frozen=True)
class Config:
    """SARP's parameters. Names follow the paper: S, R, N, b, stride, tau, thresholds."""

    block_size: int = 16  # B: tokens per KVCache block
    segment_blocks: int = 64  # S: blocks per segment
    routing_points: int = 4  # R: base routing points per segment
    filter_fields: int = 8  # N: filter fields
    field_bits: int = 8  # b: bits per field (N * b == 64)
    stride: int = 2  # blocks per filter field region
    tau: int = 256  # posting-list size above which an interval is refined
    pruning_threshold: int = 3  # posting-list size at or below which the next point is pruned
    max_retrieval: int = 3  # segment retrievals per query window; 0 means unbounded
    refinement: bool = True  # design switches, for the paper's Section 6.5 breakdown
    filtering: bool = True
    pruning: bool = True
    namespace: bytes = b""  # model, LoRA, salt: seeds the block-ID chain
    metadata_dtype: np.dtype = field(default=DEFAULT_METADATA_DTYPE)

    def __post_init__(self) -> None:
        for name in ("block_size", "segment_blocks", "routing_points", "filter_fields",
                     "field_bits", "stride", "tau", "pruning_threshold", "max_retrieval"):
            lo = 0 if name in ("pruning_threshold", "max_retrieval") else 1
            # a numpy integer becomes a Python int: sarp.json stores those
            object.__setattr__(self, name, check_int(getattr(self, name), name, lo))
        for name in ("refinement", "filtering", "pruning"):
            check_bool(getattr(self, name), name)
        if not isinstance(self.namespace, bytes):
            raise TypeError(f"namespace must be bytes, got {type(self.namespace).__name__}")
        if self.filter_fields * self.field_bits != 64 or self.field_bits > 32:
            raise ValueError("filter_fields * field_bits must be 64 with field_bits at most 32, "
                             f"got {self.filter_fields} * {self.field_bits}")
        if self.segment_blocks % self.routing_points:
            raise ValueError("segment_blocks must be a multiple of routing_points")
        if self.interval < 4 or self.interval % 2:
            raise ValueError("segment_blocks / routing_points must be even and at least 4")
        if self.l_max > self.segment_blocks:
            raise ValueError("filter_fields * stride must not exceed segment_blocks")
        if self.segment_blocks > 65535:
            raise ValueError("segment_blocks must be at most 65535")
        object.__setattr__(self, "metadata_dtype", check_metadata_dtype(self.metadata_dtype))

    @property
    def interval(self) -> int:
        """D = S / R: blocks between base routing points."""
        return self.segment_blocks // self.routing_points

    @property
    def l_max(self) -> int:
        """L_max = N * stride: blocks a filter summarizes."""
        return self.filter_fields * self.stride

    @property
    def meta_width(self) -> int:
        """Bytes of one block's metadata record (``metadata_dtype.itemsize``)."""
        return self.metadata_dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        """The parameters as JSON values for ``sarp.json``: namespace in hex, dtype as descr."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "namespace":
                value = value.hex()
            elif f.name == "metadata_dtype":
                value = dtype_json(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        """The Config of a ``to_json`` dict: every parameter named, no other (KeyError
        names the missing ones, TypeError the unknown ones); values are checked as by the
        constructor."""
        missing = sorted({f.name for f in dataclasses.fields(cls)} - set(data))
        if missing:
            raise KeyError(f"configuration parameter(s) missing: {', '.join(missing)}")
        args = dict(data)
        args["namespace"] = bytes.fromhex(args["namespace"])
        args["metadata_dtype"] = dtype_of_json(args["metadata_dtype"])
        return cls(**args)

    def merged_with_stored(self, stored: Config, given: set[str]) -> Config:
        """The stored configuration, with query-only parameters taken from ``given`` ones.

        Any other parameter named in ``given`` that differs from the stored value raises
        ``ConfigMismatchError`` naming it.
        """
        changes = {}
        for name in sorted(given):
            mine, theirs = getattr(self, name), getattr(stored, name)
            if mine == theirs:
                continue
            if name in QUERY_ONLY:
                changes[name] = mine
            else:
                raise ConfigMismatchError(
                    f"{name}={mine!r} conflicts with the index's stored {name}={theirs!r}")
        return dataclasses.replace(stored, **changes)


def config_from_kwargs(kwargs: dict[str, Any]) -> Config:
    """Build a Config from keyword arguments, naming any unknown one."""
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"unknown configuration parameter(s): {', '.join(unknown)}")
    return Config(**kwargs)


def digest_text(config: Config) -> str:
    """The configuration that stored state depends on (query-only parameters left out)."""
    data = {k: v for k, v in config.to_json().items() if k not in QUERY_ONLY}
    return json.dumps(data, sort_keys=True)


def new_index_id() -> int:
    """A random, nonzero 64-bit id for a new index: its snapshots and journals carry it, so
    that files of another index are never taken for its own."""
    return secrets.randbits(64) or 1


def dumps(config: Config, index_id: int) -> str:
    """The text of ``sarp.json`` (docs/config_format.txt) for index ``index_id``."""
    cfg = config.to_json()
    ident = f"{index_id:016x}"
    return json.dumps({"format": FORMAT, "config": cfg, "index_id": ident,
                       "checksum": _checksum(cfg, ident)}, indent=1, sort_keys=True)


def loads(raw: bytes, name: str) -> tuple[Config, int]:
    """The configuration and index id in ``sarp.json``'s bytes ``raw`` (id 0 in format 2). A
    file that is not what ``dumps`` writes (undecodable, a field missing, a checksum
    mismatch) raises CorruptionError naming ``name``: a damaged configuration is never used,
    by an open or by a rebuild."""
    try:
        data = json.loads(raw)
        fmt = data["format"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(f"{name} is damaged: {exc!r}") from exc
    if type(fmt) is not int or fmt not in READ_FORMATS:
        raise ConfigMismatchError(f"{name}: index format {fmt!r} is not supported "
                                  f"(this version reads formats "
                                  f"{' and '.join(map(str, READ_FORMATS))})")
    try:
        cfg, checksum = data["config"], data["checksum"]
        ident = data["index_id"] if fmt >= 3 else None
        if checksum != _checksum(cfg, ident):
            raise ValueError(f"checksum {checksum!r} does not match the configuration"
                             + ("" if ident is None else " and index id"))
        if ident is not None and not (isinstance(ident, str) and _INDEX_ID.fullmatch(ident)
                                      and int(ident, 16)):
            raise ValueError(f"index_id {ident!r} is not 16 lowercase hex digits, nonzero")
        return Config.from_json(cfg), 0 if ident is None else int(ident, 16)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(f"{name} is damaged: {exc}") from exc


def _checksum(cfg: dict[str, Any], index_id: str | None) -> str:
    """XXH64 (seed 0), in hex, of the configuration as sorted-key JSON (``json.dumps``
    separators); with the index id (format 3), of {"config": ..., "index_id": ...} so."""
    data = cfg if index_id is None else {"config": cfg, "index_id": index_id}
    return f"{xxh64(json.dumps(data, sort_keys=True).encode()):016x}"
