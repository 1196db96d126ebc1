"""The adapters with a router two of whose strategies share a branch (two multi-step ones) and
with branches the router never routes to: the strategy reported (and charged to a budget) is
the one the router picked, and a branch it never uses (a misspelt name) is refused."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_gate.errors import ConfigError
from retrieval_gate.gates.base import as_questions
from retrieval_gate.strategies import StrategyRegistry, StrategySpec

SPECS = (StrategySpec("closed", 0.0), StrategySpec("one_retrieval", 1.0, "default"),
         StrategySpec("ms2", 2.0, "default", multi_step=True, max_steps=2),
         StrategySpec("ms6", 4.0, "default", multi_step=True, max_steps=6))  # fmt: skip
PICKS = {"Capital of France?": "closed", "Who wrote Hamlet?": "one_retrieval",
         "Who founded the town?": "ms2", "Who taught where the founder studied?": "ms6"}  # fmt: skip
QUESTIONS = list(PICKS)


class TwoMultiRouter:
    """Routes each question of `PICKS` to its strategy (capped at the budget), carrying its
    strategies' specs as a router export does."""

    name, threshold = "two-multi", 0.5
    strategies = tuple(s.name for s in SPECS)
    costs = {s.name: s.cost for s in SPECS}

    def strategy_registry(self) -> StrategyRegistry:
        return StrategyRegistry(SPECS, "two-multi export")

    def route(self, questions, budget=None):
        picked = [PICKS[q.text] for q in as_questions(questions)]
        if budget is None:
            return picked
        top = max((s for s in SPECS if s.cost <= budget), key=lambda s: s.cost).name
        return [min(p, top, key=self.strategies.index) for p in picked]

    def strategy_proba(self, questions):
        qs = as_questions(questions)
        out = np.zeros((len(qs), len(self.strategies)))
        out[np.arange(len(qs)), [self.strategies.index(PICKS[q.text]) for q in qs]] = 1.0
        return out

    def scores(self, questions):
        return 1 - self.strategy_proba(questions)[:, 0]


def test_haystack_reports_the_strategy_the_router_picked():
    """Its `strategy` output was the cheapest strategy of the branch: ms6's questions were
    reported as ms2 (docs/integrations.md: "the strategy picked")."""
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    component = RetrievalGateRouter(TwoMultiRouter())
    got = [component.run(query=q) for q in QUESTIONS]
    assert [o["strategy"] for o in got] == list(PICKS.values())
    assert "multi_step" in got[3] and got[3]["strategy"] == "ms6"


def test_llamaindex_reason_names_the_strategy_picked():
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    engine = gated_query_engine(TwoMultiRouter(), Echo(), MockLLM(), multi_step_engine=Echo())
    reason = engine.query(QUESTIONS[3]).metadata["selector_result"].reason
    assert "routed to multi_step (ms6" in reason


def test_a_budget_account_charges_each_strategy_at_its_own_cost():
    """The account priced each branch at the last strategy mapped to it (multi_step: ms6's 4
    for an ms2 question too), and was charged branches, not the router's choices."""
    from retrieval_gate.integrations.branches import budget_account
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    account = budget_account(TwoMultiRouter(), 4.0)
    assert account is not None and account.extra == 1.0
    component = RetrievalGateRouter(TwoMultiRouter(), budget=4.0, account=account)
    for q in QUESTIONS:
        component.run(query=q)
    assert account.questions == 4 and account.spent == 0.0 + 1.0 + 2.0 + 4.0


def test_langchain_charges_the_strategies_picked():
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter
    from routers import AnswerConfidenceGate

    echo = RunnableLambda(lambda q: q)
    router = GateRouter(TwoMultiRouter(), retrieve=echo, direct=echo, multi_step=echo,
                        budget=4.0, answer_gate=AnswerConfidenceGate(),
                        logprobs_of=lambda out: [-0.01])  # fmt: skip
    router.batch(QUESTIONS[2:])  # ms2 and ms6: 2 + 4, not 4 + 4
    assert router.account is not None and router.account.spent == 6.0


def test_adapters_refuse_branches_the_router_never_routes_to():
    """A misspelt strategy branch (`bm25top3` for `bm25_top3`) and a multi-step branch of a
    router that never routes there were taken and never ran."""
    from langchain_core.runnables import RunnableLambda
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.integrations.llamaindex import gated_query_engine
    from routers import LengthRouter

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    echo = RunnableLambda(lambda q: q)
    said = r"never routes questions to the branch given as {}: it routes to {}; drop"
    with pytest.raises(ConfigError, match=said.format(r"branches: bm25top3=\.\.\.",
                                                      "direct, retrieve, multi_step")):  # fmt: skip
        GateRouter(TwoMultiRouter(), retrieve=echo, direct=echo, multi_step=echo,
                   branches={"bm25top3": echo})  # fmt: skip
    with pytest.raises(ConfigError, match=said.format(r"engines: bm25top3=\.\.\.", ".*")):
        gated_query_engine(TwoMultiRouter(), Echo(), MockLLM(), multi_step_engine=Echo(),
                           engines={"bm25top3": Echo()})  # fmt: skip
    two = LengthRouter(strategies=("no_retrieval", "one_retrieval"))  # never multi-step
    with pytest.raises(ConfigError, match=said.format(r"multi_step=\.\.\.", "direct, retrieve")):
        GateRouter(two, retrieve=echo, direct=echo, multi_step=echo)
    with pytest.raises(ConfigError, match=said.format(r"multi_step_engine=\.\.\.", ".*")):
        gated_query_engine(two, Echo(), MockLLM(), multi_step_engine=Echo())
    # what it uses is taken, a router without multi-step in every adapter
    from retrieval_gate.integrations.haystack import RetrievalGateRouter
    from retrieval_gate.integrations.llamaindex import GateSelector

    assert GateRouter(two, retrieve=echo, direct=echo).batch(["Capital?"]) == ["Capital?"]
    assert RetrievalGateRouter(two).branches == ["direct", "retrieve"]
    assert GateSelector(two).choices == 2


@pytest.mark.parametrize("name", ["probability", "strategy"])
def test_haystack_refuses_a_strategy_named_like_a_fixed_output_socket(name):
    """A strategy of its own named `probability` or `strategy` (valid names) was a raw
    TypeError from set_output_types, and its query would have been overwritten by run()."""
    from retrieval_gate.integrations.haystack import RetrievalGateRouter
    from routers import LengthRouter

    specs = (StrategySpec("closed", 0.0), StrategySpec(name, 1.0, "bm25", k=3),
             StrategySpec("deep", 3.0, "default", multi_step=True))  # fmt: skip
    router = LengthRouter(strategies=[s.name for s in specs], costs={s.name: s.cost for s in specs})
    said = f"strategy '{name}' .* clashes with the component's fixed output socket '{name}'"
    with pytest.raises(ConfigError, match=said + ".*rename the strategy"):
        RetrievalGateRouter(router, strategies=StrategyRegistry(specs, "test registry"))
