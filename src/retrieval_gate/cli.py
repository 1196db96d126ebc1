"""`retrieval-gate <verb>`: parses arguments and calls one function per verb. Each verb lives in
`retrieval_gate.commands.<verb>` with `add_parser(subparsers)` and `run(args) -> int`. The
rules every verb's parser follows (`Parser`: defaults in `-h`, an unknown flag reported with
the verb's own usage and a "did you mean") come from here through argparse's parser_class."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.util
import logging
import os
import re
import signal
import sys
import traceback
from typing import NoReturn, TextIO

from . import gc_thresholds, work
from .cache_settings import NO_CACHE_ENV, check_cache_settings
from .errors import (
    EXIT_BUG,
    InputError,
    RetrievalGateError,
    clipped,
    comma_joined,
    missing_package,
    os_error,
)
from .strict_rows import lone_surrogate_at

# verb -> (module under retrieval_gate.commands, one-line summary for `retrieval-gate -h`); a
# verb's module is imported only when used, so `retrieval-gate data summary` never pays for
# torch or vLLM.
VERBS = {
    "data": ("data", "summarise the bundled datasets or your question file"),
    "models": ("models", "prepare the bundled models (SmolLM2 GGUF -> safetensors, once)"),
    "label": ("label", "write retrieval-need labels from your generator or recorded outcomes"),
    "train": ("train", "train a learned gate (PyTorch Lightning) from a YAML config"),
    "evaluate": ("evaluate", "compare gates on the same test questions, one report"),
    "transfer": ("transfer", "leave-one-source-out transfer matrix"),
    "tune": ("tune", "tune a gate's threshold (or hyper-parameters) on dev with Optuna"),
    "export": ("export", "export a trained gate to ONNX (fp32, int8, fp16) with a model card"),
    "score": ("score", "score a question file with an exported ONNX gate"),
    "rag": ("rag", "run gates in front of a vLLM generator, side by side, with costs"),
    "serve": ("serve", "serve a gate (and the RAG loop) over HTTP"),
    "demo": ("demo", "run the whole pipeline on the bundled data (what `make demo` runs)"),
    "cache": ("cache", "show or clear the generation cache (generations and choice scores)"),
}
DESCRIPTION = (
    "Train, evaluate and ship retrieval-necessity gates: small classifiers that tell a RAG "
    "system, from the question alone, whether its LLM needs retrieval."
)
EPILOG = (
    "`retrieval-gate VERB -h` shows a verb's flags with their defaults. Exit codes: 0 done, "
    "2 bad input or configuration (the message names the file, row or flag), 3 an engine, "
    "server or package failed, 1 a bug. Docs: README.md and docs/ in the source tree."
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in `-h`: a help text that does not state its default itself gets
    "(default: X)"; flags whose default is "not given" must say what that means in their text
    (tests/test_help.py checks every verb)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, argparse.SUPPRESS, []) or default is False:
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})".lstrip()


_QUOTED = re.compile(r"'([^']{121,})'")  # a value argparse quotes, past what clipped keeps


_LISTED = re.compile(r"argument (\S+): invalid choice: '([^']*,[^']*)' \(choose from (.*)\)$")


def _spaced(message: str) -> str:
    """argparse's "invalid choice" of a list flag's values joined by commas: `comma_joined`."""
    found = _LISTED.search(message)
    if not found:
        return ""
    flag, given, choices = found.groups()
    return comma_joined(flag.split("/")[-1], given, {c.strip(" '") for c in choices.split(",")})


class Parser(argparse.ArgumentParser):
    """The parser class of the CLI and of every verb's parser (argparse passes it on to
    subparsers): the formatter above, and extra arguments reported by the verb's own parser
    with its usage and the closest flags."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # argparse quotes a refused value whole ("invalid int value: '111...'", 5,000 digits)
        super().error(_QUOTED.sub(lambda m: repr(clipped(m.group(1), 60)), message) +
                      _spaced(message))  # fmt: skip

    def add_subparsers(self, **kwargs):  # noqa: ANN201 (argparse's private action type)
        abbrev = self.allow_abbrev
        kwargs.setdefault("parser_class", lambda **kw: type(self)(allow_abbrev=abbrev, **kw))
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a verb's own parser: its usage, its flags
            self.error(self.unknown(extras))
        return parsed, extras

    def unknown(self, extras: list[str]) -> str:
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        message = f"unrecognized arguments: {' '.join(extras)}"
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=")[0], flags, n=2, cutoff=0.6)
                if close:
                    message += f" (did you mean {' or '.join(close)}?)"
                    break
        return message


