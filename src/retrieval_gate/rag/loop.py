"""The adaptive RAG loop: gate -> retrieve -> generate -> score, with measured costs.

`AdaptiveRAG(gate, retriever, generator).answer(questions)` is the API a service embeds;
`run(questions)` returns the same answers plus the cost accounting of that one pass.

Every cost is measured around the call that incurs it (`time.perf_counter`), never estimated:
the gate's `scores` call, ONE batched `retrieve` call for the questions the gate sends to
retrieval, and ONE batched `generate` call holding both the closed-book and the with-context
prompts (vLLM schedules them together). Token counts are the ones the generator reports per
generation. What is left of the wall time (prompt building, answer scoring) is `overhead`,
so gate + retrieval + generation + overhead == total by construction, and nothing is hidden.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import BackendError, ConfigError
from ..gates.base import Gate
from ..generation.base import Generation, Generator
from ..generation.prompts import DOC_WORDS
from ..questions import Question, exact_match, match, token_f1
from ..retrieval.base import Hit, Retriever
from .fit import FittedPrompt, fit_prompts

DEFAULT_K = 5  # RetrievalQA's top-5 documents
DEFAULT_MAX_NEW_TOKENS = 24


@dataclass
class Answer:
    """One answered question: the decision, its probability, the answer and (with gold
    answers) its scores. `match`/`em`/`f1` are None when the question has no gold answers."""

    id: str
    question: str
    answer: str
    retrieve: bool
    probability: float
    documents: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    match: bool | None = None
    em: bool | None = None
    f1: float | None = None
    error: str | None = None  # why this question got no answer (its prompt did not fit)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Costs:
    """Measured cost of one pass over a batch of questions (seconds and token counts)."""

    questions: int = 0
    failed: int = 0  # questions answered with an error instead of a generation
    retrieved: int = 0  # questions sent to retrieval (each one retrieval request)
    retrieval_calls: int = 0  # batched calls made to the retriever
    generation_calls: int = 0  # batched calls made to the generator
    gate_seconds: float = 0.0
    retrieval_seconds: float = 0.0
    generation_seconds: float = 0.0
    overhead_seconds: float = 0.0
    total_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def retrieval_rate(self) -> float:
        return self.retrieved / self.questions if self.questions else 0.0

    @property
    def questions_per_second(self) -> float:
        return self.questions / self.total_seconds if self.total_seconds > 0 else 0.0

    @property
    def gate_share(self) -> float:
        """The gate's share of end-to-end wall time."""
        return self.gate_seconds / self.total_seconds if self.total_seconds > 0 else 0.0

    def per_question_ms(self, part: str) -> float:
        """Milliseconds per question of `gate`, `retrieval`, `generation`, `overhead` or
        `total`."""
        return 1000 * getattr(self, f"{part}_seconds") / self.questions if self.questions else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            retrieval_rate=self.retrieval_rate,
            questions_per_second=self.questions_per_second,
            gate_share=self.gate_share,
        )
        return d


@dataclass
class RagRun:
    """The answers of one pass and what that pass cost."""

    answers: list[Answer]
    costs: Costs

    def accuracy(self) -> dict[str, float | None]:
        """Mean match / EM / F1 over the answers that have gold answers (None if none do)."""
        scored = [a for a in self.answers if a.match is not None]
        if not scored:
            return {"match": None, "em": None, "f1": None}
        return {
            "match": float(np.mean([a.match for a in scored])),
            "em": float(np.mean([a.em for a in scored])),
            "f1": float(np.mean([a.f1 for a in scored])),
        }


