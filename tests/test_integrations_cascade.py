"""The cascade in the LangChain, LlamaIndex and Haystack adapters, with the real framework
packages and fake LLMs that return token log-probabilities where each framework's
OpenAI-compatible models put them: the first gate sends one question to retrieval and keeps
the rest closed-book; the answer gate escalates the unsure closed-book answers to the retrieve
branch and keeps the sure ones; an answer without log-probabilities, or an answer gate that
reads no answer, is refused."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_gate.errors import ConfigError
from retrieval_gate.gates.base import as_questions
from retrieval_gate.rag import OracleGate
from retrieval_gate.rag.cascade import Cascade
from routers import AnswerConfidenceGate

# the first gate retrieves for the first question; the LLM is sure of "sure" answers only
QUESTIONS = ["Who painted the zorblat?", "Who wrote Hamlet?", "Is the sky green, unsure?",
             "What is the capital of France?", "Who is ulbrecht, unsure?"]  # fmt: skip
FIRST = [True, False, False, False, False]
ESCALATED = [False, False, True, False, True]
RETRIEVED = [f or e for f, e in zip(FIRST, ESCALATED, strict=True)]


def _logprobs(question: str) -> list[float]:
    return [-2.5, -3.0] if "unsure" in question else [-0.01, -0.02]


class FirstGate:
    """A binary gate that flags the questions in `FIRST` (it reads no answer)."""

    name, threshold = "first", 0.5

    def scores(self, questions):
        return np.array([float(FIRST[QUESTIONS.index(q.text)]) for q in as_questions(questions)])


# ------------------------------------------------------------------ LangChain


def _chat_model():
    """A chat model's stand-in: an AIMessage with OpenAI-compatible `logprobs` metadata."""
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    def answer(item: dict) -> AIMessage:
        content = [{"token": "x", "logprob": lp, "bytes": [120], "top_logprobs": []}
                   for lp in _logprobs(item["question"])]  # fmt: skip
        return AIMessage(content=f"closed-book: {item['question']}",
                         response_metadata={"logprobs": {"content": content}})  # fmt: skip

    return RunnableLambda(answer)


def _rag(seen: list[str]):
    from langchain_core.runnables import RunnableLambda

    def rag(item: dict) -> str:
        seen.append(item["question"])
        return f"from-rag: {item['question']}"

    return RunnableLambda(rag)


def _text(output) -> str:
    return output if isinstance(output, str) else output.content


def test_langchain_escalates_the_unsure_direct_answers_to_retrieve():
    from retrieval_gate.integrations.langchain import GateRouter

    seen: list[str] = []
    router = GateRouter(FirstGate(), retrieve=_rag(seen), direct=_chat_model(),
                        answer_gate=AnswerConfidenceGate())  # fmt: skip
    inputs = [{"question": q} for q in QUESTIONS]
    outputs = router.batch(inputs)
    assert [_text(o).startswith("from-rag") for o in outputs] == RETRIEVED
    assert sorted(seen) == sorted(q for q, r in zip(QUESTIONS, RETRIEVED, strict=True) if r)
    assert router.invoke(inputs[2]) == f"from-rag: {QUESTIONS[2]}"
    # the decision alone, for wiring it yourself
    direct = _chat_model().batch(inputs[1:])
    assert router.escalations(inputs[1:], direct) == ESCALATED[1:]
    # a cascade gate carries its answer gate; a threshold of the user's overrides the gate's
    cascade = GateRouter(Cascade(FirstGate(), AnswerConfidenceGate()), retrieve=_rag([]),
                         direct=_chat_model())  # fmt: skip
    assert [_text(o).startswith("from-rag") for o in cascade.batch(inputs)] == RETRIEVED
    lenient = GateRouter(FirstGate(), retrieve=_rag([]), direct=_chat_model(),
                         answer_gate=AnswerConfidenceGate(), answer_threshold=0.99)  # fmt: skip
    assert [_text(o).startswith("from-rag") for o in lenient.batch(inputs)] == FIRST


def test_langchain_refuses_answers_without_logprobs_unless_told_to_read_none():
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter

    parsed = _chat_model() | RunnableLambda(lambda m: m.content)  # a string: no metadata left
    router = GateRouter(FirstGate(), retrieve=_rag([]), direct=parsed,
                        answer_gate=AnswerConfidenceGate())  # fmt: skip
    with pytest.raises(ConfigError, match=r"ChatOpenAI\(logprobs=True\).*logprobs_of="):
        router.batch([{"question": q} for q in QUESTIONS])
    # logprobs_of returning None on purpose: the question-only score decides
    question_only = GateRouter(FirstGate(), retrieve=_rag([]), direct=parsed,
                               answer_gate=AnswerConfidenceGate(), logprobs_of=lambda o: None)  # fmt: skip
    outputs = question_only.batch([{"question": q} for q in QUESTIONS])
    assert [o.startswith("from-rag") for o in outputs] == RETRIEVED


