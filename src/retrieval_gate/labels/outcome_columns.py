"""The columns of an outcomes file: the names each outcome field is read from, and
`--outcome-field FIELD=COLUMN`, which reads a field from a column the user's own tool named
otherwise (`prediction=model_answer`, `id=question_id`); a column named in another case
(`Correct`) is read as its field. Renaming happens once, as the rows are read, so every
importer (one answer, several strategies) sees the project's names only."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..data.answer_confidence import MEAN_LOGPROB, TOKEN_LOGPROBS
from ..data.list_cells import list_cell
from ..data.question_lines import columns_in_any_case
from ..errors import DataError, InputError

log = logging.getLogger(__name__)

# field -> the columns tried, first non-empty wins. `logprobs` is the OpenAI-compatible reply's
# own name for the answer's log-probabilities (its object or content list, saved as is).
ID = ("id",)
QUESTION = ("question", "text")
CORRECT = ("correct", "is_correct", "closed_correct")
PREDICTION = ("prediction", "closed_prediction", "response", "answer_given")
RAG_CORRECT = ("rag_correct",)
RAG_PREDICTION = ("rag_prediction",)
LOGPROBS = (TOKEN_LOGPROBS, "logprobs")
FIELDS: dict[str, tuple[str, ...]] = {
    "id": ID, "question": QUESTION, "correct": CORRECT, "prediction": PREDICTION,
    "rag_correct": RAG_CORRECT, "rag_prediction": RAG_PREDICTION, TOKEN_LOGPROBS: LOGPROBS,
    MEAN_LOGPROB: (MEAN_LOGPROB,),
}  # fmt: skip
# a renamed row's {field: the file's column it was read from}: an error names the user's column
RENAMED = "_renamed"
# per strategy of a several-strategy file: <name>_correct, <name>_prediction, ...
STRATEGY_SUFFIXES = ("_correct", "_prediction", "_cost", f"_{TOKEN_LOGPROBS}")


def parse_outcome_fields(items: Iterable[str] | None) -> dict[str, str]:
    """`["prediction=model_answer", "id=qid"]` -> {"prediction": "model_answer", "id": "qid"}."""
    out: dict[str, str] = {}
    for item in items or ():
        field, sep, column = (s.strip() for s in item.partition("="))
        known = field in FIELDS or (field.endswith(STRATEGY_SUFFIXES) and "_" in field[1:])
        if not sep or not column or not known:
            raise InputError(
                f"--outcome-field {item!r}: expected FIELD=COLUMN with FIELD one of "
                f"{', '.join(FIELDS)}, or a strategy's <name>"
                f"{', <name>'.join(STRATEGY_SUFFIXES)} (e.g. --outcome-field "
                "prediction=model_answer)"
            )
        if field in out and out[field] != column:
            raise InputError(f"--outcome-field names two columns for {field}: {out[field]} "
                             f"and {column}; keep one")  # fmt: skip
        out[field] = column
    return out


def renamed(
    path: str | Path, rows: list[tuple[int, dict[str, Any]]], fields: dict[str, str]
) -> list[tuple[int, dict[str, Any]]]:
    """Rows with each mapped column read under its field's name (and the mapping under
    `RENAMED`); a column the file lacks is refused, listing the file's columns. The field's own
    columns, if the file has them too, are set aside: the mapping says which holds the
    outcome."""
    seen = columns(rows)
    fields = {**_in_another_case(seen, fields), **fields}
    if not fields:
        return rows
    for field, column in fields.items():
        if column not in seen:
            raise DataError(f"--outcome-field {field}={column}: no column {column!r}; columns: "
                            f"{', '.join(sorted(seen))}", path)  # fmt: skip
    aside = {*fields, *fields.values(), *(c for f in fields for c in FIELDS.get(f, ()))}

    def rename(row: dict[str, Any]) -> dict[str, Any]:
        kept = {k: v for k, v in row.items() if k not in aside}
        return {**kept, **{f: row.get(c) for f, c in fields.items()}, RENAMED: fields}

    return [(n, rename(row)) for n, row in rows]


def _in_another_case(seen: set[str], given: dict[str, str]) -> dict[str, str]:
    """The fields a file names in another case only (`ID`, `Correct`: spreadsheets capitalise
    headers), each read from that column, as `--questions` reads its file."""
    out = {}
    for field, candidates in FIELDS.items():
        if field in given or any(c in seen for c in candidates):
            continue
        found = columns_in_any_case(candidates, seen)
        if found:
            out[field] = found[0]
    return out


def columns(rows: Sequence[tuple[int, dict[str, Any]]]) -> set[str]:
    # _line: where a matched row was; RENAMED: where its renamed columns came from
    return {c for _, row in rows for c in row} - {"_line", RENAMED}


def source_names(row: dict[str, Any]) -> dict[str, str]:
    """field -> the file's own column a renamed row read it from ({}: none renamed)."""
    return row.get(RENAMED) or {}


def listed(rows: Sequence[tuple[int, dict[str, Any]]]) -> str:
    return ", ".join(sorted(columns(rows))) or "none"


def note_unread(path: str | Path, rows: Sequence[tuple[int, dict]], read: Iterable[str]) -> None:
    """Says which columns no field read: a column named otherwise than the project expects
    (`model_answer`, `conf`) is otherwise silently not there."""
    unread = sorted(c for c in columns(rows) - set(read) if c.strip())  # not a blank header
    if unread:
        log.info("%s: columns not read as outcomes: %s (read one as a field with "
                 "--outcome-field FIELD=COLUMN)", path, ", ".join(unread))  # fmt: skip


def answer_text(value: Any, column: str, path: str | Path, n: int) -> str:
    """A prediction cell as the answer's text: a string or number; a list of one answer, or a
    chat message / completion choice (`{"content": ...}`, `{"text": ...}`, a chat completion's
    `{"message": {"content": ...}}`), saved as is. Several answers in one cell are refused:
    judged as their repr, any of them right made the row right. A list saved into a text cell
    (a CSV's: JSON, or pandas' repr `['a', 'b']`) is read as that list."""
    text = value.strip() if isinstance(value, str) else ""
    if text.startswith("[") and text.endswith("]") and (listed := list_cell(text)) is not None:
        value = listed
    while True:
        if isinstance(value, list | tuple) and len(value) == 1:
            value = value[0]
        elif isinstance(value, dict) and ("content" in value or "text" in value):
            value = value.get("content", value.get("text"))
        elif isinstance(value, dict) and isinstance(value.get("message"), dict):
            value = value["message"]
        else:
            break
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    raise DataError(
        f"column {column!r} holds {str(value)[:80]!r}, not one answer's text: record one answer "
        "a row (of several samples, e.g. the greedy one)",
        path,
        n,
    )
