"""Tuning a router for a budget (issue 25 item 5), on dev questions with strategy labels:

- `budget-accuracy`: the most accurate routing whose mean cost is within `--budget`;
- `min-cost`: the cheapest routing whose accuracy reaches `--target` x the best single
  strategy's (e.g. 1.0: always-multi's accuracy);
- `cost-pareto`: the accuracy-vs-cost Pareto front;
- `llm-budget-accuracy` / `min-llm-calls`: the same two on the second cost axis, LLM calls per
  question (each strategy's from its spec): the most accurate routing within
  `--budget-llm-calls`, the fewest LLM calls reaching `--target`.

Every chosen row and the front name both axes (mean cost and LLM calls per question).

One price parameter decides a router's routing, so each is an exact sweep over every price at
which some dev question's routing changes (`pricing.sweep`): no sampler. `--calibrate-on FILE`
re-reads the price of the budget on a user's own unlabelled questions (their traffic,
RouteLLM-style). Test questions are routed only after tuning, at the prices chosen on dev.
A router fitted on dev is swept on its stored out-of-fold curve, which is of the labels it
was trained on: other `--labels` (their sha256, `other_labels`) are refused there."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, MissingInputError
from ..fileio import read_json
from ..gates.base import Gate, HasMetadata, is_router
from ..gates.strategy_routers import paid_at
from ..labels.evalset import EvalSet
from ..labels.strategy_labels import load_strategy_labels, strategy_labels_sha256
from ..pricing import (
    Calibration,
    Curve,
    outcome,
    pareto,
    point_for_accuracy,
    point_for_budget,
    route_indices,
    sweep,
)
from ..questions import Question
from ..run_folder import RunFolder
from ..strategies import StrategyRegistry
from ..strict_rows import parse_json
from ..tables import markdown_table
from .studies import require_no_test

ROUTER_OBJECTIVES = ("budget-accuracy", "min-cost", "cost-pareto", "llm-budget-accuracy",
                     "min-llm-calls")  # fmt: skip
LLM_OBJECTIVES = ("llm-budget-accuracy", "min-llm-calls")  # need each strategy's LLM calls


def require_router(gate: Gate) -> Any:
    if not is_router(gate):
        raise ConfigError(
            f"router objectives ({', '.join(ROUTER_OBJECTIVES)}) and --calibrate-on need a "
            f"router: {gate.name!r} is a binary gate (train with data.task=strategies, or use "
            "router-tfidf / router-prior)"
        )
    return gate


def same_strategies(gate: Gate, labels: Sequence[str]) -> None:
    """A router is scored on labels of its own strategies, in its order (its column i is
    theirs): other ones broke the costs' shapes (a traceback), and other names of as many
    were paired by position, unsaid."""
    own = tuple(getattr(gate, "strategies", ())) if is_router(gate) else tuple(labels)
    if own != tuple(labels):
        raise ConfigError(f"router {gate.name!r} routes among {', '.join(own)}, and the labels "
                          f"hold {', '.join(labels)}: evaluate and tune a router on labels of "
                          "its own strategies (--labels: the strategies.jsonl it was trained "
                          "on, or another of those strategies)")  # fmt: skip


def _point(curve: Curve, i: int, calls: np.ndarray | None) -> dict[str, Any]:
    return {"price": float(curve.price[i]), "mean_cost": float(curve.mean_cost[i]),
            "mean_llm_calls": None if calls is None else float(calls[i]),
            "accuracy": None if curve.accuracy is None else float(curve.accuracy[i]),
            "shares": curve.shares[i].tolist()}  # fmt: skip


def router_llm_calls(
    gate: Gate, registry: StrategyRegistry | None = None
) -> tuple[float, ...] | None:
    """A router's strategies' LLM calls per question: --strategies' specs, else its own."""
    return require_router(gate).calibration.llm_calls(registry)


