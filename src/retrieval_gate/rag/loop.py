"""The adaptive RAG loop: gate or router -> strategy -> retrieve -> generate -> score, with
measured costs.

`AdaptiveRAG(gate, retriever, generator).answer(questions)` is the API a service embeds;
`run(questions)` returns the same answers plus the cost accounting of that one pass.

Each question runs one strategy, a spec of the registry (`retrieval_gate.strategies`): one
without a retriever gets the closed-book prompt, one with a retriever its top-k documents and
the with-context prompt, a multi-step one IRCoT-style reasoning (`rag/multistep.py`); a router
names it, a binary gate picks between the registry's `binary_pair`. The loop reads what to do
from the spec (`retrieves`, `k`, `multi_step`, `max_steps`), never from its name. A pass makes
ONE batched retrieval call per retriever for every question that retrieves with its own text
(at the largest k asked; a strategy with a smaller k keeps its top hits), ONE batched
generation call holding the closed-book, with-context and first-step prompts together (vLLM
schedules them together), then per further multi-step step one retrieval and one generation
call over the questions still reasoning.

Every cost is measured around the call that incurs it (`time.perf_counter`, `costs.Meter`):
the decision (`gate_seconds`), retrieval and generation. Token counts are the ones the
generator reports per generation. What is left of the wall time (prompt building, answer
scoring) is `overhead`, so gate + retrieval + generation + overhead == total by construction.
Per strategy, `costs.by_strategy` counts questions, retrieval requests and LLM calls per
question, tokens, and the seconds of the calls it took part in (shared calls split, see
`rag/costs.py`).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError, ConfigError
from ..gates.base import Gate, Questions, as_questions
from ..generation.base import Generation, Generator
from ..generation.fit import FittedPrompt, fit_prompts, most_documents
from ..generation.prompts import DOC_WORDS
from ..questions import Question, exact_match, match, token_f1
from ..retrieval.base import Hit, Retriever
from ..strategies import BUILTIN, DEFAULT_RETRIEVER, StrategyRegistry, StrategySpec
from .cascade import Cascade, escalate, escalation_strategy
from .costs import Costs, Failure, Meter, StrategyCosts
from .decisions import (
    Budget,
    Decision,
    check_router,
    checked_budgets,
    decide,
    routed_strategies,
)
from .multistep import MultiStepConfig, Reasoning, apply_step, continue_steps, step_prompts

DEFAULT_K = 5  # RetrievalQA's top-5 documents
DEFAULT_MAX_NEW_TOKENS = 24

__all__ = ["AdaptiveRAG", "Answer", "Costs", "RagRun", "StrategyCosts"]


@runtime_checkable
class _Generating(Protocol):
    """What the loop calls on its generator: `name` (in messages) and `generate` (a
    `PartialGenerator`'s `try_generate` too); `checksum` and `choice_probs` it never calls."""

    name: str

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]: ...


def _whole(value: Any, name: str, what: str, default: int) -> int:
    """A count argument: a whole number >= 1. "5" and None failed at the first comparison,
    2.5 deep in numpy at run time, and doc_words=-3 cut each document's LAST 3 words."""
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(f"{name} ({what}) must be a whole number >= 1, got {value!r}: "
                          f"pass e.g. {name}={default} (the default)")  # fmt: skip
    return int(value)


