"""Multi-step retrieval in the IRCoT manner (Trivedi et al., ACL 2023; the multi-step strategy
of Adaptive-RAG): retrieve with the question, then alternate one reasoning sentence and one
retrieval with that sentence as the query, until the generator writes "So the answer is: ..."
or the step limit is reached.

- Step 1's documents are the one-retrieval strategy's: the top-k for the question. Each later
  step retrieves `step_k` documents for the latest sentence; they become the newest (one held
  already is not added twice, it moves up), and past `max_docs` (default: k) the oldest are
  dropped: the newest are kept (within one retrieval its best hit counts as the newest, so
  the question's lowest-ranked documents go first). Prompts list them oldest first.
- The last allowed step (`max_steps`, default 4) ends its prompt with the answer marker, so
  every question that does not fail has an answer after at most `max_steps` LLM calls and
  `max_steps` retrievals.
- At the context limit (a `WindowedGenerator`'s window less the step's new tokens) a step's
  prompt drops its oldest documents until it fits; when the question and its reasoning do not
  fit even without documents, that question ends with an error and the others go on.
- Batching: step s of every unfinished question is ONE generator call, and the retrieval
  between two steps is ONE retriever call (`costs.Meter`); questions never go one by one.
- Each step's query, the documents in its prompt and the generated text are the answer's
  `steps` trace."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError
from ..generation.base import Generation, Generator, WindowedGenerator
from ..generation.fit import most, most_documents
from ..generation.prompts import multi_step_prompt
from ..questions import Question
from ..retrieval.base import Hit, Retriever
from ..strategies import MAX_STEPS_LIMIT
from .costs import Meter

DEFAULT_MAX_STEPS = 4
_ANSWER = re.compile(r"\b(?:so )?the answer is\s*:?\s*", re.IGNORECASE)
_ECHO = re.compile(r"^(?:\s*A:)+\s*")  # a chat model may repeat the prompt's "A:" first
# A sentence ends at ". ", "! ", "? " or a line break, but not after an initial ("J. K.
# Rowling", "U.S. Navy") or a short abbreviation ("St. Louis"): the sentence is the next
# retrieval query, and "J." retrieves nothing useful.
_ABBREVIATIONS = ("St", "Mr", "Mrs", "Ms", "Dr", "Jr", "Sr", "Mt", "Ft", "vs", "Prof", "Gen",
                  "Gov", "Sen", "Rev", "Lt", "Col", "Capt")  # fmt: skip
_NOT_AN_END = "".join(rf"(?<!\b{a}\.)" for a in _ABBREVIATIONS)
_SENTENCE_END = re.compile(rf"(?<=[.!?])(?<!\b[A-Za-z]\.){_NOT_AN_END}\s+|\n+")


@dataclass(frozen=True)
class MultiStepConfig:
    """`max_steps`: LLM calls per question (1-10); `max_docs`: documents held at most (None:
    the one-retrieval k); `step_k`: documents per retrieval after the first (None: k // 2, at
    least 1)."""

    max_steps: int = DEFAULT_MAX_STEPS
    max_docs: int | None = None
    step_k: int | None = None

    def check(self) -> None:
        """Refuses a bad value, naming its flag (before any engine starts)."""
        if not 1 <= self.max_steps <= MAX_STEPS_LIMIT:
            raise ConfigError(f"--max-steps must be 1 to {MAX_STEPS_LIMIT} (LLM calls per "
                              f"multi-step question), got {self.max_steps}")  # fmt: skip
        for flag, value in (("--max-docs", self.max_docs), ("--step-k", self.step_k)):
            if value is not None and value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")

    def resolved(self, k: int) -> MultiStepConfig:
        """The defaults filled in for the one-retrieval `k`."""
        self.check()
        return replace(self, max_docs=self.max_docs or k, step_k=self.step_k or max(1, k // 2))


def parse_step(text: str) -> tuple[str, str | None]:
    """(the next reasoning sentence, the answer when the text gives one after "the answer
    is"; a marker with nothing after it gives none)."""
    text = _ECHO.sub("", text)
    found = _ANSWER.search(text)
    answer = _answer_after(text[found.end() :]) if found else ""
    if found and answer:
        return text[: found.start()].strip(), answer
    parts = [p.strip() for p in _SENTENCE_END.split(text[: found.start()] if found else text)]
    parts = [p for p in parts if p and not p.startswith(("Q:", "A:"))]  # prompt echoes
    return (parts[0] if parts else ""), None


def final_answer(text: str) -> str:
    """The reply to the last step, whose prompt ends with the answer marker: its first line
    is the answer (not its first sentence: "J. K. Rowling", "Warner Bros. Pictures"). A marker
    repeated with no answer after it (`parse_step` found none) is cut off, with what follows."""
    text = _ECHO.sub("", text)
    found = _ANSWER.search(text)
    lines = [line.strip() for line in text[: found.start() if found else None].split("\n")]
    lines = [line for line in lines if line and not line.startswith(("Q:", "A:"))]  # echoes
    return lines[0].rstrip(".").strip() if lines else ""


def _answer_after(rest: str) -> str:
    """The answer after the marker. A small model may repeat the marker until its token limit
    ("So the answer is: So the answer is: So the"): the repeats, and a cut-off one at the end,
    are no answer."""
    repeated = False
    while found := _ANSWER.match(rest):
        rest, repeated = rest[found.end() :], True
    answer = rest.strip().split("\n")[0].strip().rstrip(".").strip()
    cut_off = any(m.startswith(answer.lower()) for m in ("so the answer is", "the answer is"))
    return "" if repeated and cut_off else answer


@dataclass
class Reasoning:
    """One question's multi-step state: documents held (oldest first), sentences written,
    the trace, and the answer or error once it is done."""

    question: Question
    config: MultiStepConfig
    strategy: str  # the multi-step strategy it runs (costs are booked under its name)
    hits: list[Hit] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    query: str = ""  # the query that fetched the documents of the next step
    answer: str | None = None
    error: str | None = None
    retryable: bool = False  # the generator call failed (a rerun may answer it)
    refused: bool = False  # the server refused the step's prompt for good (`costs.Failure`)
    retrievals: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_logprobs: list[float] | None = None  # the latest step's generation's

    @property
    def done(self) -> bool:
        return self.answer is not None or self.error is not None

    @property
    def final(self) -> bool:
        """The next step is the last allowed: its prompt asks for the answer."""
        return len(self.steps) + 1 >= self.config.max_steps

    def add(self, query: str, hits: Sequence[Hit]) -> None:
        """Documents of a retrieval become the newest (one held already moves up), and the
        newest `max_docs` are kept. Held documents run oldest first, and within a retrieval
        its best hit last: trimming (and the context limit) drops the oldest and, within a
        retrieval, the lowest-ranked first."""
        fresh = {h.document.id for h in hits}
        self.hits = [h for h in self.hits if h.document.id not in fresh] + list(reversed(hits))
        self.hits = self.hits[-(self.config.max_docs or 1) :]
        self.query = query
        self.retrievals += 1

    def _repeats(self, sentence: str) -> bool:
        """The sentence says what an earlier one said (its start): reasoning has stalled."""
        head = " ".join(sentence.lower().split())[:40]
        return any(" ".join(s.lower().split())[:40] == head for s in self.sentences)

    def next_query(self) -> Question:
        """The latest sentence (the question before any) as a retrieval query; the question's
        id and own documents are kept, so every retriever, the contexts one included, works."""
        return replace(
            self.question, text=self.sentences[-1] if self.sentences else self.question.text
        )

    def record(self, result: Generation | str, shown: Sequence[Hit]) -> None:
        """One step's generation (or its error): the sentence, or the answer that ends it."""
        self.llm_calls += 1
        if isinstance(result, str):
            refused = bool(getattr(result, "refused", False))  # a `Failure` says whose it is
            self.error, self.retryable, self.refused = str(result), not refused, refused
            return
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.token_logprobs = result.token_logprobs
        final = self.final
        sentence, answer = parse_step(result.text)
        self.steps.append({"query": self.query, "documents": [h.document.id for h in shown],
                           "text": result.text})  # fmt: skip
        if final and answer is None:  # the prompt ended with the marker: the text answers
            answer = final_answer(result.text)
        if answer is not None:
            self.answer = answer.strip()
        elif sentence and not self._repeats(sentence):
            self.sentences.append(sentence)
        else:  # no new sentence to retrieve with: the next step asks for the answer
            self.config = replace(self.config, max_steps=len(self.steps) + 1)


@dataclass
class StepPrompt:
    """A step's prompt and the documents it holds (None: it does not fit, see `error`)."""

    prompt: str | None
    hits: list[Hit]
    error: str | None = None


def step_prompts(
    states: Sequence[Reasoning], generator: Generator, max_new_tokens: int, doc_words: int
) -> list[StepPrompt]:
    """The next step's prompt of each question, fitted to the generator's context window:
    the oldest documents go first, then the question fails alone."""

    def build(s: Reasoning, hits: Sequence[Hit]) -> str:
        return multi_step_prompt(s.question.text, hits, s.sentences, s.final, doc_words)

    prompts = [StepPrompt(build(s, s.hits), list(s.hits)) for s in states]
    if not isinstance(generator, WindowedGenerator):
        return prompts  # a server that counts no tokens fits prompts itself (or fails one)
    budget = generator.context_window - max_new_tokens
    lengths = generator.prompt_lengths([p.prompt or "" for p in prompts])
    for i, (s, n) in enumerate(zip(states, lengths, strict=True)):
        if n > budget:
            prompts[i] = _shrink(s, generator, build, budget, n)
    return prompts


def _shrink(s: Reasoning, generator: WindowedGenerator, build: Any, budget: int,
            tokens: int) -> StepPrompt:  # fmt: skip
    def fits(kept: int) -> bool:  # the newest `kept` documents: the oldest go first
        return generator.prompt_lengths([build(s, s.hits[len(s.hits) - kept :])])[0] <= budget

    kept = most(0, len(s.hits) - 1, fits)
    if kept >= 0:
        hits = s.hits[len(s.hits) - kept :]
        return StepPrompt(build(s, hits), hits)
    window = generator.context_window
    return StepPrompt(None, [], error=(
        f"multi-step: the question and its reasoning do not fit the generator's context "
        f"window at step {len(s.steps) + 1}: the prompt is {tokens} tokens with its documents, "
        f"and {window} tokens less {window - budget} for the step leave {budget}; shorten the "
        "question or lower --max-steps"))  # fmt: skip


def apply_step(
    states: Sequence[Reasoning], prompts: Sequence[StepPrompt], results: Sequence[Generation | str]
) -> None:
    """Records one step's results; `results` has one entry per prompt that fit, in order."""
    it = iter(results)
    for s, p in zip(states, prompts, strict=True):
        if p.prompt is None:
            s.error = p.error
        else:
            s.record(next(it), p.hits)


def continue_steps(
    states: Sequence[Reasoning],
    retriever: Retriever,
    generator: Generator,
    meter: Meter,
    max_new_tokens: int,
    doc_words: int,
) -> None:
    """Steps 2.. of questions whose first step ran: per step ONE retrieval call over every
    unfinished question's latest sentence, then ONE generator call over their prompts."""
    while True:
        todo = [s for s in states if not s.done]
        if not todo:
            return
        queries = [s.next_query() for s in todo]
        step_ks = [s.config.step_k or 1 for s in todo]
        # one call at the largest step_k; a strategy with a smaller one keeps its top hits
        depth = most_documents(generator, max(step_ks))
        hits = meter.retrieve(retriever, queries, [s.strategy for s in todo], depth)
        for s, q, h, k in zip(todo, queries, hits, step_ks, strict=True):
            s.add(q.text, h[:k])
        run_step(todo, generator, meter, max_new_tokens, doc_words)


def run_step(
    states: Sequence[Reasoning], generator: Generator, meter: Meter, max_new_tokens: int,
    doc_words: int,
) -> None:  # fmt: skip
    """One step of every question in `states`: one generator call."""
    prompts = step_prompts(states, generator, max_new_tokens, doc_words)
    fit = [p.prompt for p in prompts if p.prompt is not None]
    tags = [s.strategy for s, p in zip(states, prompts, strict=True) if p.prompt is not None]
    results = meter.generate(generator, fit, tags, max_new_tokens)
    apply_step(states, prompts, results)
