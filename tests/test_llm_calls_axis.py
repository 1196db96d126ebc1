"""LLM calls per question, the cost model's second axis (issue 37): each strategy's from its
spec, in evaluate's gate and routing tables (with CIs where the cost has them), in tune's
router objectives (`llm-budget-accuracy` within `--budget-llm-calls`, `min-llm-calls`) and
threshold reports, and in the accuracy-vs-cost figure; bad budgets refused naming the flag
before anything loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import ConfigError, InputError
from retrieval_gate.evaluation.evaluate import evaluate_gate, result_json
from retrieval_gate.evaluation.gate_tables import comparison_table
from retrieval_gate.evaluation.routing_policies import (
    check_axis,
    cost_digits,
    routing_markdown,
    routing_report,
)
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.pricing import Calibration, binary_llm_calls, route_indices
from retrieval_gate.questions import Question
from retrieval_gate.strategies import BUILTIN, StrategySpec, registry_from_list
from retrieval_gate.tuning.objectives import DevData, figures
from retrieval_gate.tuning.router_budgets import router_markdown, tune_router
from routers import TableRouter
from user_files import placeholder_weights

NAMES = ("no_retrieval", "one_retrieval", "multi_step")
COSTS = (0.0, 1.0, 3.35)


def _questions(n: int, split: str = "test", sources=("a", "b")) -> tuple[Question, ...]:
    return tuple(Question(f"{split}{i}", f"question {i} words here?", ("x",),
                          sources[i % len(sources)], split=split) for i in range(n))  # fmt: skip


class ScoreGate:
    """A binary gate with fixed scores (in question order)."""

    name, threshold = "fixed", 0.5

    def __init__(self, scores):
        self._scores = np.asarray(scores, float)

    def scores(self, questions):
        return self._scores[: len(questions)]


# ---------------------------------------------------------------- specs


def test_each_strategy_s_llm_calls_come_from_its_spec():
    assert BUILTIN.llm_calls(NAMES) == (1.0, 1.0, 3.35)  # multi-step: its expected steps
    capped = StrategySpec("capped", 5.0, "default", multi_step=True, max_steps=4)
    declared = StrategySpec("declared", 5.0, "default", multi_step=True, llm_calls=2.5)
    assert (capped.expected_llm_calls, declared.expected_llm_calls) == (4.0, 2.5)
    in_ms = StrategySpec("in_ms", 1422.86, "default", multi_step=True)  # read as 1422 calls
    assert in_ms.expected_llm_calls == 10.0  # the most steps any run takes
    assert binary_llm_calls() == (1.0, 1.0)
    reg = registry_from_list([{"name": "no_retrieval"},
                              {"name": "one_retrieval", "llm_calls": 2}], "strategies")  # fmt: skip
    assert binary_llm_calls((), reg) == (1.0, 2.0)
    assert binary_llm_calls(("no_retrieval", "one_retrieval", "multi_step")) == (1.0, 1.0)
    assert binary_llm_calls(("mine", "yours")) is None  # no spec declares them: n/a


# ---------------------------------------------------------------- evaluate


def test_the_gate_table_has_llm_calls_per_question_beside_the_retrieval_rate():
    """Three of four questions sent to retrieval, whose strategy makes 2 LLM calls: 1.75 a
    question; per source: a (questions 0, 2) both retrieve, b (1, 3) one of two."""
    n = 4
    test = EvalSet(_questions(n), np.array([1, 0, 1, 0]), np.ones(n), np.ones(n))
    result = evaluate_gate(ScoreGate([0.9, 0.1, 0.8, 0.7]), test, 20, llm_calls=(1.0, 2.0))
    assert result.metrics["retrieval_rate"] == 0.75
    assert result.metrics["llm_calls_per_question"] == pytest.approx(1.75)
    assert result.per_source["a"]["llm_calls_per_question"] == pytest.approx(2.0)
    assert result.per_source["b"]["llm_calls_per_question"] == pytest.approx(1.5)
    table = comparison_table([result_json(result)]).splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    row = [c.strip() for c in table[2].strip("|").split("|")]
    i = header.index("LLM calls/q")
    assert header[i - 1] == "retrieval rate" and (row[i - 1], row[i]) == ("0.750", "1.75")
    unknown = evaluate_gate(ScoreGate([0.9, 0.1, 0.8, 0.2]), test, 20, llm_calls=None)
    assert comparison_table([result_json(unknown)]).splitlines()[2].count("n/a") >= 1


def _strategy_set(split: str) -> EvalSet:
    """q0: no retrieval answers; q1: one retrieval; q2: only multi-step; q3: none does."""
    correct = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]], float)
    qs = _questions(4, split)
    return EvalSet(qs, 1 - correct[:, 0], correct[:, 0], correct[:, 1], NAMES, correct, None)


def test_the_routing_tables_report_llm_calls_with_cis(tmp_path):
    test, dev = _strategy_set("test"), _strategy_set("dev")
    report = routing_report(test, dev, {}, tmp_path, "t", n_resamples=50, axis="both")
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    multi = rows["always multi_step"]
    assert multi["mean_llm_calls"] == pytest.approx(3.35)
    assert multi["mean_llm_calls_ci95"] == pytest.approx((3.35, 3.35))
    oracle = rows["oracle (cheapest strategy that answers)"]  # 1, 1, 3.35 and (none) 1
    assert oracle["mean_llm_calls"] == pytest.approx((1 + 1 + 3.35 + 1) / 4)
    assert oracle["mean_cost"] == pytest.approx((0 + 1 + 3.35 + 0) / 4)
    lo, hi = oracle["mean_llm_calls_ci95"]
    assert 1.0 <= lo <= oracle["mean_llm_calls"] <= hi <= 3.35
    per_source = report["policies"][-1]["per_source"]  # the oracle: a = q0, q2; b = q1, q3
    assert per_source["a"]["mean_llm_calls"] == pytest.approx((1 + 3.35) / 2)
    text = routing_markdown(report)
    assert "LLM calls/q [95% CI]" in text and "1.59 [" in text
    assert "multi_step 3.35" in text.split("LLM calls per question")[1]
    assert (tmp_path / report["figure"]).is_file() and report["figure_axis"] == "both"


def test_mean_costs_in_small_money_keep_their_digits(tmp_path):
    """Strategies priced in dollars per question (0.0004) read 0.00 in every mean-cost cell."""
    test, dev = _strategy_set("test"), _strategy_set("dev")
    report = routing_report(test, dev, {}, tmp_path, "t", n_resamples=50, axis="both")
    scale = 1e-4  # the same routing, its costs in dollars
    report["costs"] = [c * scale for c in report["costs"]]
    for row in report["policies"]:
        for stats in (row["overall"], *row["per_source"].values()):
            stats["mean_cost"] *= scale
            if stats.get("mean_cost_ci95"):
                stats["mean_cost_ci95"] = [v * scale for v in stats["mean_cost_ci95"]]
    assert cost_digits(report) == 6 and cost_digits({"costs": [0, 1, 3.35]}) == 2
    oracle = [line for line in routing_markdown(report).splitlines() if "| oracle" in line]
    assert oracle and all("0.000109 [" in line for line in oracle[:1])  # (0+1+3.35+0)/4 * 1e-4


def test_a_strategies_file_declares_the_llm_calls_the_tables_use(tmp_path):
    reg = registry_from_list([{"name": "no_retrieval"}, {"name": "one_retrieval"},
                              {"name": "multi_step", "llm_calls": 5}], "strategies")  # fmt: skip
    test, dev = _strategy_set("test"), _strategy_set("dev")
    report = routing_report(test, dev, {}, tmp_path, "t", 20, COSTS, reg)
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    assert rows["always multi_step"]["mean_llm_calls"] == 5.0
    assert rows["always multi_step"]["mean_cost"] == pytest.approx(3.35)  # its cost unchanged


def test_routers_llm_calls_are_their_routings_shares_of_each_strategy_s(tmp_path):
    rng = np.random.default_rng(0)
    test, dev = _strategy_set("test"), _strategy_set("dev")
    P = {q.id: rng.random(3) for q in (*test.questions, *dev.questions)}
    cal = Calibration.fit(NAMES, COSTS, np.array([P[q.id] for q in dev.questions]), dev.correct)
    report = routing_report(test, dev, {"r": TableRouter(P, cal)}, tmp_path, "t", 20)
    routed = [r for r in report["policies"] if r["policy"].startswith("r @")]
    assert routed
    for r in routed:
        shares = np.array(list(r["overall"]["shares"].values()))
        assert r["overall"]["mean_llm_calls"] == pytest.approx(shares @ np.array([1.0, 1.0, 3.35]))


def test_one_price_list_for_the_whole_table(tmp_path):
    """The fixed policies' costs and LLM calls followed the first router listed, and a
    router fitted here (router-prior) kept the default costs beside one priced otherwise."""
    from retrieval_gate.gates.strategy_routers import prior_router

    rng = np.random.default_rng(2)
    test, dev = _strategy_set("test"), _strategy_set("dev")
    P = {q.id: rng.random(3) for q in (*test.questions, *dev.questions)}
    dear = (0.0, 1.0, 5.0)

    def table(costs):
        return TableRouter(P, Calibration.fit(NAMES, costs, np.array([P[q.id] for q in
                                                                      dev.questions]), dev.correct))  # fmt: skip

    for order in (("a", "b"), ("b", "a")):
        gates = dict(zip(order, (table(COSTS), table(dear)), strict=True))
        with pytest.raises(ConfigError, match=r"routers '.' and '.' declare different costs"):
            routing_report(test, dev, gates, tmp_path, "t", 20)
    report = routing_report(test, dev, {"prior": prior_router(dev), "r": table(dear)},
                            tmp_path, "t", 20)  # fmt: skip
    assert report["costs"] == list(dear)
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    assert rows["always multi_step"]["mean_cost"] == pytest.approx(5.0)
    prior = prior_router(dev)
    assert tuple(prior.at_costs(dear).calibration.costs) == dear and prior.at_costs(COSTS) is prior
    with pytest.raises(ConfigError, match=r"'r' was calibrated at costs \[0.0, 1.0, 5.0\]"):
        routing_report(test, dev, {"r": table(dear)}, tmp_path, "t", 20, COSTS)  # --strategies


def test_the_cost_axis_is_checked_naming_the_flag(capsys):
    with pytest.raises(ConfigError, match="--cost-axis"):
        check_axis("tokens")
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--labels", "x.jsonl", "--cost-axis", "tokens"])
    assert e.value.code == 2 and "--cost-axis" in capsys.readouterr().err


# ---------------------------------------------------------------- tune


def _router_and_dev(n: int = 300, seed: int = 1):
    rng = np.random.default_rng(seed)
    qs = _questions(n, "dev")
    Y = (rng.random((n, 3)) < np.array([0.3, 0.45, 0.6])).astype(float)
    P = np.clip(Y * 0.6 + rng.random((n, 3)) * 0.4, 0, 1)
    cal = Calibration.fit(NAMES, COSTS, P, Y)
    dev = EvalSet(qs, 1 - Y[:, 0], Y[:, 0], Y[:, 1], NAMES, Y, None)
    return TableRouter(dict(zip((q.id for q in qs), P, strict=True)), cal), dev, P, Y


def test_a_budget_on_llm_calls_is_honoured():
    router, dev, P, Y = _router_and_dev()
    objectives = ["budget-accuracy", "llm-budget-accuracy", "min-llm-calls", "cost-pareto"]
    result = tune_router(router, dev, objectives, 3.35, 1.0, budget_llm_calls=1.3)
    chosen = result["chosen"]["llm-budget-accuracy@1.3"]
    calls = np.array(result["llm_calls"])
    assert tuple(calls) == (1.0, 1.0, 3.35)
    choice = route_indices(P, chosen["price"], COSTS)  # the chosen price, routed afresh
    assert calls[choice].mean() == pytest.approx(chosen["mean_llm_calls"])
    assert chosen["mean_llm_calls"] <= 1.3 + 1e-9
    assert Y[np.arange(len(Y)), choice].mean() == pytest.approx(chosen["accuracy"])
    within = [(p, Y[np.arange(len(Y)), route_indices(P, p, COSTS)].mean())  # every routing
              for p in np.linspace(0, 3, 600)]  # fmt: skip
    best = max(a for p, a in within if calls[route_indices(P, p, COSTS)].mean() <= 1.3 + 1e-9)
    assert chosen["accuracy"] >= best - 1e-12  # the most accurate within the budget
    unbounded = result["chosen"]["budget-accuracy@3.35"]  # more LLM calls, the budget binds
    assert unbounded["mean_llm_calls"] > 1.3 and unbounded["accuracy"] >= chosen["accuracy"]
    fewest = result["chosen"]["min-llm-calls@1"]
    assert fewest["accuracy"] >= Y.mean(axis=0).max() - 1e-12
    assert all(p["mean_llm_calls"] is not None for p in result["pareto"])
    text = router_markdown(result)
    assert "dev LLM calls/q" in text and "dev mean cost" in text
    assert "LLM calls per question: no_retrieval 1, one_retrieval 1, multi_step 3.35" in text


def test_threshold_reports_name_both_axes():
    s = np.array([0.1, 0.6, 0.7, 0.9])
    dev = DevData(np.array([0, 1, 1, 1]), s, np.ones(4), np.ones(4), llm_calls=(1.0, 2.0))
    f = figures(dev, 0.65)
    assert f["retrieval_rate"] == 0.5 and f["llm_calls_per_question"] == pytest.approx(1.5)


def _router_run(folder: Path) -> Path:
    """A run folder whose files say "router" (no weights worth loading)."""
    folder.mkdir(parents=True)
    placeholder_weights(folder / "gate.pt")
    rng = np.random.default_rng(0)
    P, Y = rng.random((20, 3)), (rng.random((20, 3)) < 0.5).astype(float)
    meta = {"task": "strategies", "router": Calibration.fit(NAMES, COSTS, P, Y).to_dict()}
    (folder / "metadata.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize(("value", "message"), [
    ("-1", r"--budget-llm-calls -1\.0: .*from the cheapest strategy's \(1\)"),
    ("0.5", r"--budget-llm-calls 0\.5: .*from the cheapest strategy's \(1\)"),  # a call each
    ("3.4", r"--budget-llm-calls 3\.4: .*\(3\.35\)"),
    ("nan", r"--budget-llm-calls nan"),
])  # fmt: skip
def test_bad_llm_budgets_are_refused_naming_the_flag_before_loading(tmp_path, capsys, value,
                                                                    message):  # fmt: skip
    run = _router_run(tmp_path / "run")  # an empty gate.pt: loading it would fail otherwise
    argv = ["tune", "--gate", "learned", "--learned-run", str(run), "--labels", "adaptive-rag",
            "--objective", "llm-budget-accuracy", f"--budget-llm-calls={value}",
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_non_number_and_a_flag_without_its_objective_are_refused(tmp_path, capsys):
    base = ["tune", "--gate", "router-tfidf", "--labels", "adaptive-rag",
            "--out", str(tmp_path / "out")]  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main([*base, "--objective", "llm-budget-accuracy", "--budget-llm-calls", "abc"])
    assert e.value.code == 2
    assert "argument --budget-llm-calls: invalid float value: 'abc'" in capsys.readouterr().err
    assert main([*base, "--objective", "budget-accuracy", "--budget-llm-calls", "1"]) == 2
    assert "--budget-llm-calls goes with --objective llm-budget-accuracy" in capsys.readouterr().err
    assert main([*base, "--objective", "llm-budget-accuracy"]) == 2
    assert "needs --budget-llm-calls" in capsys.readouterr().err


def test_a_router_fitted_here_is_checked_against_the_label_file_s_strategies(tmp_path):
    from retrieval_gate.tuning.tune import TuneConfig

    cfg = TuneConfig(gate="router-tfidf", labels=Path("adaptive-rag"), budget_llm_calls=3.4,
                     objectives=["llm-budget-accuracy"], out=tmp_path)  # fmt: skip
    cfg.check()  # no router files to read the dearest from: checked once labels are read
    with pytest.raises(InputError, match=r"--budget-llm-calls 3\.4.*\(3\.35\)"):
        cfg.check_llm_budget_for(NAMES)
    cfg.budget_llm_calls = 3.35
    cfg.check_llm_budget_for(NAMES)


def test_the_routing_report_runs_a_router_once_on_the_test_questions(tmp_path):
    """Its policies, its AUROC's scores and its curve each asked the router for the same test
    questions: an ONNX router scored 1,350 questions for 450 (`evaluate --labels adaptive-rag`)."""
    from retrieval_gate.gates.strategy_routers import RoutingMixin

    class CountingRouter(RoutingMixin):
        name, threshold = "counting", 0.5

        def __init__(self, P, calibration):
            self.P, self.calibration, self.strategies = P, calibration, calibration.strategies
            self.asked = []

        def strategy_proba(self, questions):
            self.asked.append(len(questions))
            return np.array([self.P[q.id] for q in questions])

    rng = np.random.default_rng(1)
    test, dev = _strategy_set("test"), _strategy_set("dev")
    P = {q.id: rng.random(3) for q in (*test.questions, *dev.questions)}
    cal = Calibration.fit(NAMES, COSTS, np.array([P[q.id] for q in dev.questions]), dev.correct)
    router = CountingRouter(P, cal)
    report = routing_report(test, dev, {"r": router}, tmp_path, "t", 20)
    assert any(r["policy"].startswith("r @") for r in report["policies"])
    assert router.asked.count(len(test.questions)) == 1
