"""The service's Prometheus metrics (`GET /metrics`) and the same totals for `/health`.

Every app holds its own `CollectorRegistry` (never the process-wide default one: tests and
embedders create many apps in one process). Series, all prefixed `retrieval_gate_`:

    routed_questions_total{strategy}       questions the gate or router decided (/score and
                                           /answer), by the strategy it picked
    answered_questions_total{strategy}     /answer questions run, by the strategy they ran
    failed_questions_total{strategy}       of those, the ones that got an `error`
    retrievals_total{strategy}             retrieval requests made for answered questions
    llm_calls_total{strategy}              generations made for them (multi-step: one a step)
    llm_tokens_total{kind}                 prompt / completion tokens the generations counted
    escalations_total                      questions escalated to a dearer strategy after
                                           reading the generator's answer: declared, 0 until
                                           the cascade (issue 37) serves
    requests_total{endpoint,status}        HTTP requests by endpoint and status code
    request_seconds{endpoint}              request latency histogram, by endpoint
    gate_seconds                           the gate's (router's) decision call per request

Endpoints are the app's own paths (`/score`, `/answer`, `/health`, `/metrics`); any other path
is counted as `other`, so a scanner cannot grow the label set."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

PREFIX = "retrieval_gate"
ENDPOINTS = ("/score", "/answer", "/health", "/metrics")
# seconds: a gate call is milliseconds, an answer up to a multi-step generation under load
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0, float("inf"))  # fmt: skip
TOKEN_KINDS = ("prompt", "completion")


class ServiceMetrics:
    """One app's counters and histograms; `strategies`: the ones it serves (their series
    start at 0, so a dashboard sees every strategy before its first question)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, strategies: Sequence[str]):
        self.registry = CollectorRegistry()
        self.strategies = list(strategies)
        r = self.registry

        def per_strategy(name: str, doc: str) -> Counter:
            c = Counter(f"{PREFIX}_{name}", doc, ["strategy"], registry=r)
            for s in self.strategies:
                c.labels(s)
            return c

        self.routed = per_strategy("routed_questions", "Questions decided, by strategy")
        self.answered = per_strategy("answered_questions", "Questions answered, by strategy")
        self.failed = per_strategy("failed_questions", "Answered questions with an error")
        self.retrievals = per_strategy("retrievals", "Retrieval requests made")
        self.llm_calls = per_strategy("llm_calls", "Generator calls made (one per step)")
        self.tokens = Counter(f"{PREFIX}_llm_tokens", "Tokens the generations counted",
                              ["kind"], registry=r)  # fmt: skip
        for kind in TOKEN_KINDS:
            self.tokens.labels(kind)
        self.escalations = Counter(
            f"{PREFIX}_escalations",
            "Questions the cascade escalated to a dearer strategy after reading their "
            "closed-book answer",
            registry=r,
        )
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests", ["endpoint", "status"],
                                registry=r)  # fmt: skip
        self.request_seconds = Histogram(
            f"{PREFIX}_request_seconds", "HTTP request latency", ["endpoint"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        for endpoint in ENDPOINTS:
            self.request_seconds.labels(endpoint)
        self.gate_seconds = Histogram(f"{PREFIX}_gate_seconds", "The gate's decision call",
                                      buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip

    # -- recording -----------------------------------------------------------------------

    def routed_questions(self, strategies: Sequence[str], gate_seconds: float) -> None:
        for s in strategies:
            self.routed.labels(s).inc()
        if strategies:
            self.gate_seconds.observe(gate_seconds)

    def answers(self, answers: Sequence[Any]) -> None:
        """`rag.loop.Answer`s: their strategy, error, retrievals, LLM calls and tokens."""
        for a in answers:
            self.answered.labels(a.strategy).inc()
            if a.error is not None:
                self.failed.labels(a.strategy).inc()
            self.retrievals.labels(a.strategy).inc(a.retrievals)
            self.llm_calls.labels(a.strategy).inc(a.llm_calls)
            self.tokens.labels("prompt").inc(getattr(a, "prompt_tokens", 0) or 0)
            self.tokens.labels("completion").inc(getattr(a, "completion_tokens", 0) or 0)
            self.escalations.inc(int(getattr(a, "escalated", False)))

    def request(self, path: str, status: int, seconds: float) -> None:
        endpoint = path if path in ENDPOINTS else "other"
        self.requests.labels(endpoint, str(status)).inc()
        self.request_seconds.labels(endpoint).observe(seconds)

    # -- reading -------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def _value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(f"{PREFIX}_{name}", labels) or 0.0

    def totals(self) -> dict[str, Any]:
        """The counters as JSON (`/health`'s `metrics`): per strategy and overall."""
        seen = sorted(
            {
                s.labels["strategy"]
                for m in self.registry.collect()
                for s in m.samples
                if "strategy" in s.labels
            }  # fmt: skip
        )
        strategies = [*self.strategies, *(s for s in seen if s not in self.strategies)]

        def by(name: str) -> dict[str, int]:
            return {s: int(self._value(f"{name}_total", strategy=s)) for s in strategies}

        counts = {name: by(name) for name in
                  ("routed_questions", "answered_questions", "failed_questions", "retrievals",
                   "llm_calls")}  # fmt: skip
        requests: dict[str, int] = {}
        for m in self.registry.collect():
            for s in m.samples:
                if s.name == f"{PREFIX}_requests_total":
                    key = s.labels["endpoint"]
                    requests[key] = requests.get(key, 0) + int(s.value)
        return {
            **{name: {"total": sum(c.values()), "by_strategy": c} for name, c in counts.items()},
            "prompt_tokens": int(self._value("llm_tokens_total", kind="prompt")),
            "completion_tokens": int(self._value("llm_tokens_total", kind="completion")),
            "escalations": int(self._value("escalations_total")),
            "requests": requests,
        }


class Timing:
    """ASGI middleware: each HTTP request's endpoint, status and seconds into `metrics`."""

    def __init__(self, app: Any, metrics: ServiceMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.request(scope.get("path", ""), status, time.perf_counter() - start)