def test_langchain_refuses_an_answer_gate_that_reads_no_answer():
    from retrieval_gate.integrations.langchain import GateRouter

    with pytest.raises(ConfigError, match="answer_gate: gate 'oracle'.*cascade-closed-book"):
        GateRouter(FirstGate(), retrieve=_rag([]), direct=_chat_model(),
                   answer_gate=OracleGate({"0": 1}))  # fmt: skip
    with pytest.raises(ConfigError, match="need answer_gate"):
        GateRouter(FirstGate(), retrieve=_rag([]), direct=_chat_model(), logprobs_of=len)
    plain = GateRouter(FirstGate(), retrieve=_rag([]), direct=_chat_model())
    with pytest.raises(ConfigError, match="needs answer_gate"):
        plain.escalations([QUESTIONS[1]], ["an answer"])


# ------------------------------------------------------------------ LlamaIndex


def _llamaindex_llm(raw: bool, logprobs=_logprobs):
    """A completion LLM whose responses carry log-probabilities (`logprobs(prompt)`): in `raw`
    (an OpenAI-compatible response, as llama_index's OpenAI / OpenAILike keep it) or in
    `.logprobs`."""
    from llama_index.core.base.llms.types import LogProb
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

    class LogprobLLM(CustomLLM):
        in_raw: bool

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata()

        def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
            lps = logprobs(prompt)
            if self.in_raw:
                content = [{"token": "x", "logprob": lp} for lp in lps]
                choice = {"message": {"content": "x"}, "logprobs": {"content": content}}
                return CompletionResponse(text=f"closed-book: {prompt}", raw={"choices": [choice]})
            return CompletionResponse(text=f"closed-book: {prompt}",
                                      logprobs=[[LogProb(token="x", logprob=lp)] for lp in lps])  # fmt: skip

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
            yield self.complete(prompt)

    return LogprobLLM(in_raw=raw)


def _llamaindex_retrieval():
    from llama_index.core.query_engine import CustomQueryEngine

    class Retrieval(CustomQueryEngine):
        seen: list = []

        def custom_query(self, query_str: str) -> str:
            self.seen.append(query_str)
            return f"from-rag: {query_str}"

    return Retrieval(seen=[])


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "logprobs"])
def test_llamaindex_escalates_the_unsure_llm_answers_to_the_retrieval_engine(raw):
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    retrieval = _llamaindex_retrieval()
    engine = gated_query_engine(FirstGate(), retrieval, _llamaindex_llm(raw),
                                answer_gate=AnswerConfidenceGate())  # fmt: skip
    for question, first, escalated in zip(QUESTIONS, FIRST, ESCALATED, strict=True):
        response = engine.query(question)
        assert str(response).startswith("from-rag") == (first or escalated), question
        assert response.metadata["selector_result"].ind == (0 if first else 1)
        if not first:
            assert response.metadata["escalated"] == escalated
    assert retrieval.seen == [q for q, r in zip(QUESTIONS, RETRIEVED, strict=True) if r]


def test_llamaindex_exposes_the_decision_and_refuses_what_it_cannot_read():
    from llama_index.core.llms import MockLLM

    from retrieval_gate.integrations.llamaindex import (
        LLMQueryEngine,
        answer_escalator,
        gated_query_engine,
    )

    llm = _llamaindex_llm(True)
    responses = [llm.complete(q) for q in QUESTIONS[1:]]
    assert (
        answer_escalator(AnswerConfidenceGate()).escalations(QUESTIONS[1:], responses)
        == (ESCALATED[1:])
    )
    direct = LLMQueryEngine(llm=llm, answer_gate=AnswerConfidenceGate(),
                            retrieval_engine=_llamaindex_retrieval())  # fmt: skip
    assert direct.escalations(QUESTIONS[1:], responses) == ESCALATED[1:]
    mock = gated_query_engine(FirstGate(), _llamaindex_retrieval(), MockLLM(),
                              answer_gate=AnswerConfidenceGate())  # fmt: skip
    with pytest.raises(ConfigError, match=r"logprobs=True.*logprobs_of="):
        mock.query(QUESTIONS[1])
    question_only = gated_query_engine(FirstGate(), _llamaindex_retrieval(), MockLLM(),
                                       answer_gate=AnswerConfidenceGate(),
                                       logprobs_of=lambda r: None)  # fmt: skip
    assert str(question_only.query(QUESTIONS[2])).startswith("from-rag")
    assert not str(question_only.query(QUESTIONS[1])).startswith("from-rag")
    with pytest.raises(ConfigError, match="answer_gate: gate 'oracle'"):
        gated_query_engine(FirstGate(), _llamaindex_retrieval(), llm,
                           answer_gate=OracleGate({"0": 1}))  # fmt: skip
    with pytest.raises(ConfigError, match="retrieval_engine"):
        LLMQueryEngine(llm=llm, answer_gate=AnswerConfidenceGate())


