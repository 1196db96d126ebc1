"""One error policy: every error raised on purpose is a `RetrievalGateError` (the CLI turns it
into one line and an exit code), and library notices go through `logging`, which the CLI
configures (`-q` / `-v`)."""

from __future__ import annotations

import ast
import builtins
import logging
import sys
from pathlib import Path

from retrieval_gate.cli import build_parser, configure_logging

SRC = Path(__file__).resolve().parents[1] / "src" / "retrieval_gate"
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
# Raised because Python's protocol asks for that very class, not as our error.
PROTOCOL = {
    ("__init__.py", "AttributeError"),  # a module __getattr__ (PEP 562)
    ("training/__init__.py", "AttributeError"),  # likewise: the package's names load lazily
    ("fileio.py", "OSError"),  # renameat2's errno, raised as the os module would raise it
    ("generation/cache.py", "AttributeError"),  # CachedGenerator.__getattr__
    ("rag/cascade.py", "AttributeError"),  # Cascade.__getattr__
    ("gates/pretrained.py", "AttributeError"),  # RetrievalGate.__getattr__: a router's name
    ("generation/remote.py", "AttributeError"),  # context_window: unknown, not windowed
}


def bare_raises(source: str) -> list[tuple[int, str]]:
    """(line, class) of every `raise` of a builtin exception class in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BUILTIN_ERRORS:
                found.append((node.lineno, exc.id))
    return sorted(found)


def test_the_walker_finds_bare_raises():
    code = "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise KeyError\n    raise\n"
    assert bare_raises(code) == [(3, "ValueError"), (4, "KeyError")]
    assert bare_raises("from .errors import InputError\nraise InputError('x')\n") == []


def test_no_bare_builtin_exception_is_raised_on_purpose():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, name in bare_raises(path.read_text(encoding="utf-8")):
            if (rel, name) not in PROTOCOL:
                offenders.append(f"{rel}:{line}: raise {name}")
    assert not offenders, "raise a retrieval_gate.errors class instead:\n" + "\n".join(offenders)


def test_quiet_and_verbose_set_what_the_cli_prints(capsys):
    log = logging.getLogger("retrieval_gate.some.module")
    for flags, level in (([], logging.INFO), (["-q"], logging.WARNING), (["-v"], logging.DEBUG)):
        args = build_parser([*flags, "data"]).parse_args([*flags, "data", "summary"])
        assert (args.quiet, args.verbose) == ("-q" in flags, "-v" in flags)
        configure_logging(level)
        log.info("a note")
        log.warning("a warning")
        err = capsys.readouterr().err
        assert ("note: a note" in err) == (level <= logging.INFO)
        assert "warning: a warning" in err
    configure_logging(logging.INFO)


def test_notices_follow_stderr_when_a_caller_swaps_it(monkeypatch):
    """The handler kept the stream `sys.stderr` was when the command ran: a notice logged
    after a caller had swapped (and closed) it was a "--- Logging error ---" traceback
    (pytest's capture, closed after each test, showed it in the next tests' output)."""
    import io

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging(logging.INFO)
    log = logging.getLogger("retrieval_gate.some.module")
    log.info("one")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    monkeypatch.setattr(logging, "raiseExceptions", True)
    log.info("two")
    assert second.getvalue() == "note: two\n"
    configure_logging(logging.INFO)