class AdaptiveRAG:
    """Gate -> retriever -> generator for a batch of questions.

    Questions the gate scores at or above its threshold get the top-`k` documents and the
    with-context prompt; the others get the closed-book prompt. All answers come from one
    batched generator call. Documents are cut to their first `doc_words` words, as in the
    rag-gain labelling run, so the loop answers with the prompts the labels were made with.
    A prompt longer than the generator's context window loses documents, or, when even the
    question alone is too long, that question gets an `error` and no generation."""

    def __init__(
        self,
        gate: Gate,
        retriever: Retriever,
        generator: Generator,
        k: int = DEFAULT_K,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        doc_words: int = DOC_WORDS,
    ):
        if k < 1:
            raise ConfigError(f"k (documents per question) must be >= 1, got {k}")
        self.gate = gate
        self.retriever = retriever
        self.generator = generator
        self.k = k
        self.max_new_tokens = max_new_tokens
        self.doc_words = doc_words

    def answer(self, questions: Sequence[Question]) -> list[Answer]:
        """Answers for `questions`, in order."""
        return self.run(questions).answers

    def run(self, questions: Sequence[Question]) -> RagRun:
        """Answers plus the measured cost of producing them."""
        costs = Costs(questions=len(questions))
        if not questions:
            return RagRun([], costs)
        start = time.perf_counter()

        t = time.perf_counter()
        probs = np.asarray(self.gate.scores(questions), dtype=float)
        costs.gate_seconds = time.perf_counter() - t
        if probs.shape != (len(questions),):
            raise BackendError(
                f"gate {self.gate.name!r} returned {probs.shape} scores for {len(questions)} "
                "questions"
            )
        retrieve = probs >= self.gate.threshold

        hits = self._retrieve(questions, retrieve, costs)
        fitted = fit_prompts(
            self.generator,
            [q.text for q in questions],
            [hits[i] if retrieve[i] else None for i in range(len(questions))],
            self.doc_words,
            self.max_new_tokens,
        )
        generations = self._generate(fitted, costs)
        answers = [
            _answer(q, g, bool(retrieve[i]), float(probs[i]), f)
            for i, (q, g, f) in enumerate(zip(questions, generations, fitted, strict=True))
        ]
        costs.failed = sum(a.error is not None for a in answers)
        costs.prompt_tokens = sum(a.prompt_tokens for a in answers)
        costs.completion_tokens = sum(a.completion_tokens for a in answers)
        costs.total_seconds = time.perf_counter() - start
        costs.overhead_seconds = costs.total_seconds - (
            costs.gate_seconds + costs.retrieval_seconds + costs.generation_seconds
        )
        return RagRun(answers, costs)

    def _generate(self, fitted: list[FittedPrompt], costs: Costs) -> list[Generation | None]:
        """One batched call over the prompts that fit; None where a question has none."""
        prompts = [f.prompt for f in fitted if f.prompt is not None]
        if not prompts:
            return [None] * len(fitted)
        t = time.perf_counter()
        generations = self.generator.generate(prompts, max_new_tokens=self.max_new_tokens)
        costs.generation_seconds = time.perf_counter() - t
        costs.generation_calls = 1
        if len(generations) != len(prompts):
            raise BackendError(
                f"generator {self.generator.name!r} returned {len(generations)} generations "
                f"for {len(prompts)} prompts"
            )
        it = iter(generations)
        return [next(it) if f.prompt is not None else None for f in fitted]

    def _retrieve(
        self, questions: Sequence[Question], retrieve: np.ndarray, costs: Costs
    ) -> dict[int, list[Hit]]:
        """Top-k hits for the questions sent to retrieval, by position, in one batched call."""
        chosen = [i for i in range(len(questions)) if retrieve[i]]
        costs.retrieved = len(chosen)
        if not chosen:
            return {}
        t = time.perf_counter()
        hits = self.retriever.retrieve([questions[i] for i in chosen], k=self.k)
        costs.retrieval_seconds = time.perf_counter() - t
        costs.retrieval_calls = 1
        if len(hits) != len(chosen):
            raise BackendError(
                f"retriever {self.retriever.name!r} returned {len(hits)} hit lists for "
                f"{len(chosen)} questions"
            )
        return dict(zip(chosen, hits, strict=True))


def _answer(
    q: Question, g: Generation | None, retrieve: bool, prob: float, fitted: FittedPrompt
) -> Answer:
    """The answer to `q`; without a generation (its prompt did not fit) the reason, and
    scored as a miss when the question has gold answers."""
    text = g.text.strip() if g else ""
    scored = bool(q.answers)
    return Answer(
        id=q.id,
        question=q.text,
        answer=text,
        retrieve=retrieve,
        probability=prob,
        documents=[h.document.id for h in fitted.hits],
        prompt_tokens=g.prompt_tokens if g else 0,
        completion_tokens=g.completion_tokens if g else 0,
        match=match(text, q.answers) if scored else None,
        em=exact_match(text, q.answers) if scored else None,
        f1=token_f1(text, q.answers) if scored else None,
        error=fitted.error,
    )
