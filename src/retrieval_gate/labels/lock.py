"""One writer per label file at a time: a local run and a Ray run (or two of either) appending
to the same file would interleave rows and duplicate questions. The lock is
`fileio.take_writer_lock`'s advisory `flock` on a hidden `.<file>.lock` beside the label file,
held for the run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..fileio import lock_path, one_writer

__all__ = ["BUSY", "lock_path", "single_writer"]

BUSY = (
    "another labelling run (pid {pid}, local or --engine ray) is writing this label file "
    "now; wait for it to finish, or pass another --out"
)


@contextmanager
def single_writer(label_file: Path, busy: str = BUSY) -> Iterator[None]:
    """Holds the writer lock of `label_file` (or of a run folder: `busy` says who holds it),
    or refuses at once if another process holds it."""
    with one_writer(Path(label_file), busy):
        yield
