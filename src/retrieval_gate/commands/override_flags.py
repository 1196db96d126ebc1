"""The `KEY=VALUE ...` override flags (`train --set`, `tune --set`, `transfer --learned-set`):
repeatable, every occurrence kept. argparse's default `store` kept only the last one, so
`--set run.name=new --set trainer.max_epochs=1` silently trained (and, with --overwrite,
replaced) the config's own run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


class RepeatableOverrides(argparse.Action):
    """The first occurrence replaces the flag's default (a verb's CPU-budget overrides, which
    a bare `--set` drops on a GPU); each later one adds to it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        kept = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, kept + list(values or ()))
