"""The ``sarp`` command: maintenance of an index directory.

    sarp rebuild PATH [--backend KIND]   rebuild the routing directory from a full segment scan
    sarp stats PATH [--backend KIND]     open (recover) the index and print its statistics
"""

from __future__ import annotations

import argparse
import json
import sys

import sarp
from storage_backends import KINDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sarp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("rebuild", "rebuild the routing directory from the segment store"),
                       ("stats", "recover the index and print its statistics as JSON")):
        p = sub.add_parser(name, help=text)
        p.add_argument("path")
        p.add_argument("--backend", default="wiredtiger", choices=sorted(KINDS))
    args = parser.parse_args(argv)
    try:
        if args.command == "rebuild":
            report = sarp.rebuild(args.path, backend=args.backend)
        else:
            with sarp.open(args.path, backend=args.backend, snapshot_on_close=False) as index:
                report = {"recovery": index.recovery, **index.stats()}
    except (sarp.errors.SarpError, ValueError) as exc:
        print(f"sarp {args.command}: {exc}", file=sys.stderr)
        return 1
    json.dump(report, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
