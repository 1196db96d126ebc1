"""The HTTP face of the gate and of the adaptive RAG loop.

`create_app(gate)` serves the gate alone: `POST /score {"questions": [...]}` -> probability,
retrieve decision and strategy per question, no generator. `create_app(rag)` serves `/score`
and `POST /answer` (gate or router -> strategy -> retrieve -> generate, with the measured
costs, per strategy too). A router takes an optional per-request `"budget"`. Both have
`GET /health`, which also reports the traffic since start (realised retrieval rate, mean cost
per question, measured retrievals and LLM calls per answered question), and `GET /metrics`,
the same counters and the request and gate latencies for Prometheus (`service_metrics`).

Built to degrade, not stall:
- limits are checked before work: the body size before it is read (413), then questions per
  request, characters per question, blank or invalid-Unicode questions (422, naming the
  question); a question whose prompt cannot fit the generator's context gets an error in its
  own answer, never a failed batch;
- the gate and the engine each run on one worker thread fed by a bounded backlog (`Batcher`):
  requests await futures, concurrent requests are batched into one call, a request that does
  not fit the backlog or would wait longer than `request_timeout` at the measured rate is
  refused at once with 429 and `Retry-After`, one not served in time anyway gets 504, and
  `/health` and `/score` answer at once while the engine works; `/answer` routes first (the
  gate's worker), so a multi-step question enters the engine's backlog counted as its
  `max_steps` steps;
- a connection whose request head has not arrived 30 s after it opened (or after its last
  response) is closed, a body not whole 30 s after its head gets 408 (`slow_clients`);
- an optional bearer token (`api_key`) guards `/score` and `/answer`; `/health` and
  `/metrics` stay open."""

import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..data.answer_confidence import TOKEN_LOGPROBS, parse_token_logprobs
from ..errors import BackendError, DataError, InputError, RetrievalGateError
from ..gates.base import (
    AsksGenerator,
    Gate,
    as_questions,
    check_gate,
    is_router,
    reads_answers,
    side_columns,
)
from ..questions import VISIBLE, Question, has_text
from ..strategies import BUILTIN, MULTI_STEP, StrategyRegistry
from ..strict_rows import RepeatedKeyError, UnreadableJSONError, loads, lone_surrogate_at
from . import slow_clients
from .batcher import Batcher, Busy, TooHeavy
from .cascade import Cascade, answer_gate_of, escalate_kept, escalation_strategy
from .decisions import (
    Decision,
    check_router,
    cost_unit,
    decide,
    routed_strategies,
    strategy_costs,
)
from .limits import Limits
from .loop import AdaptiveRAG, Answer, Costs
from .service_metrics import ServiceMetrics, Timing
from .traffic import Traffic

log = logging.getLogger(__name__)


WARM_UP = "Who wrote Hamlet?"
# Seconds between checks that a waiting request's client is still there (`_wait`).
DISCONNECT_POLL = 0.25
# /health says an engine is stuck when its call under way has run this many request timeouts:
# every request in it has had its 504 long since (a generator that took the call, never answered).
STUCK_AFTER = 2.0
# The most validation problems one 422 names: 100,000 unknown keys made a 6.5 MB reply.
MAX_REASONS = 10
# Seconds uvicorn waits, on SIGTERM or Ctrl-C, for requests under way (at most the request
# timeout): a client that never read its response held the shutdown for good.
SHUTDOWN_GRACE = 30.0
# Seconds before the grace ends that requests still waiting get their 503 (the response sent
# while uvicorn still waits, at most half the grace; it then cancels them: a bare 500).
SHUTDOWN_MARGIN = 1.0


class Shutdown:
    """When the server began to stop (SIGTERM or Ctrl-C, `serve`'s uvicorn) and, from then,
    by when a request still waiting is answered 503: `grace` is uvicorn's graceful timeout,
    past which it cancels the requests under way (each got a bare 500)."""

    def __init__(self, grace: float):
        self.grace = grace
        self.answer_by: float | None = None  # time.monotonic()

    def begin(self) -> None:
        """Called from the signal handler: an assignment, safe there."""
        if self.answer_by is None:
            margin = min(SHUTDOWN_MARGIN, self.grace / 2)
            self.answer_by = time.monotonic() + self.grace - margin

    def left(self) -> float | None:
        """Seconds until a waiting request must be answered (None: not stopping)."""
        return None if self.answer_by is None else self.answer_by - time.monotonic()

    def over(self) -> bool:
        """The server is stopping and a waiting request must be answered now."""
        left = self.left()
        return left is not None and left <= 0


STOPPING = ("the server is shutting down and this request was not answered in time; retry "
            "(on another server, or once this one is back)")  # fmt: skip


class ScoreItem(BaseModel):
    question: str
    probability: float = Field(description="the gate's P(needs retrieval)")
    retrieve: bool = Field(
        description="the strategy retrieves (a binary gate: probability >= threshold)"
    )
    strategy: str = Field(description="no_retrieval | one_retrieval | multi_step")
    escalated: bool | None = Field(
        None,
        description="a cascade's (`--mode gate --answer-gate`): its answer gate read the "
        "question's token_logprobs and sent it on to the next strategy (null: no answer read)",
    )
    answer_score: float | None = Field(
        None,
        description="a cascade's answer gate's P(needs retrieval), read from the "
        "question's token_logprobs (null: not read: the router retrieves, or none were sent)",
    )


class ScoreResponse(BaseModel):
    gate: str
    threshold: float
    strategies: list[str] = Field(description="what this gate or router picks from, cheapest first")
    budget: float | None = Field(
        description="the budget the request was decided at: its own, "
        "else the server's --budget (None: the router's default)"
    )
    scores: list[ScoreItem]


