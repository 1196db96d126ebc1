"""Rows a user's tools write (label rows, question and dataset rows, CSV headers), read
strictly: a key or column named twice is an error naming it. Python's `json` and `csv` keep
the last one silently, so `{"id": "q1", "label": 1, "label": 0}` read as "does not need
retrieval", and a CSV header `question,label,label` used its third column. The same for a
user's `--set KEY=VALUE` overrides; JSON nested too deep for Python's parser is malformed
JSON (`TooDeepError`), and a CSV cell may be longer than the csv module's 128 KiB."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from typing import Any

from .errors import ConfigError

# Python's csv refuses a cell past 128 KiB ("field larger than field limit"), and a user's
# CSV may hold a document or a long answer list in one; the limit is the process's.
CSV_CELL_LIMIT = 2**30


def allow_long_cells() -> None:
    """Lifts the csv module's cell limit to `CSV_CELL_LIMIT` (1 GiB: still a bound)."""
    csv.field_size_limit(CSV_CELL_LIMIT)


class RepeatedKeyError(ValueError):
    """A JSON object gives one key twice."""


def first_repeated(names: Sequence[str]) -> str | None:
    """The first name that appears again later in `names`, or None."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def check_overrides(items: Iterable[str], flag: str = "--set") -> None:
    """A user's `KEY=VALUE` overrides name each key once: given twice, the last one won."""
    key = first_repeated([item.partition("=")[0].strip() for item in items])
    if key is not None:
        raise ConfigError(f"{flag} gives {key} more than once; keep one")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row = dict(pairs)
    if len(row) < len(pairs):  # the usual row costs one dict and one comparison
        key = first_repeated([k for k, _ in pairs])
        raise RepeatedKeyError(f"key {key!r} is given twice in one object; keep one")
    return row


class TooDeepError(json.JSONDecodeError):
    """JSON nested deeper than Python's parser recurses (`[[[[...` a few thousand levels): its
    `RecursionError` is not a `ValueError`, so every reader's "malformed JSON" missed it and a
    row file, an HTTP body or a CSV cell of brackets ended in an internal error."""

    def __init__(self, doc: str, pos: int):
        super().__init__("nested too deeply to read: more than about 1,000 levels", doc, pos)


class _Decoder(json.JSONDecoder):
    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            return super().raw_decode(s, idx)
        except RecursionError:
            raise TooDeepError(s, idx) from None


# for reading one item of a larger JSON text at a time (`raw_decode`), as strictly as `loads`
DECODER = _Decoder(object_pairs_hook=_object)


def parse_json(text: str | bytes) -> Any:
    """`json.loads` (a key repeated keeps the last, as files this project or a tool such as
    transformers wrote are read), except that JSON nested too deeply raises `TooDeepError`."""
    return json.loads(text, cls=_Decoder)


def loads(text: str | bytes) -> Any:
    """`json.loads`, except that a key repeated in one object raises `RepeatedKeyError` and
    JSON nested too deeply raises `TooDeepError` (both `ValueError`s, as `json.JSONDecodeError`
    is)."""
    return json.loads(text, cls=_Decoder, object_pairs_hook=_object)
