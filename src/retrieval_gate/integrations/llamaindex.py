"""LlamaIndex: `GateSelector`, a selector for `RouterQueryEngine` that picks the retrieval
query engine or the LLM-only one as the gate decides, and `gated_query_engine`, which builds
that router from a retrieval query engine and an LLM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_selector import BaseSelector, SelectorResult, SingleSelection
from llama_index.core.llms import LLM
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
from llama_index.core.query_engine.custom import STR_OR_RESPONSE_TYPE
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import QueryEngineTool, ToolMetadata

from ..errors import ConfigError
from ..gates.pretrained import RetrievalGate

RETRIEVE, DIRECT = 0, 1  # tool order in gated_query_engine


class GateSelector(BaseSelector):
    """Selects choice 0 (retrieval) when the gate says the question needs retrieval, else
    choice 1 (the LLM alone); the reason carries P(needs retrieval)."""

    def __init__(self, gate: RetrievalGate, threshold: float | None = None):
        self.gate, self.threshold = gate, threshold

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        pass

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        if len(choices) != 2:
            raise ConfigError(f"GateSelector routes between 2 choices, got {len(choices)}")
        p = self.gate.predict_proba(query.query_str)
        t = self.gate.threshold if self.threshold is None else self.threshold
        index = RETRIEVE if p >= t else DIRECT
        reason = f"P(needs retrieval) = {p:.3f} {'>=' if index == RETRIEVE else '<'} {t}"
        return SelectorResult(selections=[SingleSelection(index=index, reason=reason)])

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        return self._select(choices, query)


class LLMQueryEngine(CustomQueryEngine):
    """The question straight to the LLM, no retrieval."""

    llm: LLM

    def custom_query(self, query_str: str) -> STR_OR_RESPONSE_TYPE:
        return str(self.llm.complete(query_str))


def gated_query_engine(
    gate: RetrievalGate, retrieval_engine: Any, llm: LLM, threshold: float | None = None
) -> RouterQueryEngine:
    """A `RouterQueryEngine`: flagged questions go to `retrieval_engine` (e.g.
    `index.as_query_engine()`), the rest to `llm` alone."""
    tools = [
        QueryEngineTool.from_defaults(retrieval_engine, name="retrieve",
                                      description="answer from retrieved documents"),
        QueryEngineTool.from_defaults(LLMQueryEngine(llm=llm), name="direct",
                                      description="answer from the LLM's own knowledge"),
    ]  # fmt: skip
    return RouterQueryEngine(selector=GateSelector(gate, threshold), query_engine_tools=tools,
                             llm=llm)  # fmt: skip
