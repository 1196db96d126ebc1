"""The cheap learned baseline: TF-IDF word n-grams + logistic regression (scikit-learn), and
`TextModelGate`, any scikit-learn pipeline over question texts fitted on the train split (the
`length` baseline is one too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline

from ..blas import one_blas_thread
from ..errors import MissingInputError
from ..questions import Question
from .base import Questions, as_questions

FEW = 200  # a small training set keeps every n-gram (min_df 1), as the stacked head's TF-IDF


def min_df(n: int, floor: int = 2) -> int:
    """The fewest questions an n-gram must be in to be kept: `floor`, but 1 for a handful of
    questions (three share no word twice: "no terms remain", a traceback)."""
    return 1 if n < FEW else floor


def fit_inputs(steps: Pipeline, questions: Sequence[Question], name: str) -> Any:
    """The questions through the pipeline's steps before its model, the steps fitted; a
    vocabulary left empty (no word of two letters or more) is too little to fit on."""
    try:
        return steps.fit_transform([q.text for q in questions])
    except ValueError as e:  # sklearn's "empty vocabulary", a traceback
        raise MissingInputError(f"{name} gate: the {len(questions)} training questions hold no "
                                f"word to fit on ({e})") from None  # fmt: skip


class TextModelGate:
    """P(needs retrieval) = a fitted pipeline's `predict_proba` over the question texts."""

    def __init__(self, pipeline: Pipeline, threshold: float = 0.5, name: str = "tfidf"):
        self.pipeline = pipeline
        self.threshold = threshold
        self.name = name

    @classmethod
    def fit_pipeline(
        cls, pipeline: Pipeline, questions: Sequence[Question], y: np.ndarray, name: str
    ) -> TextModelGate:
        labels = np.asarray(y).astype(int)
        if len(set(labels.tolist())) < 2:
            raise MissingInputError(f"{name} gate: the training questions have only one label")
        with one_blas_thread():
            pipeline[-1].fit(fit_inputs(pipeline[:-1], questions, name), labels)
        return cls(pipeline, name=name)

    def scores(self, questions: Questions) -> np.ndarray:
        texts = [q.text for q in as_questions(questions)]
        return self.pipeline.predict_proba(texts)[:, 1] if texts else np.zeros(0)


class TfidfGate(TextModelGate):
    """Logistic regression over TF-IDF uni- and bi-grams."""

    @classmethod
    def fit(
        cls, questions: Sequence[Question], y: np.ndarray, c: float = 4.0, seed: int = 0
    ) -> TextModelGate:
        pipeline = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), min_df=min_df(len(questions)), sublinear_tf=True),
            # balanced: label shares differ a lot between policies and sources
            LogisticRegression(C=c, class_weight="balanced", max_iter=2000, random_state=seed),
        )
        return cls.fit_pipeline(pipeline, questions, y, "tfidf")
