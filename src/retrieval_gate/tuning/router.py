"""Tuning a router for a budget (issue 25 item 5), on dev questions with strategy labels:

- `budget-accuracy`: the most accurate routing whose mean cost is within `--budget`;
- `min-cost`: the cheapest routing whose accuracy reaches `--target` x the best single
  strategy's (e.g. 1.0: always-multi's accuracy);
- `cost-pareto`: the accuracy-vs-cost Pareto front.

One price parameter decides a router's routing, so each is an exact sweep over every price at
which some dev question's routing changes (`routing.sweep`): no sampler. `--calibrate-on FILE`
re-reads the price of the budget on a user's own unlabelled questions (their traffic,
RouteLLM-style). Test questions are routed only after tuning, at the prices chosen on dev."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, MissingInputError
from ..gates.base import Gate, is_router
from ..labels.evalset import EvalSet
from ..questions import Question
from ..routing import (
    Calibration,
    Curve,
    outcome,
    pareto,
    point_for_accuracy,
    point_for_budget,
    route_indices,
    sweep,
)
from ..tables import markdown_table
from .studies import require_no_test

ROUTER_OBJECTIVES = ("budget-accuracy", "min-cost", "cost-pareto")


def require_router(gate: Gate) -> Any:
    if not is_router(gate):
        raise ConfigError(
            f"router objectives ({', '.join(ROUTER_OBJECTIVES)}) and --calibrate-on need a "
            f"router: {gate.name!r} is a binary gate (train with data.task=strategies, or use "
            "router-tfidf / router-prior)"
        )
    return gate


def _point(curve: Curve, i: int) -> dict[str, Any]:
    return {"price": float(curve.price[i]), "mean_cost": float(curve.mean_cost[i]),
            "accuracy": None if curve.accuracy is None else float(curve.accuracy[i]),
            "shares": curve.shares[i].tolist()}  # fmt: skip


def dev_curve(router: Any, dev: EvalSet) -> tuple[Curve, str]:
    """The curve the objectives sweep, and what it is on: the router's scores of the dev
    questions ("dev"), or, for a router fitted on dev, its stored out-of-fold calibration
    curve ("out-of-fold train+dev": re-scoring questions it was fitted on would be in-sample)."""
    cal: Calibration = router.calibration
    if cal.fitted_on_dev:  # stored with its single strategies' accuracy and size (`n`)
        return cal.dev, cal.calibrated_on
    P = router.strategy_proba(dev.questions)
    return sweep(P, cal.costs, dev.correct, dev.costs_paid(cal.costs)), "dev"


def tune_router(
    gate: Gate, dev: EvalSet, objectives: Sequence[str], budget: float, target: float
) -> dict[str, Any]:
    """Each router objective's price and dev figures, and the dev Pareto front."""
    require_no_test(dev)
    router = require_router(gate)
    if not dev.has_strategies:
        raise MissingInputError("router objectives need strategy labels for dev questions "
                                "(--labels: a strategies.jsonl, a release folder or adaptive-rag)")  # fmt: skip
    cal: Calibration = router.calibration
    curve, swept = dev_curve(router, dev)
    single = curve.single  # either curve was swept with outcomes, so it records them
    best_single = float(single.max())
    out: dict[str, Any] = {"gate": gate.name, "strategies": list(cal.strategies),
                           "costs": list(cal.costs), "n_dev": curve.n, "swept": swept,
                           "n_prices": len(curve.price), "chosen": {}, "skipped": {}}  # fmt: skip
    for name in objectives:
        if name == "budget-accuracy":
            i = point_for_budget(curve, budget, best_accuracy=True)
            out["chosen"][f"budget-accuracy@{budget:g}"] = {**_point(curve, i), "budget": budget}
        elif name == "min-cost":
            need = target * best_single
            i = point_for_accuracy(curve, need)
            if i is None:
                out["skipped"][f"min-cost@{target:g}"] = (
                    f"no routing reaches {swept} accuracy {need:.3f} ({target:g} x the best single "
                    f"strategy's {best_single:.3f})")  # fmt: skip
                continue
            out["chosen"][f"min-cost@{target:g}"] = {**_point(curve, i),
                                                     "budget": float(curve.mean_cost[i])}  # fmt: skip
        elif name == "cost-pareto":
            out["pareto"] = [_point(curve, i) for i in pareto(curve)]
    out["dev_single"] = dict(zip(cal.strategies, single.tolist(), strict=True))
    return out


