"""What an insert costs as more and more segments share one routing key: every request is one
fixed prefix (a system prompt) and its own continuation, diverging at the same block inside a
window, so each insert copies that window's shared prefix into a new segment (docs/design.md,
section 4) whose routing points before the divergence have the keys of every earlier copy.
Prints the mean match and insert time over each stretch of requests, and the longest posting
list (memory store, durability ``group`` as in ``sarp-bench``, so that no insert waits for a
journal sync; other settings the defaults).

    python bench/hot_prefix.py --requests 32000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import sarp
from sarp.bench.cli import arg_type, positive_count
from sarp.config import Config

#: the blocks of each request after the shared prefix
OWN_BLOCKS = 28


def hot_prefix(work: Path, requests: int, prefix_blocks: int, seed: int = 0
               ) -> list[dict[str, float]]:
    """Match, then insert, ``requests`` sequences of ``prefix_blocks`` shared blocks and
    ``OWN_BLOCKS`` of their own; one row per doubling of the requests done (the last row at
    ``requests``)."""
    rng = np.random.default_rng(seed)
    prefix = rng.integers(1, 2**62, prefix_blocks, dtype=np.uint64)
    rows = []
    with sarp.open(work / "sarp", backend="memory", durability="group") as index:
        meta = np.zeros(prefix_blocks + OWN_BLOCKS, index.config.metadata_dtype)
        done, stop = 0, max(1, requests // 8)
        while done < requests:
            stop = min(stop, requests)
            match_s = insert_s = 0.0
            for _ in range(stop - done):
                own = rng.integers(1, 2**62, OWN_BLOCKS, dtype=np.uint64)
                q = np.concatenate((prefix, own))
                t0 = time.perf_counter()
                index.match(block_ids=q[:prefix_blocks + 10])
                t1 = time.perf_counter()
                index.insert(block_ids=q, metadata=meta)
                insert_s += time.perf_counter() - t1
                match_s += t1 - t0
            rows.append({"requests": stop, "match_us": match_s / (stop - done) * 1e6,
                         "insert_us": insert_s / (stop - done) * 1e6,
                         "longest_list": index.directory.table.longest_list(),
                         "routing_bytes": index.directory.table.nbytes()})
            done, stop = stop, 2 * stop
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Print one line per stretch of requests."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=arg_type(positive_count), default=16000,
                    help="sequences (default 16000)")
    ap.add_argument("--prefix-blocks", type=arg_type(positive_count), default=100,
                    help="shared blocks before the divergence, not a multiple of the segment "
                         "size (default 100: 36 blocks into the second window)")
    args = ap.parse_args(argv)
    window = Config().segment_blocks
    if args.prefix_blocks % window == 0:
        ap.error(f"argument --prefix-blocks: {args.prefix_blocks} ends on a window boundary "
                 f"(a multiple of {window}), where no request copies a shared window")
    with tempfile.TemporaryDirectory() as tmp:
        for row in hot_prefix(Path(tmp), args.requests, args.prefix_blocks):
            print(f"after {row['requests']:>8,} requests: match {row['match_us']:8.1f} us, "
                  f"insert {row['insert_us']:8.1f} us, longest posting list "
                  f"{row['longest_list']:,}, routing bytes {row['routing_bytes']:,}")


if __name__ == "__main__":
    main()
