"""Decisions made elsewhere, as a gate: a published peer's, or those of the system you run
now, read by question id, so that `evaluate` reports them beside every other gate on the same
test questions (`--gates recorded --recorded FILE`).

The file is any row file a question file can be (JSONL, CSV, TSV, Parquet, ...) with an `id`
column (the question ids of `--questions`, or of the labels' questions) and, per row, a
`score` (P(needs retrieval), 0 to 1: an ROC curve of its own) or a `retrieve` decision
(true/false, 1/0, yes/no: scored 1.0 or 0.0). A question scored without a row is refused with
how many lack one: a comparison on fewer questions would not be the same test."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..data.user_questions import read_rows
from ..errors import DataError
from ..fileio import content_id
from ..labels.outcomes import parse_bool
from .base import Questions, as_questions

SCORE, RETRIEVE = "score", "retrieve"


class RecordedGate:
    """Scores looked up by question id in a file of recorded decisions (threshold 0.5)."""

    def __init__(self, path: str | Path, threshold: float = 0.5):
        self.path = Path(path)
        self.name = f"recorded:{self.path.stem}"
        self.threshold = threshold
        self.by_id = _read(self.path)
        # what its scores are (any file format, or a folder): label-free caches key on it
        self.checksum = content_id(json.dumps(self.by_id, sort_keys=True))

    def scores(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        missing = [q.id for q in qs if q.id not in self.by_id]
        if missing:
            raise DataError(f"{len(missing)} of {len(qs)} questions have no recorded decision "
                            f"(e.g. id {missing[0]!r}; the file's ids read like "
                            f"{next(iter(self.by_id))!r}): record one for every question it is "
                            "compared on, by the id the questions have", self.path)  # fmt: skip
        return np.array([self.by_id[q.id] for q in qs], dtype=float)


def _read(path: Path) -> dict[str, float]:
    """id -> score of every row; a row without an id or a decision, a score outside 0..1, or
    an id recorded twice is refused with its line."""
    out: dict[str, float] = {}
    lines: dict[str, int] = {}
    for n, row in read_rows(str(path)):
        if row.get("id") in (None, ""):
            raise DataError(f"the row has no 'id' (its columns: {', '.join(map(str, row))}): "
                            "name each row's question by its id", path, n)  # fmt: skip
        qid = str(row["id"])
        if qid in out:
            raise DataError(f"a second decision for question {qid!r} (first on line "
                            f"{lines[qid]}): record one a question", path, n)  # fmt: skip
        out[qid], lines[qid] = _score(row, path, n), n
    if not out:
        raise DataError("no recorded decisions: the file has no rows", path)
    return out


def _score(row: dict[str, Any], path: Path, n: int) -> float:
    """The row's `score` (0..1), else (empty, null or NaN) its `retrieve` decision as 1.0 or
    0.0."""
    value = row.get(SCORE)
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        decided = parse_bool(row.get(RETRIEVE), path, n, RETRIEVE)
        if decided is None:
            raise DataError(f"the row has neither a '{SCORE}' (P(needs retrieval)) nor a "
                            f"'{RETRIEVE}' (true/false) value", path, n)  # fmt: skip
        return 1.0 if decided else 0.0
    score = _number(value)
    if score is None:  # a true/false too: a decision in the score column
        raise DataError(f"score {value!r} is not a number (a decision goes in "
                        f"'{RETRIEVE}')", path, n)  # fmt: skip
    if not (math.isfinite(score) and 0 <= score <= 1):
        raise DataError(f"score {score:g} is not a probability from 0 to 1 (P(needs "
                        "retrieval)); record a decision as 'retrieve' instead", path, n)  # fmt: skip
    return score


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