def _available() -> dict[str, str]:
    return {
        v: m
        for v, (m, _) in VERBS.items()
        if importlib.util.find_spec(f"retrieval_gate.commands.{m}")
    }


def build_parser(argv: list[str], abbrev: bool = True) -> argparse.ArgumentParser:
    """The parser for `argv`: only the verb it names is imported (the others are listed with
    their summaries). `abbrev=False` refuses shortened flags (the docs tests use it)."""
    parser = Parser(
        prog="retrieval-gate", description=DESCRIPTION, epilog=EPILOG, allow_abbrev=abbrev
    )
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument(
        "-q", "--quiet", action="store_true", help="no notes, only warnings and errors"
    )
    loud.add_argument("-v", "--verbose", action="store_true", help="debug messages too")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for verb, module in _available().items():
        summary = VERBS[verb][1]
        if verb == wanted:
            importlib.import_module(f"retrieval_gate.commands.{module}").add_parser(sub)
            verb_parser = sub.choices[verb]
            verb_parser.description = verb_parser.description or summary[0].upper() + summary[1:]
        else:
            sub.add_parser(verb, help=summary)
    for action in sub._choices_actions:  # the listing shows the summaries, whoever added it
        action.help = VERBS[action.dest][1]
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one verb. Exit codes: 0 ok, 2 bad input or configuration, 3 engine/backend failure,
    1 a bug (the only case that prints a traceback), 141 the output's reader went away."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in argv if not a.startswith("-")), "")
    gc_thresholds.raise_for_imports()  # before the verb imports torch & co
    gc_thresholds.freeze_at_exit()  # before anything the verb imports registers exit handlers
    _closed_streams()
    _bars_for_logs()
    try:
        _refuse_blank(argv)
        _refuse_undecodable(argv)
        args = build_parser(argv).parse_args(argv)
        configure_logging(
            logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
        )
        if getattr(args, "no_cache", False):  # for the verbs this one starts, too
            os.environ[NO_CACHE_ENV] = "1"
        check_cache_settings()  # before any model is prepared or engine started
        data_dir = getattr(args, "data_dir", None)  # every verb that reads the bundled datasets
        if data_dir is None:
            return _run_counted(args)
        from .data.paths import data_dir_env

        with data_dir_env(data_dir):
            return _run_counted(args)
    except RetrievalGateError as e:
        print(f"retrieval-gate {verb}: error: {e}", file=sys.stderr)
        return e.exit_code
    except ModuleNotFoundError as e:  # a verb whose extra is not installed (base install)
        error = missing_package(e)
        if error is None:
            return _bug(verb)
        print(f"retrieval-gate {verb}: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"retrieval-gate {verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head` closed the output: stop quietly, as Unix tools do
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    except OSError as e:  # a name too long, a full or read-only disk: the user's, not a bug
        said = os_error(e)
        if said is None:
            return _bug(verb)
        print(f"retrieval-gate {verb}: error: {said}", file=sys.stderr)
        return said.exit_code
    except Exception:
        return _bug(verb)


class _ClosedStdout:
    """Stands for a standard output the shell closed (`>&-`: Python sets `sys.stdout` to
    None, and the first result printed was an AttributeError, an internal error): a verb that
    prints results is refused, one that writes them to --output runs."""

    def write(self, text: str) -> int:
        raise InputError("standard output is closed (>&-): redirect it to a file, or pass "
                         "--output FILE where the verb takes one")  # fmt: skip

    def flush(self) -> None:
        pass


def _closed_streams() -> None:
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()  # type: ignore[assignment]
    if sys.stderr is None:  # notes and errors go nowhere, as the shell asked
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (for the process's life)


# Progress bars where stderr is a log or pipe: all on one line, redrawn at most every 5 s. A bar
# opened inside another (vLLM's weight loading inside `rag modes`) moved the cursor up with
# ESC[A, which a log shows as '^[[A'. tqdm reads these at import, before any verb imports it.
# The first process decides and its children inherit the decision: the demo's stages write to
# a pipe the demo reads, whatever the demo writes to. A user's own settings stay.
LOG_BARS_ENV = "RETRIEVAL_GATE_LOG_BARS"
LOG_BARS = {"TQDM_POSITION": "0", "TQDM_MININTERVAL": "5"}


def _bars_for_logs() -> None:
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # a stream without isatty, or closed
        terminal = False
    if os.environ.setdefault(LOG_BARS_ENV, "0" if terminal else "1") == "1":
        for name, value in LOG_BARS.items():
            os.environ.setdefault(name, value)


def _quiet_stdout() -> None:
    """Points stdout at /dev/null, so the interpreter's last flush of the closed pipe does not
    print a second BrokenPipeError on the way out."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _refuse_blank(argv: list[str]) -> None:
    """An empty argument (`--out "$DIR"` with DIR unset) is refused naming its flag: as a path
    it was the working folder, and `evaluate --out ""` wrote its report there."""
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if token.startswith("--") and eq and not value.strip():
            blank = flag
        elif not token.strip():
            blank = next((t.partition("=")[0] for t in reversed(argv[:i]) if t.startswith("-")),
                         f"argument {i + 1}")  # fmt: skip
        else:
            continue
        raise InputError(f"{blank} is given an empty value (an unset shell variable?): pass a "
                         "value, or leave it out")  # fmt: skip


def _refuse_undecodable(argv: list[str]) -> None:
    """An argument that is no UTF-8 text (Python keeps its bytes as lone surrogates) is
    refused naming its flag: as a run or generator name, or an output path, it ended in an
    internal error at the first file written, or a file no later command could read."""
    for i, token in enumerate(argv):
        if (at := lone_surrogate_at(token)) is None:
            continue
        byte = token[at].encode("utf-8", "surrogateescape")
        flag = next((t.partition("=")[0] for t in reversed(argv[: i + 1])
                     if t.startswith("-")), f"argument {i + 1}")  # fmt: skip
        raise InputError(f"{flag}: {token.encode('utf-8', 'replace').decode()!r} is not "
                         f"UTF-8 text (byte 0x{byte.hex()} at character {at + 1}); "
                         "pass UTF-8 text (a file so named: rename it)")  # fmt: skip


def _run_counted(args: argparse.Namespace) -> int:
    """Runs the verb; a verb that generated, trained or scored notes the work it did in
    machine-independent units (`work.summary()`), so its time can be compared across CPUs."""
    code = int(args.run(args) or 0)
    if any(work.snapshot().values()):
        logging.getLogger("retrieval_gate").info(work.summary())
    return code


class _Notice(logging.Formatter):
    """`note: ...` / `warning: ...`: library notices read as the CLI's own lines."""

    def format(self, record: logging.LogRecord) -> str:
        kind = "note" if record.levelno == logging.INFO else record.levelname.lower()
        return f"{kind}: {record.getMessage()}"


class _Stderr(logging.StreamHandler):
    """A handler writing to `sys.stderr` as it is when a notice is written (as logging's own
    last-resort handler does): a caller that swaps it after a command (a notebook, pytest's
    capture) gets the later notices there, not in a stream it may have closed."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # no stream of its own to keep

    @property
    def stream(self) -> TextIO:  # whatever sys.stderr is now
        return sys.stderr


_handler: logging.Handler | None = None


def configure_logging(level: int) -> None:
    """The package's notices (`logging.getLogger(__name__)` in every module) to stderr at
    `level`; called once per command (again in tests: the old handler is replaced)."""
    global _handler
    logger = logging.getLogger("retrieval_gate")
    if _handler is not None:
        logger.removeHandler(_handler)
    _handler = _Stderr()
    _handler.setFormatter(_Notice())
    logger.addHandler(_handler)
    logger.setLevel(level)


def _bug(verb: str) -> int:
    traceback.print_exc()
    print(
        f"retrieval-gate {verb}: internal error (a bug). Please report it with the "
        "command and the traceback above.",
        file=sys.stderr,
    )
    return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
