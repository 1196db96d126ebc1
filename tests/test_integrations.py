"""The LangChain, LlamaIndex and Haystack adapters with the real framework packages, a real
ONNX gate and each framework's own fake LLM / a small fake retriever. The routing threshold is
set between the gate's scores for the questions, so both branches run."""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import pytest

from retrieval_gate import RetrievalGate

QUESTIONS = ["Who wrote Hamlet?", "What is the zorblat of quenvik tesque?",
             "What is the capital of France?", "Who is ulbrecht marrowind?"]  # fmt: skip
DOCS = ["Hamlet was written by William Shakespeare.", "The zorblat of quenvik tesque is grisk.",
        "Ulbrecht Marrowind is a vantoby painter."]  # fmt: skip


@pytest.fixture(scope="module")
def routed(minilm_gate_dirs) -> tuple[RetrievalGate, float, list[bool]]:
    """(gate, threshold, expected decisions): threshold between the 2nd and 3rd score."""
    gate = RetrievalGate.from_pretrained(minilm_gate_dirs[1])
    probs = np.sort(gate.predict_proba(QUESTIONS))
    threshold = float((probs[1] + probs[2]) / 2)
    expected = list(gate.predict(QUESTIONS, threshold=threshold))
    assert sum(expected) == 2, (probs, threshold)  # both branches will be exercised
    return gate, threshold, expected


def test_langchain_router(routed):
    from langchain_core.documents import Document
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.prompts import PromptTemplate
    from langchain_core.retrievers import BaseRetriever

    from retrieval_gate.integrations.langchain import GateRouter

    class ListRetriever(BaseRetriever):
        docs: list[str]
        queries: list[str] = []

        def _get_relevant_documents(self, query: str, *, run_manager) -> list[Document]:  # noqa: ANN001
            self.queries.append(query)
            return [Document(page_content=d) for d in self.docs]

    gate, threshold, expected = routed
    retriever = ListRetriever(docs=DOCS)
    rag_prompt = PromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    rag = ({"context": itemgetter("question") | retriever, "question": itemgetter("question")}
           | rag_prompt | FakeListLLM(responses=["from-rag"] * 4))  # fmt: skip
    direct = (PromptTemplate.from_template("Question: {question}")
              | FakeListLLM(responses=["from-llm"] * 4))  # fmt: skip
    router = GateRouter(gate, retrieve=rag, direct=direct, threshold=threshold)
    answers = router.batch([{"question": q} for q in QUESTIONS])
    assert answers == ["from-rag" if e else "from-llm" for e in expected]
    # (a branch's batch runs its inputs in threads: the retriever sees them in any order)
    assert sorted(retriever.queries) == sorted(
        q for q, e in zip(QUESTIONS, expected, strict=True) if e
    )
    one = QUESTIONS[expected.index(False)]
    assert router.invoke({"question": one}) == "from-llm" and len(retriever.queries) == 2
    # bare strings work too when the branches take strings
    echo = GateRouter(gate, retrieve=FakeListLLM(responses=["r"]),
                      direct=FakeListLLM(responses=["d"]), threshold=threshold)  # fmt: skip
    assert echo.invoke(QUESTIONS[expected.index(True)]) == "r"


def test_llamaindex_router_query_engine(routed):
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class ListRetriever(BaseRetriever):
        def __init__(self, texts: list[str]):
            super().__init__()
            self.texts, self.queries = texts, []

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            self.queries.append(query_bundle.query_str)
            return [NodeWithScore(node=TextNode(text=t), score=1.0) for t in self.texts]

    gate, threshold, expected = routed
    llm = MockLLM()  # echoes its prompt: the answer shows what the LLM was given
    retriever = ListRetriever(DOCS)
    engine = gated_query_engine(gate, RetrieverQueryEngine.from_args(retriever, llm=llm), llm,
                                threshold=threshold)  # fmt: skip
    for question, retrieve in zip(QUESTIONS, expected, strict=True):
        response = engine.query(question)
        assert ("Shakespeare" in str(response)) == retrieve, (question, str(response))
        assert response.metadata["selector_result"].ind == (0 if retrieve else 1)
        assert "P(needs retrieval)" in response.metadata["selector_result"].reason
    assert retriever.queries == [q for q, e in zip(QUESTIONS, expected, strict=True) if e]


