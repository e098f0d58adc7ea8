"""The sarp command: maintenance of an existing index directory.

    sarp rebuild PATH [--backend KIND] [--salvage]
                                         rebuild the routing directory from a full segment scan
                                         (--salvage: first repair a damaged wiredtiger,
                                         rocksdb or odirect store)
    sarp stats PATH [--backend KIND]     open (recover) the index and print its statistics

Both open the index as ``sarp.open`` does, so recovery runs as at any open: a torn journal
tail is cut, and the storage engine writes its own files (logs, headers). An index on the
memory backend kept nothing across its close, so both refuse it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import sarp
from sarp.index import STORE_DIR
from sarp.opening import require_index
from storage_backends import KINDS, stored_kind

COMMANDS = {
    "rebuild": "rebuild the routing directory from a full scan of the segment store and "
               "publish it as a new snapshot (when no usable snapshot is left)",
    "stats": "recover the index, as any open does (a torn journal tail is cut), and print its "
             "recovery report and statistics as JSON",
}


def main(argv: list[str] | None = None) -> int:
    """Run one sarp command on ``argv`` (default: the command line); return the exit status.

    Prints the command's report as JSON on stdout; errors go to stderr with status 1.
    """
    parser = argparse.ArgumentParser(prog="sarp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("path", help="the index directory (made by sarp.open)")
        p.add_argument("--backend", choices=sorted(KINDS),
                       help="the record store's kind (default: the one the index has)")
        if name == "rebuild":
            p.add_argument("--salvage", action="store_true",
                           help="first repair a damaged wiredtiger, rocksdb or odirect store "
                                "with its repair tool (segments on damaged parts are lost)")
    args = parser.parse_args(argv)
    try:
        require_index(args.path)
        if stored_kind(Path(args.path) / STORE_DIR) == "memory":
            raise ValueError(f"index at {args.path!r} is on the memory backend, which kept "
                             "nothing across its close: there is nothing to report or rebuild")
        if args.command == "rebuild":
            report = sarp.rebuild(args.path, backend=args.backend, salvage=args.salvage)
        else:
            with sarp.open(args.path, backend=args.backend, snapshot_on_close=False) as index:
                report = {"recovery": index.recovery, **index.stats()}
    except (sarp.errors.SarpError, ValueError, OSError) as exc:  # one line, no traceback
        print(f"sarp {args.command}: {exc}", file=sys.stderr)
        return 1
    try:
        json.dump(report, sys.stdout, indent=1, default=str)
        print()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader (e.g. head) has gone: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
