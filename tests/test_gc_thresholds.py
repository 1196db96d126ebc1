"""The collector's thresholds in a process the CLI runs (gc_thresholds.py): the first
generation raised before the verb imports torch and the rest, a higher or disabled setting
kept."""

from __future__ import annotations

import gc

import pytest

from retrieval_gate.cli import main
from retrieval_gate.gc_thresholds import FIRST_GENERATION, raise_for_imports


@pytest.fixture
def thresholds():
    """Sets the thresholds a test asks for; the worker's own come back afterwards."""
    saved = gc.get_threshold()
    yield gc.set_threshold
    gc.set_threshold(*saved)


def test_the_cli_raises_the_first_generation_before_its_verb(thresholds, capsys):
    thresholds(700, 10, 10)  # CPython's defaults
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    assert gc.get_threshold() == (FIRST_GENERATION, 10, 10)


@pytest.mark.parametrize("first", [0, 2 * FIRST_GENERATION])
def test_a_disabled_or_higher_first_generation_is_kept(thresholds, first):
    thresholds(first, 5, 7)
    raise_for_imports()
    assert gc.get_threshold() == (first, 5, 7)
