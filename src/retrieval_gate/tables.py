"""The one markdown-table writer of every report (data summary, labels, evaluation, tuning,
RAG, model cards, the demo)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# a run of backslashes (maybe none) before a pipe: the run doubled, the pipe escaped
_PIPE = re.compile(r"(\\*)\|")


def fmt(value: Any, digits: int = 3) -> str:
    """A cell: floats to `digits` places, None as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def cell_text(text: str) -> str:
    """`text` as one cell: a `|` escaped (it started a new column) and the backslashes before
    it doubled (a typed `\\|` shows as typed), line breaks as spaces (one ended the row)."""
    one_line = " ".join(text.splitlines())
    return _PIPE.sub(lambda m: m.group(1) * 2 + "\\|", one_line)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3, pad: bool = False
) -> str:
    """A GitHub-markdown table; `pad` aligns the columns for reading in a terminal. Headers
    and cells are escaped (`cell_text`): a source or gate name may hold a `|` or a newline."""
    cells = [[cell_text(h) for h in header]]
    cells += [[cell_text(fmt(c, digits)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) if pad else 0 for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) if pad else "---" for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])
