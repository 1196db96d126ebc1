"""The gate registry is the one list of gates: every verb that takes gates accepts every gate
`evaluate` lists, with the flags that gate reads."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from retrieval_gate.cli import build_parser
from retrieval_gate.gates.registry import GATES, NEEDS, GateOptions, option_flag
from retrieval_gate.rag.modes import ORACLES, ROUTING, known_modes
from retrieval_gate.strategies import BUILTIN


def _choices(verb: str, dest: str) -> list[str]:
    parser = build_parser([verb])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[verb]._actions if a.dest == dest)
    return list(action.choices)


def _flags(name: str) -> list[str]:
    """The flags of the options gate `name` reads, with a value each."""
    values = {"variant": "fp32", "probe_dtype": "bfloat16"}  # options with choices
    out = []
    for option in GATES[name].options:
        out += [option_flag(option), values.get(option, f"some-{option}")]
    return out


def test_every_spec_names_known_needs_and_options():
    known = {f.name for f in fields(GateOptions)}
    for spec in GATES.values():
        assert set(spec.needs) <= set(NEEDS), spec.name
        assert set(spec.options) <= known, spec.name
        assert spec.summary, spec.name


def test_rag_modes_are_the_registry_plus_routing_and_the_oracles():
    assert ROUTING == ("multi-step", "router", "cascade")
    assert known_modes() == [*GATES, *ROUTING, *BUILTIN.names, *ORACLES]


@pytest.mark.parametrize("name", _choices("evaluate", "gates"))
def test_every_gate_evaluate_lists_is_accepted_by_tune_rag_and_serve(name):
    flags = _flags(name)
    argvs = {
        "evaluate": ["evaluate", "--labels", "l.jsonl", "--gates", name, *flags],
        "tune": ["tune", "--gate", name, "--labels", "l.jsonl", *flags],
        "rag": ["rag", "--modes", name, *flags],
        "serve": ["serve", "--gate", name, *flags],
    }
    for verb, argv in argvs.items():
        args = build_parser(argv).parse_args(argv)  # argparse exits on an unknown gate or flag
        for option in GATES[name].options:
            assert getattr(args, option) is not None, (verb, option)


def test_every_gate_option_is_a_flag_of_every_gate_verb():
    for verb in ("evaluate", "tune", "rag", "serve"):
        parser = build_parser([verb])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        flags = {s for a in sub.choices[verb]._actions for s in a.option_strings}
        assert {option_flag(f.name) for f in fields(GateOptions)} <= flags, verb
