"""The question-length baseline: P(needs retrieval) from the question's length alone (its word
count, log-scaled), a logistic regression fitted on the train split like `tfidf`. A floor line
in reports: a gate that does not beat it has learned little beyond "long questions are hard"."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from ..questions import Question
from .tfidf import TextModelGate


def word_counts(texts: Sequence[str]) -> np.ndarray:
    """(n, 1) log(1 + words): one feature per question."""
    return np.log1p([[len(t.split())] for t in texts])


class LengthGate(TextModelGate):
    """P(needs retrieval) grows (or falls, as the train labels say) with the word count."""

    @classmethod
    def fit(cls, questions: Sequence[Question], y: np.ndarray) -> TextModelGate:
        # balanced: label shares differ a lot between policies and sources
        model = make_pipeline(
            FunctionTransformer(word_counts), LogisticRegression(class_weight="balanced")
        )
        return cls.fit_pipeline(model, questions, y, "length")
