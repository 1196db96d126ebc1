"""Rows a user's tools write (label rows, question and dataset rows, CSV headers), read
strictly: a key or column named twice is an error naming it. Python's `json` and `csv` keep
the last one silently, so `{"id": "q1", "label": 1, "label": 0}` read as "does not need
retrieval", and a CSV header `question,label,label` used its third column. The same for a
user's `--set KEY=VALUE` overrides; JSON nested too deep for Python's parser, or holding an
integer longer than Python converts, is malformed JSON (`TooDeepError`, `NumberTooLongError`),
and a CSV cell may be longer than the csv module's 128 KiB."""

from __future__ import annotations

import csv
import json
import sys
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


class UnreadableJSONError(json.JSONDecodeError):
    """JSON text past what Python's parser reads; a `JSONDecodeError`, so each reader's
    "malformed JSON" names it with the file and line (it was an internal error)."""


class TooDeepError(UnreadableJSONError):
    """JSON nested deeper than Python's parser recurses (`[[[[...` a few thousand levels): its
    `RecursionError` is not a `ValueError`, so a row file, an HTTP body or a CSV cell of
    brackets ended in an internal error."""

    def __init__(self, doc: str, pos: int):
        super().__init__("nested too deeply to read: more than about 1,000 levels", doc, pos)


class NumberTooLongError(UnreadableJSONError):
    """An integer of more digits than Python converts (`sys.get_int_max_str_digits()`, 4,300:
    a guard against slow conversions); its plain `ValueError` escaped the readers."""

    def __init__(self, doc: str, pos: int):
        limit = sys.get_int_max_str_digits()
        super().__init__(f"an integer of more than {limit:,} digits", doc, pos)


class _Decoder(json.JSONDecoder):
    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            return super().raw_decode(s, idx)
        except RecursionError:
            raise TooDeepError(s, idx) from None
        except (json.JSONDecodeError, RepeatedKeyError):
            raise
        except ValueError:  # from int(): JSON's grammar leaves only "too many digits" (a
            # parse_int hook would say so directly, at a Python call per number)
            raise NumberTooLongError(s, idx) from None


# for reading one item of a larger JSON text at a time (`raw_decode`), as strictly as `loads`
DECODER = _Decoder(object_pairs_hook=_object)


def parse_json(text: str | bytes) -> Any:
    """`json.loads` (a key repeated keeps the last, as files this project or a tool such as
    transformers wrote are read), except that JSON past Python's parser (too deep, an integer
    too long) raises an `UnreadableJSONError`."""
    return json.loads(text, cls=_Decoder)


def loads(text: str | bytes) -> Any:
    """`json.loads`, except that a key repeated in one object raises `RepeatedKeyError` and
    JSON past Python's parser an `UnreadableJSONError` (both `ValueError`s, as
    `json.JSONDecodeError` is)."""
    return json.loads(text, cls=_Decoder, object_pairs_hook=_object)