def trained_labels(gate: Gate) -> dict[str, Any] | None:
    """The labels a trained router's stored calibration curve was read on: its export's
    `label_provenance` or its run's labels.json (path, sha256), with `recorded_in` (where that
    is written). None for a router fitted here (router-tfidf, router-prior: on the labels
    given) or one trained on labels given in memory (no file to compare with)."""
    if isinstance(gate, HasMetadata) and "label_provenance" in gate.metadata:  # an export
        try:
            recorded = parse_json(gate.metadata["label_provenance"])
        except ValueError:  # unreadable: the export's own loader names damaged metadata
            return None
        where = f"{getattr(gate, 'path', gate.name)} (its label_provenance)"
    elif (run := getattr(gate, "run_dir", None)) is not None:  # a run (gates/learned.py)
        path = Path(run) / RunFolder.LABELS
        if not path.is_file():  # a run written without one: nothing to compare with
            return None
        recorded, where = read_json(path), str(path)
    else:
        return None
    if not isinstance(recorded, dict) or not recorded.get("path"):
        return None
    sha = recorded.get("sha256")
    return {**recorded, "recorded_in": where} if isinstance(sha, str) else None


def other_labels(gate: Gate, labels: str | Path) -> tuple[str, str] | None:
    """Where a trained router's stored calibration curve was read on other labels than
    `labels` (its recorded sha256 against theirs, computed as training computes it:
    `strategy_labels_sha256`): a sentence naming both, and how to pass the labels it was
    trained on (their path, or, where these are that path rewritten, to restore it).
    None where they are the same, or not known (`trained_labels`)."""
    recorded = trained_labels(gate)
    if recorded is None:
        return None
    now = strategy_labels_sha256(load_strategy_labels(labels))
    if now == recorded["sha256"]:
        return None
    said = (
        f"router {gate.name!r} was trained and calibrated on labels with sha256 "
        f"{recorded['sha256'][:12]}... ({recorded['path']}, as {recorded['recorded_in']} "
        f"records), and these labels ({labels}) have sha256 {now[:12]}..."
    )
    trained = str(recorded["path"])
    if str(labels) in (trained, recorded.get("resolved")) or _same_file(trained, labels):
        trained = f"{trained} as it was when the router trained: restore it"
    else:
        trained = f"--labels {trained}"
    return said, trained


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file or folder (a relative and an absolute spelling)."""
    try:
        return Path(a).exists() and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def dev_curve(router: Any, dev: EvalSet, labels: str | Path | None = None) -> tuple[Curve, str]:
    """The curve the objectives sweep, and what it is on: the router's scores of the dev
    questions ("dev"), or, for a router fitted on dev, its stored out-of-fold calibration
    curve ("out-of-fold train+dev": re-scoring questions it was fitted on would be in-sample).
    `labels` (where `dev` comes from): a stored curve read on other labels is refused."""
    cal: Calibration = router.calibration
    if cal.fitted_on_dev:  # stored with its single strategies' accuracy and size (`n`)
        _stored_curve_is_these_labels(router, cal, labels)
        return cal.dev, cal.calibrated_on
    P = router.strategy_proba(dev.questions)
    return sweep(P, cal.costs, dev.correct, paid_at(router, dev)), "dev"


def _stored_curve_is_these_labels(router: Any, cal: Calibration, labels: str | Path | None,
                                  ) -> None:  # fmt: skip
    """Refuses a stored curve read on other labels than `labels`: its figures and the prices
    chosen on them were the old labels', the test figures beside them these labels'."""
    other = None if labels is None else other_labels(router, labels)
    if other is None:
        return
    said, trained = other
    raise DataError(f"{said}: its {cal.calibrated_on} calibration curve is of those labels, "
                    "so the prices tuned on it and its figures would not be these labels'. "
                    "Retrain the router on these labels (`retrieval-gate train --config ... "
                    f"--set data.label_file={labels}`), or tune it on the labels it was "
                    f"trained on ({trained})", labels)  # fmt: skip


def tune_router(
    gate: Gate,
    dev: EvalSet,
    objectives: Sequence[str],
    budget: float,
    target: float,
    budget_llm_calls: float | None = None,
    registry: StrategyRegistry | None = None,
    labels: str | Path | None = None,
) -> dict[str, Any]:
    """Each router objective's price and dev figures (mean cost and LLM calls), and the dev
    Pareto front; `registry` (--strategies) declares the strategies' LLM calls (default: the
    router's own specs); `labels` (--labels, where `dev` comes from) is checked against the
    labels a stored out-of-fold curve was read on."""
    require_no_test(dev)
    router = require_router(gate)
    if not dev.has_strategies:
        raise MissingInputError("router objectives need strategy labels for dev questions "
                                "(--labels: a strategies.jsonl, a release folder or adaptive-rag)")  # fmt: skip
    same_strategies(router, dev.strategies)
    cal: Calibration = router.calibration
    curve, swept = dev_curve(router, dev, labels)
    per_strategy = router_llm_calls(router, registry)
    calls = None if per_strategy is None else curve.mean_llm_calls(per_strategy)
    out: dict[str, Any] = {"gate": gate.name, "strategies": list(cal.strategies),
                           "costs": list(cal.costs), "llm_calls": per_strategy,
                           "n_dev": curve.n, "swept": swept, "n_prices": len(curve.price),
                           "chosen": {}, "skipped": {}}  # fmt: skip
    budgets = {"budget-accuracy": budget, "llm-budget-accuracy": budget_llm_calls}
    for name in objectives:
        if name in LLM_OBJECTIVES and calls is None:
            out["skipped"][name] = ("the router's strategies declare no LLM calls (pass their "
                                    "specs with --strategies FILE.yaml)")  # fmt: skip
        elif name == "cost-pareto":
            out["pareto"] = [_point(curve, i, calls) for i in pareto(curve)]
        elif name in budgets and budgets[name] is None:
            out["skipped"][name] = "no budget given (--budget-llm-calls)"
        elif name in budgets:
            _within(out, curve, calls, name, float(budgets[name]))
        else:
            _reaching(out, curve, calls, name, target, swept)
    out["dev_single"] = dict(zip(cal.strategies, curve.single.tolist(), strict=True))
    return out


def _within(out: dict[str, Any], curve: Curve, calls: np.ndarray | None, name: str,
            budget: float) -> None:  # fmt: skip
    """The most accurate routing within `budget`: mean cost, or mean LLM calls for the LLM
    objective ("budget" stays the row's mean cost: a router's default is saved in it)."""
    llm = name in LLM_OBJECTIVES
    i = point_for_budget(curve, budget, best_accuracy=True, spend=calls if llm else None)
    extra = {"budget": float(curve.mean_cost[i]), "budget_llm_calls": budget} if llm else {
        "budget": budget}  # fmt: skip
    out["chosen"][f"{name}@{budget:g}"] = {**_point(curve, i, calls), **extra}


def _reaching(out: dict[str, Any], curve: Curve, calls: np.ndarray | None, name: str,
              target: float, swept: str) -> None:  # fmt: skip
    """The cheapest routing (mean cost, or LLM calls for the LLM objective) whose accuracy
    reaches `target` x the best single strategy's."""
    need, best = target * float(curve.single.max()), float(curve.single.max())
    i = point_for_accuracy(curve, need, spend=calls if name in LLM_OBJECTIVES else None)
    if i is None:
        out["skipped"][f"{name}@{target:g}"] = (
            f"no routing reaches {swept} accuracy {need:.3f} ({target:g} x the best single "
            f"strategy's {best:.3f})")  # fmt: skip
        return
    out["chosen"][f"{name}@{target:g}"] = {**_point(curve, i, calls),
                                           "budget": float(curve.mean_cost[i])}  # fmt: skip


