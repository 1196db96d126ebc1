"""LlamaIndex: `GateSelector`, a selector for `RouterQueryEngine` that picks the retrieval
query engine or the LLM-only one as the gate decides (with a router, also a multi-step query
engine), and `gated_query_engine`, which builds that router from the engines and an LLM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

RETRIEVE, DIRECT = 0, 1  # tool order in gated_query_engine: then multi-step, then own ones


class GateSelector(BaseSelector):
    """Selects choice 0 (retrieval) when the gate says the question needs retrieval, else
    choice 1 (the LLM alone); a router also selects choice 2 (multi-step retrieval) and takes
    a `budget`; choices 3.. are its strategies of their own (`own`, in that order). The reason
    carries P(needs retrieval) or the routed strategy."""

    def __init__(self, gate: Gate, threshold: float | None = None, budget: float | None = None,
                 own: Sequence[str] = ()):  # fmt: skip
        self.gate, self.threshold, self.budget = gate, threshold, budget
        # a router's choices must include multi-step when it routes there
        branches = branches_of(gate, is_router(gate), budget, extra=own)
        self.multi = routing.MULTI in branches
        order = [routing.RETRIEVE, routing.DIRECT, *([routing.MULTI] if self.multi else []), *own]
        self.index = {b: i for i, b in enumerate(order)}
        self.choices = len(order)

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        pass

    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        if len(choices) != self.choices:
            raise ConfigError(
                f"GateSelector routes between {self.choices} choices "
                f"({', '.join(self.index)}), got {len(choices)}"
            )
        (branch,), (p,) = routed(self.gate, [query.query_str], self.threshold, self.budget)
        index = self.index[branch]
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
    engines: Mapping[str, Any] | None = None,
) -> RouterQueryEngine:
    """A `RouterQueryEngine`: flagged questions go to `retrieval_engine` (e.g.
    `index.as_query_engine()`), the rest to `llm` alone; with a router, the questions it
    routes to multi-step go to `multi_step_engine` (e.g. a `MultiStepQueryEngine`), and those
    it routes to a strategy of its own (its own retriever or k) to `engines[name]`."""
    engines = dict(engines or {})
    selector = GateSelector(gate, threshold, budget, own=list(engines))
    tools = [
        QueryEngineTool.from_defaults(retrieval_engine, name="retrieve",
                                      description="answer from retrieved documents"),
        QueryEngineTool.from_defaults(LLMQueryEngine(llm=llm), name="direct",
                                      description="answer from the LLM's own knowledge"),
    ]  # fmt: skip
    if multi_step_engine is not None or selector.multi:
        if multi_step_engine is None or not selector.multi:
            branches_of(gate, multi_step_engine is not None, budget)  # says what is wrong
        tools.append(QueryEngineTool.from_defaults(multi_step_engine, name=routing.MULTI,
                     description="answer by retrieving and reasoning in several steps"))  # fmt: skip
    for name, engine in engines.items():
        tools.append(QueryEngineTool.from_defaults(engine, name=name,
                     description=f"answer from documents retrieved by strategy {name}"))  # fmt: skip
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)
