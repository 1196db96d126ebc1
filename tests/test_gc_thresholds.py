"""The collector's thresholds in a process the CLI runs (gc_thresholds.py): the first
generation raised before the verb imports torch and the rest, a higher or disabled setting
kept, and the heap frozen as the process's last exit handler."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

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


EXIT_ORDER = """
import atexit, gc, sys
atexit.register(lambda: print("last:", gc.get_freeze_count() > 0))  # runs after the CLI's own
from retrieval_gate.cli import main
code = main(["cache", "info"])
atexit.register(lambda: print("a verb's handler:", gc.get_freeze_count()))  # runs before it
sys.exit(code)
"""


@pytest.mark.slow
def test_the_cli_freezes_the_heap_after_every_other_exit_handler(tmp_path):
    """The interpreter's last collections walked a verb's whole heap once more at exit (0.9-2.6
    s of `tune`, `export` and `evaluate` ending on a 2-core Xeon). The heap is frozen after the
    verb's own exit handlers (vLLM's engine shutdown, which unfreezes and collects, the work
    counters), so those collections skip it."""
    env = {**os.environ, "RETRIEVAL_GATE_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", EXIT_ORDER], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["a verb's handler: 0", "last: True"], done.stdout
