"""Bad rows of a data file: the first one raised, or (`skip=True`) counted per file while the
loader goes on. The errors themselves (each naming the file, row, field and fix) are
`retrieval_gate.errors`'."""

from __future__ import annotations

from ..errors import DataError


class BadRows:
    """Counts (and optionally tolerates) malformed rows.

    With `skip=False` (the default) the first bad row raises; with `skip=True` bad rows are
    counted per file and the loader goes on."""

    def __init__(self, skip: bool = False):
        self.skip = skip
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def report(self, error: DataError) -> None:
        if not self.skip:
            raise error
        key = str(error.path)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.examples.setdefault(key, str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())
