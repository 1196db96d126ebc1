"""What the adapters share: which branch each question goes down. A binary gate sends a
question to `retrieve` or `direct` at its threshold; a router (`gates.base.Router`) names a
strategy per question (`route(questions, budget)`) and each strategy's branch is read from its
spec (`retrieval_gate.strategies`, with the router export's own specs): one without retrieval
-> `direct`, a multi-step one -> `multi_step`, a one-call one on the caller's retriever and k
-> `retrieve`; any other (its own retriever or k, e.g. a `bm25_top3`) has a branch of its own,
named after it, which the caller wires (`extra` branches)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from ..gates.base import Gate, is_router
from ..rag.strategies import check_router
from ..strategies import DEFAULT_RETRIEVER, MULTI_STEP, StrategySpec

DIRECT, RETRIEVE, MULTI = "direct", "retrieve", MULTI_STEP  # multi-step: the built-in's name
BUILT_IN_BRANCHES = (DIRECT, RETRIEVE, MULTI)


def branch_of(spec: StrategySpec) -> str:
    """A strategy's branch, from what it does (never from its name)."""
    if not spec.retrieves:
        return DIRECT
    if spec.multi_step:
        return MULTI
    if spec.retriever == DEFAULT_RETRIEVER and spec.k is None:
        return RETRIEVE
    return spec.name


def branch_map(gate: Gate, budget: float | None = None) -> dict[str, str]:
    """strategy -> branch of every strategy `gate` routes to (a binary gate: none)."""
    registry = check_router(gate, budget)
    if not is_router(gate):
        return {}
    return {s: branch_of(registry[s]) for s in gate.strategies}  # type: ignore[attr-defined]


def branches_of(
    gate: Gate, has_multi_step: bool, budget: float | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """The branches `gate` can send questions down, checked against what the caller wired:
    a router that routes to multi-step needs that branch, one with a strategy of its own
    (`branch_of`) needs that branch among `extra`; a binary gate takes no multi-step branch
    and no budget (`budget`: a router's operating point)."""
    mapping = branch_map(gate, budget)
    if not is_router(gate):
        if has_multi_step or extra:
            raise ConfigError(
                f"{gate.name!r} is a binary gate: it picks retrieve or direct, never "
                "multi-step or another strategy; drop those branches, or pass a router export"
            )
        return [RETRIEVE, DIRECT]
    names = list(dict.fromkeys(mapping.values()))
    if MULTI in names and not has_multi_step:
        raise ConfigError(
            f"router {gate.name!r} routes questions to {MULTI}: pass its branch (multi_step=...)"
        )
    own = [b for b in names if b not in BUILT_IN_BRANCHES and b not in extra]
    if own:
        raise ConfigError(
            f"router {gate.name!r} routes questions to strategy {own[0]!r}, which retrieves in "
            f"its own way (its own retriever or k): pass a branch for it ({own[0]}=...)"
        )
    return names


def route(
    gate: Gate, texts: Sequence[str], threshold: float | None = None, budget: float | None = None
) -> list[str]:
    """The branch of each question: a router's strategy's (at `budget`), else the binary
    gate's decision at `threshold` (None: its own)."""
    if is_router(gate):
        branch = branch_map(gate, budget)
        return [branch[s] for s in gate.route(list(texts), budget=budget)]  # type: ignore[attr-defined]
    return routed(gate, texts, threshold)[0]


def routed(
    gate: Gate, texts: Sequence[str], threshold: float | None = None, budget: float | None = None
) -> tuple[list[str], list[float]]:
    """`route`'s branches and each question's P(needs retrieval), from one scoring of the
    questions (a router's `scores` and `route` of the same batch share one model run)."""
    probs = [float(p) for p in gate.scores(list(texts))]
    if is_router(gate):
        return route(gate, texts, budget=budget), probs
    t = gate.threshold if threshold is None else threshold
    return [RETRIEVE if p >= t else DIRECT for p in probs], probs


def strategy_of(gate: Gate, branch: str, budget: float | None = None) -> str:
    """The router's strategy a branch stands for (the cheapest one sent down it)."""
    return next(s for s, b in branch_map(gate, budget).items() if b == branch)