@dataclass
class Answer:
    """One answered question: the strategy it ran, P(needs retrieval), the answer and (with
    gold answers) its scores. `match`/`em`/`f1` are None when the question has no gold
    answers. `steps`: a multi-step question's trace (query, documents, text per step)."""

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
    error: str | None = None  # why this question got no answer
    strategy: str = ""
    retrievals: int = 0
    llm_calls: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    retryable: bool = False  # the error is a failed generator call: a rerun may answer it
    # the error is the server's refusal of this prompt, for good (`costs.Failure`): scored as
    # a miss and kept, a rerun would be refused again
    refused: bool = False
    # the answer's token log-probabilities (multi-step: its last step's generation), when the
    # loop asked for them (`logprobs=True`) and the generator returned them
    token_logprobs: list[float] | None = None
    escalated: bool = False  # a cascade's: kept closed-book, then answered by the next strategy

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    """Gate or router -> strategy -> retriever -> generator for a batch of questions.

    A binary gate sends questions it scores at or above its threshold to the registry's
    one-call retrieval strategy (top-`k` documents, with-context prompt), the others to its
    closed-book one; a router names any of its strategies (`budget`: its operating point,
    None: its default). `strategies`: the registry (default: the built-ins; a router export's
    own specs are added); `retrievers`: retrievers by name for strategies that name one other
    than `retriever` (the verb's own). A strategy the loop cannot run (unregistered, a
    retriever it lacks, a generator of its own) is refused here, before any question runs.
    Documents are cut to their first `doc_words` words, as in the rag-gain labelling run. A
    prompt longer than the generator's context window loses documents, or, when even the
    question alone is too long, that question gets an `error` and no generation."""

    def __init__(
        self,
        gate: Gate,
        retriever: Retriever,
        generator: Generator,
        k: int = DEFAULT_K,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        doc_words: int = DOC_WORDS,
        multi_step: MultiStepConfig | None = None,
        budget: Budget = None,
        strategies: StrategyRegistry | None = None,
        retrievers: Mapping[str, Retriever] | None = None,
        logprobs: bool = False,
    ):
        k = _whole(k, "k", "documents per question", DEFAULT_K)
        max_new_tokens = _whole(max_new_tokens, "max_new_tokens", "tokens generated per answer",
                                DEFAULT_MAX_NEW_TOKENS)  # fmt: skip
        doc_words = _whole(doc_words, "doc_words", "words kept of each document", DOC_WORDS)
        # checked here: None failed mid-run (a KeyError, an AttributeError) after the gate ran
        if not isinstance(retriever, Retriever):
            raise ConfigError(f"retriever must be a retriever (an object with a name and "
                              f"retrieve(questions, k)), e.g. BM25Retriever(documents); got "
                              f"{retriever!r}")  # fmt: skip
        if not isinstance(generator, _Generating):
            raise ConfigError(f"generator must be a generator (an object with a name and "
                              f"generate(prompts, max_new_tokens)), e.g. open_generator(...); "
                              f"got {generator!r}")  # fmt: skip
        self.registry = check_router(gate, budget, strategies or BUILTIN, "budget")
        self.retrievers = dict(retrievers or {})
        self.gate = gate
        self.retriever = retriever
        self.generator = generator
        self.k = k
        self.max_new_tokens = max_new_tokens
        self.doc_words = doc_words
        self.multi_step = (multi_step or MultiStepConfig()).resolved(k)
        self._multi_step = multi_step or MultiStepConfig()
        self.budget = budget
        self.logprobs = logprobs  # ask the generator for the answers' token log-probabilities
        for name in routed_strategies(gate, self.registry):
            self.retriever_for(self.registry[name])

    def retriever_for(self, spec: StrategySpec) -> Retriever | None:
        """The retriever `spec` retrieves with (None: it does not), refused when this loop has
        none of that kind or the spec names a generator of its own."""
        if spec.generator is not None:
            raise ConfigError(
                f"strategy {spec.name!r} names its own generator ({spec.generator}); this loop "
                f"runs every strategy on its one generator ({self.generator.name!r}): drop its "
                "generator: key or run it as its own generator"
            )
        if spec.retriever is None:
            return None
        if spec.retriever == DEFAULT_RETRIEVER or spec.retriever == self.retriever.name:
            return self.retriever
        if spec.retriever in self.retrievers:
            return self.retrievers[spec.retriever]
        raise ConfigError(
            f"strategy {spec.name!r} retrieves with {spec.retriever}, but this loop has only the "
            f"{self.retriever.name} retriever (--retriever {spec.retriever} runs it, or drop "
            "the strategy)"
        )

    def steps_config(self, spec: StrategySpec) -> MultiStepConfig:
        """A multi-step strategy's settings: the loop's, its own max_steps and k applied."""
        own = replace(self._multi_step, max_steps=spec.max_steps or self._multi_step.max_steps)
        return own.resolved(spec.documents(self.k))

    def answer(self, questions: str | Questions) -> list[Answer]:
        """Answers for `questions` (as `run` takes them), in order."""
        return self.run(questions).answers

    def decide(
        self, questions: str | Questions, budget: Budget | Sequence[Budget] = None
    ) -> Decision:
        """Each question's strategy; a budget left None (per question too) is this loop's."""
        questions = as_questions(questions)
        budget = checked_budgets(budget, len(questions))
        if isinstance(budget, list):
            budget = [self.budget if b is None else b for b in budget]
        return decide(self.gate, questions, self.budget if budget is None else budget,
                      self.registry)  # fmt: skip

    def run(
        self,
        questions: str | Questions,
        budget: Budget | Sequence[Budget] = None,
        decision: Decision | None = None,
    ) -> RagRun:
        """Answers plus the measured cost of producing them. `questions`: as every gate takes
        them (`Question`s or strings, a list, array or generator; one string is one question).
        `budget`: one, or one per question. `decision`: strategies already chosen (the service
        routes before it queues, so no decision time is counted here)."""
        # converted once and kept: strings reached the retriever as such, a str was read as
        # characters, and a generator was spent by the first pass over it
        questions = as_questions(questions)
        budget = checked_budgets(budget, len(questions))
        costs = Costs(questions=len(questions))
        if not questions:
            return RagRun([], costs)
        start = time.perf_counter()
        if decision is None:
            decision = self.decide(questions, budget)
            costs.gate_seconds = time.perf_counter() - start
        if len(decision.strategies) != len(questions):
            raise BackendError(f"{len(decision.strategies)} strategies for {len(questions)} "
                               "questions")  # fmt: skip
        meter = Meter(costs, self.logprobs)
        if isinstance(self.gate, Cascade):
            # each question escalates within its own budget (a list: the service batches
            # requests of different budgets); None is this loop's
            each = budget if isinstance(budget, list) else [budget] * len(questions)
            answers = self._cascade(self.gate, questions, decision.strategies, meter,
                                    [self.budget if b is None else b for b in each])  # fmt: skip
        else:
            answers = self._answers(questions, decision.strategies, meter)
        for a, p in zip(answers, decision.probabilities, strict=True):
            a.probability = float(p)
        _tally(costs, answers)
        costs.total_seconds = time.perf_counter() - start
        costs.overhead_seconds = costs.total_seconds - (
            costs.gate_seconds + costs.retrieval_seconds + costs.generation_seconds
        )
        # every question failed, refused too: the generator is down (or a proxy's page in its
        # place, or a model it does not serve): say so
        if answers and all(a.retryable or a.refused for a in answers):
            raise BackendError(answers[0].error or "the generator failed")
        return RagRun(answers, costs)

    def _cascade(
        self,
        cascade: Cascade,
        questions: Sequence[Question],
        strategies: list[str],
        meter: Meter,
        budgets: Sequence[Budget],
    ) -> list[Answer]:
        """The cascade (rag/cascade.py): the questions the first gate keeps closed-book are
        answered with their log-probabilities (one call), the rest as any mode answers them
        (another: their prompts keep the generation cache's keys); the answer gate reads the
        closed-book answers, and those it escalates are answered again by the next strategy.
        `budgets`: each question's; escalations are picked within each budget's slack over
        the questions of that budget (as one run at that budget picks them)."""
        closed, up = escalation_strategy(cascade, self.registry)
        kept = [i for i, s in enumerate(strategies) if s == closed]
        rest = [i for i, s in enumerate(strategies) if s != closed]
        answers: list[Answer | None] = [None] * len(questions)
        asked = Meter(meter.costs, True)
        for idx, m in ((kept, asked), (rest, meter)):
            got = self._answers([questions[i] for i in idx], [strategies[i] for i in idx], m)
            for i, a in zip(idx, got, strict=True):
                answers[i] = a
        done = [a for a in answers if a is not None]
        kept = [i for i in kept if done[i].error is None]
        if not kept:
            return done
        start = time.perf_counter()
        again: list[int] = []
        for b in dict.fromkeys(budgets):
            group = [i for i, x in enumerate(budgets) if x == b]
            mine = [i for i in kept if budgets[i] == b]
            if not mine:
                continue
            # an empty answer has no tokens to read: its question-only score decides
            logprobs = [done[i].token_logprobs or None for i in mine]
            read = as_questions([questions[i] for i in mine], token_logprobs=logprobs)
            picks, _ = escalate(cascade, read, [strategies[i] for i in group], b, self.registry)
            again += [mine[j] for j in picks]
        again.sort()
        meter.costs.gate_seconds += time.perf_counter() - start
        second = self._answers([questions[i] for i in again], [up] * len(again), meter)
        for i, a in zip(again, second, strict=True):
            done[i] = _escalated(done[i], a)
        return done

    def _answers(
        self, questions: Sequence[Question], strategies: list[str], meter: Meter
    ) -> list[Answer]:
        """Round 1 (one retrieval call, one generation call for every strategy), then the
        further multi-step steps."""
        n = len(questions)
        specs = [self.registry[s] for s in strategies]
        hits = self._retrieve(questions, specs, meter)
        multi = {i: Reasoning(questions[i], self.steps_config(specs[i]), specs[i].name)
                 for i in range(n) if specs[i].multi_step}  # fmt: skip
        for i, state in multi.items():
            state.add(questions[i].text, hits.pop(i))
        single = [i for i in range(n) if i not in multi]
        fitted = fit_prompts(self.generator, [questions[i].text for i in single],
                             [hits.get(i) for i in single], self.doc_words, self.max_new_tokens)  # fmt: skip
        generations = self._first_round(single, fitted, strategies, multi, meter)
        by_retriever: dict[int, tuple[Retriever, list[Reasoning]]] = {}
        for i, state in multi.items():
            r = self.retriever_for(specs[i])
            by_retriever.setdefault(id(r), (r, []))[1].append(state)  # type: ignore[arg-type]
        for r, states in by_retriever.values():
            continue_steps(states, r, self.generator, meter, self.max_new_tokens, self.doc_words)
        out: list[Answer | None] = [None] * n
        for i, f, g in zip(single, fitted, generations, strict=True):
            out[i] = _answer(questions[i], g, specs[i], f)
        for i, state in multi.items():
            out[i] = _multi_answer(state)
        return [a for a in out if a is not None]

    def _retrieve(
        self, questions: Sequence[Question], specs: list[StrategySpec], meter: Meter
    ) -> dict[int, list[Hit]]:
        """Round 1's documents of every question that retrieves: ONE call per retriever, at
        the largest k its strategies ask for (each keeps its own top k)."""
        groups: dict[int, tuple[Retriever, list[int]]] = {}
        for i, spec in enumerate(specs):
            r = self.retriever_for(spec)
            if r is not None:
                groups.setdefault(id(r), (r, []))[1].append(i)
        hits: dict[int, list[Hit]] = {}
        for r, idx in groups.values():
            ks = [specs[i].documents(self.k) for i in idx]
            found = meter.retrieve(r, [questions[i] for i in idx], [specs[i].name for i in idx],
                                   most_documents(self.generator, max(ks)))  # fmt: skip
            for i, h, k in zip(idx, found, ks, strict=True):
                hits[i] = list(h)[:k]
        return hits

    def _first_round(
        self,
        single: list[int],
        fitted: list[FittedPrompt],
        strategies: list[str],
        multi: dict[int, Reasoning],
        meter: Meter,
    ) -> list[Generation | Failure | None]:
        """ONE generator call over the closed-book and with-context prompts that fit and the
        first step of every multi-step question; None where a question's prompt did not fit."""
        states = list(multi.values())
        steps = step_prompts(states, self.generator, self.max_new_tokens, self.doc_words)
        prompts = [f.prompt for f in fitted if f.prompt is not None]
        tags = [strategies[i] for i, f in zip(single, fitted, strict=True) if f.prompt is not None]
        step_fit = [p.prompt for p in steps if p.prompt is not None]
        step_tags = [s.strategy for s, p in zip(states, steps, strict=True) if p.prompt is not None]
        results = meter.generate(self.generator, prompts + step_fit, tags + step_tags,
                                 self.max_new_tokens)  # fmt: skip
        apply_step(states, steps, results[len(prompts) :])
        it = iter(results[: len(prompts)])
        return [next(it) if f.prompt is not None else None for f in fitted]


