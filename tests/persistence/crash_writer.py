"""Writer subprocess for the index crash tests: inserts sequences and acknowledges each.

usage: crash_writer.py BACKEND PATH DURABILITY FIRST SNAPSHOT_EVERY
Prints ``begin i`` before insert i and ``ack i`` once it is acknowledged (after insert under
``sync``; under ``group``, after the flush that follows each insert). Runs until killed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sarp  # noqa: E402
from tests.persistence.workload import CONFIG, metadata, sequence  # noqa: E402


def main() -> None:
    backend, path, durability, first, every = sys.argv[1:6]
    index = sarp.open(path, backend=backend, durability=durability, memory_budget=8 << 20,
                      snapshot_every_inserts=int(every), **CONFIG)
    i = int(first)
    while True:
        tokens = sequence(i)
        print(f"begin {i}", flush=True)
        index.insert(tokens=tokens, metadata=metadata(sarp.block_ids(tokens, CONFIG["block_size"])))
        if durability == "group":
            index.flush()
        print(f"ack {i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
