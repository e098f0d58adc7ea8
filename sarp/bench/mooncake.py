"""Mooncake trace format: requests as hashed block IDs instead of tokens.

One JSON object a line: ``{"timestamp", "input_length", "output_length", "hash_ids"}``,
with one hash id per ``block_tokens`` tokens of the input (512 in Mooncake's traces; the
last id may cover a partial block). Equal ids mean equal block prefixes. The trace has
no sessions and no output blocks, so :func:`read_mooncake` returns a block workload
(see :mod:`sarp.bench.workloads`) of one single-turn session per request, in timestamp
order: the turn's context holds ``uint64`` block IDs of the input's full blocks and its
output is empty; :class:`~sarp.bench.workloads.Request` reports ``unit == "blocks"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xxhash

from sarp.bench.workloads import Workload, frozen, iter_requests

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def read_mooncake(path: str | Path, block_tokens: int = 512, expand: int = 1) -> Workload:
    """Block workload of a Mooncake trace; each hashed block becomes ``expand`` sub-blocks.

    Sub-block IDs are 64-bit and chained: an ID depends on the last ID of the previous
    block, the hash id of its own block and its position inside that block, so two
    requests share exactly the sub-block IDs of the hashed block prefix they share.
    A trailing partial block (input_length not a multiple of ``block_tokens``) is not
    indexed, as for token workloads.
    """
    _check_positive(block_tokens=block_tokens, expand=expand)
    records = []
    with Path(path).open(encoding="utf-8") as lines:
        for n, line in enumerate(lines, 1):
            if line.strip():
                records.append(_record(line, f"{path}:{n}"))
    records.sort(key=lambda r: r["timestamp"])
    derived: dict[tuple[int, int], np.ndarray] = {}
    workload: Workload = []
    for record in records:
        full = int(record["input_length"]) // block_tokens
        ids, parent = [], 0
        for hash_id in record["hash_ids"][:full]:
            subs = derived.get((parent, hash_id))
            if subs is None:
                subs = derived[(parent, hash_id)] = _expand(parent, int(hash_id), expand)
            ids.append(subs)
            parent = int(subs[-1])
        context = np.concatenate(ids) if ids else np.empty(0, np.uint64)
        workload.append([(frozen(context), frozen(np.empty(0, np.uint64)))])
    return workload


def write_mooncake(workload: Workload, path: str | Path, block_tokens: int = 512) -> None:
    """Write a token workload as a Mooncake trace, requests in round-robin replay order.

    hash_ids are numbered from 0 by first appearance of each block prefix (a partial
    last block gets its own id, as in Mooncake); the timestamp is the request's
    position in the replay order.
    """
    _check_positive(block_tokens=block_tokens)
    numbering: dict[tuple[int, bytes], int] = {}
    with Path(path).open("w", encoding="utf-8") as out:
        for position, request in enumerate(iter_requests(workload)):
            if request.unit != "tokens":
                raise ValueError("write_mooncake: workload must hold tokens, not block IDs")
            context, hash_ids, parent = request.context, [], -1
            for start in range(0, len(context), block_tokens):
                key = (parent, context[start : start + block_tokens].tobytes())
                parent = numbering.setdefault(key, len(numbering))
                hash_ids.append(parent)
            record = {
                "timestamp": position,
                "input_length": len(context),
                "output_length": len(request.output),
                "hash_ids": hash_ids,
            }
            out.write(json.dumps(record) + "\n")


def _record(line: str, where: str) -> dict:
    """One trace line, checked: its timestamp, input_length and hash_ids, else ValueError
    naming ``where`` (file:line)."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"{where}: not a JSON line ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not a JSON object")
    missing = [k for k in ("timestamp", "input_length", "hash_ids") if k not in record]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    stamp, length = record["timestamp"], record["input_length"]
    ok = (isinstance(stamp, (int, float)) and not isinstance(stamp, bool)
          and isinstance(length, int) and not isinstance(length, bool) and length >= 0
          and isinstance(record["hash_ids"], list)
          and all(isinstance(h, int) and 0 <= h < 2**64 for h in record["hash_ids"]))
    if not ok:
        raise ValueError(f"{where}: timestamp must be a number, input_length a non-negative "
                         "integer and hash_ids a list of 64-bit non-negative integers")
    return record


def _expand(parent: int, hash_id: int, count: int) -> np.ndarray:
    """``count`` chained sub-block IDs for a hashed block whose predecessor ID is ``parent``."""
    base = xxhash.xxh64_intdigest(parent.to_bytes(8, "little") + hash_id.to_bytes(8, "little"))
    steps = np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN + np.uint64(base)
    return _splitmix64(steps)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a bijective 64-bit mix, so distinct inputs keep distinct IDs."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not (isinstance(value, int) and value > 0):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
