"""`retrieval-gate <verb>`: parses arguments and calls one function per verb. Each verb lives in
`retrieval_gate.commands.<verb>` with `add_parser(subparsers)` and `run(args) -> int`."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
import traceback

from .errors import EXIT_BUG, RetrievalGateError, missing_package

# verb -> module under retrieval_gate.commands; a verb's module is imported only when used,
# so `retrieval-gate data summary` never pays for torch or vLLM.
VERBS = {
    "data": "data",
    "models": "models",
    "label": "label",
    "train": "train",
    "evaluate": "evaluate",
    "transfer": "transfer",
    "tune": "tune",
    "export": "export",
    "score": "score",
    "rag": "rag",
    "serve": "serve",
    "demo": "demo",
}


def _available() -> dict[str, str]:
    return {
        v: m for v, m in VERBS.items() if importlib.util.find_spec(f"retrieval_gate.commands.{m}")
    }


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrieval-gate", description=__doc__.split("\n")[0])
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument(
        "-q", "--quiet", action="store_true", help="no notes, only warnings and errors"
    )
    loud.add_argument("-v", "--verbose", action="store_true", help="debug messages too")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs = _available()
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for verb, module in verbs.items():
        if verb == wanted:
            importlib.import_module(f"retrieval_gate.commands.{module}").add_parser(sub)
        else:
            sub.add_parser(verb, help=f"(run `retrieval-gate {verb} -h`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one verb. Exit codes: 0 ok, 2 bad input or configuration, 3 engine/backend failure,
    1 a bug (the only case that prints a traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in argv if not a.startswith("-")), "")
    try:
        args = build_parser(argv).parse_args(argv)
        configure_logging(
            logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
        )
        return int(args.run(args) or 0)
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
    except Exception:
        return _bug(verb)


class _Notice(logging.Formatter):
    """`note: ...` / `warning: ...`: library notices read as the CLI's own lines."""

    def format(self, record: logging.LogRecord) -> str:
        kind = "note" if record.levelno == logging.INFO else record.levelname.lower()
        return f"{kind}: {record.getMessage()}"


_handler: logging.Handler | None = None


def configure_logging(level: int) -> None:
    """The package's notices (`logging.getLogger(__name__)` in every module) to stderr at
    `level`; called once per command (again in tests: the old handler is replaced)."""
    global _handler
    logger = logging.getLogger("retrieval_gate")
    if _handler is not None:
        logger.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
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
