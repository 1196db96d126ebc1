"""LangChain: `GateRouter`, a Runnable that sends each question either to a retrieval chain or
straight to the LLM chain, as the gate decides. Batches go through the gate in one call and
through each branch with that branch's `batch`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from ..gates.pretrained import RetrievalGate


class GateRouter(Runnable[Any, Any]):
    """`retrieve` gets the questions the gate flags, `direct` the rest. The input is a question
    string or a dict holding it under `question_key`; each branch receives it unchanged.
    `threshold` overrides the gate's stored threshold."""

    def __init__(
        self,
        gate: RetrievalGate,
        retrieve: Runnable,
        direct: Runnable,
        question_key: str = "question",
        threshold: float | None = None,
    ):
        self.gate, self.retrieve, self.direct = gate, retrieve, direct
        self.question_key, self.threshold = question_key, threshold

    def _text(self, item: Any) -> str:
        return item[self.question_key] if isinstance(item, dict) else item

    def decide(self, inputs: Sequence[Any]) -> list[bool]:
        """The gate's retrieve decision for each input."""
        texts = [self._text(x) for x in inputs]
        return [bool(d) for d in self.gate.predict(texts, threshold=self.threshold)]

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
        decisions = self.decide(inputs)
        outputs: list[Any] = [None] * len(inputs)
        for flag, branch in ((True, self.retrieve), (False, self.direct)):
            idx = [i for i, d in enumerate(decisions) if d == flag]
            if idx:
                cfg = [config[i] for i in idx] if isinstance(config, list) else config
                results = branch.batch([inputs[i] for i in idx], cfg, **kwargs)
                for i, out in zip(idx, results, strict=True):
                    outputs[i] = out
        return outputs
