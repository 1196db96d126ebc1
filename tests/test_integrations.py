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