def test_figures(gate: Gate, result: dict[str, Any], test: EvalSet) -> None:
    """After tuning: test accuracy and mean cost at each chosen price (and the front's)."""
    router = require_router(gate)
    if not test.has_strategies:
        return
    costs = router.calibration.costs
    P = router.strategy_proba(test.questions)
    paid = test.costs_paid(costs)

    def at(price: float) -> dict[str, float]:
        ok, cost = outcome(route_indices(P, price, costs), test.correct, paid)
        return {"accuracy": float(ok.mean()), "mean_cost": float(cost.mean())}

    for point in [*result["chosen"].values(), *result.get("pareto", [])]:
        point["test"] = at(point["price"])
    result["test_single"] = dict(zip(router.strategies, test.correct.mean(axis=0).tolist(),
                                     strict=True))  # fmt: skip


def calibrate_on(
    gate: Gate, questions: Sequence[Question], source: str, budget: float
) -> Calibration:
    """The router's calibration with the price of `budget` read on these unlabelled questions."""
    router = require_router(gate)
    P = router.strategy_proba(list(questions))
    return router.calibration.on_traffic(P, source, budget)


FRONT_STEP = 0.0025  # the front's rows shown: each this much more accurate than the last


def shown_front(front: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The front's rows for a report: on thousands of questions it has a row per question or
    two; one row per FRONT_STEP of accuracy (and the last) says the same (all rows in .json)."""
    out: list[dict[str, Any]] = []
    for i, p in enumerate(front):
        if not out or p["accuracy"] >= out[-1]["accuracy"] + FRONT_STEP or i == len(front) - 1:
            out.append(p)
    return out


def router_markdown(result: dict[str, Any]) -> str:
    where = result.get("swept", "dev")  # the questions swept: dev, or out-of-fold train+dev
    header = ["objective", "price", f"{where} accuracy", f"{where} mean cost", "test accuracy",
              "test mean cost", *(f"% {s}" for s in result["strategies"])]  # fmt: skip

    def row(name: str, p: dict[str, Any]) -> list[Any]:
        t = p.get("test", {})
        return [name, p["price"], p["accuracy"], p["mean_cost"], t.get("accuracy"),
                t.get("mean_cost"), *(f"{100 * v:.0f}" for v in p["shares"])]  # fmt: skip

    costs = ", ".join(
        f"{s} {c:g}" for s, c in zip(result["strategies"], result["costs"], strict=True)
    )
    lines = [f"## Router {result['gate']}: price for a budget", "",
             f"Costs: {costs}. Exact sweep over the {result['n_prices']} distinct routings one "
             f"price makes on {result['n_dev']} questions ({where}); test routed afterwards "
             "at the chosen prices.", "",
             markdown_table(header, [row(k, v) for k, v in result["chosen"].items()]), ""]  # fmt: skip
    single = ", ".join(f"{k} {v:.3f}" for k, v in result["dev_single"].items())
    lines.append(f"Single strategies, {where} accuracy: {single}"
                 + (", test: " + ", ".join(f"{k} {v:.3f}" for k, v in result["test_single"].items())
                    if "test_single" in result else "") + ".")  # fmt: skip
    for k, why in result["skipped"].items():
        lines.append(f"- {k} skipped: {why}")
    if "pareto" in result:
        front = shown_front(result["pareto"])
        lines += ["", f"Accuracy-vs-cost Pareto front ({where}; {len(front)} of its "
                  f"{len(result['pareto'])} rows, one per {FRONT_STEP} of accuracy), with the "
                  "test figures at the same prices:", "",
                  markdown_table(header, [row("front", p) for p in front])]  # fmt: skip
    if "traffic" in result:
        t = result["traffic"]
        lines += ["", f"Calibrated on {t['source']} ({t['n']} questions): budget "
                  f"{t['budget']:g} -> price {t['price']:.4g} (mean cost there "
                  f"{t['mean_cost']:.3f}; the dev price for it: {t['dev_price']:.4g})."]  # fmt: skip
    return "\n".join(lines) + "\n"


def traffic_summary(cal: Calibration, n: int, dev_price: float) -> dict[str, Any]:
    curve = cal.curve()
    i = int(np.argmin(np.abs(curve.price - cal.default_price)))
    return {"source": cal.traffic_source, "n": n, "budget": cal.default_budget,
            "price": cal.default_price, "mean_cost": float(curve.mean_cost[i]),
            "dev_price": dev_price}  # fmt: skip


def saved_calibration(gate: Gate, result: dict[str, Any], objective: str) -> Calibration:
    """The router's calibration with the default operating point set to a tuned objective."""
    router = require_router(gate)
    key = next((k for k in result["chosen"] if k.startswith(objective)), None)
    if key is None:
        why = next(
            (v for k, v in result["skipped"].items() if k.startswith(objective)), "not tuned"
        )
        raise ConfigError(f"--save-objective {objective!r} could not be tuned ({why})")
    p = result["chosen"][key]
    return router.calibration.with_default(
        p["budget"], p["price"], f"tuned: {key} on {result.get('swept', 'dev')}"
    )


def calibration_source(spec: str | Path) -> str:
    return f"traffic {Path(str(spec)).name}"
