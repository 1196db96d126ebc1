"""The question-length baseline: P(needs retrieval) from the question's length alone (its word
count, log-scaled), a logistic regression fitted on the train split like `tfidf`. A floor line
in reports: a gate that does not beat it has learned little beyond "long questions are hard"."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from ..errors import MissingInputError
from ..questions import Question
from .base import Questions, as_questions


def word_counts(questions: Sequence[Question]) -> np.ndarray:
    """(n, 1) log(1 + words): one feature per question."""
    return np.log1p([[len(q.text.split())] for q in questions])


class LengthGate:
    """P(needs retrieval) grows (or falls, as the train labels say) with the word count."""

    def __init__(self, model: LogisticRegression, threshold: float = 0.5, name: str = "length"):
        self.model = model
        self.threshold = threshold
        self.name = name

    @classmethod
    def fit(cls, questions: Sequence[Question], y: np.ndarray) -> LengthGate:
        labels = np.asarray(y).astype(int)
        if len(set(labels.tolist())) < 2:
            raise MissingInputError("length gate: the training questions have only one label")
        # balanced: label shares differ a lot between policies and sources
        model = LogisticRegression(class_weight="balanced").fit(word_counts(questions), labels)
        return cls(model)

    def scores(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        if not qs:
            return np.zeros(0)
        return self.model.predict_proba(word_counts(qs))[:, 1]
