"""The questions a gate is judged on: the canonical split, a label file, and the labelling
run's recorded answers (closed-book and with-retrieval correctness) for adaptive accuracy."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..data import canonical_questions
from ..data.errors import DataError
from ..questions import Question
from .files import meta_path, read_labels
from .labelling_run import DEFAULT_RUN_DIR, LabellingRun, Outcomes


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


def load_splits(
    label_path: str | Path,
    run_dir: str | Path | None = DEFAULT_RUN_DIR,
    questions: Sequence[Question] | None = None,
) -> Splits:
    """A label file over `questions` (default: the bundled ones, canonical split), with the
    labelling run's outcomes if available."""
    labels = read_labels(label_path)
    outcomes = LabellingRun(Path(run_dir)).outcomes() if run_dir else Outcomes.empty()
    qs = questions if questions is not None else canonical_questions()
    if not any(q.id in labels for q in qs):
        raise DataError(
            "no label id is a question id of the questions given"
            + ("" if questions is not None else " (the bundled datasets): pass --questions SPEC"),
            label_path,
        )
    return split_evalsets(qs, labels, outcomes)


def label_file_names(paths: Sequence[str | Path]) -> dict[str, Path]:
    """One unique name per label file, for the sections of one report: `<generator>/<policy>`
    from its provenance (`smollm2-135m-instruct/closed-book`), the policy alone where the
    provenance names no generator (no provenance: the file's stem). Names two files would
    share become `<folder>/<stem>`, then get a number: no file's results replace another's."""
    paths = [Path(p) for p in paths]
    first = [_label_name(p) for p in paths]
    names = [n if first.count(n) == 1 else f"{p.parent.name}/{p.stem}" for n, p in zip(first, paths, strict=True)]  # fmt: skip
    out: dict[str, Path] = {}
    for name, path in zip(names, paths, strict=True):
        unique, i = name, 1
        while unique in out:
            i += 1
            unique = f"{name}-{i}"
        out[unique] = path
    return out


def _label_name(path: Path) -> str:
    try:
        meta = json.loads(meta_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no or unreadable provenance: the file's own name
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    policy = str(meta.get("policy") or path.stem)
    generator = meta.get("generator")
    return f"{Path(str(generator)).name.lower()}/{policy}" if generator else policy


def policy_name(label_path: str | Path) -> str:
    """`closed-book` from data/labels/<generator>/closed-book.jsonl."""
    return Path(label_path).name.removesuffix(".jsonl")
