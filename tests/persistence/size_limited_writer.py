"""Subprocess for the file-size-limit test: snapshots that the kernel refuses to write.

usage: size_limited_writer.py BACKEND PATH INSERTS ATTEMPTS
Inserts sequences 0..INSERTS-1, then limits every file it writes to 4 KiB (RLIMIT_FSIZE, with
SIGXFSZ ignored, so a write past the limit fails with EFBIG as on a full file system) and
takes ATTEMPTS snapshots, printing ``failed ERRNO`` for each and ``leftovers NAMES`` after
them. Then it lifts the limit and closes the index, which takes the closing snapshot.
"""

import resource
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sarp  # noqa: E402
from tests.persistence.workload import CONFIG, insert  # noqa: E402

LIMIT = 4096


def main() -> None:
    backend, path, inserts, attempts = sys.argv[1:5]
    index = sarp.open(path, backend=backend, memory_budget=1 << 20, **CONFIG)
    for i in range(int(inserts)):
        insert(index, i)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))
    for _ in range(int(attempts)):
        try:
            index.snapshot()
        except OSError as e:
            print(f"failed {e.errno}", flush=True)
    print("leftovers", *sorted(p.name for p in Path(path).glob("*.tmp")), flush=True)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    index.close()


if __name__ == "__main__":
    main()
