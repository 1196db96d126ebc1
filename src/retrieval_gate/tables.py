"""The one markdown-table writer of every report (data summary, labels, evaluation, tuning,
RAG, model cards, the demo)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    """A cell: floats to `digits` places, None as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3, pad: bool = False
) -> str:
    """A GitHub-markdown table; `pad` aligns the columns for reading in a terminal."""
    cells = [list(header)] + [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) if pad else 0 for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) if pad else "---" for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])
