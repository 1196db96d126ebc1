"""What a RAG pass cost, overall and per strategy, and the meter that measures it.

Every second is measured around the batched call that spent it (`time.perf_counter`). A call
shared by several strategies (the first generation call holds closed-book, one-retrieval and
first-step multi-step prompts; the first retrieval call serves one-retrieval and multi-step
questions alike) is split between them: generation time in proportion to each strategy's
prompt + generated tokens in that call, retrieval time in proportion to its queries. Those
shares are the only figures that are apportioned rather than timed on their own; the totals
are not. Token counts are the generator's own, per generation.

Behind the generation cache (`generation/cache.py`) an answer may be served without being
computed now. Each generation carries the seconds it took when it was computed, so the meter
also books `computed_seconds` (overall and per strategy; an answer without them: its
token-weighted share of the call's wall time) and how many prompts were computed or served
from the cache. `Costs.as_computed()` puts those seconds in place of the measured generation
time (the RAG comparison does: a cached run then reports the costs of a fresh one)."""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from ..errors import BackendError, PromptRefused, clipped
from ..generation.base import Generation, Generator, PartialGenerator
from ..questions import Question
from ..retrieval.base import Hit, Retriever


@dataclass
class StrategyCosts:
    """One strategy's share of a pass: its questions, retrieval requests and LLM calls
    (counted per question), seconds (apportioned in shared calls) and tokens."""

    questions: int = 0
    failed: int = 0
    retrievals: int = 0  # retrieval requests made for its questions (one per query)
    llm_calls: int = 0  # generations made for its questions (a multi-step question: one a step)
    retrieval_seconds: float = 0.0
    generation_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    computed_seconds: float = 0.0  # its generations' seconds when they were computed

    def per_question(self) -> dict[str, float]:
        n = self.questions or 1
        return {"retrievals": self.retrievals / n, "llm_calls": self.llm_calls / n}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), **{f"{k}_per_question": v for k, v in self.per_question().items()}}


