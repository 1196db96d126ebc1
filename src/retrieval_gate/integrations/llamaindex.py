"""LlamaIndex: `GateSelector`, a selector for `RouterQueryEngine` that picks the retrieval
query engine or the LLM-only one as the gate decides (with a router, also a multi-step query
engine), and `gated_query_engine`, which builds that router from the engines and an LLM. With
an `answer_gate` (the cascade), the LLM-only engine's unsure answers are escalated: answered
again by the retrieval engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.base_selector import BaseSelector, SelectorResult, SingleSelection
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
from llama_index.core.query_engine.custom import STR_OR_RESPONSE_TYPE
from llama_index.core.schema import QueryBundle
from llama_index.core.tools import QueryEngineTool, ToolMetadata

from ..errors import ConfigError
from ..gates.base import Gate
from ..rag.cascade import answer_gate_of
from . import branches as shared  # its DIRECT / RETRIEVE names; this module has its own
from .branches import (
    BudgetAccount,
    Escalator,
    LogprobsOf,
    Strategies,
    branches_of,
    budget_account,
    escalator,
    openai_logprobs,
    own_mapping,
    registry_of,
    routed,
)

RETRIEVE, DIRECT = 0, 1  # tool order in gated_query_engine: then multi-step, then own ones


class GateSelector(BaseSelector):
    """Selects choice 0 (retrieval) when the gate says the question needs retrieval, else
    choice 1 (the LLM alone); a router also selects choice 2 (multi-step retrieval) and takes
    a `budget`; choices 3.. are its strategies of their own (`own`, in that order). The reason
    carries P(needs retrieval) or the routed strategy. `strategies`: as `gated_query_engine`'s."""

    def __init__(self, gate: Gate, threshold: float | None = None, budget: float | None = None,
                 own: Sequence[str] = (), account: BudgetAccount | None = None,
                 strategies: Strategies = None):  # fmt: skip
        self.gate, self.threshold, self.budget = gate, threshold, budget
        self.account = account  # charged with each choice: escalations are paid from it
        self.registry = registry_of(strategies)  # read once, not per query
        # a router's choices must include multi-step when it routes there
        multi = shared.MULTI in shared.branch_map(gate, budget, self.registry).values()
        branches = branches_of(gate, multi, budget, extra=own, threshold=threshold,
                               extra_arg="own", strategies=self.registry)  # fmt: skip
        self.multi = shared.MULTI in branches
        order = [shared.RETRIEVE, shared.DIRECT, *([shared.MULTI] if self.multi else []), *own]
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
        (branch,), (p,), strategies = routed(self.gate, [query.query_str], self.threshold,
                                             self.budget, self.registry)  # fmt: skip
        if self.account is not None and strategies is not None:
            self.account.charge(strategies)  # each strategy at its own cost
        index = self.index[branch]
        if strategies is not None:
            reason = f"routed to {branch} ({strategies[0]}, P(needs retrieval) = {p:.3f})"
        else:
            t = self.gate.threshold if self.threshold is None else self.threshold
            reason = f"P(needs retrieval) = {p:.3f} {'>=' if index == RETRIEVE else '<'} {t}"
        return SelectorResult(selections=[SingleSelection(index=index, reason=reason)])

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        return self._select(choices, query)


HINT = ("enable log-probabilities on the LLM (e.g. llama_index's OpenAI(..., logprobs=True) or "
        "OpenAILike on a vLLM server, which keep them in the response's `raw`)")  # fmt: skip


def completion_logprobs(output: Any) -> list[float] | None:
    """A `CompletionResponse`'s (or `ChatResponse`'s) token log-probabilities: from its `raw`
    OpenAI-compatible response, else from `.logprobs` (each position's first alternative, the
    chosen token under greedy decoding)."""
    found = openai_logprobs(getattr(output, "raw", None))
    positions = getattr(output, "logprobs", None)
    if found is None and positions and all(positions):
        found = [float(alternatives[0].logprob) for alternatives in positions]
    return found


def answer_escalator(
    answer_gate: Gate, threshold: float | None = None, logprobs_of: LogprobsOf | None = None
) -> Escalator:
    """The cascade's second step for wiring it yourself: `.escalations(queries, responses)`
    says which LLM responses (`llm.complete(query)`) `answer_gate` escalates."""
    return Escalator(answer_gate, threshold, logprobs_of, completion_logprobs, HINT)


