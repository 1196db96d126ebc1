"""The cascade: decide on the question first, read the answer second.

A question router (or binary gate) decides at no LLM cost. For the questions it sends to a
strategy without retrieval, the loop generates the closed-book answer with its token
log-probabilities, and a two-stage gate (`model.answer_confidence`, docs/train.md) reads
them: below its threshold the answer is kept (one LLM call, no retrieval); at or above it the
question is escalated to the next strategy of the router (the registry's next one by cost, the
one-call retrieval strategy for a binary gate), which pays a second LLM call. With an explicit
budget, escalations count in it: at most as many as the budget's slack after the router's own
choices pays for are escalated, those the answer gate scores highest first.

`Cascade(first, answer_gate)` is a gate like any other (it scores and routes as `first`
does), so every place that takes a gate takes it: the loop reads `answer_gate` from it."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import open_artifact
from ..errors import BackendError, ConfigError, DataError
from ..gates.base import Gate, Questions, is_router, reads_answers
from ..generation.base import Generator
from ..questions import Question
from ..strategies import StrategyRegistry
from .decisions import routed_strategies, strategy_costs

CASCADE = "cascade"


@dataclass
class Cascade:
    """`first` (a router or binary gate) with `answer_gate`, the two-stage gate that reads the
    closed-book answers of the questions `first` keeps closed-book."""

    first: Gate
    answer_gate: Gate
    name: str = CASCADE

    def __post_init__(self) -> None:
        check_answer_gate(self.answer_gate)

    def __getattr__(self, attr: str) -> Any:  # routes, costs, strategies: the first gate's
        if attr in ("first", "answer_gate", "__setstate__"):
            raise AttributeError(attr)
        return getattr(self.first, attr)

    @property
    def threshold(self) -> float:
        return float(self.first.threshold)

    @threshold.setter
    def threshold(self, value: float) -> None:  # `--threshold cascade=X`: the first gate's
        self.first.threshold = float(value)

    def scores(self, questions: Questions) -> np.ndarray:
        return np.asarray(self.first.scores(questions), dtype=float)


def answer_gate_of(gate: Gate) -> Gate | None:
    """The answer gate of a cascade (None for any other gate)."""
    return gate.answer_gate if isinstance(gate, Cascade) else None


def check_answer_gate(gate: Gate, where: str = "--answer-gate") -> None:
    """The answer gate reads the answer's log-probabilities (a two-stage gate export);
    `where`: the flag or argument that named it."""
    if not reads_answers(gate):
        raise ConfigError(
            f"{where}: gate {gate.name!r} does not read the answer's log-probabilities (a "
            "binary gate or router scores the question alone): pass a two-stage gate export, "
            "trained with --config cascade-closed-book (model.answer_confidence)"
        )


def check_answer_gate_folder(folder: str | Path, flag: str = "--answer-gate") -> None:
    """`folder` is a two-stage gate's export or run (read before it loads, or any engine)."""
    if not Path(folder).is_dir():
        raise DataError(f"no such folder: {flag} takes a two-stage gate's export folder", folder)
    if "answer_logprobs" not in open_artifact(folder, flag=flag).signals:
        raise ConfigError(f"{flag} {folder}: this gate does not read the answer's "
                          "log-probabilities: export one trained with --config "
                          "cascade-closed-book")  # fmt: skip


def check_logprobs(generator: Generator, where: str, reader: str = "the cascade") -> None:
    """The generator returns token log-probabilities (asked once, before the run): the cascade
    (`reader`: or another gate that reads them) cannot read an answer without them. `where`:
    the option that named the generator."""
    out = _interruptible(lambda: generator.generate(["Reply with one word: yes."], 2,
                                                    logprobs=True))  # fmt: skip
    if not out or not out[0].token_logprobs:
        raise BackendError(
            f"{where}: the generator returned no token log-probabilities, which {reader} "
            "reads (an OpenAI-compatible server must honour `logprobs: true`; vLLM's does)"
        )