def _tally(costs: Costs, answers: Sequence[Answer]) -> None:
    """The per-question counts of a pass, overall and per strategy (seconds are booked by the
    meter as the calls run)."""
    for a in answers:
        c = costs.strategy(a.strategy)
        c.questions += 1
        c.failed += a.error is not None
        c.retrievals += a.retrievals
        c.llm_calls += a.llm_calls
        c.prompt_tokens += a.prompt_tokens
        c.completion_tokens += a.completion_tokens
    costs.failed = sum(a.error is not None for a in answers)
    costs.escalations = sum(a.escalated for a in answers)
    costs.retrieved = sum(a.retrievals > 0 for a in answers)
    costs.retrievals = sum(a.retrievals for a in answers)
    costs.llm_calls = sum(a.llm_calls for a in answers)
    costs.prompt_tokens = sum(a.prompt_tokens for a in answers)
    costs.completion_tokens = sum(a.completion_tokens for a in answers)


def _escalated(first: Answer, second: Answer) -> Answer:
    """The escalated answer, charged both calls (the closed-book one it replaced, too)."""
    return replace(second, escalated=True, llm_calls=first.llm_calls + second.llm_calls,
                   prompt_tokens=first.prompt_tokens + second.prompt_tokens,
                   completion_tokens=first.completion_tokens + second.completion_tokens)  # fmt: skip


