"""Haystack: `RetrievalGateRouter`, a component with an output socket per branch: the query
comes out of `retrieve` when the gate says it needs retrieval, else out of `direct`; with a
router, also out of `multi_step`, and out of a branch named after each strategy of its own (its
own retriever or k, `integrations.routing.branch_of`). Only one branch of the pipeline runs."""

from __future__ import annotations

from typing import Any

from haystack import component

from ..gates.base import Gate, is_router
from .routing import branch_map, branches_of, routed, strategy_of


@component
class RetrievalGateRouter:
    """Connect `retrieve` to the retriever branch and `direct` to the LLM-only branch (a
    router: also `multi_step` to a multi-step branch); `probability` always carries
    P(needs retrieval), and a router's `strategy` the strategy it picked. `threshold`
    overrides a binary gate's threshold, `budget` is a router's operating point."""

    def __init__(self, gate: Gate, threshold: float | None = None, budget: float | None = None):
        self.gate, self.threshold, self.budget = gate, threshold, budget
        own = list(branch_map(gate, budget).values())
        self.branches = branches_of(gate, is_router(gate), budget, extra=own)
        extra = {"strategy": str} if is_router(gate) else {}
        component.set_output_types(self, **dict.fromkeys(self.branches, str), probability=float,
                                   **extra)  # fmt: skip

    def run(self, query: str) -> dict[str, Any]:
        (branch,), (p,) = routed(self.gate, [query], self.threshold, self.budget)
        out: dict[str, Any] = {branch: query, "probability": p}
        if is_router(self.gate):
            out["strategy"] = strategy_of(self.gate, branch, self.budget)
        return out
