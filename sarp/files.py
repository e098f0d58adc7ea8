"""The index directory's numbered files: snapshots and journals."""

from __future__ import annotations

from pathlib import Path


class Numbered:
    """File names of the form PREFIX + 16-digit sequence number + SUFFIX."""

    def __init__(self, prefix: str, suffix: str):
        self.prefix, self.suffix = prefix, suffix

    def name(self, seq: int) -> str:
        """The file name of sequence number ``seq`` (zero-padded, so names sort by number)."""
        return f"{self.prefix}{seq:016d}{self.suffix}"

    def seq(self, path: Path) -> int | None:
        """The sequence number in ``path``'s name, or None for other files."""
        name = path.name
        if name.startswith(self.prefix) and name.endswith(self.suffix):
            digits = name[len(self.prefix):len(name) - len(self.suffix)]
            if digits.isascii() and digits.isdigit():  # not "²", which int() refuses
                return int(digits)
        return None

    def files(self, directory: Path) -> list[tuple[int, Path]]:
        """(seq, path) of the matching files in ``directory``, oldest first."""
        found = ((self.seq(p), p) for p in directory.iterdir())
        return sorted((s, p) for s, p in found if s is not None)

    def leftovers(self, directory: Path) -> list[tuple[int, Path]]:
        """(seq, path) of the temporary files (``<name>.tmp``) that a publish of these files
        cut short by a crash left in ``directory``, oldest first."""
        found = ((self.seq(p.with_suffix("")), p) for p in directory.glob("*.tmp"))
        return sorted((s, p) for s, p in found if s is not None)
