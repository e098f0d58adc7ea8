"""Writer subprocess for ``test_thread_crash``: request threads insert a shared workload.

usage: thread_writer.py SEED PATH
The seed draws a configuration, a backend, a durability mode, the background worker, periodic
snapshots, 2 to 4 threads and the workload (``draw``). Thread t inserts requests t, t + T, ...
It prints ``begin i`` before insert i and ``ack i`` once it is acknowledged (on return under
``sync``; under ``group``, once the ``flush()`` that follows it returns), then ``done`` when
every request is, and runs until killed. An insert that raises ends the process at once,
with its traceback on stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sarp  # noqa: E402
from tests.index.helpers import metadata_for, random_config, random_workload  # noqa: E402


def draw(seed: int, backends: tuple[str, ...] = ("odirect", "flashlog", "wiredtiger", "rocksdb"),
         count: int = 300) -> tuple[dict[str, Any], int, list[np.ndarray]]:
    """(options of ``sarp.open``, threads, the block IDs of each of ``count`` requests) of
    ``seed``, on one of ``backends``; the power-cut threads (``test_power_cuts``) draw theirs
    here too."""
    rng = np.random.default_rng(seed)
    cfg = random_config(rng, bounded=False)
    options = dict(backend=str(rng.choice(backends)),
                   durability=str(rng.choice(["sync", "group"])),
                   background=bool(rng.random() < 0.5),
                   snapshot_every_inserts=int(rng.choice([0, 3, 7])),
                   memory_budget=8 << 20, **cfg)
    threads = int(rng.integers(2, 5))
    requests = [sarp.block_ids(full, cfg["block_size"])
                for _, full in random_workload(rng, count)]
    return options, threads, requests


def main() -> None:
    seed, path = int(sys.argv[1]), sys.argv[2]
    options, threads, requests = draw(seed)
    index = sarp.open(path, **options)
    out = threading.Lock()

    def say(line: str) -> None:
        with out:
            print(line, flush=True)

    def work(t: int) -> None:
        try:
            for i in range(t, len(requests), threads):
                ids = requests[i]
                say(f"begin {i}")
                index.insert(block_ids=ids, metadata=metadata_for(ids, i))
                if options["durability"] == "group":
                    index.flush()
                say(f"ack {i}")
        except BaseException:  # the test sees an exit other than its kill, and this log
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    say("done")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