class AnswerItem(BaseModel):
    question: str
    answer: str = Field(description="empty when `error` is set")
    strategy: str = Field(description="the strategy it ran")
    retrieve: bool
    probability: float
    documents: list[str] = Field(description="ids of the documents in the (last) prompt")
    retrievals: int = Field(description="retrieval requests made for it")
    llm_calls: int = Field(description="generations made for it (multi-step: one a step)")
    escalated: bool = Field(
        False,
        description="the cascade kept it closed-book, read the "
        "answer, and answered it again with the next strategy",
    )
    steps: list[dict[str, Any]] = Field(
        description="multi-step trace: per step its query, documents and text"
    )
    error: str | None = Field(None, description="why this question got no answer")


class AnswerResponse(BaseModel):
    gate: str
    threshold: float
    budget: float | None = Field(
        description="the budget the request was decided at: its own, "
        "else the server's --budget (None: the router's default)"
    )
    answers: list[AnswerItem]
    costs: dict[str, Any] = Field(
        description="measured costs of the engine call (its batch), overall and `by_strategy`"
    )
    decision_seconds: float = Field(description="the gate's or router's call for this request")
    queue_seconds: float = Field(description="time waited before the engine call started")


class ErrorResponse(BaseModel):
    detail: str


_ERRORS = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "unreadable body",
        401: "missing or wrong bearer token",
        405: "another method than POST",
        408: "the body did not arrive in time",
        413: "body larger than the limit",
        415: "a body not sent as `Content-Type: application/json`",
        422: "invalid request (the reason names the field), or one too heavy for the backlog",
        429: "backlog full; retry after `Retry-After` seconds",
        503: "the engine failed, or the server is shutting down",
        504: "not answered within the request timeout",
    }.items()
}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body over {limit} bytes (--max-body-bytes)")


CLIENT_CLOSED = 499  # a client that went away mid-request (nginx's code): not a server error
_SEND = 'send a JSON object such as {"questions": ["..."]}'
_QUERY = ("query parameter %r: a request's fields are read from its JSON body only, e.g. "
          '{"questions": ["..."], "budget": 1.0}')  # fmt: skip


class StrictJSON(APIRoute):
    """A route whose JSON body may not name a key twice (422, naming it): Python's json keeps
    the last one silently, so `{"questions": [...], "questions": [...]}` was answered for the
    second list alone, as the files' readers refuse it (strict_rows)."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            if request.method == "POST" and request.query_params:  # `?budget=2` went unread
                return JSONResponse(status_code=422, content={"detail": _QUERY % next(iter(
                    request.query_params))})  # fmt: skip
            try:
                body = await request.body()  # kept: the handler reads it again from the request
            except ClientDisconnect:  # gone before its body came: an ERROR traceback and a 500
                return Response(status_code=CLIENT_CLOSED)  # counted, though nobody reads it
            sent_as = request.headers.get("content-type")
            if body and not _is_json(sent_as):
                return JSONResponse(status_code=415, content={"detail": _not_json(sent_as)})
            encoding = request.headers.get("content-encoding", "identity").strip().lower()
            if body and encoding != "identity":  # gzip bytes were read as text: "not UTF-8"
                return JSONResponse(status_code=415, content={"detail": _ENCODED % encoding})
            try:
                sent = loads(body, lone_surrogates=True) if body else None  # named per field below
            except RepeatedKeyError as e:
                return JSONResponse(status_code=422, content={"detail": f"body: {e}"})
            except (UnicodeDecodeError, UnreadableJSONError) as e:  # FastAPI's 400 said only "There
                # was an error parsing the body"
                return JSONResponse(status_code=400, content={"detail": _unreadable(e)})
            except ValueError:
                sent = ...  # not JSON: FastAPI's own 422 names the character
            if body and sent is None:  # FastAPI reads JSON null as no body: "body: empty"
                return JSONResponse(status_code=422, content={"detail": f"body: null; {_SEND}"})
            if body and sent is not ... and not isinstance(sent, dict):  # FastAPI: "a valid dict"
                return JSONResponse(status_code=422, content={"detail": _not_object(sent)})
            return await handler(request)

        return run


def _unreadable(error: UnicodeDecodeError | UnreadableJSONError) -> str:
    """Why a body could not be read as JSON at all (an error parsing the body)."""
    if isinstance(error, UnicodeDecodeError):
        return f"body: not UTF-8 text (byte {error.start} is 0x{error.object[error.start]:02x}); " \
            "send the JSON as UTF-8"  # fmt: skip
    return f'body: JSON past what can be read ({error.msg}); send an object such as ' \
        '{"questions": ["..."]}'  # fmt: skip


def _not_json(sent_as: str | None) -> str:
    """Why a body sent as another type, or with no type, was not read. FastAPI reads such a
    body (curl -d: a form; Python's requests with data=: no header) as no JSON at all and
    said only "Input should be a valid dictionary"; it is refused on purpose (a browser may
    send either to a local server from any page), so say why and the fix."""
    sent = "without a Content-Type header" if sent_as is None else f"as Content-Type {sent_as!r}"
    return (f"body: sent {sent}; send it as JSON with the header Content-Type: "
            "application/json (curl: -H 'content-type: application/json'; requests: json=)")  # fmt: skip


_KINDS = {list: "an array", dict: "an object", str: "a string", bool: "true or false",
          int: "a number", float: "a number"}  # fmt: skip


def _not_object(sent: Any) -> str:
    """A body of JSON that is not an object: what it is, and the shape to send."""
    return f"body: {_KINDS.get(type(sent), 'not an object')}; {_SEND}"


_ENCODED = ("body: sent with Content-Encoding %r, which this server does not decode; send the "
            "JSON uncompressed (no Content-Encoding header)")  # fmt: skip


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class BodyLate(HTTPException):
    def __init__(self) -> None:
        late = slow_clients.BODY_TIMEOUT
        super().__init__(408, f"the request body did not all arrive within {late:g} s of its "
                              "headers; send it whole")  # fmt: skip


class BodyLimit:
    """ASGI middleware refusing bodies over `max_bytes` before they are read: at once from
    Content-Length, or as soon as a chunked body passes the limit; and bodies not whole
    `slow_clients.BODY_TIMEOUT` s after the first read (408: a client that sent headers, then
    nothing, held its connection and a task for good)."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            response = JSONResponse({"detail": BodyTooLarge(self.max_bytes).detail}, 413)
            return await response(scope, receive, send)
        seen, whole, deadline = 0, False, None

        async def limited() -> dict:
            nonlocal seen, whole, deadline
            if whole:  # later reads wait for the client to leave: no deadline
                return await receive()
            if deadline is None:  # from the first read on
                deadline = asyncio.get_running_loop().time() + slow_clients.BODY_TIMEOUT
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyLate() from None  # FastAPI passes HTTPExceptions through
            seen += len(message.get("body", b""))
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            if seen > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited, send)


