"""The baseline routers fitted by `evaluate` and `tune` (router-tfidf, router-prior) on costs
that do not span 1 (milliseconds; a --strategies file pricing them 5/6/7): both verbs exited 2
with "model.budget 1.0: a budget is a mean cost per question from the cheapest strategy's",
a flag neither has, and `tune --budget 400` never reached the router."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.gates.strategy_routers import prior_router
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.questions import Question

NAMES = ("s0", "s1", "s2")
MS = np.array([150.0, 400.0, 1200.0])  # each strategy's latency, the same for every question
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "your-data"


def _dev(paid: np.ndarray | None = None, names: tuple[str, ...] = NAMES) -> EvalSet:
    """Eight dev questions of two sources: `a` answered by s1, `b` only by s2."""
    qs = tuple(Question(f"q{i}", f"question {i}?", ("x",), "ab"[i % 2]) for i in range(8))
    correct = np.array([[0, 1, 1], [0, 0, 1]] * 4, float)
    return EvalSet(qs, 1 - correct[:, 0], correct[:, 0], correct[:, 1], names, correct, paid)


def test_a_baseline_router_on_costs_in_another_unit_defaults_halfway_between_them():
    ms = prior_router(_dev(np.tile(MS, (8, 1))))  # the labels' per-question costs
    assert ms.calibration.costs == tuple(MS) and ms.budget == pytest.approx(675.0)
    new = [Question("n", "new?", ("x",), "a"), Question("m", "new?", ("x",), "b")]
    assert ms.route(new) == ["s1", "s0"]  # b's s2 for every question would cost 800 a question
    priced = prior_router(_dev(), costs=(5.0, 6.0, 7.0))  # a --strategies file's prices
    assert priced.budget == 6.0 and priced.route([Question("n", "new?", ("x",), "a")]) == ["s1"]
    # a router fitted at the built-ins' costs keeps budget 1; re-priced, it re-reads its default
    builtin = prior_router(_dev(names=("no_retrieval", "one_retrieval", "multi_step")))
    assert builtin.budget == 1.0 and builtin.at_costs((5.0, 6.0, 7.0)).budget == 6.0
    assert builtin.at_costs((0.0, 0.6, 2.0)).budget == 1.0  # costs that span 1 keep it
    assert ms.at_budget(400.0).budget == 400.0 and ms.at_budget(675.0) is ms


def _labels(tmp_path: Path) -> str:
    """Outcomes of s0 s1 s2 with per-question costs in milliseconds (100-1500)."""
    ids = [line.split(",")[0] for line in (EXAMPLES / "questions.csv").read_text().splitlines()[1:]]
    rng = random.Random(0)
    rows = ["id,s0_correct,s1_correct,s2_correct,s0_cost,s1_cost,s2_cost"]
    rows += [f"{i},{rng.random() < 0.3},{rng.random() < 0.7},{rng.random() < 0.6},"
             f"{rng.uniform(100, 200):.1f},{rng.uniform(300, 500):.1f},"
             f"{rng.uniform(1000, 1500):.1f}" for i in ids]  # fmt: skip
    (tmp_path / "ms.csv").write_text("\n".join(rows) + "\n")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(tmp_path / "ms.csv"),
                 "--questions", str(EXAMPLES / "questions.csv"), "--strategies", *NAMES,
                 "--generator", "ms", "--labels-dir", str(tmp_path / "L")]) == 0  # fmt: skip
    return str(tmp_path / "L" / "ms" / "strategies.jsonl")


def test_tune_budget_reaches_a_baseline_router_on_costs_in_milliseconds(tmp_path, capsys):
    labels, questions = _labels(tmp_path), str(EXAMPLES / "questions.csv")
    tune = ["tune", "--gate", "router-prior", "--labels", labels, "--questions", questions,
            "--objective", "budget-accuracy", "--out", str(tmp_path / "tune")]  # fmt: skip
    assert main([*tune, "--budget", "400"]) == 0, capsys.readouterr().err
    result = json.loads(next((tmp_path / "tune").glob("tune-router-*.json")).read_text())
    assert result["chosen"]["budget-accuracy@400"]["budget"] == 400.0
    capsys.readouterr()
    # the default --budget 1 is below every cost here: refused, naming the flag tune has (a
    # budget below the cheapest strategy's was met by sending every question to it, unsaid)
    assert main(tune) == 2
    assert "--budget 1.0: a budget is a mean cost per question" in capsys.readouterr().err


@pytest.mark.slow  # evaluate twice: about 6 s
def test_evaluate_fits_the_baselines_on_costs_in_milliseconds_or_a_file_s(tmp_path, capsys):
    labels, questions = _labels(tmp_path), str(EXAMPLES / "questions.csv")
    spec = tmp_path / "cnz.yaml"
    spec.write_text("strategies:\n  - {name: s0, cost: 5.0}\n"
                    "  - {name: s1, cost: 6.0, retriever: default}\n"
                    "  - {name: s2, cost: 7.0, retriever: default, steps: multi}\n")  # fmt: skip
    for name, extra, budget in (("ms", [], ""), ("priced", ["--strategies", str(spec)], "6)")):
        out = tmp_path / name
        gates = ["--gates", "router-tfidf", "router-prior", "--no-cost"]
        code = main(["evaluate", "--labels", labels, "--questions", questions, *gates,
                     "--out", str(out), *extra])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        text = (out / "report.md").read_text()
        for gate in ("router-tfidf", "router-prior"):
            assert f"{gate} @ default (budget {budget}" in text


def test_tune_refuses_a_strategies_file_pricing_a_routers_strategies_otherwise(tmp_path):
    """tune took a --strategies file whose costs were not a loaded router's own: --budget was
    read in the router's unit, its LLM calls in the file's (score, serve and rag refuse it)."""
    from retrieval_gate.errors import ConfigError
    from retrieval_gate.strategies import load_strategies
    from retrieval_gate.tuning.tune import priced_alike

    spec = (
        "strategies:\n  - {{name: s0, cost: 0}}\n  - {{name: s1, cost: {}, retriever: default}}\n"
    )
    for cost in (1, 50):
        (tmp_path / f"s{cost}.yaml").write_text(spec.format(cost))

    class Loaded:  # a learned router's shape: its own costs by strategy
        name = "learned"
        costs = {"s0": 0.0, "s1": 1.0}

    priced_alike(Loaded(), load_strategies(tmp_path / "s1.yaml"))  # the same costs
    priced_alike(Loaded(), None)  # no --strategies: the router's own
    with pytest.raises(ConfigError, match=r"prices them at \[0.0, 50.0\]"):
        priced_alike(Loaded(), load_strategies(tmp_path / "s50.yaml"))


def test_a_price_list_not_the_labels_sets_their_per_question_costs_aside(tmp_path, caplog):
    """Labels with per-question costs (ms) and a --strategies file pricing the strategies
    5 / 6 / 7: the router was calibrated and budgeted at the file's prices, but its curve, the
    table's mean cost and tune's test figures read the labels' milliseconds, so the "@ default
    (budget 6)" row spent more than 6 a question in the file's unit."""
    from retrieval_gate.evaluation.routing_policies import routing_report
    from retrieval_gate.tuning.router_budgets import test_figures

    dev, file = _dev(np.tile(MS, (8, 1))), (5.0, 6.5, 7.25)
    ms = prior_router(dev)  # the labels' own prices: their per-question costs kept
    assert ms.calibration.dev.mean_cost.max() > 150.0  # in milliseconds
    assert ms.at_costs(ms.calibration.costs, labels_own=True) is ms
    with caplog.at_level("WARNING"):
        for router in (prior_router(dev, costs=file), ms.at_costs(file)):
            curve = router.calibration.dev.mean_cost
            assert curve.min() >= 5.0 - 1e-9 and curve.max() <= 7.25 + 1e-9
    said = [r.message for r in caplog.records if "per-question costs are set aside" in r.message]
    assert len(said) == 1 and "[5.0, 6.5, 7.25]" in said[0]  # said once
    report = routing_report(dev, dev, {"router-prior": ms}, tmp_path, "x", 20, costs=file)
    for row in report["policies"]:
        assert 5.0 - 1e-9 <= row["overall"]["mean_cost"] <= 7.25 + 1e-9, row["policy"]
    own = routing_report(dev, dev, {"router-prior": ms}, tmp_path, "y", 20)  # labels' prices
    assert max(r["overall"]["mean_cost"] for r in own["policies"]) == pytest.approx(1200.0)
    result = {"chosen": {"b": {"price": prior_router(dev, costs=file).calibration.price(6.0)}}}
    test_figures(prior_router(dev, costs=file), result, dev)
    assert 5.0 <= result["chosen"]["b"]["test"]["mean_cost"] <= 6.0 + 1e-9
