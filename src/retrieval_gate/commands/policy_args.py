"""`label`'s policy flags, generated from the policy registry: one flag per `PolicyOption`
of any registered policy, its help naming the policies that read it (and their defaults).
A flag given to a policy that does not read it is refused (`labels.policy_registry.request`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..labels.policy_registry import PolicyOption


def policy_flags() -> dict[str, list[tuple[str, PolicyOption]]]:
    """Flag -> (policy, its option) for each policy reading it, in registry order."""
    from ..labelling import POLICIES  # every policy, the RAG loop's included

    flags: dict[str, list[tuple[str, PolicyOption]]] = {}
    for spec in POLICIES.values():
        for opt in spec.options:
            flags.setdefault(opt.flag, []).append((spec.name, opt))
    return flags


def add_policy_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("policy options (each --policy reads its own; docs/label.md)")
    for flag, users in policy_flags().items():
        opt = users[0][1]
        kwargs: dict[str, Any] = {"dest": opt.name, "help": flag_help(users)}
        if opt.switch:
            kwargs.update(action="store_true")
        else:  # None: not given (the policy's default applies), so a stray flag is seen
            extra = {"type": opt.type, "choices": opt.choices, "nargs": opt.nargs,
                     "metavar": opt.metavar}  # fmt: skip
            kwargs.update(default=None, **{k: v for k, v in extra.items() if v is not None})
        g.add_argument(flag, **kwargs)


def flag_help(users: list[tuple[str, PolicyOption]]) -> str:
    """The option's help, its default(s) per policy, and which policies read it."""
    help_ = users[0][1].help
    defaults: dict[Any, list[str]] = {}
    for name, opt in users:
        if opt.default is not None:
            defaults.setdefault(opt.default, []).append(name)
    if len(defaults) == 1:
        help_ += f" (default {next(iter(defaults))})"
    elif defaults:
        first, *others = defaults.items()
        rest = "; ".join(f"{', '.join(names)}: {value}" for value, names in others)
        help_ += f" (default {first[0]}; {rest})"
    elif "default" not in help_:  # -h tells every flag's default (tests/test_docs.py)
        help_ += " (default: none)"
    return f"{help_} [--policy {', '.join(name for name, _ in users)}]"


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """Every policy flag given on the command line (name -> value), whatever the policy."""
    names = {opt.name for users in policy_flags().values() for _, opt in users}
    values = {n: getattr(args, n) for n in names}
    # `is`, not `in (None, False)`: a 0 (`--k 0`) is given, and must be seen and refused
    return {n: v for n, v in values.items() if v is not None and v is not False}
