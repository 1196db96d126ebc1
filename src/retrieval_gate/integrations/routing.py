"""What the adapters share: which branch each question goes down. A binary gate sends a
question to `retrieve` or `direct` at its threshold; a router (`gates.base.Router`) names a
strategy per question (`route(questions, budget)`) and each strategy has its branch:
`no_retrieval` -> direct, `one_retrieval` -> retrieve, `multi_step` -> multi_step."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from ..gates.base import Gate, is_router
from ..rag.strategies import MULTI_STEP, NO_RETRIEVAL, ONE_RETRIEVAL, check_router

DIRECT, RETRIEVE, MULTI = "direct", "retrieve", "multi_step"
BRANCH = {NO_RETRIEVAL: DIRECT, ONE_RETRIEVAL: RETRIEVE, MULTI_STEP: MULTI}
STRATEGY = {branch: strategy for strategy, branch in BRANCH.items()}


def branches_of(gate: Gate, has_multi_step: bool, budget: float | None = None) -> list[str]:
    """The branches `gate` can send questions down, checked against what the caller wired:
    a router that routes to multi-step needs that branch; a binary gate takes no multi-step
    branch and no budget (`budget`: a router's operating point)."""
    check_router(gate, budget)
    if not is_router(gate):
        if has_multi_step:
            raise ConfigError(
                f"{gate.name!r} is a binary gate: it picks retrieve or direct, never "
                "multi-step; drop the multi-step branch, or pass a router export"
            )
        return [RETRIEVE, DIRECT]
    names = [BRANCH[s] for s in gate.strategies]  # type: ignore[attr-defined]
    if MULTI in names and not has_multi_step:
        raise ConfigError(
            f"router {gate.name!r} routes questions to multi_step: pass its branch (multi_step=...)"
        )
    return names


def route(
    gate: Gate, texts: Sequence[str], threshold: float | None = None, budget: float | None = None
) -> list[str]:
    """The branch of each question: a router's strategy (at `budget`), else the binary gate's
    decision at `threshold` (None: its own)."""
    if is_router(gate):
        return [BRANCH[s] for s in gate.route(list(texts), budget=budget)]  # type: ignore[attr-defined]
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