def test_haystack_component_with_two_sockets(routed):
    from haystack import Document, Pipeline, component
    from haystack.components.builders import PromptBuilder
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    @component
    class EchoGenerator:  # test double for an LLM generator: replies with its prompt
        @component.output_types(replies=list[str])
        def run(self, prompt: str) -> dict:
            return {"replies": [prompt]}

    gate, threshold, expected = routed
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=d) for d in DOCS])
    pipe = Pipeline()
    pipe.add_component("gate", RetrievalGateRouter(gate, threshold=threshold))
    pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=1))
    pipe.add_component("rag_prompt", PromptBuilder(
        "{% for d in documents %}{{ d.content }} {% endfor %}Q: {{ query }}",
        required_variables=["documents", "query"]))  # fmt: skip
    pipe.add_component(
        "direct_prompt", PromptBuilder("Q: {{ query }}", required_variables=["query"])
    )
    pipe.add_component("rag_llm", EchoGenerator())
    pipe.add_component("direct_llm", EchoGenerator())
    pipe.connect("gate.retrieve", "retriever.query")
    pipe.connect("gate.retrieve", "rag_prompt.query")
    pipe.connect("retriever.documents", "rag_prompt.documents")
    pipe.connect("rag_prompt.prompt", "rag_llm.prompt")
    pipe.connect("gate.direct", "direct_prompt.query")
    pipe.connect("direct_prompt.prompt", "direct_llm.prompt")
    for question, retrieve in zip(QUESTIONS, expected, strict=True):
        out = pipe.run({"gate": {"query": question}})
        ran, skipped = ("rag_llm", "direct_llm") if retrieve else ("direct_llm", "rag_llm")
        assert ran in out and skipped not in out, (question, out)
        reply = out[ran]["replies"][0]
        assert reply.endswith(f"Q: {question}") and (len(reply) > len(question) + 3) == retrieve
        assert 0.0 <= out["gate"]["probability"] <= 1.0
    # saved as YAML and loaded again: it failed ("unsupported value of type 'RetrievalGate'")
    alone = Pipeline()
    alone.add_component("gate", RetrievalGateRouter(gate, threshold=threshold))
    again = Pipeline.loads(alone.dumps(), allowed_modules=["retrieval_gate.integrations.haystack"])
    for question in QUESTIONS:
        assert again.run({"gate": {"query": question}}) == alone.run({"gate": {"query": question}})
    built = Pipeline()  # a gate built in Python has no folder to name
    built.add_component("gate", RetrievalGateRouter(_router()))
    with pytest.raises(ConfigError, match="has none: load it with RetrievalGate.from_pretrained"):
        built.dumps()


# ------------------------------------------------------------------ a router: three branches

# LengthRouter (tests/routers.py) implements the project's Router protocol: up to 3 words no
# retrieval, up to 6 one retrieval, longer multi-step.
ROUTED = ["Capital of France?", "Who wrote the play Hamlet?",
          "Who founded the city where the play Hamlet was first written?"]  # fmt: skip
BRANCHES = ["direct", "retrieve", "multi_step"]


def _router():
    from routers import LengthRouter

    return LengthRouter(short=3, long=6)


