"""Decisions made elsewhere, as a gate: a published peer's, or those of the system you run
now, read by question id, so that `evaluate` reports them beside every other gate on the same
test questions (`--gates recorded --recorded FILE`).

The file is any row file a question file can be (JSONL, CSV, TSV, Parquet, ...) with an `id`
column (the question ids of `--questions`, or of the labels' questions) and, per row, a
`score` (P(needs retrieval), 0 to 1: an ROC curve of its own) or a `retrieve` decision
(true/false, 1/0, yes/no: scored 1.0 or 0.0), or a `strategy` (a router's decision, by the
name the strategy labels give it: evaluate's routing report scores it as a policy; its binary
view is "retrieves": any strategy but the labels' first, or for the built-in names their
spec's). A question scored without a row is refused with how many lack one: a comparison on
fewer questions would not be the same test."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data.user_questions import read_rows
from ..errors import DataError, clipped
from ..fileio import content_id
from ..labels.outcomes import parse_bool
from ..questions import Question, row_id
from ..strategies import BUILTIN, MULTI_STEP, NO_RETRIEVAL, ONE_RETRIEVAL
from .base import Questions, as_questions

SCORE, RETRIEVE, STRATEGY = "score", "retrieve", "strategy"
log = logging.getLogger(__name__)


class RecordedGate:
    """Scores looked up by question id in a file of recorded decisions (threshold 0.5);
    `first_strategy`: the labels' strategy without retrieval, for rows that record a
    strategy only (None: the built-in specs say which retrieve)."""

    def __init__(self, path: str | Path, threshold: float = 0.5, first_strategy: str | None = None):
        self.path = Path(path)
        self.name = f"recorded:{self.path.stem}"
        self.threshold = threshold
        self.first_strategy = first_strategy
        rows = _read(self.path)
        self.recorded = {qid: score for qid, (score, _) in rows.items()}  # None: a strategy only
        self.routes = {qid: s for qid, (_, s) in rows.items() if s is not None}
        # what its scores are (any file format, or a folder): label-free caches key on it
        self.checksum = content_id(json.dumps([rows, first_strategy], sort_keys=True))

    def scores(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        self._covers(qs, self.recorded, "decision")
        return np.array([self._score(q.id) for q in qs], dtype=float)

    def strategy_choice(self, questions: Questions, strategies: Sequence[str]) -> np.ndarray:
        """Each question's recorded strategy, as its index in `strategies` (the labels')."""
        qs = as_questions(questions)
        self._covers(qs, self.routes, "strategy")
        unknown = sorted({self.routes[q.id] for q in qs} - set(strategies))
        if unknown:
            raise DataError(f"recorded strategy {unknown[0]!r} is not one of the labels' "
                            f"({', '.join(strategies)}): record each question's strategy by "
                            f"the name the strategy labels give it{_letters_hint(unknown)}",
                            self.path)  # fmt: skip
        return np.array([list(strategies).index(self.routes[q.id]) for q in qs])

    def check_questions(self, questions: Questions, strategies: Sequence[str] = ()) -> None:
        """What `scores` (and, on strategy labels, `strategy_choice`) would refuse on these
        questions: evaluate calls it before the generator starts or any gate is built."""
        qs = as_questions(questions)
        if not strategies:  # binary labels: a strategy-only row must name a built-in one
            self.scores(qs)
            return
        self._covers(qs, self.recorded, "decision")
        if self.routes:
            self.strategy_choice(qs, strategies)

    def _covers(self, qs: Sequence[Question], table: dict[str, Any], what: str) -> None:
        missing = [q.id for q in qs if q.id not in table]
        if missing:
            seen = next(iter(table), None) or next(iter(self.recorded))
            raise DataError(f"{len(missing)} of {len(qs)} questions have no recorded {what} "
                            f"(e.g. id {missing[0]!r}; the file's ids read like {seen!r}): "
                            "record one for every question it is compared on, by the id the "
                            "questions have", self.path)  # fmt: skip

    def _score(self, qid: str) -> float:
        score = self.recorded[qid]
        if score is not None:
            return score
        strategy = self.routes[qid]
        if self.first_strategy is not None:
            return float(strategy != self.first_strategy)
        if strategy not in BUILTIN:
            raise DataError(f"recorded strategy {strategy!r} (question {qid!r}) is not a "
                            "built-in one, so whether it retrieves is not known here: evaluate "
                            "on the strategy labels that name it, or give the row a "
                            f"'{RETRIEVE}' (true/false){_letters_hint([strategy])}",
                            self.path)  # fmt: skip
        return float(BUILTIN[strategy].retrieves)


# Adaptive-RAG's classifier names its classes by letter (its paper, section 3.3).
LETTERS = {"A": NO_RETRIEVAL, "B": ONE_RETRIEVAL, "C": MULTI_STEP}


def _letters_hint(unknown: Sequence[str]) -> str:
    if not set(unknown) <= set(LETTERS):
        return ""
    mapping = ", ".join(f"{k} -> {v}" for k, v in LETTERS.items())
    return f" (Adaptive-RAG's classifier writes A, B, C: rename them {mapping})"


def _read(path: Path) -> dict[str, tuple[float | None, str | None]]:
    """id -> (score, strategy) of every row; a row without an id or a decision, a score
    outside 0..1, or an id recorded twice is refused with its line."""
    out: dict[str, tuple[float | None, str | None]] = {}
    lines: dict[str, int] = {}
    both: list[int] = []  # lines giving a score and a retrieve decision: the score is read
    for n, row in read_rows(str(path)):
        if row.get("id") in (None, ""):
            raise DataError(f"the row has no 'id' (its columns: {', '.join(map(str, row))}): "
                            "name each row's question by its id", path, n)  # fmt: skip
        qid = row_id(row["id"], path, n)
        if qid in out:
            raise DataError(f"a second decision for question {qid!r} (first on line "
                            f"{lines[qid]}): record one a question", path, n)  # fmt: skip
        strategy = None if _empty(row.get(STRATEGY)) else str(row[STRATEGY]).strip()
        out[qid], lines[qid] = (_score(row, path, n, strategy is not None), strategy), n
        if not _empty(row.get(SCORE)) and not _empty(row.get(RETRIEVE)):
            both.append(n)
    if not out:
        raise DataError("no recorded decisions: the file has no rows", path)
    if both:  # the decision went unread without a word (at another threshold, another gate)
        log.warning(f"{path}: {len(both)} rows give both a score and a retrieve decision (the "
                    f"first: line {both[0]}); the score is read, at the gate's threshold, and "
                    "the decision is not: keep one column")  # fmt: skip
    return out


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (
        isinstance(value, float) and math.isnan(value))  # fmt: skip


def _score(row: dict[str, Any], path: Path, n: int, routed: bool = False) -> float | None:
    """The row's `score` (0..1), else (empty, null or NaN) its `retrieve` decision as 1.0 or
    0.0; None where neither is given but the row records a strategy (`routed`)."""
    value = row.get(SCORE)
    if _empty(value):
        decided = parse_bool(row.get(RETRIEVE), path, n, RETRIEVE)
        if decided is None and routed:
            return None
        if decided is None:
            raise DataError(f"the row has neither a '{SCORE}' (P(needs retrieval)), a "
                            f"'{RETRIEVE}' (true/false) nor a '{STRATEGY}' value (each is empty, "
                            "null or NaN): record one of them", path, n)  # fmt: skip
        return 1.0 if decided else 0.0
    score = _number(value)
    if score is None:  # a true/false too: a decision in the score column
        raise DataError(f"score {value!r} is not a number (a decision goes in "
                        f"'{RETRIEVE}')", path, n)  # fmt: skip
    if not (math.isfinite(score) and 0 <= score <= 1):
        shown = clipped(repr(value), 40) if isinstance(value, int) else f"{score:g}"
        raise DataError(f"score {shown} is not a probability from 0 to 1 (P(needs "
                        "retrieval)); record a decision as 'retrieve' instead", path, n)  # fmt: skip
    return score


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an int past the float range (JSON reads 10**400 exactly)
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        return None