def _interruptible(call: Callable[[], Any]) -> Any:
    """`call()` on a thread of its own, waited for here: Ctrl-C stops the wait at once (a
    generator server that took the request and never answered held Ctrl-C in the main
    thread until the request's deadline, --request-timeout)."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = call()
        except BaseException as e:  # noqa: BLE001  (raised again in the waiting thread)
            done["error"] = e

    worker = threading.Thread(target=run, name="logprobs-check", daemon=True)
    worker.start()
    worker.join()
    if "error" in done:
        raise done["error"]
    return done["result"]


def escalation_strategy(gate: Cascade, registry: StrategyRegistry) -> tuple[str, str]:
    """(the strategy kept answers ran, the one escalated questions run): the first gate's
    cheapest strategy without retrieval and the next one by cost."""
    names = sorted(routed_strategies(gate.first, registry), key=lambda n: registry[n].cost)
    closed = next((n for n in names if not registry[n].retrieves), None)
    dearer = [n for n in names if registry[n].cost > registry[closed].cost] if closed else []
    if closed is None or not dearer:
        raise ConfigError(f"the cascade needs a strategy without retrieval and a dearer one to "
                          f"escalate to; {gate.first.name!r} routes to {names}")  # fmt: skip
    return closed, dearer[0]


def escalations(
    scores: np.ndarray, threshold: float, slack: float | None, extra_cost: float
) -> list[int]:
    """Indices to escalate: at or above `threshold`, highest first, at most as many as `slack`
    (budget left, None: no cap) pays for at `extra_cost` each."""
    picked = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] >= threshold]
    if slack is not None and extra_cost > 0:
        picked = picked[: max(0, math.floor(slack / extra_cost + 1e-9))]
    return sorted(picked)


def escalate(
    gate: Cascade,
    read: Questions,
    strategies: Sequence[str],
    budget: float | None,
    registry: StrategyRegistry,
) -> tuple[list[int], np.ndarray]:
    """(which of `read` to escalate, the answer gate's scores of them): `read` are the
    questions `gate.first` kept closed-book, with their answers' log-probabilities;
    `strategies`: every question's first choice, whose spend the budget's slack counts."""
    _, up = escalation_strategy(gate, registry)
    scores = np.asarray(gate.answer_gate.scores(read), dtype=float)
    slack = budget_slack(gate, strategies, budget, registry)
    # the slack already paid for the closed-book answer: an escalation adds the next one's
    picks = escalations(scores, gate.answer_gate.threshold, slack,
                        strategy_costs(gate.first, registry)[up])  # fmt: skip
    return picks, scores


def escalate_kept(
    gate: Cascade,
    questions: Sequence[Question],
    strategies: Sequence[str],
    budget: float | None,
    registry: StrategyRegistry,
    readable: Sequence[bool] | None = None,
) -> tuple[set[int], dict[int, float]]:
    """`escalate` over a batch: of `questions`, those `gate.first` sent to its closed-book
    strategy (`strategies`: every question's first choice) and `readable` (default: all)
    have their answers read; (the indices escalated, index -> the answer gate's score)."""
    closed, _ = escalation_strategy(gate, registry)
    kept = [i for i, s in enumerate(strategies)
            if s == closed and (readable is None or readable[i])]  # fmt: skip
    if not kept:
        return set(), {}
    picks, scores = escalate(gate, [questions[i] for i in kept], strategies, budget, registry)
    return {kept[j] for j in picks}, {i: float(scores[j]) for j, i in enumerate(kept)}


def budget_slack(
    gate: Cascade, strategies: Sequence[str], budget: float | None, registry: StrategyRegistry
) -> float | None:
    """The budget left after the first gate's choices (None: no explicit budget, no cap)."""
    if budget is None or not is_router(gate.first):
        return None
    costs = strategy_costs(gate.first, registry)
    return budget * len(strategies) - sum(costs[s] for s in strategies)