def test_langchain_router_three_branches():
    from langchain_core.language_models.fake import FakeListLLM

    from retrieval_gate.errors import ConfigError, InputError
    from retrieval_gate.integrations.langchain import GateRouter

    router = GateRouter(_router(), retrieve=FakeListLLM(responses=["retrieve"] * 3),
                        direct=FakeListLLM(responses=["direct"] * 3),
                        multi_step=FakeListLLM(responses=["multi_step"] * 3))  # fmt: skip
    assert router.batch(ROUTED) == BRANCHES
    assert router.decide(ROUTED) == [False, True, True]
    capped = GateRouter(_router(), retrieve=FakeListLLM(responses=["retrieve"] * 3),
                        direct=FakeListLLM(responses=["direct"] * 3),
                        multi_step=FakeListLLM(responses=["multi_step"]), budget=1.0)  # fmt: skip
    assert capped.batch(ROUTED) == ["direct", "retrieve", "retrieve"]
    # LangChain's return_exceptions: an empty question is its own output, the others go on
    # (the gate scored the batch at once: one bad input failed all)
    tolerant = GateRouter(_router(), retrieve=FakeListLLM(responses=["retrieve"]),
                          direct=FakeListLLM(responses=["direct"]),
                          multi_step=FakeListLLM(responses=["multi_step"]))  # fmt: skip
    with pytest.raises(InputError, match="question 1 is ''"):
        tolerant.batch([ROUTED[0], "", ROUTED[2]])
    got = tolerant.batch([ROUTED[0], "", ROUTED[2]], return_exceptions=True)
    assert got[0] == "direct" and isinstance(got[1], InputError) and got[2] == "multi_step"
    with pytest.raises(ConfigError, match="pass its branch"):
        GateRouter(_router(), retrieve=FakeListLLM(responses=["r"]),
                   direct=FakeListLLM(responses=["d"]))  # fmt: skip


def test_langchain_binary_gate_refuses_a_multi_step_branch():
    from langchain_core.language_models.fake import FakeListLLM

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.rag import OracleGate

    gate = OracleGate({"0": 1})
    llm = FakeListLLM(responses=["x"])
    with pytest.raises(ConfigError, match="binary gate"):
        GateRouter(gate, retrieve=llm, direct=llm, multi_step=llm)
    with pytest.raises(ConfigError, match="binary gate") as said:
        GateRouter(gate, retrieve=llm, direct=llm, budget=1.0)
    assert "--" not in str(said.value), said.value  # it named the CLI's --threshold, --router


def test_llamaindex_router_three_engines():
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Named(CustomQueryEngine):
        label: str

        def custom_query(self, query_str: str) -> str:
            return f"{self.label}: {query_str}"

    llm = MockLLM()
    engine = gated_query_engine(_router(), Named(label="retrieve"), llm,
                                multi_step_engine=Named(label="multi_step"))  # fmt: skip
    for question, branch in zip(ROUTED, BRANCHES, strict=True):
        response = engine.query(question)
        selected = response.metadata["selector_result"]
        assert selected.ind == {"retrieve": 0, "direct": 1, "multi_step": 2}[branch]
        assert ("routed to " + branch) in selected.reason
        if branch != "direct":
            assert str(response) == f"{branch}: {question}"
        else:
            assert question in str(response)  # MockLLM echoes its prompt
    with pytest.raises(ConfigError, match="pass its branch"):
        gated_query_engine(_router(), Named(label="retrieve"), llm)


def test_haystack_router_three_sockets():
    from haystack import Pipeline, component

    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    @component
    class Tag:  # test double for a branch: says which one ran
        def __init__(self, name: str):
            self.name = name

        @component.output_types(reply=str)
        def run(self, query: str) -> dict:
            return {"reply": f"{self.name}: {query}"}

    pipe = Pipeline()
    pipe.add_component("router", RetrievalGateRouter(_router()))
    for name in BRANCHES:
        pipe.add_component(name, Tag(name))
        pipe.connect(f"router.{name}", f"{name}.query")
    for question, branch in zip(ROUTED, BRANCHES, strict=True):
        out = pipe.run({"router": {"query": question}})
        assert [b for b in BRANCHES if b in out] == [branch]
        assert out[branch]["reply"] == f"{branch}: {question}"
        strategy = {"direct": "no_retrieval", "retrieve": "one_retrieval"}.get(branch, branch)
        assert out["router"]["strategy"] == strategy