class LLMQueryEngine(CustomQueryEngine):
    """The question straight to the LLM, no retrieval. With `answer_gate` (the cascade), an
    answer it escalates is answered by `retrieval_engine` instead (`metadata["escalated"]`)."""

    llm: LLM
    answer_gate: Any = None
    answer_threshold: float | None = None
    logprobs_of: Any = None
    retrieval_engine: Any = None
    budget_account: Any = None  # a `BudgetAccount` the selector charges (gated_query_engine)
    _escalator: Escalator | None = PrivateAttr(default=None)

    def __init__(self, **data: Any):
        super().__init__(**data)  # then the checks, raised as they are (not pydantic's)
        self._escalator = escalator(None, self.answer_gate, self.answer_threshold,
                                    self.logprobs_of, completion_logprobs, HINT,
                                    self.budget_account)  # fmt: skip
        if self._escalator is not None and self.retrieval_engine is None:
            raise ConfigError("answer_gate escalates to retrieval_engine: pass it")

    def escalations(self, queries: Sequence[str], outputs: Sequence[Any]) -> list[bool]:
        """Whether the answer gate escalates each LLM response (the answer to `queries[i]`)."""
        if self._escalator is None:
            raise ConfigError("LLMQueryEngine.escalations needs answer_gate=...")
        return self._escalator.escalations(queries, outputs)

    def custom_query(self, query_str: str) -> STR_OR_RESPONSE_TYPE:
        out = self.llm.complete(query_str)
        if self._escalator is None:
            return str(out)
        if not self.escalations([query_str], [out])[0]:
            return Response(str(out), metadata={"escalated": False})
        response = self.retrieval_engine.query(query_str)
        response.metadata = {**(response.metadata or {}), "escalated": True}
        return response


def _check_engine(engine: Any, what: str) -> None:
    """A query engine (`.query`): None was taken, and each question routed there failed with
    a raw AttributeError ("'NoneType' object has no attribute 'query'")."""
    if not callable(getattr(engine, "query", None)):
        raise ConfigError(f"{what} is {type(engine).__name__}, not a query engine: give one "
                          "(e.g. index.as_query_engine())")  # fmt: skip


def gated_query_engine(
    gate: Gate,
    retrieval_engine: Any,
    llm: LLM,
    threshold: float | None = None,
    multi_step_engine: Any = None,
    budget: float | None = None,
    engines: Mapping[str, Any] | None = None,
    answer_gate: Gate | None = None,
    answer_threshold: float | None = None,
    logprobs_of: LogprobsOf | None = None,
    strategies: Strategies = None,
) -> RouterQueryEngine:
    """A `RouterQueryEngine`: flagged questions go to `retrieval_engine` (e.g.
    `index.as_query_engine()`), the rest to `llm` alone; with a router, the questions it
    routes to multi-step go to `multi_step_engine` (e.g. a `MultiStepQueryEngine`), and those
    it routes to a strategy of its own (its own retriever or k) to `engines[name]`.
    `answer_gate` (or `gate` a `rag.cascade.Cascade`): the LLM's answers it escalates, read
    with `logprobs_of` (default `completion_logprobs`), go to `retrieval_engine` too; with a
    router's `budget`, only as many as the selector's choices so far left budget for.
    `strategies`: a strategies YAML file (read as the CLI's `--strategies FILE.yaml`) or a
    `StrategyRegistry`, declaring a router's strategies its export names only (a router
    trained on a label file's own strategy names without a strategies file)."""
    engines = own_mapping(engines, "engines", "query engine")
    registry = registry_of(strategies)  # read once
    _check_engine(retrieval_engine, "retrieval_engine")
    if multi_step_engine is not None:
        _check_engine(multi_step_engine, "multi_step_engine")
    for name, engine in engines.items():
        _check_engine(engine, f"engines[{name!r}]")
    # what was wired, checked first: the errors name this function's parameters
    branches_of(gate, multi_step_engine is not None, budget, extra=list(engines),
                threshold=threshold, multi_arg="multi_step_engine", extra_arg="engines",
                strategies=registry)  # fmt: skip
    answer_gate = answer_gate_of(gate) if answer_gate is None else answer_gate
    account = budget_account(gate, budget, registry) if answer_gate is not None else None
    selector = GateSelector(gate, threshold, budget, own=list(engines), account=account,
                            strategies=registry)  # fmt: skip
    direct = LLMQueryEngine(llm=llm, answer_gate=answer_gate, answer_threshold=answer_threshold,
                            logprobs_of=logprobs_of, retrieval_engine=retrieval_engine,
                            budget_account=account)  # fmt: skip
    tools = [
        QueryEngineTool.from_defaults(retrieval_engine, name="retrieve",
                                      description="answer from retrieved documents"),
        QueryEngineTool.from_defaults(direct, name="direct",
                                      description="answer from the LLM's own knowledge"),
    ]  # fmt: skip
    if multi_step_engine is not None or selector.multi:
        if multi_step_engine is None or not selector.multi:
            branches_of(gate, multi_step_engine is not None, budget,  # says what is wrong
                        multi_arg="multi_step_engine", extra_arg="engines",
                        strategies=registry)  # fmt: skip
        tools.append(QueryEngineTool.from_defaults(multi_step_engine, name=shared.MULTI,
                     description="answer by retrieving and reasoning in several steps"))  # fmt: skip
    for name, engine in engines.items():
        tools.append(QueryEngineTool.from_defaults(engine, name=name,
                     description=f"answer from documents retrieved by strategy {name}"))  # fmt: skip
    return RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)
