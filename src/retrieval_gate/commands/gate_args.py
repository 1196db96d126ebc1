"""The gate flags every verb that takes gates shares (`evaluate`, `tune`, `rag`, `serve`): one
flag per `GateOptions` field, so every verb accepts every gate it lists."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import fields

from ..errors import InputError
from ..gates.base import checked_threshold
from ..gates.registry import GATES, GateOptions, option_flag
from ..questions import Question, feature_value
from ..strategies import StrategyRegistry, is_strategies_file, load_strategies


def strategies_file(value: str) -> StrategyRegistry:
    """`--strategies FILE.yaml`, read and checked while the command line is parsed (before
    any engine starts); the message names the file and key of anything wrong."""
    if not is_strategies_file(value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: a strategies YAML file (.yaml / .yml) with a top-level strategies: list"
        )
    try:
        return load_strategies(value)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_strategies_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strategies",
        type=strategies_file,
        metavar="FILE.yaml",
        help="the strategy registry: a YAML file whose strategies: list declares each strategy "
        "(name, cost, retriever, k, steps, ...; docs/router.md), cheapest first; its names are "
        "also fixed-strategy modes of rag (default: the built-ins no_retrieval, one_retrieval, "
        "multi_step)",
    )


def add_gate_options(p: argparse.ArgumentParser) -> None:
    add_strategies_option(p)
    g = p.add_argument_group("gate options (each gate reads the ones it needs)")
    for f in fields(GateOptions):
        users = [s.name for s in GATES.values() if f.name in s.options]
        help_ = f.metadata["help"] + (f"; used by: {', '.join(users)}" if users else "")
        extra = {k: f.metadata[k] for k in ("choices", "metavar") if k in f.metadata}
        g.add_argument(option_flag(f.name), default=f.default, help=help_, **extra)


def gate_options(args: argparse.Namespace, names: Sequence[str]) -> GateOptions:
    """The parsed gate flags as typed options; a flag that none of `names` (the run's gates
    or modes) reads is refused, naming the gates that read it (it would go unused). A verb
    may offer some of the flags only (transfer: --feature); the others keep their defaults."""
    given = vars(args)
    options = GateOptions(**{f.name: given.get(f.name, f.default) for f in fields(GateOptions)})
    read = {o for n in names if n in GATES for o in GATES[n].options}
    for f in fields(GateOptions):
        if getattr(options, f.name) != f.default and f.name not in read:
            users = [s.name for s in GATES.values() if f.name in s.options]
            raise InputError(f"{option_flag(f.name)} is read by the {' / '.join(users)} gate, "
                             f"and this run has none ({' '.join(names)}): drop it, or add "
                             "the gate")  # fmt: skip
    return options


def check_feature(options: GateOptions, questions: Sequence[Question] | None) -> None:
    """`--feature COLUMN` that no question has a value for (a typo, a column of another
    file): refused before any gate fits; every popularity cell read "cannot fit" and the
    report was written anyway. `questions`: the user's (None: the bundled ones)."""
    if options.feature is None:
        return
    if questions is None:
        from ..data import canonical_questions

        questions = canonical_questions()
    if any(feature_value(q, options.feature) is not None for q in questions):
        return
    columns = sorted({k for q in questions for k in q.extra} | {"s_pop", "o_pop"})
    raise InputError(f"--feature {options.feature}: no question has a value in that column "
                     f"(the questions have: {', '.join(columns[:12])}"
                     f"{', ...' if len(columns) > 12 else ''})")  # fmt: skip


def check_threshold(value: float | None, flag: str = "--threshold") -> float | None:
    """A decision threshold given on the command line: a probability (NaN refused)."""
    return None if value is None else checked_threshold(value, flag)