def test_adapters_refuse_what_they_would_route_wrongly(routed):
    """Each went through: a folder's path as the gate (then "'str' object has no attribute
    'scores'" at the first question), a threshold of NaN or 2 (every question sent down
    `direct`), a threshold given with a router (unread), an input without the question key
    (a bare KeyError), a budget of "1" (a TypeError deep inside) or np.float32 (refused as out
    of range)."""
    from langchain_core.language_models.fake import FakeListLLM

    from retrieval_gate.errors import ConfigError, InputError
    from retrieval_gate.integrations.haystack import RetrievalGateRouter
    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.integrations.llamaindex import GateSelector

    gate, _, _ = routed
    llm = FakeListLLM(responses=["x"] * 4)
    for bad in ("export/minilm-gate", None):
        with pytest.raises(ConfigError, match="gate is (str|NoneType), not a gate"):
            GateRouter(bad, retrieve=llm, direct=llm)
        with pytest.raises(ConfigError, match="not a gate"):
            RetrievalGateRouter(bad)
        with pytest.raises(ConfigError, match="not a gate"):
            GateSelector(bad)
    with pytest.raises(ConfigError, match=r"RetrievalGate.from_pretrained\('export/minilm-gate'"):
        GateRouter("export/minilm-gate", retrieve=llm, direct=llm)
    for bad in (float("nan"), 2, "0.5"):
        with pytest.raises(InputError, match=r"threshold must be a number in \[0, 1\]"):
            GateRouter(gate, retrieve=llm, direct=llm, threshold=bad)
        with pytest.raises(InputError, match=r"threshold must be a number in \[0, 1\]"):
            RetrievalGateRouter(gate, threshold=bad)
        with pytest.raises(InputError, match=r"threshold must be a number in \[0, 1\]"):
            GateSelector(gate, threshold=bad)
    router = _router()
    for make in (lambda: GateRouter(router, retrieve=llm, direct=llm, multi_step=llm,
                                    threshold=0.0),
                 lambda: RetrievalGateRouter(router, threshold=0.0),
                 lambda: GateSelector(router, threshold=0.0)):  # fmt: skip
        with pytest.raises(ConfigError, match="is a router, which picks a strategy.*budget="):
            make()
    keyed = GateRouter(gate, retrieve=llm, direct=llm, question_key="q")
    with pytest.raises(ConfigError, match="an input has no 'q' key \\(it has 'question'\\)"):
        keyed.invoke({"question": QUESTIONS[0]})
    with pytest.raises(ConfigError, match="^budget must be 0 or more.*got '1'"):
        GateRouter(router, retrieve=llm, direct=llm, multi_step=llm, budget="1")
    capped = GateRouter(router, retrieve=FakeListLLM(responses=["retrieve"] * 3),
                        direct=FakeListLLM(responses=["direct"] * 3),
                        multi_step=FakeListLLM(responses=["multi_step"]),
                        budget=np.float32(1.0))  # fmt: skip
    assert capped.batch(ROUTED) == ["direct", "retrieve", "retrieve"]


def test_langchain_branches_are_runnables_and_a_config_list_fits_the_inputs():
    """retrieve=None (or direct=None) was taken and every question routed there got None as
    its output; a plain function was a raw AttributeError at the first batch, a config list
    of the wrong length a raw IndexError. Functions are coerced, as RunnableBranch does."""
    from langchain_core.language_models.fake import FakeListLLM

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.langchain import GateRouter

    llm = FakeListLLM(responses=["x"] * 3)
    for bad in ({"retrieve": None}, {"direct": None}, {"multi_step": "a chain"},
                {"branches": {"bm25_top3": None}}):  # fmt: skip
        wired = {"retrieve": llm, "direct": llm, "multi_step": llm, **bad}
        name = next(iter(bad)) if "branches" not in bad else r"branches\['bm25_top3'\]"
        with pytest.raises(ConfigError, match=f"^{name} is (NoneType|str): give a Runnable"):
            GateRouter(_router(), **wired)
    router = GateRouter(_router(), retrieve=lambda q: f"retrieve: {q}",
                        direct=lambda q: f"direct: {q}", multi_step=lambda q: "multi_step")  # fmt: skip
    assert router.batch(ROUTED) == [f"direct: {ROUTED[0]}", f"retrieve: {ROUTED[1]}",
                                    "multi_step"]  # fmt: skip
    assert router.batch(ROUTED, config=[{}, {}, {}])[2] == "multi_step"
    with pytest.raises(ConfigError, match="config has 1 entries for 3 inputs"):
        router.batch(ROUTED, config=[{}])


