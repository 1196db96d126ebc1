"""The RAG loop's strategies, and how a gate or a router picks one per question.

Strategies are specs of the registry (`retrieval_gate.strategies`: the three built-ins, no
retrieval, one retrieval and multi-step, plus whatever a `--strategies FILE.yaml` declares),
in cost order. A `Router` (gates/base.py) names one per question through `route(questions,
budget)`; a binary gate picks between the registry's `binary_pair` (the cheapest strategy
without retrieval, and the one-call strategy on the verb's own retriever): the second where its
score reaches its threshold. Nothing here compares a strategy's name: what a strategy does is
read from its spec.

The seam for real routers is `load_router` below: the one place a `--router` folder becomes
an object. It calls `RetrievalGate.from_pretrained`; a router export loads as a `Router`
there (issue 25), a binary gate export as a gate. A router export carries its strategies'
specs (`CarriesStrategies`); `loop_registry` adds them to the verb's registry, and
`check_router` refuses a router whose strategies the loop cannot run. `strategy_costs` is the
one place the price of each strategy (for `/health`'s mean cost and a request's budget range)
is read: the router's own `costs` where it has them."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BackendError, ConfigError
from ..gates.base import CarriesStrategies, Gate, Questions, Router, as_questions, is_router
from ..pricing import check_budget
from ..strategies import BUILTIN, DEFAULT_COSTS, StrategyRegistry, StrategySpec, with_cost

Budget = float | None


@dataclass
class Decision:
    """The strategy and P(needs retrieval) for each question of a batch."""

    strategies: list[str]
    probabilities: list[float]


def check_strategies(
    names: Sequence[str], where: str, registry: StrategyRegistry = BUILTIN
) -> None:
    """Every name is a registered strategy (`where` names the flag or router)."""
    registry.check(names, where)


def loop_registry(gate: Gate, registry: StrategyRegistry = BUILTIN) -> StrategyRegistry:
    """The strategies a loop runs `gate` with: the verb's registry plus the specs a router
    export carries for strategies the registry lacks (one it has must agree on what it runs
    and, where --strategies declares it, on its cost: `StrategyRegistry.merged`). A router
    trained on a label file's own strategy names carries names only: the verb's registry
    (--strategies) declares them, at the router's costs."""
    if is_router(gate) and isinstance(gate, CarriesStrategies):
        try:
            carried = gate.strategy_registry().specs
        except ConfigError:  # names only, not built-ins: the verb's registry must declare them
            if all(s in registry for s in gate.strategies):
                priced = strategy_costs(gate, registry).items()
                return registry.merged([with_cost(registry[s], c) for s, c in priced],
                                       f"router {gate.name!r}", carried=False)  # fmt: skip
            raise
        return registry.merged(carried, f"router {gate.name!r}")
    return registry


def check_router(
    gate: Gate, budget: Budget = None, registry: StrategyRegistry = BUILTIN, flag: str = "--budget"
) -> StrategyRegistry:
    """A router's strategies are registered ones (or carried by its export), its first (the
    cheapest) one without retrieval; a budget needs a router (a binary gate's operating point
    is its threshold) and stays within its dearest strategy's cost. Returns the registry the
    loop runs it with. `flag` names the budget as the caller took it (`--budget` on the command
    line, `budget` in Python and in requests)."""
    check_budget_sign(budget, flag)
    registry = loop_registry(gate, registry)
    if is_router(gate):
        strategies = tuple(gate.strategies)  # type: ignore[attr-defined]
        check_strategies(strategies, f"router {gate.name!r}", registry)
        if not strategies or registry[strategies[0]].retrieves:
            raise ConfigError(f"router {gate.name!r} lists {list(strategies)}: the first "
                              "strategy (the cheapest) must be one without retrieval")  # fmt: skip
        if budget is not None:
            costs = strategy_costs(gate, registry)
            check_budget(budget, list(costs.values()), flag)
    elif budget is not None:
        raise _binary_budget(gate, budget, flag)
    else:
        registry.binary_pair()
    return registry


def _binary_budget(gate: Gate, budget: Budget, flag: str) -> ConfigError:
    """A budget handed to a binary gate, said in the caller's terms (flags or arguments)."""
    cli = flag.startswith("--")
    point = "(--threshold MODE=VALUE)" if cli else "(threshold=)"
    router = "pass a router export with --router" if cli else "load a router export"
    return ConfigError(f"{flag} {budget}: {gate.name!r} is a binary gate, which has no retrieval "
                       f"budget to meet; its operating point is its threshold {point}: pass no "
                       f"budget, or {router}")  # fmt: skip


def check_runnable(specs: Sequence[StrategySpec], retriever: str, where: str) -> None:
    """Before any engine starts: every strategy retrieves with the verb's `--retriever` (or
    none) and runs on the verb's generator; else the ones that cannot run are named, with
    what stops them (another retriever, or a generator of their own)."""
    own = [s for s in specs if s.generator is not None]
    if own:  # a --retriever flag would not help: the verbs run one generator
        said = ", ".join(f"{s.name} (generator {s.generator})" for s in own)
        raise ConfigError(
            f"{where}: this run cannot run strategy {said}: it names its own generator, and "
            "this version runs every strategy on the run's one generator (--generator / "
            "--generator-url); drop its generator: line from the strategies file to run it "
            "on this run's generator, or run it separately with that generator as "
            "--generator-url (or --generator) and no generator: line"
        )
    bad = [s for s in specs if s.retriever_name(retriever) not in (None, retriever)]
    if bad:
        said = ", ".join(f"{s.name} ({s.retriever} retriever)" for s in bad)
        raise ConfigError(
            f"{where}: this run cannot run strategy {said}: it retrieves with --retriever "
            f"{retriever}; pass --retriever {bad[0].retriever_name(retriever)}, or drop the "
            "strategy"
        )


