"""Figures the reports print, recomputed by hand on small sets: a router's test shares beside
its dev ones in `tune`, the fixed policies' LLM calls whatever gates are listed beside them,
threshold ties broken toward fewer retrievals, and no negative mean cost from drift."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval_gate.evaluation.routing_policies import routing_report
from retrieval_gate.gates.strategy_routers import prior_router
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.pricing import Calibration, route_indices, sweep
from retrieval_gate.questions import Question
from retrieval_gate.strategies import BUILTIN, StrategySpec, with_cost
from retrieval_gate.tuning.objectives import DevData, candidate_thresholds, exhaustive_best
from retrieval_gate.tuning.objectives import objective as make_objective
from retrieval_gate.tuning.router_budgets import router_markdown, tune_router
from retrieval_gate.tuning.router_budgets import test_figures as route_test  # not a test
from retrieval_gate.tuning.threshold import tune_threshold
from routers import TableRouter

NAMES = ("no_retrieval", "one_retrieval", "multi_step")
COSTS = (0.0, 1.0, 3.35)


def _questions(n: int, split: str, sources: tuple[str, ...] = ("a",)) -> tuple[Question, ...]:
    return tuple(Question(f"{split}{i}", f"question {i}?", ("x",), sources[i % len(sources)],
                          split=split) for i in range(n))  # fmt: skip


def _evalset(qs: tuple[Question, ...], correct: np.ndarray, paid: np.ndarray | None = None):
    c = np.asarray(correct, float)
    return EvalSet(qs, 1 - c[:, 0], c[:, 0], c[:, 1], NAMES, c, paid)


# ---------------------------------------------------------------- 1. tune's share columns


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_tune_reports_the_test_routings_shares_apart_from_the_dev_ones():
    """The `% strategy` columns were the dev curve's shares beside the test figures, unsaid."""
    dev_q, test_q = _questions(4, "dev"), _questions(4, "test")
    # dev: one question a strategy at the chosen price; test: every question to multi-step
    dev_P = np.array([[0.9, 0.1, 0.1], [0.1, 0.9, 0.1], [0.0, 0.1, 0.9], [0.5, 0.5, 0.5]])
    test_P = np.tile([0.0, 0.1, 0.9], (4, 1))
    Y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]], float)
    P = {q.id: p for q, p in zip((*dev_q, *test_q), (*dev_P, *test_P), strict=True)}
    router = TableRouter(P, Calibration.fit(NAMES, COSTS, dev_P, Y))
    result = tune_router(router, _evalset(dev_q, Y), ["budget-accuracy"], 3.35, 1.0)
    route_test(router, result, _evalset(test_q, np.tile([0, 0, 1], (4, 1))))
    point = result["chosen"]["budget-accuracy@3.35"]
    want = np.bincount(route_indices(test_P, point["price"], COSTS), minlength=3) / 4
    assert point["test"]["shares"] == pytest.approx(want.tolist())
    assert point["test"]["shares"] == pytest.approx([0.0, 0.0, 1.0])
    assert point["shares"] != point["test"]["shares"]  # the dev curve's, kept apart
    lines = router_markdown(result).splitlines()
    columns = _cells(next(line for line in lines if line.startswith("| objective")))
    cells = _cells(next(line for line in lines if line.startswith("| budget-accuracy@3.35")))
    assert cells[columns.index("test % multi_step")] == "100"
    dev_pct = f"{100 * point['shares'][2]:.0f}"
    assert cells[columns.index("dev % multi_step")] == dev_pct
    assert "% multi_step" not in columns  # no share column without its questions named


# ---------------------------------------------------------------- 2. LLM calls of fixed policies


def test_with_cost_keeps_the_specs_llm_calls():
    """A multi-step spec without `llm_calls` read them off its cost: at the labels' mean cost
    (3.38) the built-in made 3.38 LLM calls, not its 3.35."""
    multi = BUILTIN["multi_step"]
    assert with_cost(multi, 3.38).expected_llm_calls == pytest.approx(3.35)
    assert with_cost(multi, 3.38).cost == 3.38
    declared = StrategySpec("deep", 5.0, retriever="default", multi_step=True, llm_calls=2.0)
    assert with_cost(declared, 1422.0).expected_llm_calls == 2.0
    P = np.array([[0.2, 0.5, 0.9], [0.9, 0.2, 0.1]])
    cal = Calibration.fit(NAMES, (0.0, 1.0, 3.38), P, np.eye(3)[[2, 0]])
    assert cal.llm_calls() == pytest.approx((1.0, 1.0, 3.35))


