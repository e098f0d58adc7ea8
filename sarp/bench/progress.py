"""Progress bars on stderr (tqdm) when it is a terminal, or none."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm


class Progress:
    """Makes one bar per long step, shown only when stderr is a terminal (a log file gets the
    notes alone); ``enabled=False`` makes bars and notes silent."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    @contextmanager
    def bar(self, total: int, desc: str) -> Iterator[Callable[[], None]]:
        """A bar of ``total`` steps; yields the function that advances it by one."""
        with tqdm(total=total, desc=desc, file=sys.stderr, leave=False, unit="req",
                  disable=None if self.enabled else True, dynamic_ncols=True) as t:
            yield lambda: t.update(1)

    def note(self, text: str) -> None:
        """One line of progress, above the bars."""
        if self.enabled:
            tqdm.write(text, file=sys.stderr)
