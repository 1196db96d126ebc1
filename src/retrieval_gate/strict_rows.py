"""Rows a user's tools write (label rows, question and dataset rows, CSV headers), read
strictly: a key or column named twice is an error naming it. Python's `json` and `csv` keep
the last one silently, so `{"id": "q1", "label": 1, "label": 0}` read as "does not need
retrieval", and a CSV header `question,label,label` used its third column. The same for a
user's `--set KEY=VALUE` overrides; JSON nested too deep for Python's parser, or holding an
integer longer than Python converts, or a lone surrogate, is malformed JSON (`TooDeepError`,
`NumberTooLongError`, `LoneSurrogateError`), and a CSV cell may be longer than the csv module's
128 KiB."""

from __future__ import annotations

import csv
import json
import re
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
    """A user's `KEY=VALUE` overrides name each key once: given twice, the last one won. An
    item without "=" is left to the parser, which says what it lacks."""
    key = first_repeated([k.strip() for k, eq, _ in (i.partition("=") for i in items) if eq])
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


class LoneSurrogateError(UnreadableJSONError):
    """A string escaping half of a UTF-16 pair (`"\\ud800"`): JSON's grammar takes it, but it
    is no Unicode text, and no tokenizer, hash or UTF-8 file does: an internal error far from
    the row (a label file's rewrite, a question's id)."""

    def __init__(self, doc: str, pos: int, where: str):
        super().__init__(f"a lone surrogate {where}: not Unicode text, write it as UTF-8",
                         doc, pos)  # fmt: skip


# a \uD8xx-\uDFxx escape: group 1 its backslashes (an even run is text, not an escape)
_SURROGATE_ESCAPE = re.compile(r"(\\+)u[dD]([89a-fA-F])[0-9a-fA-F]{2}")


def _lone_escape_at(s: str, idx: int, end: int) -> int:
    """Where in s[idx:end] the first escape of a lone surrogate starts (idx if none is seen):
    a high half not followed at once by a low half, or a low half not preceded by a high."""
    found = _SURROGATE_ESCAPE.finditer(s, idx, end)
    escapes = [(m.end(1) - 1, m.group(2) in "89abAB") for m in found if len(m.group(1)) % 2]
    k = 0
    while k < len(escapes):
        pos, high = escapes[k]
        paired = high and k + 1 < len(escapes) and escapes[k + 1] == (pos + 6, False)
        if not paired:
            return pos
        k += 2
    return idx


def lone_surrogate_at(text: str) -> int | None:
    """Where the first lone surrogate of `text` is, or None: JSON may escape one ("\\ud800")
    and Python keeps an argument's non-UTF-8 bytes as ones; no tokenizer, hash or UTF-8 file
    takes it."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _lone_surrogate(value: Any) -> str | None:
    """Where the first lone surrogate in a decoded value is ("'\\ud800' in 'question'"), or
    None. Iterative (the value may be nested as deep as the parser reads), in the text's
    order, as `_lone_escape_at` finds its column."""
    stack: list[tuple[Any, str]] = [(value, "the value")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if (at := lone_surrogate_at(item)) is not None:
                return f"{item[at]!r} in {where}"
        elif isinstance(item, dict):
            for key, v in reversed(item.items()):
                stack += [(v, repr(key)), (key, "a key")]
        elif isinstance(item, list):
            stack += [(v, where) for v in reversed(item)]
    return None


def _escapes_one(s: str, idx: int, end: int) -> bool:
    """Whether s[idx:end] holds an escape of a surrogate half (paired or not)."""
    return s.find("\\ud", idx, end) >= 0 or s.find("\\uD", idx, end) >= 0


class _Decoder(json.JSONDecoder):
    lone_surrogates = False  # kept (a subclass): json.loads builds a decoder per call

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            value, end = super().raw_decode(s, idx)
        except RecursionError:
            raise TooDeepError(s, idx) from None
        except (json.JSONDecodeError, RepeatedKeyError):
            raise
        except ValueError:  # from int(): JSON's grammar leaves only "too many digits" (a
            # parse_int hook would say so directly, at a Python call per number)
            raise NumberTooLongError(s, idx) from None
        # only an escape makes one (UTF-8 text holds none): the common row is not walked
        if s.find("\\u", idx, end) >= 0 and not self.lone_surrogates and _escapes_one(s, idx, end):
            where = _lone_surrogate(value)
            if where is not None:
                raise LoneSurrogateError(s, _lone_escape_at(s, idx, end), where)
        return value, end


class _KeepingDecoder(_Decoder):
    lone_surrogates = True


# for reading one item of a larger JSON text at a time (`raw_decode`), as strictly as `loads`
DECODER = _Decoder(object_pairs_hook=_object)


def parse_json(text: str | bytes) -> Any:
    """`json.loads` (a key repeated keeps the last, as files this project or a tool such as
    transformers wrote are read), except that JSON past Python's parser (too deep, an integer
    too long) raises an `UnreadableJSONError`."""
    return json.loads(text, cls=_Decoder)


def loads(text: str | bytes, lone_surrogates: bool = False) -> Any:
    """`json.loads`, except that a key repeated in one object raises `RepeatedKeyError` and
    JSON past Python's parser an `UnreadableJSONError` (both `ValueError`s, as
    `json.JSONDecodeError` is). `lone_surrogates`: kept, for a reader that names the field
    holding one itself."""
    cls = _KeepingDecoder if lone_surrogates else _Decoder
    return json.loads(text, cls=cls, object_pairs_hook=_object)
