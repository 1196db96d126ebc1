"""LangChain: `GateRouter`, a Runnable that sends each question either to a retrieval chain or
straight to the LLM chain, as the gate decides; with a router, to one of three chains (direct,
retrieve, multi-step, and one per strategy of its own: `branches`). Batches go through the gate in one call and through each branch with
that branch's `batch`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from ..gates.base import Gate
from .routing import DIRECT, MULTI, RETRIEVE, branches_of, route


class GateRouter(Runnable[Any, Any]):
    """`retrieve` gets the questions the gate flags, `direct` the rest; a router (a
    `RetrievalGate` of a router export) also sends questions to `multi_step`. The input is a
    question string or a dict holding it under `question_key`; each branch receives it
    unchanged. `threshold` overrides a binary gate's stored threshold, `budget` is a router's
    operating point (None: its default). `branches`: a chain per strategy that retrieves in its
    own way (its own retriever or k, e.g. `{"bm25_top3": chain}`), for a router that routes to
    one."""

    def __init__(
        self,
        gate: Gate,
        retrieve: Runnable,
        direct: Runnable,
        multi_step: Runnable | None = None,
        question_key: str = "question",
        threshold: float | None = None,
        budget: float | None = None,
        branches: Mapping[str, Runnable] | None = None,
    ):
        self.gate, self.retrieve, self.direct, self.multi_step = gate, retrieve, direct, multi_step
        self.question_key, self.threshold, self.budget = question_key, threshold, budget
        self.own = dict(branches or {})
        self.branches = branches_of(gate, multi_step is not None, budget, extra=list(self.own))

    def _text(self, item: Any) -> str:
        return item[self.question_key] if isinstance(item, dict) else item

    def route(self, inputs: Sequence[Any]) -> list[str]:
        """The branch of each input: retrieve, direct or multi_step."""
        return route(self.gate, [self._text(x) for x in inputs], self.threshold, self.budget)

    def decide(self, inputs: Sequence[Any]) -> list[bool]:
        """Whether each input retrieves (one retrieval or multi-step)."""
        return [b != DIRECT for b in self.route(inputs)]

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.batch([input], config, **kwargs)[0]

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        if not inputs:
            return []
        decisions = self.route(inputs)
        outputs: list[Any] = [None] * len(inputs)
        runnables = {RETRIEVE: self.retrieve, DIRECT: self.direct, MULTI: self.multi_step,
                     **self.own}  # fmt: skip
        for name, branch in runnables.items():
            idx = [i for i, d in enumerate(decisions) if d == name]
            if idx:
                cfg = [config[i] for i in idx] if isinstance(config, list) else config
                results = branch.batch([inputs[i] for i in idx], cfg, **kwargs)
                for i, out in zip(idx, results, strict=True):
                    outputs[i] = out
        return outputs
