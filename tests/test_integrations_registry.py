"""The adapters with a router trained on a label file's own strategy names without a strategies
file (its export carries the names and costs only): refused without a registry, naming the
adapters' `strategies=` (not the CLI's --strategies), and routed in LangChain, LlamaIndex and
Haystack when `strategies=` declares them (a `StrategyRegistry` or a YAML file, read as the
CLI's --strategies FILE.yaml reads it)."""

from __future__ import annotations

import pytest

from retrieval_gate.errors import ConfigError
from retrieval_gate.strategies import StrategyRegistry, StrategySpec, specs_of
from routers import LengthRouter

NAMES = ("closed", "lookup", "deep")
COSTS = {"closed": 0.0, "lookup": 1.0, "deep": 3.0}
SPECS = (StrategySpec("closed", 0.0), StrategySpec("lookup", 1.0, "default"),
         StrategySpec("deep", 3.0, "default", multi_step=True, max_steps=3))  # fmt: skip
YAML = ("strategies:\n  - {name: closed, cost: 0}\n"
        "  - {name: lookup, cost: 1, retriever: default}\n"
        "  - {name: deep, cost: 3, retriever: default, steps: multi}\n")  # fmt: skip
SHORT, MID, LONG = "Capital of France?", "Who wrote the play Hamlet first?", " ".join(["w"] * 12)


class NamesOnlyRouter(LengthRouter):
    """A router export of a label file's own strategy names: names and costs, no specs (its
    `strategy_registry` refuses, as a real export's does)."""

    name = "names-only"

    def __init__(self):
        super().__init__(strategies=NAMES, costs=COSTS)

    def strategy_registry(self) -> StrategyRegistry:
        return specs_of((), self.strategies, f"router {self.name!r}")


@pytest.fixture(params=["registry", "yaml"])
def strategies(request, tmp_path):
    if request.param == "registry":
        return StrategyRegistry(SPECS, "test registry")
    path = tmp_path / "strategies.yaml"
    path.write_text(YAML)
    return str(path)


def _refused(build) -> str:
    with pytest.raises(ConfigError) as e:
        build()
    said = str(e.value)
    assert "strategies=" in said and "--strategies" not in said, said
    return said


def test_without_a_registry_each_adapter_refuses_naming_strategies_arg():
    from langchain_core.runnables import RunnableLambda
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.integrations.branches import branch_map, budget_account
    from retrieval_gate.integrations.haystack import RetrievalGateRouter
    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    r = RunnableLambda(lambda x: x)
    said = _refused(lambda: GateRouter(NamesOnlyRouter(), r, r, multi_step=r))
    assert "'closed'" in said
    _refused(lambda: gated_query_engine(NamesOnlyRouter(), Echo(), MockLLM(),
                                        multi_step_engine=Echo()))  # fmt: skip
    _refused(lambda: RetrievalGateRouter(NamesOnlyRouter()))
    _refused(lambda: branch_map(NamesOnlyRouter()))
    _refused(lambda: budget_account(NamesOnlyRouter(), 1.0))


def test_langchain_routes_with_strategies(strategies):
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter

    def tag(name):
        return RunnableLambda(lambda x, name=name: f"{name}:{x}")

    chain = GateRouter(NamesOnlyRouter(), tag("retrieve"), tag("direct"),
                       multi_step=tag("multi"), strategies=strategies)  # fmt: skip
    assert chain.route([SHORT, MID, LONG]) == ["direct", "retrieve", "multi_step"]
    assert chain.batch([SHORT, LONG]) == [f"direct:{SHORT}", f"multi:{LONG}"]
    capped = GateRouter(NamesOnlyRouter(), tag("retrieve"), tag("direct"),
                        multi_step=tag("multi"), budget=1.0, strategies=strategies)  # fmt: skip
    assert capped.account is not None and capped.account.extra == 1.0
    assert capped.batch([LONG]) == [f"retrieve:{LONG}"]


def test_llamaindex_routes_with_strategies(strategies):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Echo(CustomQueryEngine):
        tag: str

        def custom_query(self, query_str: str) -> str:
            return f"{self.tag}:{query_str}"

    engine = gated_query_engine(NamesOnlyRouter(), Echo(tag="retrieve"), MockLLM(),
                                multi_step_engine=Echo(tag="multi"),
                                strategies=strategies)  # fmt: skip
    assert str(engine.query(MID)) == f"retrieve:{MID}"
    got = engine.query(LONG)
    assert str(got) == f"multi:{LONG}"
    assert "(deep" in got.metadata["selector_result"].reason


def test_haystack_routes_with_strategies(strategies):
    from retrieval_gate.integrations.branches import budget_account
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    component = RetrievalGateRouter(NamesOnlyRouter(), strategies=strategies)
    assert set(component.branches) == {"direct", "retrieve", "multi_step"}
    got = [component.run(query=q) for q in (SHORT, MID, LONG)]
    assert [o["strategy"] for o in got] == list(NAMES)
    assert "direct" in got[0] and "retrieve" in got[1] and "multi_step" in got[2]
    account = budget_account(NamesOnlyRouter(), 2.0, strategies)
    assert account is not None and account.costs == COSTS


def test_haystack_saves_the_strategies_file_and_refuses_a_registry(tmp_path):
    from retrieval_gate.integrations.haystack import RetrievalGateRouter, _saved_strategies

    path = tmp_path / "strategies.yaml"
    path.write_text(YAML)
    assert _saved_strategies(str(path)) == str(path.absolute())
    with pytest.raises(ConfigError, match="StrategyRegistry.*path as strategies="):
        _saved_strategies(StrategyRegistry(SPECS, "in code"))
    component = RetrievalGateRouter(NamesOnlyRouter(), strategies=str(path))
    assert component.registry is not None and component.registry.names == NAMES


def test_strategies_must_be_a_yaml_file_or_a_registry():
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    with pytest.raises(ConfigError, match=r"strategies='closed,lookup'.*YAML file"):
        RetrievalGateRouter(NamesOnlyRouter(), strategies="closed,lookup")
