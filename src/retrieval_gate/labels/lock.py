"""One writer per label file at a time: a local run and a Ray run (or two of either) appending
to the same file would interleave rows and duplicate questions. The lock is an advisory
`flock` on a hidden `.<file>.lock` beside the label file, held for the run; the kernel
releases it when the process ends, however it ends (kill -9 included), so a stale lock
never blocks a resume. The lock file is left in place: removing it would let two runs lock
two different files of the same name."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from ..fileio import make_parent


def lock_path(label_file: Path) -> Path:
    return label_file.with_name(f".{label_file.name}.lock")


BUSY = (
    "another labelling run (pid {pid}, local or --engine ray) is writing this label file "
    "now; wait for it to finish, or pass another --out"
)


@contextmanager
def single_writer(label_file: Path, busy: str = BUSY) -> Iterator[None]:
    """Holds the writer lock of `label_file` (or of a run folder: `busy` says who holds it),
    or refuses at once if another process holds it."""
    path = lock_path(Path(label_file))
    make_parent(Path(label_file))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise InputError(
            f"cannot write in its folder ({e.strerror}); choose another output", label_file
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise InputError(busy.format(pid=holder), label_file) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
