"""A list written into one text cell (a CSV or TSV cell: gold answers, token log-probabilities)
the ways users' tools write one: JSON (`["a", "b"]`), a Python list's repr (pandas' `to_csv` of
a list column: `['a', 'b']`) or a numpy array's (`[-0.1 -0.2]`, no commas)."""

from __future__ import annotations

import ast
import re
from typing import Any

from ..strict_rows import loads

# a numpy array's repr: numbers between brackets, separated by blanks (possibly over lines)
_NUMPY = re.compile(r"\[\s*(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*)*\]")


def list_cell(text: str) -> list[Any] | None:
    """The list a cell holds, or None when it holds none of the three forms. Python's form is
    read with `ast.literal_eval` (literals only: nothing in the cell runs)."""
    try:
        value = loads(text)
    except ValueError:  # not JSON, nested too deeply, a key twice
        value = None
    if value is None and _NUMPY.fullmatch(text.strip()):
        return [float(v) for v in text.strip()[1:-1].split()]
    if value is None:
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return list(value) if isinstance(value, list | tuple) else None