def _valid_unicode(value: Any) -> Any:
    """JSON may escape lone surrogates (`"\\ud800"`), which no tokenizer can encode."""
    if isinstance(value, str) and (at := lone_surrogate_at(value)) is not None:
        raise InputError(  # a ValueError, so pydantic reports it as a 422
            f"is not valid Unicode (a lone surrogate at character {at}); send UTF-8"
        )
    return value


# said by _not_blank and, for the schema pattern's refusal, by _reason
BLANK = "is empty or only whitespace or control characters"


def _not_blank(text: str) -> str:
    if not has_text(text):
        raise InputError(BLANK)
    return text


def _as_logprob_list(value: Any) -> Any:
    """One answer's log-probabilities as the OpenAI-compatible reply has them (`logprobs`,
    `{"content": [{"token", "logprob"}, ...]}`, or its list of token entries) read as the list
    of numbers, as files read them; a list of numbers (or anything else) is left to the
    schema."""
    if not isinstance(value, dict) and not (
        isinstance(value, list) and any(isinstance(v, dict) for v in value)
    ):
        return value
    try:
        return parse_token_logprobs(value)
    except DataError as e:
        raise InputError(e.args[0] if e.args else str(e)) from None  # pydantic: a 422


def _request_model(
    name: str,
    limits: Limits,
    max_budget: float | None = None,
    columns: Sequence[str] = (),
    answers: bool = False,
) -> type[BaseModel]:
    """`{"questions": [...]}` with this app's limits in its schema and its validation; with
    `max_budget` (a router's), an optional `"budget"` from 0 to it; with `columns` (a gate
    trained on side features), a required `"features"`: per column one value (or null,
    unknown) per question; with `answers` (a two-stage gate), an optional `"token_logprobs"`:
    per question its closed-book answer's token log-probabilities (or null)."""
    text = Annotated[
        str,
        # the schema says what _not_blank checks: a client (or a fuzzer) reads it there
        Field(min_length=1, max_length=limits.max_question_chars, pattern=VISIBLE),
        BeforeValidator(_valid_unicode),
        AfterValidator(_not_blank),
    ]
    questions = Annotated[
        list[text],
        Field(
            min_length=1,
            max_length=limits.max_questions,
            description="questions with some visible text, valid Unicode (UTF-8)",
        ),
    ]
    config = ConfigDict(extra="forbid", strict=True)
    fields: dict[str, Any] = {"questions": (questions, ...)}
    if max_budget is not None:
        budget = Annotated[
            float | None,
            Field(ge=0, le=max_budget, allow_inf_nan=False,
                  description="the router's budget: mean cost per question (default: its own)"),
        ]  # fmt: skip
        fields["budget"] = (budget, None)
    number = Annotated[float, Field(allow_inf_nan=False)]
    if columns:
        column = Annotated[list[number | None], Field(max_length=limits.max_questions)]
        features = create_model(f"{name}Features", __config__=config,
                                **{c: (column, ...) for c in columns})  # fmt: skip
        fields["features"] = (features, Field(description="the gate's side features: per "
                              "column one value per question, in order (null: unknown)"))  # fmt: skip
    if answers:
        logprob = Annotated[float, Field(le=0, ge=-100_000, allow_inf_nan=False)]
        tokens = Annotated[list[logprob], Field(min_length=1)]  # an answer has a token
        one = Annotated[tokens | None, BeforeValidator(_as_logprob_list)]
        lists = Annotated[list[one] | None, Field(
            max_length=limits.max_questions, description="per question its closed-book "
            "answer's token log-probabilities (a list of numbers, or the OpenAI-compatible "
            "reply's `logprobs` as it comes), or null (the question-only score)")]  # fmt: skip
        fields["token_logprobs"] = (lists, None)
    return create_model(name, __config__=config, **fields)