def test_figures(gate: Gate, result: dict[str, Any], test: EvalSet) -> None:
    """After tuning: test accuracy, mean cost, LLM calls and shares of each strategy at each
    chosen price (and the front's)."""
    router = require_router(gate)
    if not test.has_strategies:
        return
    costs = router.calibration.costs
    P = router.strategy_proba(test.questions)
    paid = paid_at(router, test)
    calls = result.get("llm_calls")

    def at(price: float) -> dict[str, float | None]:
        choice = route_indices(P, price, costs)
        ok, cost = outcome(choice, test.correct, paid)
        llm = None if calls is None else float(np.asarray(calls, float)[choice].mean())
        # the test routing's own shares: the point's "shares" are those of the tuned-on curve
        shares = np.bincount(choice, minlength=P.shape[1]) / max(len(choice), 1)
        return {"accuracy": float(ok.mean()), "mean_cost": float(cost.mean()),
                "mean_llm_calls": llm, "shares": shares.tolist()}  # fmt: skip

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
    names = result["strategies"]
    # each routing's shares on both: the tuned-on curve's, then the test routing's
    header = ["objective", "price", f"{where} accuracy", f"{where} mean cost",
              f"{where} LLM calls/q", "test accuracy", "test mean cost", "test LLM calls/q",
              *(f"{where} % {s}" for s in names), *(f"test % {s}" for s in names)]  # fmt: skip

    def row(name: str, p: dict[str, Any]) -> list[Any]:
        t = p.get("test", {})
        # 4 significant digits (as the save note): 3 decimals read 5.468e-05 (costs in ms) as 0
        return [name, f"{p['price']:.4g}", p["accuracy"], p["mean_cost"], p.get("mean_llm_calls"),
                t.get("accuracy"), t.get("mean_cost"), t.get("mean_llm_calls"),
                *_percents(p["shares"], len(names)),
                *_percents(t.get("shares"), len(names))]  # fmt: skip

    lines = [f"## Router {result['gate']}: price for a budget", "",
             f"{_axes(result)}. Exact sweep over the {result['n_prices']} distinct routings one "
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
        calls = t.get("mean_llm_calls")
        lines += ["", f"Calibrated on {t['source']} ({t['n']} questions): budget "
                  f"{t['budget']:g} -> price {t['price']:.4g} (mean cost there "
                  f"{t['mean_cost']:.3f}" + ("" if calls is None else f", LLM calls/q {calls:.3f}")
                  + f"; the dev price for it: {t['dev_price']:.4g})."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _percents(shares: Sequence[float] | None, n: int) -> list[str | None]:
    """Shares as whole percents (None, n/a: no test labels)."""
    return [None] * n if shares is None else [f"{100 * v:.0f}" for v in shares]


def _axes(result: dict[str, Any]) -> str:
    """The two cost axes, per strategy: cost (retrievals unless the strategies say another
    unit) and LLM calls per question (from each strategy's spec)."""
    names = result["strategies"]
    costs = ", ".join(f"{s} {c:g}" for s, c in zip(names, result["costs"], strict=True))
    calls = result.get("llm_calls")
    llm = "n/a (no specs)" if calls is None else ", ".join(
        f"{s} {c:g}" for s, c in zip(names, calls, strict=True))  # fmt: skip
    return f"Costs: {costs}; LLM calls per question: {llm}"


def traffic_summary(
    cal: Calibration, n: int, dev_price: float, calls: Sequence[float] | None = None
) -> dict[str, Any]:
    curve = cal.curve()
    i = int(np.argmin(np.abs(curve.price - cal.default_price)))
    llm = None if calls is None else float(curve.mean_llm_calls(calls)[i])
    return {"source": cal.traffic_source, "n": n, "budget": cal.default_budget,
            "price": cal.default_price, "mean_cost": float(curve.mean_cost[i]),
            "mean_llm_calls": llm, "dev_price": dev_price}  # fmt: skip


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
