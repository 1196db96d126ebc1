"""Small file helpers every stage shares: files written whole and atomically (a temporary file
in the target folder renamed over the target: a crash never leaves half a file, a reader never
sees one), JSON read with errors naming the line, file checksums, and the rules for output
names and paths (plain names; an output is never an input).

JSONL data rows are read by `data.files.read_jsonl`, which reports bad lines per row."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import DataError, InputError


def write_text(path: str | Path, text: str) -> Path:
    """Writes `text` to `path` atomically; a missing or read-only folder is an InputError."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes `data` to `path` atomically; a missing or read-only folder is an InputError."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"cannot create its folder ({e.strerror}); choose another output", path
        ) from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise InputError(
            f"cannot write in its folder ({e.strerror}); choose another output", path
        ) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the temp file is ours; the target is untouched
        raise
    return path


def write_json(path: str | Path, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def plain_name(name: str, what: str) -> str:
    """A run or export name: one folder name, never a path (`../x`, `a/b`) or a hidden name."""
    name = str(name)
    if not name or name in (".", "..") or name.startswith(".") or any(s in name for s in "/\\"):
        raise InputError(
            f"{what} {name!r} must be a plain folder name (no '/', '\\', '..' or leading '.')"
        )
    return name


def not_an_input(output: str | Path, inputs: list[str | Path], flag: str = "--output") -> None:
    """Refuses an output path that is one of the inputs (it would be overwritten)."""
    out = Path(output).resolve()
    for src in inputs:
        if Path(src).resolve() == out:
            raise InputError(f"{flag} {output} is also an input; write to another file")


def read_json(path: Path, missing: str = "missing file") -> Any:
    """The parsed file; a missing file raises DataError(`missing`), a corrupt one names the
    line and column."""
    if not Path(path).is_file():
        raise DataError(missing, path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"malformed JSON ({e.msg}, column {e.colno})", path, e.lineno) from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_id(*parts: str | None) -> str:
    """A short hash of what a cached result depends on (file, weight and model checksums)."""
    return hashlib.sha256("|".join(p or "-" for p in parts).encode()).hexdigest()[:16]
