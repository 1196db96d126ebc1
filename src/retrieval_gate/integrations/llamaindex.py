"""LlamaIndex: `GateSelector`, a selector for `RouterQueryEngine` that picks the retrieval
query engine or the LLM-only one as the gate decides (with a router, also a multi-step query
engine), and `gated_query_engine`, which builds that router from the engines and an LLM."""

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
from ..gates.base import Gate, is_router
from . import routing
from .routing import branches_of, routed

RETRIEVE, DIRECT, MULTI_STEP = 0, 1, 2  # tool order in gated_query_engine
_INDEX = {routing.RETRIEVE: RETRIEVE, routing.DIRECT: DIRECT, routing.MULTI: MULTI_STEP}


class GateSelector(BaseSelector):
    """Selects choice 0 (retrieval) when the gate says the question needs retrieval, else
    choice 1 (the LLM alone); a router also selects choice 2 (multi-step retrieval) and takes
    a `budget`. The reason carries P(needs retrieval) or the routed strategy."""

    def __init__(self, gate: Gate, threshold: float | None = None, budget: float | None = None):
        self.gate, self.threshold, self.budget = gate, threshold, budget
        # a router's choices must include multi-step when it routes there
        self.choices = len(branches_of(gate, is_router(gate), budget))

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        pass

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        if len(choices) != self.choices:
            raise ConfigError(
                f"GateSelector routes between {self.choices} choices (retrieve, direct"
                f"{', multi-step' if self.choices == 3 else ''}), got {len(choices)}"
            )
        (branch,), (p,) = routed(self.gate, [query.query_str], self.threshold, self.budget)
        index = _INDEX[branch]
        if is_router(self.gate):
            reason = f"routed to {branch} (P(needs retrieval) = {p:.3f})"
        else:
            t = self.gate.threshold if self.threshold is None else self.threshold
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
    gate: Gate,
    retrieval_engine: Any,
    llm: LLM,
    threshold: float | None = None,
    multi_step_engine: Any = None,
    budget: float | None = None,
) -> RouterQueryEngine:
    """A `RouterQueryEngine`: flagged questions go to `retrieval_engine` (e.g.
    `index.as_query_engine()`), the rest to `llm` alone; with a router, the questions it
    routes to multi-step go to `multi_step_engine` (e.g. a `MultiStepQueryEngine`)."""
    selector = GateSelector(gate, threshold, budget)
    tools = [
        QueryEngineTool.from_defaults(retrieval_engine, name="retrieve",
                                      description="answer from retrieved documents"),
        QueryEngineTool.from_defaults(LLMQueryEngine(llm=llm), name="direct",
                                      description="answer from the LLM's own knowledge"),
    ]  # fmt: skip
    if multi_step_engine is not None or selector.choices == 3:
        if multi_step_engine is None or selector.choices != 3:
            branches_of(gate, multi_step_engine is not None, budget)  # says what is wrong
        tools.append(QueryEngineTool.from_defaults(multi_step_engine, name="multi_step",
                     description="answer by retrieving and reasoning in several steps"))  # fmt: skip
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)
