"""Datasets by name: `load_dataset("popqa")` returns a list of Questions. Importing the
loader modules here registers them, so the registry itself imports none of them."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import DataError
from ..questions import Question
from . import adaptive_rag, loaders  # noqa: F401  (registers the built-in loaders)
from .bad_rows import BadRows
from .dataset_registry import LOADERS, OPTIONAL
from .paths import resolve_data_dir


def dataset_names(optional: bool = False) -> list[str]:
    """The default datasets (what `load_all()` reads); with `optional`, every registered one."""
    return sorted(n for n in LOADERS if optional or n not in OPTIONAL)


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    skip_bad_rows: bool = False,
    bad: BadRows | None = None,
) -> list[Question]:
    """Questions of one dataset. With `skip_bad_rows`, malformed rows are counted in `bad`
    (pass your own `BadRows` to read the counts) instead of raising. Read once per process
    while the data folder's files stay as they were (`_READ`)."""
    names = dataset_names()
    if name not in LOADERS:
        optional = ", ".join(sorted(OPTIONAL))
        raise DataError(
            f"unknown dataset {name!r}; known datasets: {', '.join(names)} (loaded only when "
            f"named: {optional})"
        )
    bad = bad if bad is not None else BadRows(skip=skip_bad_rows)
    folder = resolve_data_dir(data_dir)
    key = _read_key(name, folder)
    if key in _READ:
        return list(_READ[key])
    before = bad.total
    questions = LOADERS[name](folder, bad)
    if not questions:
        raise DataError(f"dataset {name!r} has no usable rows under {folder}")
    if key is not None and bad.total == before:  # a file with bad rows is read afresh each time
        if len(_READ) >= 32:
            _READ.clear()
        _READ[key] = tuple(questions)
    return questions


# A default dataset's questions, kept per process under what they were read from: the loader
# and every file of the data folder (path, size, modification time, inode), so that a file
# changed, added or removed is read afresh. A command or a test worker reads a dataset many
# times (`load_all()` took ~1 s a time). Optional datasets (adaptive-rag) are found through
# environment variables too: never kept.
_READ: dict[tuple, tuple[Question, ...]] = {}


def _read_key(name: str, folder: Path, files: tuple | None = None) -> tuple | None:
    """`files`: `_folder_files(folder)`, when the caller walked the folder already."""
    if name in OPTIONAL:
        return None
    files = _folder_files(folder) if files is None else files
    return (name, LOADERS[name], str(folder.resolve()), files)


def _folder_files(folder: Path) -> tuple:
    files, seen = [], set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a link back up: its files are listed already
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        files += [(root, file, *_stamp(os.path.join(root, file))) for file in sorted(names)]
    return tuple(files)


def _stamp(path: str) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except OSError:  # a broken link: the loader says so if it reads it
        return (-1, -1, -1)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def data_state(names: list[str] | None = None, data_dir: str | Path | None = None) -> tuple:
    """What `load_all(names, data_dir)` reads: each dataset's loader and the data folder's
    files (as `_READ` keys them). Equal states give equal questions."""
    folder = resolve_data_dir(data_dir)
    files = _folder_files(folder)  # one walk for every dataset's key
    return tuple(_read_key(name, folder, files) for name in names or dataset_names())


def load_all(
    names: list[str] | None = None, data_dir: str | Path | None = None, skip_bad_rows: bool = False
) -> list[Question]:
    out: list[Question] = []
    for name in names or dataset_names():
        out.extend(load_dataset(name, data_dir, skip_bad_rows))
    return out