# ------------------------------------------------------------------ Haystack


def _haystack_pipeline(generator):
    """gate -> (retrieve | direct LLM -> answer gate -> (answer | escalate -> retrieve))."""
    from haystack import Pipeline, component
    from haystack.components.joiners import BranchJoiner

    from retrieval_gate.integrations.haystack import AnswerGateRouter, RetrievalGateRouter

    @component
    class Rag:  # test double for the retrieve branch
        @component.output_types(reply=str)
        def run(self, query: str) -> dict:
            return {"reply": f"from-rag: {query}"}

    pipe = Pipeline()
    pipe.add_component("gate", RetrievalGateRouter(FirstGate()))
    pipe.add_component("direct_llm", generator)
    pipe.add_component("answer_gate", AnswerGateRouter(AnswerConfidenceGate()))
    pipe.add_component("to_rag", BranchJoiner(str))
    pipe.add_component("rag", Rag())
    pipe.connect("gate.direct", "direct_llm.query")
    pipe.connect("gate.direct", "answer_gate.query")
    pipe.connect("direct_llm.replies", "answer_gate.replies")
    pipe.connect("gate.retrieve", "to_rag.value")
    pipe.connect("answer_gate.escalate", "to_rag.value")
    pipe.connect("to_rag.value", "rag.query")
    return pipe


def _haystack_generator(with_logprobs: bool):
    from haystack import component
    from haystack.dataclasses import ChatMessage

    @component
    class ChatGenerator:  # test double: replies as OpenAIChatGenerator(logprobs) makes them
        @component.output_types(replies=list[ChatMessage])
        def run(self, query: str) -> dict:
            content = [{"token": "x", "logprob": lp} for lp in _logprobs(query)]
            meta = {"logprobs": {"content": content, "refusal": None}} if with_logprobs else {}
            return {"replies": [ChatMessage.from_assistant(f"closed-book: {query}", meta=meta)]}

    return ChatGenerator()


def test_haystack_answer_gate_router_sends_the_unsure_answers_to_retrieve():
    from haystack.dataclasses import ChatMessage

    from retrieval_gate.integrations.haystack import AnswerGateRouter

    pipe = _haystack_pipeline(_haystack_generator(with_logprobs=True))
    for question, retrieved in zip(QUESTIONS, RETRIEVED, strict=True):
        out = pipe.run({"gate": {"query": question}})
        if retrieved:
            assert out["rag"]["reply"] == f"from-rag: {question}" and "answer_gate" not in out
        else:
            assert out["answer_gate"]["answer"][0].text == f"closed-book: {question}"
            assert "rag" not in out
    router = AnswerGateRouter(AnswerConfidenceGate())
    replies = [ChatMessage.from_assistant("a", meta={"logprobs": {"content": [
        {"logprob": lp} for lp in _logprobs(q)]}}) for q in QUESTIONS[1:]]  # fmt: skip
    assert router.escalations(QUESTIONS[1:], replies) == ESCALATED[1:]
    # a stream's meta: one logprobs object per chunk
    streamed = ChatMessage.from_assistant("a", meta={"logprobs": [
        {"content": [{"logprob": -2.5}]}, {"content": [{"logprob": -3.0}]}]})  # fmt: skip
    assert router.escalations([QUESTIONS[1]], [streamed]) == [True]
    from retrieval_gate.errors import ConfigError

    with pytest.raises(ConfigError, match="saves its gate by the folder it was loaded from"):
        router.to_dict()  # a gate built in Python: no folder to save it by


def test_haystack_refuses_replies_without_logprobs_and_an_answer_gate_that_reads_none():
    from haystack.dataclasses import ChatMessage

    from retrieval_gate.integrations.haystack import AnswerGateRouter

    pipe = _haystack_pipeline(_haystack_generator(with_logprobs=False))
    with pytest.raises(Exception, match=r"generation_kwargs.*logprobs_of=") as failed:
        pipe.run({"gate": {"query": QUESTIONS[1]}})
    cause = failed.value if isinstance(failed.value, ConfigError) else failed.value.__cause__
    assert isinstance(cause, ConfigError)
    question_only = AnswerGateRouter(AnswerConfidenceGate(), logprobs_of=lambda r: None)
    bare = [ChatMessage.from_assistant("a") for _ in QUESTIONS[1:]]
    assert question_only.escalations(QUESTIONS[1:], bare) == ESCALATED[1:]
    with pytest.raises(ConfigError, match="answer_gate: gate 'first'"):
        AnswerGateRouter(FirstGate())


