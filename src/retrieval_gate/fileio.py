"""Small file helpers every stage shares: JSON read/written whole (atomically), file checksums.

JSONL data rows are read by `data.files.read_jsonl`, which reports bad lines per row."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import DataError


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)  # atomic: a crash never leaves half a file


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
