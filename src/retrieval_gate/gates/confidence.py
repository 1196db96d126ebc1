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


def records_confidence(row: Mapping[str, Any]) -> bool:
    """Whether a closed-book record gives its answer's confidence: a mean log-probability, or
    an answer that declined (`idk`: an empty answer too, which has no tokens). A row whose
    mean is null beside an answer (imported without log-probabilities, or from a server that
    returned none) records none: scored 1.0 it read as "certainly wrong"."""
    return bool(row.get("idk")) or row.get("mean_logprob") is not None


def unrecorded(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ids of `records` whose row gives no answer confidence (`records_confidence`)."""
    return [qid for qid, row in records.items() if not records_confidence(row)]


class ConfidenceGate:
    """Scores from the labelling run's recorded closed-book answers (`records`: closed-book
    label rows by id, with `mean_logprob` and `idk`); questions without a record, or whose
    record gives no confidence (`records_confidence`), are answered closed-book by the
    generator, as a deployed gate would."""

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
            if row is None or not records_confidence(row):
                missing.append(i)
            else:
                out[i] = confidence_score(row.get("mean_logprob"), bool(row.get("idk")))
        if missing:
            asked = [questions[i] for i in missing]
            for i, q, g in zip(missing, asked, self._generate(asked), strict=True):
                idk = is_idk(g.text)
                if g.token_logprobs is None and not idk:  # scored 1.0: "certainly wrong"
                    raise MissingInputError(
                        f"confidence gate: the generator returned no token log-probabilities "
                        f"for the closed-book answer of question {q.id!r}, which the gate "
                        "scores by; use a generator that returns them (an OpenAI-compatible "
                        "server must honour `logprobs: true`; vLLM's does)")  # fmt: skip
                out[i] = confidence_score(g.mean_logprob, idk)
        return out

    def _generate(self, questions: Sequence[Question]) -> list[Generation]:
        recorded = sum(q.id in self.records for q in questions)  # a record, but no confidence
        why = (f"confidence gate: {len(questions)} questions have no closed-book record, or one "
               f"without log-probabilities ({recorded} record no mean_logprob / "
               f"token_logprobs; e.g. {questions[0].id})")  # fmt: skip
        if self.generator is None:
            raise MissingInputError(f"{why}; pass the closed-book label file with them, or a "
                                    "generator")  # fmt: skip
        try:
            generator = self.generator()
        except MissingInputError as e:  # a generator with no local copy: say what it was for
            raise MissingInputError(f"{why}: {e}") from None
        prompts = [closed_book_prompt(q.text) for q in questions]
        return generator.generate(prompts, self.max_new_tokens, logprobs=True)