def test_fixed_policies_llm_calls_do_not_follow_the_gates_listed(tmp_path):
    """Per-question costs move the mean cost, not the LLM calls: `always multi_step` made
    3.38 LLM calls with a router fitted here listed (calibrated at the labels' mean costs),
    3.35 without."""
    correct = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]], float)
    paid = np.tile([0.0, 1.0, 3.38], (4, 1))  # the labels' own costs: multi-step 3.38 each
    dev = _evalset(_questions(4, "dev", ("a", "b")), correct, paid)
    test = _evalset(_questions(4, "test", ("a", "b")), correct, paid)

    def multi(gates) -> dict:
        report = routing_report(test, dev, gates, tmp_path, "t", 20)
        return next(r["overall"] for r in report["policies"] if r["policy"] == "always multi_step")

    alone, beside = multi({}), multi({"router-prior": prior_router(dev)})
    assert alone["mean_llm_calls"] == pytest.approx(3.35)
    assert beside["mean_llm_calls"] == pytest.approx(3.35)
    assert beside["mean_cost"] == pytest.approx(3.38) == alone["mean_cost"]


# ---------------------------------------------------------------- 3. threshold ties


def _tied_dev() -> DevData:
    """Retrieval fixes only q2 and q3: every threshold from the lowest score to 0.8 makes the
    same adaptive accuracy (1.0), at retrieval rates 1, 0.75 and 0.5."""
    s = np.array([0.1, 0.2, 0.8, 0.9])
    return DevData(np.array([0, 0, 1, 1]), s, np.array([1.0, 1.0, 0.0, 0.0]), np.ones(4))


def test_adaptive_accuracy_ties_go_to_the_fewest_retrievals():
    res = tune_threshold(make_objective("adaptive-accuracy"), _tied_dev())
    assert res.value == 1.0
    assert res.threshold == 0.8  # was 0.1: retrieving for every question
    assert res.dev_figures["retrieval_rate"] == 0.5


def test_macro_f1_ties_go_to_the_fewest_retrievals():
    s = np.array([0.1, 0.2, 0.3, 0.4])  # retrieving for q1-q3 or for q3 alone: F1 0.733 both
    res = tune_threshold(make_objective("macro-f1"), DevData(np.array([0, 1, 0, 1]), s,
                                                             np.ones(4), np.ones(4)))  # fmt: skip
    assert res.value == pytest.approx(11 / 15)
    assert (res.threshold, res.dev_figures["retrieval_rate"]) == (0.4, 0.25)  # was 0.2, 0.75


@pytest.mark.parametrize("name", ["macro-f1", "adaptive-accuracy", "min-retrieval"])
def test_every_threshold_objective_takes_the_highest_of_its_tied_thresholds(name):
    rng = np.random.default_rng(3)
    for _ in range(30):  # few distinct scores and answers: ties are common
        s = rng.integers(0, 6, 12) / 5
        closed, rag = rng.integers(0, 2, 12).astype(float), rng.integers(0, 2, 12).astype(float)
        rag[0] = 1.0  # some answer with retrieval is right: always-retrieve's accuracy > 0
        dev = DevData(rng.integers(0, 2, 12), s, closed, rag)
        obj = make_objective(name, target=0.9)
        t, value = exhaustive_best(obj, dev)
        ts = candidate_thresholds(s)
        values = np.array([obj.value(dev, x) for x in ts])
        best = values.max() if obj.direction == "maximize" else values.min()
        assert value == best
        assert t == ts[values == best].max()


def test_min_retrieval_still_meets_its_target_with_the_fewest_retrievals():
    res = tune_threshold(make_objective("min-retrieval", target=1.0), _tied_dev())
    assert (res.threshold, res.value) == (0.8, 0.5)
    assert res.dev_figures["adaptive_accuracy"] == 1.0


# ---------------------------------------------------------------- 4. drift in the sweep


def test_the_sweep_never_reports_a_negative_mean_cost():
    """Per-question costs added and taken back drifted to -5.6e-17 ("-0.000") where every
    question went to the free strategy."""
    P = np.array([[0.6, 0.7], [0.0, 0.1]])
    curve = sweep(P, (0.0, 1.0), None, np.array([[0.0, 0.9], [0.0, 1.0]]))
    assert curve.mean_cost[0] == pytest.approx(0.95)
    assert curve.mean_cost[-1] == 0.0 and (curve.mean_cost >= 0).all()
