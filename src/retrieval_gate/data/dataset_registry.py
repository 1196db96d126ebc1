"""Where dataset loaders register by name (`@register("popqa")`); `catalog` looks them up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..questions import Question
from .bad_rows import BadRows

Loader = Callable[[Path, BadRows], list[Question]]
LOADERS: dict[str, Loader] = {}
# Datasets loaded only when named (`--dataset NAME`): not in `load_all()`, so adding one
# changes neither the default question set nor its canonical split.
OPTIONAL: set[str] = set()


def register(name: str, default: bool = True) -> Callable[[Loader], Loader]:
    def wrap(fn: Loader) -> Loader:
        LOADERS[name] = fn
        if not default:
            OPTIONAL.add(name)
        return fn

    return wrap