# ------------------------------------------------------------------ a router's budget

# All short: the router keeps every one closed-book (cost 0); escalating one costs 1. At a
# budget of 0.4 a question, 5 questions leave 2.0: the two unsurest answers are escalated.
SHORT = ["Who is ulbrecht?", "Who wrote Hamlet?", "What is zorp?", "Capital of France?",
         "Who painted vrel?"]  # fmt: skip
SHORT_LOGPROBS = {SHORT[0]: [-3.0], SHORT[1]: [-0.01], SHORT[2]: [-2.0], SHORT[3]: [-0.02],
                  SHORT[4]: [-1.0]}  # fmt: skip  # P(wrong): 0.95, 0.01, 0.86, 0.02, 0.63


def _budget_router():
    from routers import LengthRouter

    return LengthRouter(strategies=("no_retrieval", "one_retrieval"),
                        costs={"no_retrieval": 0.0, "one_retrieval": 1.0})  # fmt: skip


def _short_chat_model():
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableLambda

    def answer(item: dict) -> AIMessage:
        content = [{"token": "x", "logprob": lp} for lp in SHORT_LOGPROBS[item["question"]]]
        return AIMessage(
            content="closed-book", response_metadata={"logprobs": {"content": content}}
        )

    return RunnableLambda(answer)


@pytest.mark.parametrize("budget, escalated", [(None, {0, 2, 4}), (0.4, {0, 2}), (0.1, set()),
                                               (1.0, {0, 2, 4})])  # fmt: skip
def test_langchain_escalations_are_paid_from_the_routers_budget(budget, escalated):
    from retrieval_gate.integrations.langchain import GateRouter

    router = GateRouter(_budget_router(), retrieve=_rag([]), direct=_short_chat_model(),
                        answer_gate=AnswerConfidenceGate(), budget=budget)  # fmt: skip
    outputs = router.batch([{"question": q} for q in SHORT])
    assert {i for i, o in enumerate(outputs) if _text(o).startswith("from-rag")} == escalated


def test_one_question_adapters_keep_a_running_budget_account():
    from retrieval_gate.integrations.branches import budget_account, escalate

    account = budget_account(_budget_router(), 0.5)
    assert account is not None and account.extra == 1.0
    taken = []
    for q in SHORT:  # one at a time, as LlamaIndex's selector and Haystack's components see them
        account.charge(["no_retrieval"])  # the strategy it picked
        taken += escalate(AnswerConfidenceGate(), [q], [SHORT_LOGPROBS[q]], account=account)
    # 0.5 a question: the first escalation waits for the second question's share
    assert taken == [False, False, True, False, True]
    assert account.spent <= 0.5 * account.questions
    assert budget_account(FirstGate(), 0.5) is None  # a binary gate: no budget, no cap
    assert budget_account(_budget_router(), None) is None


def test_llamaindex_escalations_are_paid_from_the_routers_budget():
    from retrieval_gate.integrations.llamaindex import gated_query_engine

    retrieval = _llamaindex_retrieval()
    engine = gated_query_engine(_budget_router(), retrieval,
                                _llamaindex_llm(True, SHORT_LOGPROBS.__getitem__),
                                budget=0.5, answer_gate=AnswerConfidenceGate())  # fmt: skip
    escalated = [engine.query(q).metadata["escalated"] for q in SHORT]
    assert escalated == [False, False, True, False, True]  # as the running account allows
    assert retrieval.seen == [SHORT[2], SHORT[4]]


def test_langchain_keeps_a_failed_direct_call_as_its_own_output():
    """return_exceptions=True: one direct call that failed was read for log-probabilities
    with the rest, and the whole batch raised a misleading ConfigError about them. The
    failure stays its input's output (not escalated), the others escalate as ever."""
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate.integrations.langchain import GateRouter

    def flaky(item: dict):
        if item["question"] == QUESTIONS[2]:
            raise TimeoutError("LLM server timed out")
        return item

    seen: list[str] = []
    router = GateRouter(FirstGate(), retrieve=_rag(seen),
                        direct=RunnableLambda(flaky) | _chat_model(),
                        answer_gate=AnswerConfidenceGate())  # fmt: skip
    inputs = [{"question": q} for q in QUESTIONS]
    outputs = router.batch(inputs, return_exceptions=True)
    assert isinstance(outputs[2], TimeoutError)
    kept = [i for i in range(len(QUESTIONS)) if i != 2]
    assert [_text(outputs[i]).startswith("from-rag") for i in kept] == [RETRIEVED[i] for i in kept]
    assert QUESTIONS[2] not in seen
    with pytest.raises(TimeoutError, match="timed out"):  # without: the call's own error
        router.batch(inputs)
