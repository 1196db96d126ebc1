"""The helpers that hide the warnings and log lines a user can do nothing about, and nothing else;
progress bars that draw on one line in a log."""

import logging
import os
import sys
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


NESTED_BARS = """
import sys
from tqdm import tqdm
with tqdm(total=2, desc="outer", mininterval=0) as outer:
    for _ in range(2):
        for _ in tqdm(range(3), desc="inner", mininterval=0):
            pass
        outer.update()
"""


@pytest.mark.slow
def test_progress_bars_in_a_log_draw_on_one_line():
    """A bar opened inside another (vLLM's weight loading inside `rag modes`) moved the cursor
    up with ESC[A, which a log of a piped run showed as '^[[A'."""
    import subprocess

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TQDM_") and k != "RETRIEVAL_GATE_LOG_BARS"}  # fmt: skip
    runs = {
        setup: subprocess.run(
            [sys.executable, "-c", setup + NESTED_BARS], env=env, capture_output=True, check=True
        ).stderr
        for setup in ("", "from retrieval_gate.cli import _bars_for_logs; _bars_for_logs()")
    }
    plain, logged = runs.values()
    assert b"\x1b[A" in plain and b"inner" in plain  # what tqdm does by itself
    assert b"\x1b[A" not in logged and b"inner: 100%" in logged and b"outer: 100%" in logged


def test_bars_are_set_for_logs_only_and_a_users_settings_stay(monkeypatch):
    """The first process decides; the processes it starts (the demo's stages, which write to a
    pipe the demo reads) keep its decision."""
    import io

    from retrieval_gate import cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for name in ("TQDM_POSITION", cli.LOG_BARS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TQDM_MININTERVAL", "1")
    monkeypatch.setattr(sys, "stderr", Terminal())
    cli._bars_for_logs()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a stage of a demo run on a terminal
    cli._bars_for_logs()
    assert "TQDM_POSITION" not in os.environ and os.environ[cli.LOG_BARS_ENV] == "0"
    monkeypatch.delenv(cli.LOG_BARS_ENV)  # a run whose stderr is a log
    cli._bars_for_logs()
    assert os.environ["TQDM_POSITION"] == "0" and os.environ["TQDM_MININTERVAL"] == "1"
