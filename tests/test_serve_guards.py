"""`serve`'s guards found by probing it over HTTP: a failed batch's re-runs, gates that cannot
decide for a request, an API key no client can send, an outage's counts, answers held past
their call (--no-cache), a flag serve does not have, and the schema's error statuses."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi.testclient import TestClient

from pg_server import free_port
from retrieval_gate.cli import main
from retrieval_gate.commands.serve import check_bind
from retrieval_gate.errors import BackendError, ConfigError
from retrieval_gate.generation.cache import CachedGenerator
from retrieval_gate.rag import AdaptiveRAG
from retrieval_gate.rag.batcher import Batcher
from retrieval_gate.rag.service import create_app
from retrieval_gate.retrieval import BM25Retriever, Document
from routers import LengthRouter, ScriptedGenerator

DOCS = [Document(id="d0", title="Paris", text="Paris is the capital of France. " * 4)]


class Down(ScriptedGenerator):
    """The scripted generator, whose server fails every prompt naming zorblat or quenvik."""

    def _reply(self, prompt: str):
        if "zorblat" in prompt or "quenvik" in prompt:
            return BackendError("cannot reach the generator server")
        return super()._reply(prompt)


@pytest.fixture
def no_server(monkeypatch):
    """`serve` gets as far as starting the server, which it then does not: a flag taken
    returns 0 at once rather than serving for good."""
    monkeypatch.setattr("retrieval_gate.rag.service.serve", lambda *a, **k: None)


def _rag(generator) -> AdaptiveRAG:
    return AdaptiveRAG(LengthRouter(short=3, long=6), BM25Retriever(DOCS), generator, k=1)


def test_a_failed_batch_re_runs_only_the_requests_still_waiting_from_the_batchs_start():
    """Requests that gave up (504) were re-run one by one after their batch failed, holding
    the engine from live requests while /health's "stuck" clock restarted at each re-run."""
    calls: list[tuple[list[str], float | None]] = []

    def engine(items: list[str]) -> list[str]:
        calls.append((list(items), batcher.call_started))
        if items == ["first"]:
            time.sleep(0.2)  # the others queue behind it: one batch
            return ["ok"]
        if len(items) > 1:
            time.sleep(0.5)  # two of them give up meanwhile
        raise BackendError("generator down")

    batcher = Batcher(engine, max_batch=16, max_backlog=64)

    async def ask(item: str, timeout: float) -> str:
        try:
            await asyncio.wait_for(batcher.submit([item]), timeout)
            return "ok"
        except (TimeoutError, BackendError) as e:
            return type(e).__name__

    async def scenario() -> list[str]:
        first = asyncio.ensure_future(ask("first", 5))
        await asyncio.sleep(0.05)
        return await asyncio.gather(first, ask("a", 0.4), ask("b", 0.4), ask("c", 5), ask("d", 5))

    got = asyncio.run(scenario())
    batcher.close()
    assert got == ["ok", "TimeoutError", "TimeoutError", "BackendError", "BackendError"]
    assert [items for items, _ in calls] == [["first"], ["a", "b", "c", "d"], ["c"], ["d"]]
    batch_start = calls[1][1]
    assert batch_start is not None and [s for _, s in calls[2:]] == [batch_start] * 2


@pytest.mark.parametrize("gate", ["popularity", "popularity-global"])
def test_the_popularity_gates_are_refused_by_serve(capsys, no_server, gate):
    """A request carries no popularity signal: every question got the same score."""
    assert main(["serve", "--mode", "gate", "--gate", gate, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert f"--gate {gate} thresholds each question's popularity signal" in err
    assert "same score" in err and "--router DIR" in err


@pytest.mark.parametrize("key", ["clé-secret", "secret ", "abc\r", " abc", "tab\tkey"])
def test_an_api_key_no_client_can_send_is_refused_at_start(key):
    with pytest.raises(ConfigError, match=r"--api-key \(or \$RETRIEVAL_GATE_API_KEY\)") as e:
        check_bind("127.0.0.1", free_port(), key)
    assert "printable ASCII without leading or trailing whitespace" in str(e.value)
    check_bind("127.0.0.1", free_port(), "s3cret-KEY_with.punct~")  # a sendable one


def _sum(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(f"retrieval_gate_{name}{{"))  # fmt: skip


def test_a_request_whose_every_question_failed_is_counted_as_failed():
    """A 503 (the generator down) left failed_questions_total flat: an outage unseen."""
    with TestClient(create_app(_rag(Down()))) as client:
        for _ in range(3):
            r = client.post("/answer", json={"questions": ["what is zorblat", "zorblat again?"]})
            assert r.status_code == 503, r.text
        metrics = client.get("/metrics").text
    assert _sum(metrics, "failed_questions_total") == 6
    assert _sum(metrics, "answered_questions_total") == 6


def test_answers_held_from_a_failed_call_serve_only_its_retry():
    """Without a store, a failed call's other answers were held for the process and replayed
    as cached to a later, unrelated call (serve --no-cache)."""
    inner = Down()
    gen = CachedGenerator(inner, store=None)
    assert isinstance(gen.try_generate(["zorblat one", "fine"])[0], BackendError)
    gen.try_generate(["fine"])  # its retry: held, not asked again
    assert inner.calls == [["zorblat one", "fine"]]
    gen.try_generate(["zorblat one", "fine"])
    gen.try_generate(["quenvik two", "fine"])  # another call: computed
    assert inner.calls[-1] == ["quenvik two", "fine"]
    # serve: an answered request's held answers are not another request's
    inner = Down()
    with TestClient(create_app(_rag(CachedGenerator(inner, store=None)))) as client:
        first = client.post("/answer", json={"questions": ["zorblat one?", "fine question?"]})
        assert first.status_code == 200 and first.json()["answers"][0]["error"]
        second = client.post("/answer", json={"questions": ["fine question?"]}).json()
    assert second["costs"]["prompts_computed"] == 1 and second["costs"]["prompts_cached"] == 0


def test_a_router_flag_without_a_router_names_serves_own_flag(capsys, no_server):
    argv = ["serve", "--mode", "gate", "--gate", "never", "--router-variant", "int8"]
    assert main([*argv, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "pass it with --router DIR" in err and "--modes" not in err


def test_the_schema_lists_every_error_status_the_server_returns():
    with TestClient(create_app(_rag(ScriptedGenerator()))) as client:
        schema = client.get("/openapi.json").json()
        assert client.get("/score").status_code == 405
        assert client.post("/score", content=b"{}").status_code == 415
    for path in ("/score", "/answer"):
        codes = set(schema["paths"][path]["post"]["responses"])
        assert {"405", "408", "413", "415", "429", "503", "504"} <= codes