def _scored(q: Question, text: str) -> dict[str, Any]:
    if not q.answers:
        return {"match": None, "em": None, "f1": None}
    return {"match": match(text, q.answers), "em": exact_match(text, q.answers),
            "f1": token_f1(text, q.answers)}  # fmt: skip


def _answer(
    q: Question, g: Generation | Failure | None, spec: StrategySpec, fitted: FittedPrompt
) -> Answer:
    """A one-call strategy's answer; without a generation (its prompt did not fit, or the
    generator failed) the reason, and scored as a miss when the question has gold answers."""
    text = g.text.strip() if isinstance(g, Generation) else ""
    return Answer(
        id=q.id,
        question=q.text,
        answer=text,
        retrieve=spec.retrieves,
        probability=0.0,
        documents=[h.document.id for h in fitted.hits],
        prompt_tokens=g.prompt_tokens if isinstance(g, Generation) else 0,
        completion_tokens=g.completion_tokens if isinstance(g, Generation) else 0,
        **_scored(q, text),
        error=str(g) if isinstance(g, str) else fitted.error,
        strategy=spec.name,
        retrievals=int(spec.retrieves),
        llm_calls=int(fitted.prompt is not None),
        retryable=isinstance(g, Failure) and not g.refused,
        refused=isinstance(g, Failure) and g.refused,
        token_logprobs=g.token_logprobs if isinstance(g, Generation) else None,
    )


def _multi_answer(state: Reasoning) -> Answer:
    q, text = state.question, (state.answer or "").strip()
    last = state.steps[-1]["documents"] if state.steps else []
    return Answer(
        id=q.id,
        question=q.text,
        answer=text,
        retrieve=True,
        probability=0.0,
        documents=list(last),
        prompt_tokens=state.prompt_tokens,
        completion_tokens=state.completion_tokens,
        **_scored(q, text),
        error=state.error,
        strategy=state.strategy,
        retrievals=state.retrievals,
        llm_calls=state.llm_calls,
        steps=state.steps,
        retryable=state.retryable,
        refused=state.refused,
        token_logprobs=state.token_logprobs,
    )
