"""Haystack: `RetrievalGateRouter`, a component with two output sockets: the query comes out
of `retrieve` when the gate says it needs retrieval, else out of `direct`, so only one branch
of the pipeline runs."""

from __future__ import annotations

from typing import Any

from haystack import component

from ..gates.pretrained import RetrievalGate


@component
class RetrievalGateRouter:
    """Connect `retrieve` to the retriever branch and `direct` to the LLM-only branch;
    `probability` always carries P(needs retrieval)."""

    def __init__(self, gate: RetrievalGate, threshold: float | None = None):
        self.gate, self.threshold = gate, threshold

    @component.output_types(retrieve=str, direct=str, probability=float)
    def run(self, query: str) -> dict[str, Any]:
        p = self.gate.predict_proba(query)
        t = self.gate.threshold if self.threshold is None else self.threshold
        return {"retrieve" if p >= t else "direct": query, "probability": p}