@dataclass
class Costs:
    """Measured cost of one pass over a batch of questions (seconds and token counts)."""

    questions: int = 0
    failed: int = 0  # questions answered with an error instead of a generation
    escalations: int = 0  # a cascade's questions answered again by the next strategy
    retrieved: int = 0  # questions that retrieved at all (one retrieval or multi-step)
    retrievals: int = 0  # retrieval requests, per question summed (multi-step: one a step)
    llm_calls: int = 0  # generations, per question summed (multi-step: one a step)
    retrieval_calls: int = 0  # batched calls made to the retriever
    generation_calls: int = 0  # batched calls made to the generator
    gate_seconds: float = 0.0  # the gate's or router's decision
    retrieval_seconds: float = 0.0
    generation_seconds: float = 0.0
    overhead_seconds: float = 0.0
    total_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # prompts the generator computed in this pass (a copy of one in the same call too: that
    # call computed it once, and the cache gives the copy 0.0 seconds)
    prompts_computed: int = 0
    prompts_cached: int = 0  # prompts answered from the generation cache's store
    prefill_tokens_computed: int = 0  # their prompt tokens (the RAG comparison counts these)
    prefill_tokens_cached: int = 0
    computed_seconds: float = 0.0  # the generations' seconds when they were computed
    replayed: bool = False  # generation_seconds are computed_seconds (`as_computed`)
    by_strategy: dict[str, StrategyCosts] = field(default_factory=dict)

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

    @property
    def tokens_per_second(self) -> float:
        """Prompt + generated tokens per second of generation: the engine's rate, which shows
        whether calls are batched (a per-question loop would lower it, longer prompts not)."""
        tokens = self.prompt_tokens + self.completion_tokens
        return tokens / self.generation_seconds if self.generation_seconds > 0 else 0.0

    def per_question_ms(self, part: str) -> float:
        """Milliseconds per question of `gate`, `retrieval`, `generation`, `overhead` or
        `total`."""
        return 1000 * getattr(self, f"{part}_seconds") / self.questions if self.questions else 0.0

    def as_computed(self, gate_replay: float = 0.0) -> Costs:
        """Generation seconds (overall and per strategy) := the seconds each answer took when it
        was computed; `gate_replay` likewise moves the gate's seconds (a prompt or confidence
        gate asks the generator: its cached answers' seconds minus the wall time of those
        calls). The total moves by both differences (overhead is unchanged). Idempotent."""
        if not self.replayed:
            delta = self.computed_seconds - self.generation_seconds
            self.generation_seconds = self.computed_seconds
            self.gate_seconds += gate_replay
            self.total_seconds += delta + gate_replay
            for c in self.by_strategy.values():
                c.generation_seconds = c.computed_seconds
            self.replayed = True
        return self

    def strategy(self, name: str) -> StrategyCosts:
        return self.by_strategy.setdefault(name, StrategyCosts())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            retrieval_rate=self.retrieval_rate,
            questions_per_second=self.questions_per_second,
            gate_share=self.gate_share,
            tokens_per_second=self.tokens_per_second,
            by_strategy={s: c.to_dict() for s, c in self.by_strategy.items()},
        )
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Costs:
        """The inverse of `to_dict` (derived figures are recomputed, not read)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"by_strategy"}
        parts = {f.name for f in dataclasses.fields(StrategyCosts)}
        by = {s: StrategyCosts(**{k: v for k, v in c.items() if k in parts})
              for s, c in (d.get("by_strategy") or {}).items()}  # fmt: skip
        return cls(**{k: v for k, v in d.items() if k in names}, by_strategy=by)


class Failure(str):
    """A prompt's failed generation, as its message; `refused`: the server refused that prompt
    for good (a final 4xx, a reply with no answer, while it answered others: `PromptRefused`),
    so a rerun gets the same refusal; else it was busy or unreachable, and a rerun may answer."""

    refused: bool

    def __new__(cls, message: str, refused: bool = False) -> Failure:
        out = super().__new__(cls, message)
        out.refused = refused
        return out


class Meter:
    """Makes the batched retriever and generator calls of one pass and books their time into
    `costs`, split between the strategies each call served (see the module docstring)."""

    def __init__(self, costs: Costs, logprobs: bool = False):
        self.costs = costs
        # ask for the answers' token log-probabilities (`Generation.token_logprobs`), where
        # the generator's call takes `logprobs` (a PartialGenerator's `try_generate` may not)
        self.logprobs = logprobs

    def retrieve(
        self, retriever: Retriever, queries: Sequence[Question], strategies: Sequence[str], k: int
    ) -> list[list[Hit]]:
        """Top-k hits per query in ONE call; `strategies[i]` is the strategy query i serves."""
        if not queries:
            return []
        call = partial(retriever.retrieve, list(queries), k=k)
        what = f"retriever {retriever.name!r}"
        raw, seconds = _timed(call, len(queries), what, "a list of Hit lists, one per question")
        hits = [_hits(h, what, i, q) for i, (h, q) in enumerate(zip(raw, queries, strict=True))]
        self.costs.retrieval_calls += 1
        self.costs.retrieval_seconds += seconds
        self._split("retrieval", seconds, strategies, [1] * len(queries))
        return hits

    def generate(
        self,
        generator: Generator,
        prompts: Sequence[str],
        strategies: Sequence[str],
        max_new_tokens: int,
    ) -> list[Generation | Failure]:
        """ONE generator call over `prompts`; per prompt its generation, or the error that
        ended it (a `Failure`) when the generator reports failures prompt by prompt (a server:
        see `PartialGenerator`). Any other failure fails the call."""
        if not prompts:
            return []
        method = (
            generator.try_generate
            if isinstance(generator, PartialGenerator)
            else generator.generate
        )
        extra = {"logprobs": True} if self.logprobs and _takes_logprobs(method) else {}
        call = partial(method, list(prompts), max_new_tokens=max_new_tokens, **extra)
        what = f"generator {generator.name!r}"
        raw, seconds = _timed(call, len(prompts), what, "a list of Generation, one per prompt")
        for i, g in enumerate(raw):
            _check_generation(g, what, i)
        self.costs.generation_calls += 1
        self.costs.generation_seconds += seconds
        # a PromptRefused beside anything else is the prompt's, for good (every prompt
        # refused: the server's, an outage or a proxy's page, as `RemoteGenerator` keeps them)
        own = not all(isinstance(g, PromptRefused) for g in raw)
        out = [g if isinstance(g, Generation)
               else Failure(f"the generator failed: {g}", own and isinstance(g, PromptRefused))
               for g in raw]  # fmt: skip
        tokens = [g.prompt_tokens + g.completion_tokens if isinstance(g, Generation) else 0
                  for g in out]  # fmt: skip
        self._split("generation", seconds, strategies, tokens)
        self._computed(out, strategies, seconds, tokens)
        return out

    def _computed(self, out: Sequence[Generation | str], strategies: Sequence[str],
                  seconds: float, tokens: Sequence[int]) -> None:  # fmt: skip
        """Books what the answers cost when they were computed, and how many were."""
        total = sum(tokens)
        for g, s, w in zip(out, strategies, tokens, strict=True):
            if not isinstance(g, Generation):
                continue
            took = g.seconds if g.seconds is not None else seconds * w / total if total else 0.0
            self.costs.computed_seconds += took
            self.costs.strategy(s).computed_seconds += took
            if g.cached:
                self.costs.prompts_cached += 1
            else:
                self.costs.prompts_computed += 1

    def _split(self, part: str, seconds: float, strategies: Sequence[str],
               weights: Sequence[int]) -> None:  # fmt: skip
        """A shared call's seconds between the strategies it served, by `weights`."""
        total = sum(weights)
        for s, w in zip(strategies, weights, strict=True):
            c = self.costs.strategy(s)
            share = w / total if total else 1 / len(weights)
            setattr(c, f"{part}_seconds", getattr(c, f"{part}_seconds") + seconds * share)