def test_llamaindex_names_its_own_arguments_and_refuses_missing_engines():
    """A router routing to multi-step without its engine was told to pass `multi_step=`, which
    gated_query_engine does not take (it is multi_step_engine=); retrieval_engine=None was
    taken and each question sent there was a raw AttributeError."""
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    llm = MockLLM()
    with pytest.raises(ConfigError, match=r"pass its branch \(multi_step_engine=\.\.\.\)"):
        gated_query_engine(_router(), Echo(), llm)
    for wired, name in [({"retrieval_engine": None}, "retrieval_engine"),
                        ({"multi_step_engine": "engine"}, "multi_step_engine"),
                        ({"engines": {"bm25_top3": None}}, r"engines\['bm25_top3'\]")]:  # fmt: skip
        args = {"retrieval_engine": Echo(), "multi_step_engine": Echo(), **wired}
        with pytest.raises(ConfigError, match=f"^{name} is (NoneType|str), not a query engine"):
            gated_query_engine(_router(), llm=llm, **args)


def test_haystack_saves_a_relatively_loaded_gate_by_its_absolute_folder(
    minilm_gate_dirs, tmp_path, monkeypatch
):
    """A gate loaded from a relative path was saved as `folder: <that path>`, which failed to
    load from another working folder ("no such folder, and not a Hub id")."""
    from haystack import Pipeline

    from retrieval_gate.integrations.haystack import RetrievalGateRouter

    export = minilm_gate_dirs[1]
    monkeypatch.chdir(export.parent)
    pipe = Pipeline()
    gate = RetrievalGate.from_pretrained(export.name, batch_size=8)
    pipe.add_component("gate", RetrievalGateRouter(gate))
    saved = pipe.dumps()
    monkeypatch.chdir(tmp_path)
    again = Pipeline.loads(saved, allowed_modules=["retrieval_gate.integrations.haystack"])
    loaded = again.get_component("gate").gate
    assert loaded.folder == export.resolve() and loaded.gate.batch_size == 8
    asked = {"gate": {"query": QUESTIONS[0]}}
    assert again.run(asked) == pipe.run(asked)


def test_langchain_return_exceptions_keeps_an_unscorable_question_to_its_own_input(routed):
    """A question with a lone surrogate ("ok\\ud800") passed the per-input check (a non-empty
    string) and failed the gate's scoring of the whole batch, every input's output lost."""
    from retrieval_gate.errors import InputError
    from retrieval_gate.integrations.langchain import GateRouter

    gate, threshold, expected = routed
    router = GateRouter(gate, retrieve=lambda q: "r", direct=lambda q: "d", threshold=threshold)
    got = router.batch([QUESTIONS[0], "ok\ud800", "", QUESTIONS[1]], return_exceptions=True)
    assert [got[0], got[3]] == ["r" if e else "d" for e in (expected[0], expected[1])]
    assert isinstance(got[1], InputError) and isinstance(got[2], InputError)
    assert "question 1 is not valid Unicode (a lone surrogate at character 2)" in str(got[1])
    with pytest.raises(InputError, match="question 1 is not valid Unicode"):
        router.batch([QUESTIONS[0], "ok\ud800"])


def test_adapters_refuse_own_branches_that_are_no_mapping():
    """engines="bm25_top3" (a name, not a mapping) was a raw ValueError from dict(); both
    adapters say which argument and what it takes, in one wording."""
    from langchain_core.runnables import RunnableLambda
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.langchain import GateRouter
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    class Echo(CustomQueryEngine):
        def custom_query(self, query_str: str) -> str:
            return query_str

    said = r"^{} is str: give a mapping of strategy name -> {} \(e\.g\. {}=\{{"
    with pytest.raises(ConfigError, match=said.format("engines", "query engine", "engines")):
        gated_query_engine(_router(), Echo(), MockLLM(), multi_step_engine=Echo(),
                           engines="bm25_top3")  # fmt: skip
    echo = RunnableLambda(lambda q: q)
    with pytest.raises(ConfigError, match=said.format("branches", "Runnable", "branches")):
        GateRouter(_router(), retrieve=echo, direct=echo, multi_step=echo, branches="bm25_top3")