def create_app(
    service: AdaptiveRAG | Gate,
    limits: Limits | None = None,
    api_key: str | None = None,
    warm_up: bool = False,
    strategies: StrategyRegistry = BUILTIN,
    budget: float | None = None,
) -> FastAPI:
    """The app for a gate alone (`/score`) or a RAG loop (`/score` and `/answer`). With
    `warm_up`, one question goes through the gate (and the engine) at startup. `strategies`:
    the registry a gate alone is served with (a RAG loop has its own); `budget`: a router's
    budget for the requests that send none (`serve --budget`; a RAG loop has its own)."""
    if not isinstance(service, AdaptiveRAG):  # a folder's path was served: every /score a 500
        check_gate(service, "service")
    limits = limits or Limits()
    limits.check()
    rag = service if isinstance(service, AdaptiveRAG) else None
    default_budget = rag.budget if rag else budget
    gate = rag.gate if rag else service
    columns = side_columns(gate)  # a request gives them per question
    registry = rag.registry if rag else check_router(gate, default_budget, strategies)
    router = is_router(gate)
    # gate mode: a cascade reads the answers the requests send (answer mode makes its own)
    cascade = gate if rag is None and answer_gate_of(gate) is not None else None
    if cascade is not None:  # a cascade with nothing to escalate to: refused now
        escalation_strategy(cascade, registry)  # type: ignore[arg-type]
    strategies_served = list(routed_strategies(gate, registry))
    prices = strategy_costs(gate, registry)
    traffic = Traffic(prices, cost_unit(prices), registry)
    metrics = ServiceMetrics(strategies_served)  # this app's own registry (GET /metrics)
    # A gate that holds the generator (prompt, confidence gates) must not enter the engine
    # while it generates: both workers then take the engine's lock.
    engine = threading.Lock()
    sizes = (limits.max_batch, limits.max_backlog, limits.request_timeout)
    # uvicorn's graceful timeout (`serve`): a client that never read its response held the
    # shutdown for good
    shutdown = Shutdown(min(SHUTDOWN_GRACE, limits.request_timeout))
    shared = engine if isinstance(gate, AsksGenerator) else None
    scorer = Batcher(_locked(_decisions(gate, rag, registry, cascade), shared), *sizes,
                     name="gate")  # fmt: skip
    answerer = None
    if rag:
        steps = {s.name: rag.steps_config(s).max_steps if s.multi_step else 1 for s in registry}
        # a full request of the dearest questions must fit the engine's backlog
        limits.check(max(steps.get(s, 1) for s in strategies_served))
        answerer = Batcher(_locked(_answers(rag), engine), *sizes, name="engine",
                           weight=lambda r: steps.get(r.strategy, 1))  # fmt: skip

    async def route(
        sent: dict[str, Any], client: Request, count: bool = True
    ) -> tuple[list[_Routed], float]:
        """`sent`: the request as a dict (`model_dump`): its questions, a router's budget, the
        side features and answer log-probabilities the served gate reads; `client`: its
        connection, watched while it waits. `count`: the routing counted now (/score); /answer
        counts it once the engine's backlog admits the questions (`counted`), so a request
        refused with 429 there is not in the realised figures."""
        budget = _budget_of(sent, default_budget)
        items = [(q, budget) for q in _as_questions(
            sent["questions"], sent.get("features"), sent.get("token_logprobs"))]  # fmt: skip
        routed, _ = await _wait(scorer, items, limits.request_timeout, client,
                                shutdown=shutdown)  # fmt: skip
        decided = routed[0].seconds if routed else 0.0
        if count:
            counted(routed, decided)
        return routed, decided

    def counted(routed: list[_Routed], decided: float) -> None:
        """The routing of questions served (/health's traffic, /metrics)."""
        traffic.routed([r.strategy for r in routed])
        metrics.routed_questions([r.strategy for r in routed], decided)
        metrics.escalations.inc(sum(r.escalated is True for r in routed))  # gate-mode cascade

    def all_failed(routed: list[_Routed]) -> None:
        """A request whose every question failed in the engine (503): run and failed, as
        those of a 200 with `error` are, or a generator outage left the counters flat."""
        for r in routed:
            metrics.answered.labels(r.strategy).inc()
            metrics.failed.labels(r.strategy).inc()

    async def warm() -> None:
        """One question through the gate and the engine: their first-call cost paid, their
        rate measured. Each within the request timeout (the gate may ask the generator too),
        else `BackendError`: a generator that took the call and never answered held the
        startup silent (no port, no log) for 300 s."""
        unknown = {c: [None] for c in columns}  # a side feature's value unknown
        questions = _as_questions([WARM_UP], unknown if columns else None)
        timeout = limits.request_timeout
        where = getattr(rag.generator, "base_url", None) if rag else None
        try:
            async with asyncio.timeout(timeout):
                routed, _ = await scorer.submit([(q, None) for q in questions])
            if answerer:
                async with asyncio.timeout(timeout):
                    await answerer.submit(routed)
        except TimeoutError:
            engine = f"the generator server at {where}" if where else "the engine"
            raise BackendError(
                f"{engine} did not answer the warm-up question within {timeout:g} s "
                "(--request-timeout) at startup: is it stuck or overloaded? (or raise "
                "--request-timeout)"
            ) from None
        except RetrievalGateError as e:
            raise BackendError(f"the warm-up question failed at startup: {e}") from None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warm_up:  # the engines' first-call cost paid here (`serve` pays it before)
            await warm()
        yield
        for batcher in (scorer, answerer):
            if batcher:
                batcher.close()

    app = FastAPI(
        title="retrieval-gate",
        summary=("a retrieval router" if router else "a retrieval-necessity gate")
        + (" in front of a RAG generator" if rag else " (gate only)"),
        lifespan=lifespan,
        docs_url=None,  # FastAPI's /docs and /redoc load their assets from a CDN: see _docs
        redoc_url=None,
    )
    app.state.warm_up = warm  # `serve` warms up before uvicorn starts: a failure is one line
    app.state.shutdown = shutdown  # `serve` begins it on SIGTERM or Ctrl-C
    app.router.route_class = StrictJSON  # the routes below: a key twice is refused
    _docs(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(Timing, metrics=metrics)  # outermost: times and counts 413s too
    guarded = [Depends(_bearer(api_key))] if api_key else []

    bodies: dict[str, type[BaseModel]] = {}  # each route's request model, for its errors

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # One readable sentence per problem, naming the field (instead of the nested default).
        body = bodies.get(request.url.path)
        keys = list(body.model_fields) if body else []
        errors = exc.errors()
        reasons: dict[str, None] = {}  # once each, the first MAX_REASONS of them
        for i, e in enumerate(errors):
            if len(reasons) == MAX_REASONS:
                reasons[f"and {len(errors) - i} more"] = None
                break
            reasons[_reason(e, keys, columns)] = None
        return JSONResponse(status_code=422, content={"detail": "; ".join(reasons)})

    @app.exception_handler(StarletteHTTPException)
    async def _no_route(request: Request, exc: StarletteHTTPException) -> Response:
        # Starlette's bare "Not Found" / "Method Not Allowed" (a typo, GET /score): the routes
        if exc.status_code in (404, 405) and exc.detail in ("Not Found", "Method Not Allowed"):
            exc = StarletteHTTPException(exc.status_code, _route_reason(app, request, exc),
                                         exc.headers)  # fmt: skip
        return await http_exception_handler(request, exc)

    def stuck() -> list[str]:
        """The workers whose call under way has run STUCK_AFTER request timeouts."""
        now, late = time.perf_counter(), STUCK_AFTER * limits.request_timeout
        return [name for name, b in (("gate", scorer), ("engine", answerer))
                if b and b.call_started is not None and now - b.call_started > late]  # fmt: skip

    @app.get("/health", responses={503: {"description": "a worker's call is stuck"}})
    async def health() -> Any:
        """`status` "ok", or "stuck" (503) while the gate's or engine's call under way has run
        STUCK_AFTER request timeouts (a generator that took it and never answers)."""
        late, now = stuck(), time.perf_counter()
        body = {
            "status": "stuck" if late else "ok",
            "mode": "answer" if rag else "gate",
            "gate": gate.name,
            "threshold": float(gate.threshold),
            "router": router,
            "budget": default_budget if router else None,  # the requests' default
            "strategies": strategies_served,
            "strategy_specs": registry.to_list(strategies_served),
            "retriever": rag.retriever.name if rag else None,
            "generator": rag.generator.name if rag else None,
            MULTI_STEP: asdict(rag.multi_step) if rag else None,  # the reasoner's settings
            "limits": asdict(limits),
            "queue": {
                name: {
                    "waiting": b.backlog,
                    "running": b.running,
                    "running_seconds": _since(b.call_started, now),
                }  # fmt: skip
                for name, b in (("gate", scorer), ("engine", answerer))
                if b
            },
            "traffic": traffic.snapshot(),
            "metrics": metrics.totals(),  # GET /metrics's counters, as JSON
        }
        if late:
            body["stuck"] = (f"the {' and '.join(late)} call under way has run over "
                             f"{STUCK_AFTER:g} x --request-timeout ({limits.request_timeout:g} s)"
                             ": is the generator stuck?")  # fmt: skip
            return JSONResponse(status_code=503, content=body)
        return body

    # HEAD too: uptime monitors and load balancers often probe with it (it was a 405); out of
    # the schema, where it would repeat GET's operation id
    app.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        """Prometheus's text format (`rag.service_metrics`); open like /health."""
        return Response(metrics.exposition(), media_type=metrics.content_type)

    # a router takes a per-request budget (up to its dearest strategy); a binary gate none
    max_budget = max(traffic.costs.values()) if router else None
    reads = reads_answers(gate) or cascade is not None
    score_request = _request_model("ScoreRequest", limits, max_budget, columns, reads)
    bodies["/score"] = score_request

    @app.post("/score", response_model=ScoreResponse, responses=_ERRORS, dependencies=guarded)
    async def score(
        request: score_request,  # type: ignore[valid-type]
        client: Request,
    ) -> ScoreResponse:
        """The gate's probability, retrieve decision and strategy per question (one batched
        call; a router routes at the request's `budget`)."""
        sent = request.model_dump()
        routed, _ = await route(sent, client)
        return ScoreResponse(
            gate=gate.name,
            threshold=float(gate.threshold),
            strategies=strategies_served,
            budget=_budget_of(sent, default_budget),
            scores=[
                ScoreItem(
                    question=t,
                    probability=r.probability,
                    retrieve=registry[r.strategy].retrieves,
                    strategy=r.strategy,
                    escalated=r.escalated,
                    answer_score=r.answer_score,
                )
                for t, r in zip(request.questions, routed, strict=True)
            ],  # fmt: skip
        )

    if answerer:
        answer_request = _request_model("AnswerRequest", limits, max_budget, columns)
        bodies["/answer"] = answer_request

        @app.post("/answer", response_model=AnswerResponse, responses=_ERRORS, dependencies=guarded)
        async def answer(
            request: answer_request,  # type: ignore[valid-type]
            client: Request,
        ) -> AnswerResponse:
            """Gate or router -> strategy -> retrieve -> generate for each question; queued
            questions of concurrent requests share one batched generator call (a step)."""
            arrived = time.perf_counter()
            sent = request.model_dump()
            routed, decided = await route(sent, client, count=False)
            # the engine waits what is left of the request timeout, not all of it again
            left = limits.request_timeout - (time.perf_counter() - arrived)
            done, waited = await _wait(answerer, routed, left, client, limits.request_timeout,
                                       admitted=lambda: counted(routed, decided),
                                       shutdown=shutdown,
                                       failed=lambda: all_failed(routed))  # fmt: skip
            costs = done[0][1]
            answers = [a for a, _ in done]
            traffic.answered(len(answers), sum(a.retrievals for a in answers),
                             sum(a.llm_calls for a in answers),
                             costs.total_seconds * len(answers) / max(costs.questions, 1))  # fmt: skip
            metrics.answers(answers)
            return AnswerResponse(
                gate=gate.name,
                threshold=float(gate.threshold),
                budget=_budget_of(sent, default_budget),
                answers=[_item(a) for a in answers],
                costs=costs.to_dict(),
                decision_seconds=decided,
                queue_seconds=waited,
            )

    else:

        @app.post("/answer", include_in_schema=False)
        async def no_answer() -> JSONResponse:
            return JSONResponse(status_code=404, content={"detail": GATE_MODE_ANSWER})

    return app


def _budget_of(sent: dict[str, Any], default: float | None) -> float | None:
    """The budget a request is decided at: its own (only a router's requests have one), else
    the server's."""
    own = sent.get("budget")
    return default if own is None else own


@dataclass(frozen=True)
class _Routed:
    """A question with its strategy, on its way to the engine."""

    question: Question
    strategy: str
    probability: float
    seconds: float = 0.0  # the decision call's time
    escalated: bool | None = None  # a gate-mode cascade's, where it read the answer
    answer_score: float | None = None
    budget: float | None = None  # its request's (None: the server's), for a cascade's escalations


def _decisions(
    gate: Gate,
    rag: AdaptiveRAG | None,
    strategies: StrategyRegistry = BUILTIN,
    cascade: Cascade | None = None,
) -> Callable[[list[tuple[Question, float | None]]], list[_Routed]]:
    """(question, budget) items -> each routed, in one gate call (one `route` call per
    distinct budget); `cascade` (gate mode's): then escalated where the answers sent say so."""

    def run(items: list[tuple[Question, float | None]]) -> list[_Routed]:
        questions = [q for q, _ in items]
        start = time.perf_counter()
        budgets = [b for _, b in items]
        d = rag.decide(questions, budgets) if rag else decide(gate, questions, budgets, strategies)
        routed = [_Routed(q, s, p, budget=b) for q, s, p, b in
                  zip(questions, d.strategies, d.probabilities, budgets, strict=True)]  # fmt: skip
        if cascade is not None:
            routed = _escalated(cascade, routed, budgets, strategies)
        seconds = time.perf_counter() - start
        return [replace(r, seconds=seconds) for r in routed]

    return run


def _escalated(
    cascade: Cascade, routed: list[_Routed], budgets: list[float | None], registry: StrategyRegistry
) -> list[_Routed]:
    """A gate-mode cascade's decisions: of the questions its router keeps closed-book, those
    sent with their answer's token_logprobs are read by its answer gate, and the ones it
    escalates take the next strategy: within each budget's slack over the questions decided
    together (a request's, and those of concurrent requests at the same budget batched with
    it), as `score --answer-gate` picks them per batch. A kept question sent without them
    stays kept, unread."""
    closed, up = escalation_strategy(cascade, registry)
    out = list(routed)
    for b in dict.fromkeys(budgets):
        group = [i for i, x in enumerate(budgets) if x == b]
        part = [routed[i] for i in group]
        sent = [r.question.extra.get(TOKEN_LOGPROBS) is not None for r in part]
        picked, scores = escalate_kept(cascade, [r.question for r in part],
                                       [r.strategy for r in part], b, registry, sent)  # fmt: skip
        for j, score in scores.items():
            up_here = j in picked
            out[group[j]] = replace(part[j], strategy=up if up_here else closed,
                                    escalated=up_here, answer_score=score)  # fmt: skip
    return out


GATE_MODE_ANSWER = (
    "/answer needs a generator, and this server runs the gate alone (`serve --mode gate`): "
    "POST /score gives each question's probability and retrieve decision; start the server "
    "with --mode answer for /answer"
)


def _docs(app: FastAPI) -> None:
    """GET /docs: Swagger UI from the installed swagger-ui-bundle-v2 package, so it works
    without the internet (FastAPI's default page pulls its JavaScript from a CDN)."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=str(app.openapi_url),
            title=f"{app.title} API",
            swagger_js_url="docs-assets/swagger-ui-bundle.js",
            swagger_css_url="docs-assets/swagger-ui.css",
            swagger_favicon_url="docs-assets/favicon-32x32.png",
        )


def _bearer(api_key: str) -> Callable:
    scheme = HTTPBearer(auto_error=False, description="the server's --api-key")
    expected = api_key.encode()

    async def check(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)]) -> None:
        if creds is None or not secrets.compare_digest(creds.credentials.encode(), expected):
            raise HTTPException(
                401,
                "missing or wrong bearer token: send `Authorization: Bearer <api key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check


def _locked(fn: Callable, lock: "threading.Lock | None") -> Callable:
    if lock is None:
        return fn

    def run(items: Any) -> Any:
        with lock:
            return fn(items)

    return run


def _answers(rag: AdaptiveRAG) -> Callable[[list[_Routed]], list[tuple[Answer, Costs]]]:
    def run(items: list[_Routed]) -> list[tuple[Answer, Costs]]:
        decision = Decision([r.strategy for r in items], [r.probability for r in items])
        # each question's own request budget: a cascade escalates within it (batched
        # requests may differ); the loop's own budget stood for every request's
        result = rag.run([r.question for r in items], [r.budget for r in items], decision)
        # answered: no retry of this call comes, so answers a failed generator call left held
        # (--no-cache) must not stand in for a later request's
        release = getattr(rag.generator, "release_held", None)
        if release is not None:
            release()
        return [(a, result.costs) for a in result.answers]

    return run


def _as_questions(
    texts: Sequence[str], features: Any = None, token_logprobs: Any = None
) -> list[Question]:
    """A request's questions, each with its side features and answer's log-probabilities (a
    count that does not match the questions is a 422 naming the field, before any batch)."""
    try:
        qs = as_questions([t.strip() for t in texts], features, token_logprobs)
    except InputError as e:
        raise HTTPException(422, str(e)) from None
    return [replace(q, id=f"request-{i}", source="http") for i, q in enumerate(qs)]


async def _wait(
    batcher: Batcher,
    items: list[Any],
    timeout: float,
    client: Request | None = None,
    limit: float | None = None,
    admitted: Callable[[], None] | None = None,
    shutdown: Shutdown | None = None,
    failed: Callable[[], None] | None = None,
) -> tuple[list, float]:
    """The batcher's results, or the HTTP error that says why there are none. `timeout`:
    the seconds left of the request's `limit` (--request-timeout; default: `timeout`);
    `client`: watched while it waits, its request withdrawn from the backlog if it leaves
    (499): Starlette does not cancel a handler whose client left, so a gone client's questions
    were generated anyway while live clients got 429. `admitted`: called once the batcher's
    backlog took the items (not for a 429 or a request that never fits). `shutdown`: once
    the server is stopping, a request not answered by its `answer_by` gets 503 (uvicorn
    cancelled it at the end of its grace: a bare 500). `failed`: called when the engine
    failed them (the 503 of `BackendError`)."""
    said = limit or timeout
    late = HTTPException(504, f"not answered within {said:g} s (--request-timeout); retry later")
    if timeout <= 0:
        raise late
    work = asyncio.ensure_future(batcher.submit(items))
    taken = True  # admission is `submit`'s first step: Busy or TooHeavy, else in the backlog
    try:
        async with asyncio.timeout(timeout):
            while not (await asyncio.wait({work}, timeout=_poll(shutdown)))[0]:
                if shutdown is not None and shutdown.over():
                    raise HTTPException(503, STOPPING, headers={"Retry-After": "1"})
                if client is not None and await client.is_disconnected():
                    raise HTTPException(CLIENT_CLOSED, "the client closed the connection")
            return work.result()
    except Busy as e:
        taken = False
        raise HTTPException(429, str(e), headers={"Retry-After": str(e.retry_after)}) from None
    except TooHeavy as e:  # never fits: not worth a retry
        taken = False
        raise HTTPException(422, str(e)) from None
    except TimeoutError:
        raise late from None
    except BackendError as e:
        if failed is not None:
            failed()
        raise HTTPException(503, f"the engine failed: {e}") from None
    except RetrievalGateError as e:
        raise HTTPException(422, str(e)) from None
    finally:
        work.cancel()  # a request given up (timeout, client gone) leaves the backlog
        if taken and admitted is not None:
            admitted()


def _poll(shutdown: Shutdown | None) -> float:
    """Seconds to the next check of a waiting request: DISCONNECT_POLL, or less when the
    server stops sooner."""
    left = None if shutdown is None else shutdown.left()
    return DISCONNECT_POLL if left is None else max(0.0, min(DISCONNECT_POLL, left))


def _since(start: float | None, now: float) -> float | None:
    """Seconds from `start` to `now` (None: no call under way)."""
    return None if start is None else round(now - start, 3)


def _item(a: Answer) -> AnswerItem:
    return AnswerItem(
        question=a.question,
        answer=a.answer,
        strategy=a.strategy,
        retrieve=a.retrieve,
        probability=a.probability,
        documents=a.documents,
        retrievals=a.retrievals,
        llm_calls=a.llm_calls,
        escalated=a.escalated,
        steps=a.steps,
        error=a.error,
    )


# Why a request key this server has no field for is not read (pydantic said only "Extra
# inputs are not permitted"): the key is right, the served gate is not one that reads it.
_NOT_READ = {
    "budget": "a budget is a router's (serve --router DIR), and this server's gate is not one",
    "features": "the served gate was trained without side features (data.features)",
    "token_logprobs": "answers' log-probabilities are read by a two-stage gate or a cascade "
    "(--router with --answer-gate), on /score",
}


def _reason(error: dict[str, Any], keys: Sequence[str] = (), columns: Sequence[str] = ()) -> str:
    """One sentence for one validation error; `keys`: the fields of the route's request,
    `columns`: the side features the served gate reads."""
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    kind = error.get("type")
    if kind == "extra_forbidden":
        return f"{where}: {_unread(where, keys, columns)}"
    field = where.split(".")[0]
    said = _FIELD_REASONS[field](where, error, columns) if field in _FIELD_REASONS else None
    if said:
        return said
    if kind == "string_pattern_mismatch":  # the one pattern: VISIBLE
        return f"{where}: {BLANK}"
    if kind == "missing" and where == "body":  # no body at all
        return f"body: empty; {_SEND}"
    if kind == "json_invalid":  # loc is ("body", character offset)
        return f"body: not valid JSON at character {where} ({error.get('ctx', {}).get('error')})"
    return f"{where}: {error.get('msg', 'invalid').removeprefix('Value error, ')}"


_HAMLET = '{"questions": ["Who wrote Hamlet?"]}'


def _questions_reason(where: str, error: dict[str, Any], _: Sequence[str]) -> str | None:
    """The questions' shape and this server's limits (pydantic: "Input should be a valid
    string", "List should have at most 64 items after validation, not 65", ...)."""
    kind, got = error.get("type"), _KINDS.get(type(error.get("input")), "null")
    limit = error.get("ctx", {}).get("max_length")
    if kind == "list_type" and where == "questions":  # one question, unlisted
        return f"questions: {got}; send a list, even of one: {_HAMLET}"
    if kind == "string_type":
        return f"{where}: {got}; each question is a string: {_HAMLET}"
    if kind == "too_long" and where == "questions":
        return (f"questions: {error['ctx'].get('actual_length')} in one request, past this "
                f"server's limit of {limit} (serve --max-questions): send them in requests of "
                f"at most {limit}")  # fmt: skip
    if kind == "string_too_long":
        return (f"{where}: {len(str(error.get('input', '')))} characters, past this server's "
                f"limit of {limit} a question (serve --max-question-chars)")  # fmt: skip
    return None


def _features_reason(where: str, error: dict[str, Any], columns: Sequence[str]) -> str | None:
    """Side features missing or in the wrong shape, with the served gate's own example."""
    example = json.dumps({c: [1.0, None] for c in columns})
    if error.get("type") == "missing" and where == "features":
        return (f"features: required: the served gate reads side features ({', '.join(columns)})"
                f", per column one value per question, null when unknown, e.g. {example}")  # fmt: skip
    if error.get("type") in _FEATURE_SHAPES:
        got = _KINDS.get(type(error.get("input")), "null")
        return f"{where}: {got}; {_FEATURE_SHAPES[error['type']]}, e.g. {example}"
    return None


def _logprobs_reason(where: str, error: dict[str, Any], _: Sequence[str]) -> str | None:
    """A two-stage gate's answers in the wrong shape (`_LOGPROB_REASONS`)."""
    if where != TOKEN_LOGPROBS and error.get("type") in _LOGPROB_REASONS:
        return _LOGPROB_REASONS[error["type"]].format(where=where, sent=error.get("input"))
    return None


def _budget_reason(where: str, error: dict[str, Any], _: Sequence[str]) -> str | None:
    """A router's budget out of its range (pydantic: "Input should be less than or equal to
    3.35"): the range, and what the bounds mean."""
    sent, bound = error.get("input"), error.get("ctx", {})
    if error.get("type") == "less_than_equal":
        top = bound["le"]
        return (f"budget: {sent} is past {top}, the dearest strategy's cost (every question on "
                f"it); a budget is a mean cost a question, from 0 to {top}")  # fmt: skip
    if error.get("type") == "greater_than_equal":
        return f"budget: {sent} is below 0; a budget is a mean cost a question, 0 or more"
    return None


# the request's field (the first part of an error's place) -> its reasons, where it has its own
_FIELD_REASONS = {"questions": _questions_reason, "features": _features_reason,
                  TOKEN_LOGPROBS: _logprobs_reason, "budget": _budget_reason}  # fmt: skip


# The two-stage gate's answers, as clients get them wrong: one answer's list sent flat, a
# probability for a log-probability, an empty answer (pydantic named only the bound or type).
_LOGPROB_REASONS = {
    "list_type": "token_logprobs: one list per question, of its answer's token log-probabilities, "
                 "e.g. [[-0.1, -2.3]] for one question (or null where there is no answer)",
    "less_than_equal": "{where}: {sent} is above 0; a log-probability is 0 or below (send "
                       "log-probabilities, not probabilities)",
    "too_short": "{where}: an empty list; an answer has at least one token: send null for a "
                 "question without an answer",
}  # fmt: skip


# Side features in the wrong shape (pydantic: "Input should be a valid list" and the like):
# rows of {column: value} for the columns' lists, one value for a list, a number as text.
_FEATURE_SHAPES = {
    "model_type": "send one list per column, of one value per question",
    "model_attributes_type": "send one list per column, of one value per question",  # FastAPI's
    "list_type": "send a list of one value per question",
    "float_type": "send a number (null when unknown)",
}


def _route_reason(app: FastAPI, request: Request, exc: StarletteHTTPException) -> str:
    """What a request for no route (404) or with another method (405) gets: what there is."""
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 405:
        return f"{where}: this route takes {(exc.headers or {}).get('Allow', 'another method')}"
    routes = sorted({f"{m} {r.path}" for r in app.routes if isinstance(r, APIRoute)
                     for m in r.methods if m != "HEAD"})  # fmt: skip
    return f"{where}: no such route; this server has {', '.join(routes)}"


def _unread(where: str, keys: Sequence[str], columns: Sequence[str]) -> str:
    if where.startswith("features."):
        return f"not a side feature of the served gate (it reads {', '.join(columns)})"
    reason = f"not a key this request takes (it takes {', '.join(keys) or 'questions'})"
    return reason + (f": {_NOT_READ[where]}" if where in _NOT_READ else "")


def serve(
    service: AdaptiveRAG | Gate,
    host: str = "127.0.0.1",
    port: int = 8000,
    limits: Limits | None = None,
    api_key: str | None = None,
    strategies: StrategyRegistry = BUILTIN,
    budget: float | None = None,
) -> None:
    """Serves until interrupted (uvicorn, one process: the engine is in-process; scale
    generation out with a remote vLLM server instead of more workers). `strategies`: the
    registry a gate alone is served with (`--strategies FILE.yaml`); `budget`: its router's
    default budget (`--budget`; a RAG loop has its own)."""
    import uvicorn

    limits = limits or Limits()
    app = create_app(service, limits, api_key, strategies=strategies, budget=budget)
    log.info("warming up: one question through the gate and the engine")
    asyncio.run(app.state.warm_up())  # before the port opens: a failure is one clear line
    protocol = slow_clients.head_deadline_protocol()
    shutdown: Shutdown = app.state.shutdown
    config = uvicorn.Config(app, host=host, port=port, workers=1, http=protocol,
                            timeout_graceful_shutdown=shutdown.grace)  # fmt: skip
    server = _server(config, shutdown)
    # Ctrl-C goes on as the CLI's "interrupted" once the requests under way are answered
    # (uvicorn.run swallowed it: exit 0); SIGTERM, raised again by uvicorn, ends the process
    server.run()
    if not server.started:  # stopped before it started (uvicorn.run exited 3 then)
        raise BackendError(f"the HTTP server on {host}:{port} did not start (see above)")


def _server(config: Any, shutdown: Shutdown) -> Any:
    """uvicorn's server, telling `shutdown` when a signal stops it: uvicorn then waits its
    graceful timeout for the requests under way and cancels the rest (each a bare 500), so
    those still waiting get their 503 just before (`_wait`)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            shutdown.begin()

    return Server(config)
