"""A tuned threshold is one every gate, flag and run takes, and deciding at it gives what tune
measured on dev: where dev scores reach 1.0, "never retrieve" (1.0000000000000002, shown as
1.000, refused by `checked_threshold` and `save_threshold`) is no candidate."""

from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from retrieval_gate.gates.base import checked_threshold, decide
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.questions import Question
from retrieval_gate.training.checkpoint import save_threshold
from retrieval_gate.tuning.objectives import DevData, candidate_thresholds, objective
from retrieval_gate.tuning.threshold import tune_threshold
from retrieval_gate.tuning.threshold_studies import tune_gate_thresholds
from retrieval_gate.tuning.tuned_report import dev_test_rows, tuned_markdown

optuna.logging.set_verbosity(optuna.logging.WARNING)

OBJECTIVES = ["macro-f1", "adaptive-accuracy", "min-retrieval"]


def test_never_retrieving_wins_yet_the_threshold_stays_in_range():
    """The report's case: closed-book right everywhere, one question scored 1.0."""
    dev = DevData(np.array([0, 0, 1, 0]), np.array([0.1, 0.3, 0.6, 1.0]), np.ones(4),
                  np.array([1.0, 0.0, 1.0, 0.0]))  # fmt: skip
    res = tune_threshold(objective("adaptive-accuracy"), dev)
    assert res.threshold == checked_threshold(res.threshold) == 1.0  # was 1.0000000000000002
    assert res.dev_figures["retrieval_rate"] == 0.25  # the question scored 1.0: retrieved
    assert res.value == 0.75


@pytest.mark.parametrize("top", [1.0, 0.9])
def test_candidates_are_thresholds_in_range_with_never_where_one_is(top):
    s = np.array([0.0, 0.2, 0.2, 0.5, top])
    ts = candidate_thresholds(s)
    assert all(checked_threshold(t) == t for t in ts)
    never = ts[-1] > top  # a candidate above every score: never retrieve
    assert never == (top < 1.0) and len(ts) == 4 + never


class ScoredGate:
    """Scores recorded per question id (a confidence gate scores its "I don't know" 1.0)."""

    name = "scored"

    def __init__(self, scores: dict[str, float], threshold: float = 0.5):
        self.recorded, self.threshold = scores, threshold

    def scores(self, questions):
        return np.array([self.recorded[q.id] for q in questions])


def _split(split: str, n: int = 40) -> tuple[EvalSet, dict[str, float]]:
    """Closed-book right and with-retrieval wrong everywhere (never retrieving is best); one
    question in four scored 1.0, the others spread below."""
    qs = tuple(Question(f"{split}{i}", f"q {i}?", ("a",), "popqa", split=split) for i in range(n))
    scores = {q.id: 1.0 if i % 4 == 0 else i / (2 * n) for i, q in enumerate(qs)}
    y = np.array([i % 2 for i in range(n)])
    return EvalSet(qs, y, np.ones(n), np.zeros(n)), scores


def test_every_tuned_threshold_is_saved_and_decides_as_tune_measured(tmp_path):
    (dev, on_dev), (test, on_test) = _split("dev"), _split("test")
    gate = ScoredGate({**on_dev, **on_test})
    out = tune_gate_thresholds(gate, _split("train")[0], dev, "synthetic",
                               [*OBJECTIVES, "pareto"], tmp_path / "s.db", tmp_path, 8)  # fmt: skip
    (tmp_path / "metadata.json").write_text("{}")
    for name, r in out["thresholds"].items():
        t = r["threshold"]
        save_threshold(tmp_path, t, name, r["dev_figures"])  # refused 1.0000000000000002
        assert json.loads((tmp_path / "metadata.json").read_text())["threshold"] == t
        gate.threshold = checked_threshold(t)
        assert decide(gate, dev.questions).mean() == r["dev_figures"]["retrieval_rate"]
    assert out["thresholds"]["adaptive-accuracy"]["threshold"] == 1.0
    assert out["thresholds"]["adaptive-accuracy"]["dev_figures"]["retrieval_rate"] == 0.25
    assert all(0 <= p["threshold"] <= 1 for p in out["pareto"]["front"])
    md = tuned_markdown(out, dev_test_rows(out, gate, test))
    assert "| adaptive-accuracy | 1.0 | 0.750 |" in md
    assert "scores 25.0% of dev questions 1.0" in md


def test_the_report_prints_thresholds_that_read_back_exactly(tmp_path):
    dev, scores = _split("dev")
    scores = {k: 0.9996 if v == 1.0 else v for k, v in scores.items()}  # read 1.000
    gate = ScoredGate(scores)
    out = tune_gate_thresholds(gate, _split("train")[0], dev, "synthetic",
                               ["adaptive-accuracy"], tmp_path / "s.db", tmp_path)  # fmt: skip
    t = out["thresholds"]["adaptive-accuracy"]["threshold"]
    assert t == float(np.nextafter(0.9996, np.inf))  # never retrieve: above every dev score
    md = tuned_markdown(out, dev_test_rows(out, gate, dev))
    assert f"| adaptive-accuracy | {t!r} |" in md and "of dev questions 1.0" not in md
