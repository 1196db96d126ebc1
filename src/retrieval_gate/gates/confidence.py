"""The calibration-based family: retrieve when the generator is not confident in its own
closed-book answer.

Score = 1 - exp(mean token log-probability) of the closed-book answer, i.e. 1 - the geometric
mean token probability; an "I don't know" answer scores 1. Everything stays in probabilities,
so a higher score always means "more in need of retrieval" and the threshold lives in [0, 1]
(Self-RAG's public code divides log-probabilities, which inverts the comparison and made its
threshold 0.2 retrieve for every question: AkariAsai/self-rag#45)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import MissingInputError
from ..fileio import content_id
from ..generation.base import Generation, Generator, checksum_of
from ..generation.prompts import closed_book_prompt
from ..questions import Question, is_idk
from .base import Questions, as_questions


def confidence_score(mean_logprob: float | None, idk: bool) -> float:
    """P(needs retrieval) from one closed-book answer."""
    if idk:
        return 1.0
    if mean_logprob is None or not np.isfinite(mean_logprob):
        return 1.0  # no answer tokens: nothing to be confident about
    return float(1.0 - np.exp(min(mean_logprob, 0.0)))


class ConfidenceGate:
    """Scores from the labelling run's recorded closed-book answers (`records`: closed-book
    label rows by id, with `mean_logprob` and `idk`); questions without a record are answered
    closed-book by the generator, as a deployed gate would."""

    def __init__(
        self,
        records: Mapping[str, Mapping[str, Any]] | None = None,
        generator: Callable[[], Generator] | None = None,
        threshold: float = 0.5,
        max_new_tokens: int = 16,
        name: str = "confidence",
    ):
        self.records = dict(records or {})
        self.generator = generator
        self.threshold = threshold
        self.max_new_tokens = max_new_tokens
        self.name = name

    @property
    def checksum(self) -> str:
        """What its scores depend on, by content: the recorded answers, the generator's weights
        (for questions without a record) and the answer length."""
        rows = json.dumps(self.records, sort_keys=True, default=str)
        generator = checksum_of(self.generator) if self.generator is not None else None
        return content_id(rows, generator, str(self.max_new_tokens))

    def uncached(self) -> ConfidenceGate:
        """The same gate generating every answer (what a question costs in deployment)."""
        return ConfidenceGate(None, self.generator, self.threshold, self.max_new_tokens, self.name)

    def scores(self, questions: Questions) -> np.ndarray:
        questions = as_questions(questions)
        out = np.empty(len(questions))
        missing = []
        for i, q in enumerate(questions):
            row = self.records.get(q.id)
            if row is None:
                missing.append(i)
            else:
                out[i] = confidence_score(row.get("mean_logprob"), bool(row.get("idk")))
        if missing:
            for i, g in zip(missing, self._generate([questions[i] for i in missing]), strict=True):
                out[i] = confidence_score(g.mean_logprob, is_idk(g.text))
        return out

    def _generate(self, questions: Sequence[Question]) -> list[Generation]:
        if self.generator is None:
            raise MissingInputError(
                f"confidence gate: {len(questions)} questions have no closed-book record "
                "(e.g. " + questions[0].id + "); pass the closed-book label file or a generator"
            )
        prompts = [closed_book_prompt(q.text) for q in questions]
        return self.generator().generate(prompts, self.max_new_tokens, logprobs=True)
