"""Prompt-based gates of RetrievalQA: ask the generator whether it needs retrieval.

Both are scored as P([Yes]) from the generator's own probabilities over the two answers
(`Generator.choice_probs`), so they have an ROC curve and a tunable threshold, not only a
yes/no. `vanilla` is the plain RetrievalQA prompt; `ta-are` (time-aware adaptive retrieval)
prefixes today's date and adds 4 demonstrations: the 2 training questions nearest to the asked
one (`retrieval.dense.MiniLMEncoder` embeddings, cosine) among long-tail questions the generator
got wrong closed-book, labelled [Yes], alternating with 2 hand-written questions any LLM knows,
labelled [No], as in the authors' release."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from itertools import zip_longest

import numpy as np

from ..errors import ConfigError, MissingInputError
from ..fileio import content_id
from ..generation.base import Generator, checksum_of
from ..generation.prompts import (
    TA_ARE_DEMO,
    TA_ARE_EXAMPLES_HEADER,
    TA_ARE_ID,
    TA_ARE_NO_DEMOS,
    TA_ARE_PREFIX,
    VANILLA,
    VANILLA_ID,
    vanilla_prompt,
)
from ..questions import Question
from .base import Questions, as_questions

CHOICES = ("[Yes]", "[No]")
# The Vanilla instruction without its question slot, which TA-ARE places after the examples.
INSTRUCTION, QUESTION_SLOT = VANILLA.split("\n\nQuestion: ", 1)
LONG_TAIL_POP = 100  # Mallen's long tail: s_pop < 100 monthly page views


def ta_are_prompt(question: str, date: str, yes_demos: Sequence[str]) -> str:
    """Today's date, the Vanilla instruction, then [No] and [Yes] demonstrations alternating
    (the authors' layout, a [No] first), the nearest [Yes] one last, next to the question.
    The shared head (date, instruction, first [No]) is the same for every question, so vLLM's
    prefix cache computes it once."""
    demos = []
    for no, yes in zip_longest(TA_ARE_NO_DEMOS, reversed(yes_demos)):
        pair = ((no, "[No]"), (yes, "[Yes]"))
        demos += [TA_ARE_DEMO.format(question=q, answer=a) for q, a in pair if q]
    return (
        TA_ARE_PREFIX.format(date=date)
        + INSTRUCTION
        + "\n\n"
        + TA_ARE_EXAMPLES_HEADER
        + "\n\n"
        + "\n\n".join(demos)
        + "\n\nQuestion: "
        + QUESTION_SLOT.format(question=question)
    )


def is_long_tail(q: Question) -> bool:
    """RetrievalQA's long-tail sources: PopQA below 100 page views, and TriviaQA."""
    return (q.s_pop is not None and q.s_pop < LONG_TAIL_POP) or q.source == "triviaqa"


class DemoPool:
    """Long-tail training questions the generator answered wrong closed-book; `nearest`
    returns, per asked question, the texts of the k most similar ones (never itself)."""

    def __init__(
        self,
        questions: Sequence[Question],
        embed: Callable[[Sequence[str]], np.ndarray],
        k: int = 2,
    ):
        if len(questions) < k + 1:
            raise MissingInputError(
                f"TA-ARE needs more than {k} demonstration questions, got {len(questions)}"
            )
        self.questions = list(questions)
        self.embed = embed
        self.k = k
        texts = [q.text for q in self.questions]
        # the encoder (a bound `MiniLMEncoder.encode` names its model), k and the pool's texts
        owner = getattr(embed, "__self__", embed)
        model = getattr(owner, "model_name", None)
        encoder = model or getattr(owner, "__qualname__", type(owner).__qualname__)
        self.checksum = content_id(str(encoder), str(k), *texts)
        self.vectors = self._vectors(texts, model)

    def _vectors(self, texts: list[str], model: str | None) -> np.ndarray:
        """The pool's embeddings; a named encoder's are kept on disk by model and texts (each
        stage that builds the gate would otherwise encode the same pool again)."""
        if model is None:
            return np.asarray(self.embed(texts))
        from ..retrieval.dense import cached_embeddings

        return cached_embeddings(model, texts, lambda: np.asarray(self.embed(texts)))

    @classmethod
    def from_closed_book(
        cls,
        train: Sequence[Question],
        closed_book_rows: dict[str, dict],
        embed: Callable[[Sequence[str]], np.ndarray],
        k: int = 2,
    ) -> DemoPool:
        wrong = [
            q
            for q in train
            if is_long_tail(q)
            and q.id in closed_book_rows
            and not closed_book_rows[q.id].get("match")
        ]
        return cls(wrong, embed, k)

    def nearest(self, questions: Sequence[Question]) -> list[list[str]]:
        sims = np.asarray(self.embed([q.text for q in questions])) @ self.vectors.T
        ids = [q.id for q in self.questions]
        out = []
        for row, q in zip(sims, questions, strict=True):
            order = np.argsort(-row, kind="stable")
            picked = [i for i in order[: self.k + 1] if ids[i] != q.id][: self.k]
            out.append([self.questions[i].text for i in picked])
        return out


class PromptGate:
    """P([Yes]) of the generator under the Vanilla or TA-ARE prompt, all prompts in one call."""

    def __init__(
        self,
        generator: Callable[[], Generator],
        template: str = "vanilla",
        demos: DemoPool | None = None,
        date: str | None = None,
        threshold: float = 0.5,
    ):
        if template not in ("vanilla", "ta-are"):
            raise ConfigError(f"unknown prompt template {template!r}; use vanilla or ta-are")
        if template == "ta-are" and demos is None:
            raise MissingInputError(
                "the TA-ARE gate needs a demonstration pool (closed-book labels)"
            )
        self.generator = generator
        self.template = template
        self.demos = demos
        self.date = date or dt.date.today().isoformat()
        self.threshold = threshold
        self.name = f"prompt-{template}"

    @property
    def checksum(self) -> str:
        """What its scores depend on, by content: the generator's weights, the prompt (by its
        versioned id) and, for TA-ARE, the date and the demonstration pool (cached scores are
        keyed by it)."""
        prompt_id = TA_ARE_ID if self.template == "ta-are" else VANILLA_ID
        extra = (self.date, self.demos.checksum) if self.demos is not None else ()
        return content_id(checksum_of(self.generator), prompt_id, *extra)

    def prompts(self, questions: Sequence[Question]) -> list[str]:
        if self.template == "vanilla":
            return [vanilla_prompt(q.text) for q in questions]
        assert self.demos is not None
        nearest = self.demos.nearest(questions)
        return [
            ta_are_prompt(q.text, self.date, d) for q, d in zip(questions, nearest, strict=True)
        ]

    def scores(self, questions: Questions) -> np.ndarray:
        questions = as_questions(questions)
        if not questions:
            return np.empty(0)
        probs = self.generator().choice_probs(self.prompts(questions), list(CHOICES))
        return np.asarray(probs)[:, 0]