def routed_strategies(gate: Gate, registry: StrategyRegistry = BUILTIN) -> tuple[str, ...]:
    """The strategies `gate` can send questions down: a router's own, a binary gate's pair."""
    if is_router(gate):
        return tuple(gate.strategies)  # type: ignore[attr-defined]
    return registry.binary_pair()


def check_budget_sign(budget: Budget, flag: str = "--budget") -> None:
    """A budget is 0 or more (its top is the router's dearest cost, known once it loads)."""
    real = isinstance(budget, numbers.Real) and not isinstance(budget, bool)
    if budget is not None and not (real and budget >= 0):  # "1" failed deep inside: TypeError
        raise ConfigError(f"{flag} must be 0 or more (mean cost per question), got {budget!r}")


def checked_budgets(
    budget: Budget | Sequence[Budget] | np.ndarray, n: int, flag: str = "budget"
) -> Budget | list[Budget]:
    """The budget of a batch of `n` questions: one (None: the default) or a list of one per
    question (a list, tuple or numpy array; None in it: the default), each 0 or more. Unchecked,
    a list too short blamed the router, one too long or an array failed raw, NaN reached the
    router and a str was read as one budget per character."""
    if isinstance(budget, np.ndarray):
        budget = budget.tolist()  # a 0-d array is one number, plain floats either way
    if isinstance(budget, str | bytes):
        raise ConfigError(f"{flag} {budget!r} is a string: pass a number (e.g. {flag}=1.0), "
                          "or a list of one per question")  # fmt: skip
    if not isinstance(budget, Sequence):
        check_budget_sign(budget, flag)
        return budget
    if len(budget) != n:
        raise ConfigError(f"{flag}: {len(budget)} budgets for {n} questions: pass one per "
                          "question, or one number for all")  # fmt: skip
    for i, b in enumerate(budget):
        check_budget_sign(b, f"{flag}[{i}]")
    return list(budget)


def decide(
    gate: Gate,
    questions: Questions,
    budget: Budget | Sequence[Budget] = None,
    registry: StrategyRegistry = BUILTIN,
) -> Decision:
    """Each question's strategy: the router's `route` (per question budget allowed: one
    `route` call per distinct budget), else the binary gate at its threshold."""
    questions = as_questions(questions)
    budget = checked_budgets(budget, len(questions))  # before the gate spends its time
    budgets = budget if isinstance(budget, list) else [budget] * len(questions)
    probs = np.asarray(gate.scores(questions), dtype=float)
    if probs.shape != (len(questions),):
        raise BackendError(
            f"gate {gate.name!r} returned {probs.shape} scores for {len(questions)} questions"
        )
    if not is_router(gate):
        for b in {b for b in budgets if b is not None}:
            check_router(gate, b, registry, "budget")
        closed, retrieve = registry.binary_pair()
        names = [retrieve if p >= gate.threshold else closed for p in probs]
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


def retrieval_scores(names: Sequence[str], registry: StrategyRegistry = BUILTIN) -> list[float]:
    """P(needs retrieval) of questions whose strategy is already fixed: 1 where it retrieves."""
    return [float(registry[n].retrieves) for n in names]


class FixedStrategy:
    """A `Router` that sends every question down one strategy: a fixed-strategy mode of `rag`
    (`multi-step`, or any registered strategy's name), and a way to label or measure one
    strategy alone."""

    threshold = 0.5

    def __init__(self, strategy: str, name: str | None = None,
                 registry: StrategyRegistry = BUILTIN):  # fmt: skip
        check_strategies([strategy], "FixedStrategy", registry)
        self.registry = registry
        self.strategies = registry.names
        self.strategy = strategy
        self.name = name or strategy
        self.checksum = f"fixed-strategy:{strategy}"

    @property
    def costs(self) -> dict[str, float]:
        return {s.name: s.cost for s in self.registry}

    def strategy_registry(self) -> StrategyRegistry:
        return self.registry

    def scores(self, questions: Questions) -> np.ndarray:
        retrieves = float(self.registry[self.strategy].retrieves)
        return np.full(len(as_questions(questions)), retrieves)

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


def strategy_costs(gate: Gate, registry: StrategyRegistry = BUILTIN) -> dict[str, float]:
    """The price of each strategy in the router's unit, for the service's mean cost per
    question and its budget range: the router's own `costs` (issue 25's routers have them),
    else the registry's costs (retrievals for the built-ins); a binary gate's pair's."""
    if not isinstance(gate, Router):
        return {s: registry[s].cost for s in registry.binary_pair()}
    strategies = tuple(gate.strategies)
    own = getattr(gate, "costs", None)
    if own is None:
        return {s: registry[s].cost for s in strategies}
    own = dict(own)
    if set(own) != set(strategies) or not all(np.isfinite(c) and c >= 0 for c in own.values()):
        raise ConfigError(
            f"router {gate.name!r}: its costs {own} do not price each of its strategies "
            f"{list(strategies)} with a finite cost of 0 or more; fix the router export's costs"
        )
    return {s: float(own[s]) for s in strategies}


def cost_unit(costs: dict[str, float]) -> str:
    """What `strategy_costs` counts: retrievals where they are the defaults."""
    return (
        "retrievals" if costs == {s: DEFAULT_COSTS.get(s) for s in costs} else "the router's unit"
    )
