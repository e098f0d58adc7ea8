"""How often does damage after a power cut lose acknowledged inserts without an error?

Runs the power-cut seeds of ``tests/persistence/test_random_damage.py``: a randomized session
on odirect or flashlog through the simulated power cut, then one damage (a flipped bit, random
bytes, a zeroed sector, a cut or a deletion) to one of the index's files. For the seeds whose
damage hit the store's records (flashlog's WAL or page log, odirect's slot file) it reopens the
index and tallies what became of the acknowledged inserts: the open refused (naming what it
found), a match raised CorruptionError, every one matched whole, or some came back shorter with
no error: lost without an error (docs/durability.md, "Damage after a crash"). The test checks
that nothing unverified is served; this counts how much of such damage is detected.

    python bench/damage_after_crash.py --seeds 1000 [--sectors 512]

It imports the test's session from the repository's ``tests``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import sarp
from sarp.errors import CorruptionError, SarpError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests
from tests.persistence.test_random_damage import REOPEN, Cut, cut_and_damage  # noqa: E402

#: what a refusal names, by the check that made it
CHECKS = {"lacks segments the snapshot names": "the snapshot's store probes",
          "had been synced": "odirect's synced lag",
          "at the last checkpoint (copy": "odirect's checkpoint bits",
          "after a sync of the store": "the journal's flagged records",
          "names segments": "the journal's synced records",
          "routing directory names": "the snapshot's segments the open found absent"}


def outcome(root: Path, cut: Cut) -> str:
    """What the reopen of the damaged index did with the acknowledged inserts."""
    try:
        index = sarp.open(root, **REOPEN)
    except SarpError as exc:
        by = [check for text, check in CHECKS.items() if text in str(exc)]
        return f"refused ({by[0] if by else 'other checks'})"
    with index:
        short = False
        for ids in cut.inserted[:cut.acked]:
            try:
                short |= index.match(block_ids=ids).num_blocks < len(ids)
            except CorruptionError:
                return "raised at a match"
    return "lost without an error" if short else "every acknowledged insert whole"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1000, help="seeds 0 .. N-1 (default 1000)")
    parser.add_argument("--list", action="store_true", help="print each counted seed")
    parser.add_argument("--sectors", type=int, choices=(512, 4096),
                        help="the cut tears the newest write in any subset of its sectors of "
                             "this size (default: a prefix; see PowerLossIO)")
    args = parser.parse_args()
    tally: collections.Counter[str] = collections.Counter()
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "i"
            cut = cut_and_damage(root, seed, args.sectors)
            if not cut.store_records:
                continue
            got = outcome(root, cut)
        tally[got] += 1
        if args.list:
            print(f"{got}: {cut.where}", flush=True)
    print(f"{sum(tally.values())} of {args.seeds} seeds damaged the store's records:")
    for got, n in sorted(tally.items()):
        print(f"  {n:5d}  {got}")


if __name__ == "__main__":
    main()