def _timed(call: Any, n: int, what: str, expected: str) -> tuple[list[Any], float]:
    """`call()`'s results and seconds; one result per input, or the backend misbehaved (None
    or a str back was a raw TypeError, or a list of characters)."""
    t = time.perf_counter()
    got = call()
    try:
        out = None if isinstance(got, str | bytes) else list(got)
    except TypeError:
        out = None
    seconds = time.perf_counter() - t
    if out is None:
        raise BackendError(f"{what} returned {_shown(got)}: expected {expected}")
    if len(out) != n:
        raise BackendError(f"{what} returned {len(out)} results for {n} inputs")
    return out, seconds


def _shown(value: Any) -> str:
    return f"{clipped(repr(value), 60)} (a {type(value).__name__})"


def _hits(found: Any, what: str, i: int, query: Question) -> list[Hit]:
    """Query i's hits as a list, or the retriever misbehaved: None, or Documents for Hits,
    failed later as a raw TypeError or AttributeError inside the loop."""
    try:
        hits = None if isinstance(found, str | bytes) else list(found)
    except TypeError:
        hits = None
    bad = found if hits is None else next((h for h in hits if not isinstance(h, Hit)), None)
    if hits is None or bad is not None:
        raise BackendError(f"{what} returned {_shown(bad)} for question {i} "
                           f"({clipped(query.text, 40)!r}): expected a list of Hit (a Document "
                           "and its score) per question, best first")  # fmt: skip
    return hits


def _check_generation(g: Any, what: str, i: int) -> None:
    """A generation with its text a str, or the error that ended that prompt (a
    `PartialGenerator`'s). A plain str was reported as "the generator failed: <the answer>",
    and text None failed as a raw TypeError when a multi-step reply was parsed."""
    if isinstance(g, Exception):
        return
    if not isinstance(g, Generation):
        raise BackendError(f"{what} returned {_shown(g)} for prompt {i}: expected a "
                           "Generation (its text, prompt_tokens, completion_tokens) per "
                           "prompt")  # fmt: skip
    if not isinstance(g.text, str):
        raise BackendError(f"{what} returned a Generation whose text is {_shown(g.text)} for "
                           f"prompt {i}: expected its text a str")  # fmt: skip


def _takes_logprobs(method: Any) -> bool:
    """The generator call accepts `logprobs=` (by name or through **kwargs)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "logprobs" or p.kind is p.VAR_KEYWORD for p in params)
