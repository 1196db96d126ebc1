"""`tune` on routers priced in any unit, and its studies under Ctrl-C: scaling every cost by
one factor changes no routing (the price sweep's nudge was a fixed 1e-9, past most breakpoints
with costs of 1e11), an unread --budget is not checked against costs in ms, the report prints
a price in ms as such (not 0.000), and a Ctrl-C in Optuna's trial commit exits as interrupted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from retrieval_gate.errors import InputError
from retrieval_gate.gates.registry import GateOptions
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.pricing import Calibration, route_indices, sweep
from retrieval_gate.questions import Question
from retrieval_gate.tuning.router_budgets import router_markdown, tune_router
from retrieval_gate.tuning.tune import TuneConfig
from retrieval_gate.tuning.workers import optimize_until
from routers import TableRouter
from user_files import placeholder_weights

NAMES = ("no_retrieval", "one_retrieval", "multi_step")
MS = (100.0, 400.0, 1500.0)  # costs in milliseconds


def _table(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """P as a float32 model gives it, and outcomes drawn from it."""
    rng = np.random.default_rng(seed)
    P = rng.uniform(size=(n, 3)).astype(np.float32).astype(float)
    return P, (rng.uniform(size=(n, 3)) < P).astype(float)


def _tuned(P: np.ndarray, Y: np.ndarray, costs: tuple[float, ...], budget: float) -> dict:
    """`tune`'s router result (budget-accuracy, the Pareto front) for a router fitted on P."""
    qs = tuple(Question(f"d{i}", f"question {i}?", ("x",), "a", split="dev")
               for i in range(len(P)))  # fmt: skip
    router = TableRouter({q.id: p for q, p in zip(qs, P, strict=True)},
                         Calibration.fit(NAMES, costs, P, Y, budget=budget))  # fmt: skip
    dev = EvalSet(qs, 1 - Y[:, 0], Y[:, 0], Y[:, 1], NAMES, Y)
    return tune_router(router, dev, ["budget-accuracy", "cost-pareto"], budget, 1.0)


def test_scaling_every_cost_by_one_factor_changes_no_routing():
    """Costs 0 / 1e11 / 1e12 (valid up to 1e12) found 2 routings where 0 / 0.1 / 1 found
    every one, and budget-accuracy sent every question to no_retrieval, unsaid."""
    P, Y = _table(400)
    small, big = (0.0, 0.1, 1.0), (0.0, 1e11, 1e12)
    a, b = sweep(P, small, Y), sweep(P, big, Y)
    assert len(a.price) == len(b.price) > 300
    np.testing.assert_array_equal(a.shares, b.shares)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    ra, rb = _tuned(P, Y, small, 0.5), _tuned(P, Y, big, 5e11)
    pa, pb = ra["chosen"]["budget-accuracy@0.5"], rb["chosen"]["budget-accuracy@5e+11"]
    assert pa["shares"] == pb["shares"] and pa["accuracy"] == pb["accuracy"]
    assert pa["shares"][0] < 0.5  # not every question to the cheapest strategy
    np.testing.assert_array_equal(route_indices(P, pa["price"], small),
                                  route_indices(P, pb["price"], big))  # fmt: skip
    assert len(ra["pareto"]) == len(rb["pareto"]) > 2


def _router_run(folder: Path, costs: tuple[float, ...], budget: float) -> Path:
    """A run folder whose files say "router", priced in `costs` (no weights worth loading):
    tune's flags are checked against it before anything would load."""
    folder.mkdir(parents=True)
    placeholder_weights(folder / "gate.pt")
    P, Y = _table(20)
    calibration = Calibration.fit(NAMES, costs, P, Y, budget=budget).to_dict()
    (folder / "metadata.json").write_text(json.dumps({"task": "strategies", "router": calibration}))
    return folder


@pytest.mark.parametrize(
    ("objectives", "calls"),
    [(["min-cost"], None), (["cost-pareto"], None), (["llm-budget-accuracy"], 2.0),
     (["min-llm-calls"], None)],
)  # fmt: skip
def test_an_unread_budget_is_not_checked_against_a_routers_costs(tmp_path, objectives, calls):
    """Costs in ms: the default --budget 1.0, read by none of these objectives, was refused
    as below the cheapest strategy's cost (and --budget 500 as unused): none could run."""
    run = _router_run(tmp_path / "run", MS, 500.0)
    cfg = TuneConfig(gate="learned", labels=Path("adaptive-rag"), objectives=objectives,
                     budget_llm_calls=calls, storage=tmp_path / "s.db",
                     gate_options=GateOptions(learned_run=str(run)))  # fmt: skip
    cfg.check()
    # where --budget is read it is still checked against the router's costs
    read = TuneConfig(gate="learned", labels=Path("adaptive-rag"), objectives=["budget-accuracy"],
                      storage=tmp_path / "s.db", gate_options=GateOptions(learned_run=str(run)))  # fmt: skip
    with pytest.raises(InputError, match=r"--budget 1.0: .*cheapest strategy's \(100\)"):
        read.check()
    read.budget = 500.0
    read.check()


def test_the_report_prints_a_price_in_ms_as_it_is():
    """A price per ms is about 1e-4: the table rounded it to 3 decimals and printed 0.000
    (price 0 reads as "always the most accurate strategy")."""
    P, Y = _table(200)
    result = _tuned(P, Y, MS, 500.0)
    price = result["chosen"]["budget-accuracy@500"]["price"]
    assert 0 < price < 5e-4
    row = next(line for line in router_markdown(result).splitlines()
               if line.startswith("| budget-accuracy@500 |"))  # fmt: skip
    assert row.split("|")[2].strip() == f"{price:.4g}" != "0.000"


class _CommitInterrupted(optuna.storages.InMemoryStorage):
    """A storage whose first commit of a finished trial is cut by Ctrl-C (as SQLAlchemy's was
    in a real run): Optuna's `_run_trial` then fails in its `finally` with UnboundLocalError."""

    def set_trial_state_values(self, trial_id, state, values=None):  # type: ignore[override]
        if state == optuna.trial.TrialState.COMPLETE:
            raise KeyboardInterrupt
        return super().set_trial_state_values(trial_id, state, values)


def test_ctrl_c_in_the_trial_commit_is_an_interrupt():
    """It ended as an UnboundLocalError: 'internal error (a bug)', exit 1, not 130."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(storage=_CommitInterrupted(), study_name="interrupted")
    with pytest.raises(KeyboardInterrupt):
        optimize_until(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
