"""The questions a gate is judged on: the canonical split, a label file, and the labelling
run's recorded answers (closed-book and with-retrieval correctness) for adaptive accuracy."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import canonical_questions
from ..data.errors import DataError
from ..questions import Question
from .files import LABELS_DIR, LabelFile, read_labels

DEFAULT_RUN_DIR = LABELS_DIR / "smollm2-135m-instruct"


@dataclass(frozen=True)
class Outcomes:
    """Per question id: was the closed-book answer correct, was the with-retrieval one."""

    closed: dict[str, bool]
    rag: dict[str, bool]

    @classmethod
    def empty(cls) -> Outcomes:
        return cls({}, {})


def read_outcomes(run_dir: str | Path = DEFAULT_RUN_DIR) -> Outcomes:
    """closed-book.jsonl `match` and rag-gain.jsonl `closed_correct`/`rag_correct` of one
    generator's labelling run (rag-gain wins where both record a closed-book answer: it is the
    row that also has the with-retrieval answer). Missing files give empty outcomes."""
    run_dir = Path(run_dir)
    closed: dict[str, bool] = {}
    rag: dict[str, bool] = {}
    if (run_dir / "closed-book.jsonl").is_file():
        for i, row in LabelFile(run_dir / "closed-book.jsonl").rows.items():
            if row.get("match") is not None:
                closed[i] = bool(row["match"])
    if (run_dir / "rag-gain.jsonl").is_file():
        for i, row in LabelFile(run_dir / "rag-gain.jsonl").rows.items():
            if row.get("rag_correct") is not None:
                rag[i] = bool(row["rag_correct"])
            if row.get("closed_correct") is not None:
                closed[i] = bool(row["closed_correct"])
    return Outcomes(closed, rag)


@dataclass(frozen=True)
class EvalSet:
    """Labelled questions with their label and recorded answer correctness as arrays
    (NaN where the labelling run has no answer for a question)."""

    questions: tuple[Question, ...]
    y: np.ndarray
    closed_correct: np.ndarray
    rag_correct: np.ndarray

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    @property
    def sources(self) -> np.ndarray:
        return np.array([q.source for q in self.questions])

    @property
    def has_outcomes(self) -> bool:
        both = ~np.isnan(self.closed_correct) & ~np.isnan(self.rag_correct)
        return bool(both.any())

    def subset(self, mask: np.ndarray) -> EvalSet:
        idx = np.flatnonzero(mask)
        return EvalSet(
            tuple(self.questions[i] for i in idx),
            self.y[idx],
            self.closed_correct[idx],
            self.rag_correct[idx],
        )

    def where_source(self, sources: Iterable[str]) -> EvalSet:
        return self.subset(np.isin(self.sources, list(sources)))


def build_evalset(
    questions: Sequence[Question], labels: dict[str, int], outcomes: Outcomes | None = None
) -> EvalSet:
    """The questions that have a label, in the given order, with their outcomes."""
    outcomes = outcomes or Outcomes.empty()
    kept = tuple(q for q in questions if q.id in labels)

    def column(d: dict[str, bool]) -> np.ndarray:
        return np.array([float(d[q.id]) if q.id in d else np.nan for q in kept])

    y = np.array([labels[q.id] for q in kept], dtype=int)
    return EvalSet(kept, y, column(outcomes.closed), column(outcomes.rag))


@dataclass(frozen=True)
class Splits:
    train: EvalSet
    dev: EvalSet
    test: EvalSet


def split_evalsets(
    questions: Sequence[Question], labels: dict[str, int], outcomes: Outcomes | None = None
) -> Splits:
    """Train / dev / test EvalSets from questions that carry their split."""
    parts = {
        s: build_evalset([q for q in questions if q.split == s], labels, outcomes)
        for s in ("train", "dev", "test")
    }
    if not len(parts["test"]):
        raise DataError("no labelled test questions: do the label file's ids match the data?")
    return Splits(**parts)


def load_splits(label_path: str | Path, run_dir: str | Path | None = DEFAULT_RUN_DIR) -> Splits:
    """The canonical split of a label file, with the labelling run's outcomes if available."""
    labels = read_labels(label_path)
    outcomes = read_outcomes(run_dir) if run_dir else Outcomes.empty()
    return split_evalsets(canonical_questions(), labels, outcomes)


def policy_name(label_path: str | Path) -> str:
    """`closed-book` from data/labels/<generator>/closed-book.jsonl."""
    return Path(label_path).name.removesuffix(".jsonl")
