"""One evaluation for every gate: the same test questions, the same metrics, bootstrap CIs,
a per-source breakdown, the cost of a decision and the cost of the answers on both axes
(retrievals per question: the retrieval rate; LLM calls per question: the binary pair's
strategies' specs)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import metrics as M
from ..gates.base import Gate, uncached_gate
from ..labels.evalset import EvalSet
from ..questions import Question
from .bootstrap import bootstrap_ci

# metric name -> f(y, scores, decisions, closed, rag); all on one set of questions
METRICS = {
    "accuracy": lambda y, s, d, c, r: M.accuracy(y, d),
    "macro_precision": lambda y, s, d, c, r: M.macro_prf(y, d)[0],
    "macro_recall": lambda y, s, d, c, r: M.macro_prf(y, d)[1],
    "macro_f1": lambda y, s, d, c, r: M.macro_f1(y, d),
    "auroc": lambda y, s, d, c, r: M.auroc(y, s),
    "ap": lambda y, s, d, c, r: M.average_precision(y, s),
    "ece": lambda y, s, d, c, r: M.ece(y, s),
    "retrieval_rate": lambda y, s, d, c, r: M.retrieval_rate(d),
    "retrieval_accuracy": lambda y, s, d, c, r: M.retrieval_accuracy(y, d),
    "adaptive_accuracy": lambda y, s, d, c, r: M.adaptive_accuracy(d, c, r),
}
WITH_CI = ("accuracy", "macro_f1", "auroc", "adaptive_accuracy")


def undefined_reason(name: str, y: np.ndarray, closed: np.ndarray, rag: np.ndarray) -> str:
    """Why a metric is n/a on a set of questions (shown instead of a number)."""
    if name in ("auroc", "ap", "retrieval_accuracy") and len(set(y.tolist())) < 2:
        return f"n/a (only label {int(y[0])})" if len(y) else "n/a (no questions)"
    if name == "adaptive_accuracy":
        return "n/a (no recorded answers)"
    return "n/a"


BUILTIN_PAIR = (1.0, 1.0)  # the built-ins' no_retrieval and one_retrieval: one LLM call each


def compute_metrics(
    y: np.ndarray,
    scores: np.ndarray,
    threshold: float,
    closed: np.ndarray,
    rag: np.ndarray,
    llm_calls: tuple[float, float] | None = BUILTIN_PAIR,
) -> dict[str, float | None]:
    """Every metric at `threshold`, and the LLM calls per question its decisions cost
    (`llm_calls`: a question's without and with retrieval; None: unknown)."""
    d = scores >= threshold
    out = {name: f(y, scores, d, closed, rag) for name, f in METRICS.items()}
    out["llm_calls_per_question"] = (
        float(np.mean(np.where(d, llm_calls[1], llm_calls[0])))
        if llm_calls is not None and len(d)
        else None
    )
    return out


def metric_cis(
    y: np.ndarray,
    scores: np.ndarray,
    threshold: float,
    closed: np.ndarray,
    rag: np.ndarray,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, tuple[float, float] | None]:
    """Bootstrap 95% CIs of the headline metrics (same resamples for every gate: same seed)."""
    d = scores >= threshold
    out = {}
    for name in WITH_CI:
        f = METRICS[name]
        out[name] = bootstrap_ci(
            lambda i, f=f: f(y[i], scores[i], d[i], closed[i], rag[i]),
            len(y),
            n_resamples,
            seed=seed,
        )
    return out


@dataclass
class GateResult:
    name: str
    threshold: float
    scores: np.ndarray
    metrics: dict[str, float | None]
    cis: dict[str, tuple[float, float] | None]
    per_source: dict[str, dict[str, float | None]]
    score_seconds: float
    cost_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def cost_per_question(gate: Gate, questions: Sequence[Question], n: int = 30) -> float:
    """Median wall time (ms) of one decision on one question, over `n` questions scored one at
    a time after a warm-up call (what a deployed gate pays per incoming question; a gate that
    asks the generator computes its answers, never reading the generation cache)."""
    from ..generation.cache import computing

    probe = uncached_gate(gate)
    picked = list(questions[: n + 1])
    times = []
    with computing():
        probe.scores(picked[:1])  # warm-up: lazy loading, first-call compilation
        for q in picked[1:] or picked:  # one question: timed again after its warm-up
            start = time.perf_counter()
            probe.scores([q])
            times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def evaluate_gate(
    gate: Gate,
    test: EvalSet,
    n_resamples: int = 1000,
    scores: np.ndarray | None = None,
    llm_calls: tuple[float, float] | None = BUILTIN_PAIR,
) -> GateResult:
    """All metrics of one gate on the test questions (scores computed unless given);
    `llm_calls`: a question's LLM calls without and with retrieval (`pricing.binary_llm_calls`)."""
    start = time.perf_counter()
    if scores is None:
        scores = np.asarray(gate.scores(test.questions), dtype=float)
    seconds = time.perf_counter() - start
    y, c, r = test.y, test.closed_correct, test.rag_correct
    per_source = {}
    for source in sorted(set(test.sources.tolist())):
        m = test.sources == source
        per_source[source] = compute_metrics(y[m], scores[m], gate.threshold, c[m], r[m],
                                             llm_calls)  # fmt: skip
    return GateResult(
        name=gate.name,
        threshold=float(gate.threshold),
        scores=scores,
        metrics=compute_metrics(y, scores, gate.threshold, c, r, llm_calls),
        cis=metric_cis(y, scores, gate.threshold, c, r, n_resamples),
        per_source=per_source,
        score_seconds=seconds,
    )


def result_json(result: GateResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "threshold": result.threshold,
        "metrics": result.metrics,
        "ci95": {k: list(v) if v else None for k, v in result.cis.items()},
        "per_source": result.per_source,
        "score_seconds": result.score_seconds,
        "cost_ms_per_question": result.cost_ms,
        "notes": result.notes,
    }
