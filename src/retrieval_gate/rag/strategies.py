"""The RAG loop's named strategies, and how a gate or a router picks one per question.

Strategies, in cost order: `no_retrieval` (closed-book prompt), `one_retrieval` (top-k
documents and the with-context prompt), `multi_step` (IRCoT-style interleaved retrieval and
reasoning, `rag/multistep.py`). A `Router` (gates/base.py) names one per question through
`route(questions, budget)`; a binary gate picks between the first two: `one_retrieval` where
its score reaches its threshold, else `no_retrieval`.

The seam for real routers is `load_router` below: the one place a `--router` folder becomes
an object. It calls `RetrievalGate.from_pretrained`; a router export loads as a `Router`
there (issue 25), a binary gate export as a gate. `strategy_costs` is the one place the price
of each strategy (for `/health`'s mean cost and a request's budget range) is read: the
router's own `costs` where it has them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BackendError, ConfigError
from ..gates.base import Gate, Questions, Router, as_questions, is_router
from ..routing import DEFAULT_COSTS  # retrievals per strategy, where a router has no costs

NO_RETRIEVAL, ONE_RETRIEVAL, MULTI_STEP = "no_retrieval", "one_retrieval", "multi_step"
STRATEGIES = (NO_RETRIEVAL, ONE_RETRIEVAL, MULTI_STEP)

Budget = float | None


@dataclass
class Decision:
    """The strategy and P(needs retrieval) for each question of a batch."""

    strategies: list[str]
    probabilities: list[float]


def check_strategies(names: Sequence[str], where: str) -> None:
    """Every name is a strategy the loop runs (`where` names the flag or router)."""
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ConfigError(
            f"{where}: unknown strategy {unknown[0]!r}; the RAG loop runs "
            f"{', '.join(STRATEGIES)} (in that cost order)"
        )


def check_router(gate: Gate, budget: Budget = None) -> None:
    """A router's strategies are ones the loop runs, cheapest first; a budget needs a router
    (a binary gate's operating point is its threshold)."""
    if is_router(gate):
        strategies = tuple(gate.strategies)  # type: ignore[attr-defined]
        check_strategies(strategies, f"router {gate.name!r}")
        if not strategies or strategies[0] != NO_RETRIEVAL:
            raise ConfigError(f"router {gate.name!r} lists {list(strategies)}: the first "
                              f"strategy (the cheapest) must be {NO_RETRIEVAL}")  # fmt: skip
    elif budget is not None:
        raise ConfigError(
            f"--budget {budget}: {gate.name!r} is a binary gate, which has no retrieval budget "
            "to meet; its operating point is its threshold (--threshold MODE=VALUE), or pass a "
            "router export with --router"
        )
    check_budget_sign(budget)


def check_budget_sign(budget: Budget) -> None:
    """A budget is 0 or more (its top is the router's dearest cost, known once it loads)."""
    if budget is not None and not budget >= 0:
        raise ConfigError(f"--budget must be 0 or more (mean cost per question), got {budget}")


def decide(gate: Gate, questions: Questions, budget: Budget | Sequence[Budget] = None) -> Decision:
    """Each question's strategy: the router's `route` (per question budget allowed: one
    `route` call per distinct budget), else the binary gate at its threshold."""
    questions = as_questions(questions)
    probs = np.asarray(gate.scores(questions), dtype=float)
    if probs.shape != (len(questions),):
        raise BackendError(
            f"gate {gate.name!r} returned {probs.shape} scores for {len(questions)} questions"
        )
    budgets = list(budget) if isinstance(budget, Sequence) else [budget] * len(questions)
    if not is_router(gate):
        for b in {b for b in budgets if b is not None}:
            check_router(gate, b)
        names = [ONE_RETRIEVAL if p >= gate.threshold else NO_RETRIEVAL for p in probs]
        return Decision(names, probs.tolist())
    names: list[str] = [""] * len(questions)
    for b in dict.fromkeys(budgets):
        idx = [i for i, x in enumerate(budgets) if x == b]
        routed = gate.route([questions[i] for i in idx], budget=b)  # type: ignore[attr-defined]
        if len(routed) != len(idx):
            raise BackendError(f"router {gate.name!r} routed {len(routed)} of {len(idx)} questions")
        for i, name in zip(idx, routed, strict=True):
            names[i] = name
    known = set(gate.strategies)  # type: ignore[attr-defined]
    odd = [n for n in names if n not in known]
    if odd:
        raise BackendError(f"router {gate.name!r} routed a question to {odd[0]!r}, which is not "
                           f"one of its strategies {sorted(known)}")  # fmt: skip
    return Decision(names, probs.tolist())


class FixedStrategy:
    """A `Router` that sends every question down one strategy: the `multi-step` mode (and a
    way to label or measure one strategy alone)."""

    strategies = STRATEGIES
    threshold = 0.5

    def __init__(self, strategy: str, name: str | None = None):
        check_strategies([strategy], "FixedStrategy")
        self.strategy = strategy
        self.name = name or strategy
        self.checksum = f"fixed-strategy:{strategy}"

    def scores(self, questions: Questions) -> np.ndarray:
        return np.full(len(as_questions(questions)), float(self.strategy != NO_RETRIEVAL))

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        out = np.zeros((len(as_questions(questions)), len(self.strategies)))
        out[:, self.strategies.index(self.strategy)] = 1.0
        return out

    def route(self, questions: Questions, budget: Budget = None) -> list[str]:
        return [self.strategy] * len(as_questions(questions))


def load_router(path: str | Path, variant: str = "fp32") -> Gate:
    """THE seam: a `--router` folder as the object the loop routes with. A router export is a
    `Router` (through `RetrievalGate.from_pretrained`, issue 25); a binary gate export loads as
    a gate and picks between the first two strategies."""
    from ..gates.pretrained import RetrievalGate

    return RetrievalGate.from_pretrained(path, variant=variant)


def strategy_costs(gate: Gate) -> dict[str, float]:
    """The price of each strategy in the router's unit, for the service's mean cost per
    question and its budget range: the router's own `costs` (issue 25's routers have them),
    else issue 25's default count of retrievals."""
    if not isinstance(gate, Router):
        return {s: DEFAULT_COSTS[s] for s in STRATEGIES[:2]}
    strategies = tuple(gate.strategies)
    own = getattr(gate, "costs", None)
    if own is None:
        return {s: DEFAULT_COSTS[s] for s in strategies}
    own = dict(own)
    if set(own) != set(strategies) or not all(np.isfinite(c) and c >= 0 for c in own.values()):
        raise ConfigError(
            f"router {gate.name!r}: its costs {own} do not price each of its strategies "
            f"{list(strategies)} with a finite cost of 0 or more; fix the router export's costs"
        )
    return {s: float(own[s]) for s in strategies}


def cost_unit(costs: dict[str, float]) -> str:
    """What `strategy_costs` counts: retrievals where they are the defaults."""
    return "retrievals" if costs == {s: DEFAULT_COSTS[s] for s in costs} else "the router's unit"
