"""Rows a user's tools write (label rows, question and dataset rows, CSV headers), read
strictly: a key or column named twice is an error naming it. Python's `json` and `csv` keep
the last one silently, so `{"id": "q1", "label": 1, "label": 0}` read as "does not need
retrieval", and a CSV header `question,label,label` used its third column."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


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


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row = dict(pairs)
    if len(row) < len(pairs):  # the usual row costs one dict and one comparison
        key = first_repeated([k for k, _ in pairs])
        raise RepeatedKeyError(f"key {key!r} is given twice in one object; keep one")
    return row


# for reading one item of a larger JSON text at a time (`raw_decode`), as strictly as `loads`
DECODER = json.JSONDecoder(object_pairs_hook=_object)


def loads(text: str | bytes) -> Any:
    """`json.loads`, except that a key repeated in one object raises `RepeatedKeyError` (a
    `ValueError`, as `json.JSONDecodeError` is)."""
    return json.loads(text, object_pairs_hook=_object)
