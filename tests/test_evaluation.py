"""Metrics against scikit-learn, bootstrap, the evaluation of gates, transfer splits."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    precision_recall_fscore_support,
    recall_score,
    roc_auc_score,
)

from retrieval_gate.evaluation import metrics as M
from retrieval_gate.evaluation.bootstrap import bootstrap_ci
from retrieval_gate.evaluation.dataset import EvalSet
from retrieval_gate.evaluation.evaluate import evaluate_gate
from retrieval_gate.gates.trivial import always_gate
from retrieval_gate.questions import Question

RNG = np.random.default_rng(7)


def small_cases():
    for n in (5, 17, 60):
        y = RNG.integers(0, 2, n)
        y[0], y[1] = 0, 1  # both classes present
        s = np.round(RNG.random(n), 1)  # rounding makes ties, which sklearn handles its way
        yield y, s, s >= 0.5


@pytest.mark.parametrize("case", list(small_cases()))
def test_metrics_match_sklearn(case):
    y, s, d = case
    assert M.accuracy(y, d) == pytest.approx(accuracy_score(y, d))
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(y, d) == pytest.approx((p, r, f))
    assert M.auroc(y, s) == pytest.approx(roc_auc_score(y, s))
    assert M.average_precision(y, s) == pytest.approx(average_precision_score(y, s))
    assert M.retrieval_accuracy(y, d) == pytest.approx(recall_score(y, d))
    prob_true, prob_pred = calibration_curve(y, s, n_bins=10, strategy="uniform")
    pred, true, count = M.reliability(y, s, 10)
    assert pred == pytest.approx(prob_pred) and true == pytest.approx(prob_true)
    assert count.sum() == len(y)
    assert M.ece(y, s) == pytest.approx(np.sum(count * np.abs(prob_true - prob_pred)) / len(y))


def test_degenerate_predictions_match_sklearn():
    y = np.array([0, 1, 1, 0, 1])
    d = np.zeros(5, bool)  # never retrieve: precision of class 1 undefined -> 0
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(y, d) == pytest.approx((p, r, f))


def test_undefined_metrics_are_none():
    y = np.ones(4, int)
    assert M.auroc(y, np.array([0.1, 0.2, 0.3, 0.4])) is None
    assert M.average_precision(np.zeros(3, int), np.array([0.1, 0.5, 0.9])) is None
    assert M.retrieval_accuracy(np.zeros(3, int), np.ones(3, bool)) is None


def test_adaptive_accuracy_routes_answers_and_skips_unknown():
    d = np.array([True, False, True, False])
    closed = np.array([1.0, 1.0, 0.0, np.nan])
    rag = np.array([0.0, 0.0, 1.0, 1.0])
    # q0 retrieves -> rag 0; q1 keeps -> closed 1; q2 retrieves -> 1; q3 unknown closed -> skipped
    assert M.adaptive_accuracy(d, closed, rag) == pytest.approx(2 / 3)


def test_bootstrap_ci_brackets_the_mean():
    x = RNG.random(200)
    lo, hi = bootstrap_ci(lambda i: float(x[i].mean()), len(x), 500)
    assert lo < x.mean() < hi and hi - lo < 0.2


def _evalset(n: int = 40) -> EvalSet:
    qs = tuple(
        Question(id=f"q{i}", text=f"question {i}?", answers=("a",), source="ab"[i % 2])
        for i in range(n)
    )
    y = np.array([i % 3 == 0 for i in range(n)], int)
    return EvalSet(qs, y, np.full(n, 1.0), np.zeros(n))


def test_evaluate_gate_reports_per_source_and_undefined_auroc():
    result = evaluate_gate(always_gate(), _evalset(), n_resamples=50)
    assert result.metrics["retrieval_rate"] == 1.0
    assert result.metrics["adaptive_accuracy"] == 0.0  # retrieval always wrong here
    assert set(result.per_source) == {"a", "b"}
    assert result.metrics["auroc"] == pytest.approx(0.5)  # constant scores: chance
