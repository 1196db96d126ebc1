"""The helpers that hide the warnings and log lines a user can do nothing about, and nothing else."""

import logging
import warnings

import pytest

from retrieval_gate.known_noise import LinesStartingWith, warnings_hidden


def test_lines_starting_with_drops_only_the_known_beginnings_of_the_named_logger(caplog):
    lines = LinesStartingWith({"rg.test.noisy": ("Enforce eager",)})
    lines.add()
    lines.add()  # once: a filter already on a logger is not added again
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("rg.test.noisy").info("Enforce eager set for CPU")
            logging.getLogger("rg.test.noisy").info("the engine did not start")
            logging.getLogger("rg.test.other").info("Enforce eager set for CPU")
    finally:
        lines.remove()
    assert [(r.name, r.msg) for r in caplog.records] == [
        ("rg.test.noisy", "the engine did not start"),
        ("rg.test.other", "Enforce eager set for CPU"),
    ]
    assert lines not in logging.getLogger("rg.test.noisy").filters


def test_warnings_hidden_hides_the_listed_warning_only_and_only_in_the_block():
    with pytest.warns(UserWarning) as seen:
        with warnings_hidden([(r"known .* warning", FutureWarning)]):
            warnings.warn("known future warning", FutureWarning, stacklevel=1)
            warnings.warn("known user warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["known user warning"]
    with pytest.warns(FutureWarning):
        warnings.warn("known future warning", FutureWarning, stacklevel=1)
