"""Datasets by name: `load_dataset("popqa")` returns a list of Questions. Importing the
loader modules here registers them, so the registry itself imports none of them."""

from __future__ import annotations

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
    (pass your own `BadRows` to read the counts) instead of raising."""
    names = dataset_names()
    if name not in LOADERS:
        optional = ", ".join(sorted(OPTIONAL))
        raise DataError(
            f"unknown dataset {name!r}; known datasets: {', '.join(names)} (loaded only when "
            f"named: {optional})"
        )
    bad = bad if bad is not None else BadRows(skip=skip_bad_rows)
    questions = LOADERS[name](resolve_data_dir(data_dir), bad)
    if not questions:
        raise DataError(f"dataset {name!r} has no usable rows under {resolve_data_dir(data_dir)}")
    return questions


def load_all(
    names: list[str] | None = None, data_dir: str | Path | None = None, skip_bad_rows: bool = False
) -> list[Question]:
    out: list[Question] = []
    for name in names or dataset_names():
        out.extend(load_dataset(name, data_dir, skip_bad_rows))
    return out
