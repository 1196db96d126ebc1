"""`GET /metrics` (Prometheus) and `/health`'s `metrics` totals: a router served with the
scripted generator of tests/routers.py (no engine), a real BM25 retriever."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from retrieval_gate.rag import AdaptiveRAG
from retrieval_gate.rag.service import create_app
from retrieval_gate.retrieval import BM25Retriever, Document
from retrieval_gate.strategies import BUILTIN

DOCS = [
    Document(id="d0", title="Hamlet", text="Hamlet is a tragedy by William Shakespeare. " * 4),
    Document(id="d1", title="Paris", text="Paris is the capital of France. " * 4),
]
QUESTIONS = ["Capital of France?", "Who wrote the tragedy Hamlet?",
             "Who founded the city where the tragedy Hamlet was written, and when was it?"]  # fmt: skip


def _app():
    from routers import LengthRouter, ScriptedGenerator

    gen = ScriptedGenerator({QUESTIONS[2]: ["Hamlet was written in London."]})
    return create_app(AdaptiveRAG(LengthRouter(short=3, long=6), BM25Retriever(DOCS), gen, k=2))


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from a parsed exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_answers_and_parse():
    names = list(BUILTIN.names)  # the router's strategies, cheapest first
    with TestClient(_app()) as client:
        before = _samples(client.get("/metrics").text)
        assert before[("retrieval_gate_routed_questions_total", (("strategy", names[0]),))] == 0
        assert before[("retrieval_gate_escalations_total", ())] == 0
        answers = []
        for _ in range(2):
            r = client.post("/answer", json={"questions": QUESTIONS})
            assert r.status_code == 200, r.text
            answers += r.json()["answers"]
        r = client.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        after = _samples(r.text)
        health = client.get("/health").json()["metrics"]

    def got(name: str, **labels: str) -> float:
        return after[(f"retrieval_gate_{name}", tuple(sorted(labels.items())))]

    # the length router sends one question to each strategy; two requests
    for s in names:
        assert got("routed_questions_total", strategy=s) == 2
        assert got("answered_questions_total", strategy=s) == 2
    one_call = [s for s in names if not BUILTIN[s].multi_step]
    multi = next(s for s in names if BUILTIN[s].multi_step)
    # each answer's own retrievals and LLM calls, summed per strategy
    for s in names:
        mine = [a for a in answers if a["strategy"] == s]
        assert got("retrievals_total", strategy=s) == sum(a["retrievals"] for a in mine)
        assert got("llm_calls_total", strategy=s) == sum(a["llm_calls"] for a in mine)
    assert got("retrievals_total", strategy=names[0]) == 0
    assert all(got("llm_calls_total", strategy=s) == 2 for s in one_call)
    assert got("llm_calls_total", strategy=multi) >= 3  # a step a call (2, then 1: scripted)
    assert got("llm_tokens_total", kind="prompt") > 0
    assert got("llm_tokens_total", kind="completion") > 0
    assert got("escalations_total") == 0
    assert got("requests_total", endpoint="/answer", status="200") == 2
    assert got("request_seconds_count", endpoint="/answer") == 2
    assert got("request_seconds_count", endpoint="/metrics") == 1  # the first scrape
    assert got("gate_seconds_count") == 2 and got("gate_seconds_sum") > 0
    # /health reports the same totals as JSON
    assert health["routed_questions"] == {"total": 6, "by_strategy": dict.fromkeys(names, 2)}
    assert health["retrievals"]["total"] == sum(a["retrievals"] for a in answers)
    assert health["llm_calls"]["total"] == sum(a["llm_calls"] for a in answers)
    assert health["escalations"] == 0 and health["requests"]["/answer"] == 2
    assert health["prompt_tokens"] == got("llm_tokens_total", kind="prompt")


def test_each_app_has_its_own_registry_and_odd_paths_are_other():
    with TestClient(_app()) as one, TestClient(_app()) as two:
        one.post("/score", json={"questions": QUESTIONS[:1]})
        one.get("/no-such-page")
        a, b = _samples(one.get("/metrics").text), _samples(two.get("/metrics").text)
    key = ("retrieval_gate_requests_total", (("endpoint", "/score"), ("status", "200")))
    assert a[key] == 1 and key not in b
    assert a[("retrieval_gate_requests_total", (("endpoint", "other"), ("status", "404")))] == 1
    assert not any("no-such-page" in str(k) for k in a)
    # /metrics is not in the OpenAPI schema (it is text, not JSON) and /score stays guarded
    assert "/metrics" not in _app().openapi()["paths"]
