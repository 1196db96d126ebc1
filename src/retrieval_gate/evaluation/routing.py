"""Evaluate like the Adaptive-RAG paper, and better (issue 25 item 7): on strategy labels, the
accuracy and mean cost per question of every routing policy on the test questions, overall and
per source, with bootstrap CIs, and the accuracy-vs-cost curve as a figure.

Policies: always one strategy (never = the first, always-one, always-multi, ...), the
per-source prior (each dataset's best strategy on dev), every router evaluated (the TF-IDF
router, the learned router ...) at budgets 0.5 / 1.0 / 2.0 and at its default operating point,
every binary gate (the first two strategies, at its threshold), and the oracle (the cheapest
strategy that answers; none does: the first, at no cost)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics as M
from ..figures import plt, save_figure
from ..gates.base import Gate, is_router
from ..labels.evalset import EvalSet
from ..routing import Calibration, default_costs, outcome, point_for_accuracy, route_indices
from ..strategies import StrategyRegistry
from ..tables import markdown_table
from .bootstrap import bootstrap_ci

BUDGETS = (0.5, 1.0, 2.0)


@dataclass
class Policy:
    name: str
    choice: np.ndarray  # index of each test question's strategy


def fixed_policies(test: EvalSet, dev: EvalSet) -> list[Policy]:
    """Always each strategy, the per-source prior chosen on dev, and the oracle."""
    n, names = len(test), test.strategies
    short = {0: "never (always " + names[0] + ")", 1: f"always {names[1]}"}
    out = [Policy(short.get(k, f"always {s}"), np.full(n, k)) for k, s in enumerate(names)]
    best = {s: int(np.argmax(dev.correct[dev.sources == s].mean(axis=0)))
            for s in np.unique(dev.sources)}  # fmt: skip
    overall = int(np.argmax(dev.correct.mean(axis=0)))
    prior = np.array([best.get(s, overall) for s in test.sources])
    out.append(Policy("per-source prior (best strategy per dataset on dev)", prior))
    answered = test.correct.any(axis=1)
    out.append(Policy("oracle (cheapest strategy that answers)",
                      np.where(answered, np.argmax(test.correct, axis=1), 0)))  # fmt: skip
    return out


# a router's accuracy-matching point on its calibration questions (dev, or out-of-fold
# train+dev), or, where no routing there matches the best single strategy, its best
MATCH = "matches the best single strategy on"
BEST_DEV = "best accuracy on"


def matching_price(cal: Calibration, dev: EvalSet) -> tuple[float, float, bool] | None:
    """The price and mean cost of the router's cheapest routing on its calibration questions
    (dev, or out-of-fold train+dev) whose accuracy there reaches the best single strategy's
    (always multi-step's, on the bundle): the budget at which it claims always-multi's
    accuracy, chosen there, never on test. When no routing reaches it, its best accuracy
    there (the cheaper on ties), flagged False."""
    if cal.dev.accuracy is None:
        return None
    if cal.dev.single is not None:  # the calibration questions' own (out-of-fold: train+dev)
        best_single = float(cal.dev.single.max())
    elif dev.has_strategies and len(dev):
        best_single = float(dev.correct.mean(axis=0).max())
    else:
        return None
    i = point_for_accuracy(cal.dev, best_single)
    reached = i is not None
    if i is None:
        best = np.flatnonzero(cal.dev.accuracy >= cal.dev.accuracy.max() - 1e-12)
        i = int(best[np.argmin(cal.dev.mean_cost[best])])
    return float(cal.dev.price[i]), float(cal.dev.mean_cost[i]), reached


def gate_policies(gates: Mapping[str, Gate], test: EvalSet, dev: EvalSet) -> list[Policy]:
    """Routers at the budgets, at their default and where they match the best single
    strategy's dev accuracy; binary gates between the first two."""
    out = []
    for name, gate in gates.items():
        if not is_router(gate):
            decide = np.asarray(gate.scores(test.questions)) >= gate.threshold
            out.append(Policy(f"{name} @ threshold {gate.threshold:.3g}", decide.astype(int)))
            continue
        P = gate.strategy_proba(test.questions)  # type: ignore[attr-defined]
        cal = gate.calibration  # type: ignore[attr-defined]
        for budget in [*(b for b in BUDGETS if b <= max(cal.costs)), None]:
            label = f"budget {budget:g}" if budget is not None else (
                f"default (budget {cal.default_budget:g})")  # fmt: skip
            out.append(Policy(f"{name} @ {label}", route_indices(P, cal.price(budget), cal.costs)))
        match = matching_price(cal, dev)
        if match is not None:
            price, cost, reached = match
            where = cal.calibrated_on
            label = f"{MATCH} {where}" if reached else (
                f"{BEST_DEV} {where}, short of the best single strategy's")  # fmt: skip
            out.append(Policy(f"{name} @ {label} (budget there {cost:.2f})",
                              route_indices(P, price, cal.costs)))  # fmt: skip
    return out


def _stats(policy: Policy, test: EvalSet, paid: np.ndarray, rows: np.ndarray, reps: int) -> dict:
    ok, cost = outcome(policy.choice[rows], test.correct[rows], paid[rows])
    acc_ci = bootstrap_ci(lambda i: float(ok[i].mean()), len(rows), reps)
    cost_ci = bootstrap_ci(lambda i: float(cost[i].mean()), len(rows), reps)
    shares = np.bincount(policy.choice[rows], minlength=len(test.strategies)) / len(rows)
    return {"n": int(len(rows)), "accuracy": float(ok.mean()), "accuracy_ci95": acc_ci,
            "mean_cost": float(cost.mean()), "mean_cost_ci95": cost_ci,
            "shares": dict(zip(test.strategies, shares.tolist(), strict=True))}  # fmt: skip


def routing_report(
    test: EvalSet,
    dev: EvalSet,
    gates: Mapping[str, Gate],
    out_dir: Path,
    stem: str,
    n_resamples: int = 1000,
    costs: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Every policy on `test`: overall and per source, with CIs; AUROC of "the no-retrieval
    answer is wrong" per gate; the accuracy-vs-cost figure."""
    costs = tuple(costs) if costs is not None else _costs(gates, test.strategies)
    paid = test.costs_paid(costs)
    policies = fixed_policies(test, dev) + gate_policies(gates, test, dev)
    everything = np.arange(len(test))
    sources = sorted(set(test.sources.tolist()))
    rows = []
    for p in policies:
        row = {"policy": p.name, "overall": _stats(p, test, paid, everything, n_resamples)}
        row["per_source"] = {s: _stats(p, test, paid, np.flatnonzero(test.sources == s),
                                       n_resamples) for s in sources}  # fmt: skip
        rows.append(row)
    y = 1 - test.correct[:, 0]
    auroc = {}
    for name, gate in gates.items():
        s = np.asarray(gate.scores(test.questions), float)
        auroc[name] = {"auroc": M.auroc(y, s),
                       "ci95": bootstrap_ci(lambda i, s=s: M.auroc(y[i], s[i]), len(y), n_resamples),
                       "per_source": {src: M.auroc(y[test.sources == src], s[test.sources == src])
                                      for src in sources}}  # fmt: skip
    figure = accuracy_cost_figure(test, gates, rows, paid, out_dir / f"{stem}-accuracy-cost.png")
    return {"strategies": list(test.strategies), "costs": list(costs), "n_test": len(test),
            "policies": rows, "auroc_no_retrieval_wrong": auroc, "figure": figure.name}  # fmt: skip


def registry_costs(
    registry: StrategyRegistry | None, strategies: Sequence[str]
) -> tuple[float, ...] | None:
    """`--strategies FILE.yaml`'s costs of a label file's strategies (None: no file given);
    a strategy the file does not declare is refused, naming it."""
    if registry is None:
        return None
    registry.check(strategies, f"the label file's strategies ({registry.source})")
    return registry.costs(strategies)


def _costs(gates: Mapping[str, Gate], strategies: Sequence[str]) -> tuple[float, ...]:
    """The routers' own costs (the first router's), else retrievals."""
    for gate in gates.values():
        if is_router(gate):
            return tuple(gate.calibration.costs)  # type: ignore[attr-defined]
    return default_costs(strategies)


def accuracy_cost_figure(
    test: EvalSet, gates: Mapping[str, Gate], rows: list[dict], paid: np.ndarray, path: Path
) -> Path:
    """Test accuracy vs mean cost: each router over its dev curve's prices, each fixed
    policy and operating point as a point."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for name, gate in gates.items():
        if not is_router(gate):
            continue
        P = gate.strategy_proba(test.questions)  # type: ignore[attr-defined]
        cal = gate.calibration  # type: ignore[attr-defined]
        pts = []
        for price in cal.dev.price:
            ok, cost = outcome(route_indices(P, price, cal.costs), test.correct, paid)
            pts.append((cost.mean(), ok.mean()))
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", lw=1.2, label=f"{name} (test)")
    for row in rows:
        o = row["overall"]
        if " @ budget" in row["policy"] or " @ default" in row["policy"]:
            continue  # on the router's line
        ax.plot(o["mean_cost"], o["accuracy"], "o", ms=5, label=row["policy"][:48])
    ax.set(xlabel="mean cost per question (test)", ylabel="accuracy (test)",
           title="accuracy vs cost on the test questions")  # fmt: skip
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def _cell(stats: dict, key: str, digits: int) -> str:
    ci = stats.get(f"{key}_ci95")
    value = f"{stats[key]:.{digits}f}"
    return value + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def routing_markdown(report: dict[str, Any]) -> str:
    header = ["policy", "accuracy [95% CI]", "mean cost [95% CI]",
              *(f"% {s}" for s in report["strategies"])]  # fmt: skip
    body = [[r["policy"], _cell(r["overall"], "accuracy", 3), _cell(r["overall"], "mean_cost", 2),
             *(f"{100 * v:.0f}" for v in r["overall"]["shares"].values())]
            for r in report["policies"]]  # fmt: skip
    sources = list(report["policies"][0]["per_source"]) if report["policies"] else []
    per = [[r["policy"], *(f"{r['per_source'][s]['accuracy']:.3f} / {r['per_source'][s]['mean_cost']:.2f}"
                           for s in sources)] for r in report["policies"]]  # fmt: skip
    au = report["auroc_no_retrieval_wrong"]
    auroc = [[n, a["auroc"], f"[{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]" if a["ci95"] else "n/a",
              *(a["per_source"][s] for s in sources)] for n, a in au.items()]  # fmt: skip
    costs = ", ".join(
        f"{s} {c:g}" for s, c in zip(report["strategies"], report["costs"], strict=True)
    )
    return "\n".join([
        "### Routing: the saving (test)", "",
        saving_table(report), "",
        "### Routing: accuracy and mean cost per question (test)", "",
        f"{report['n_test']} test questions; costs: {costs} (per question where the labels "
        "carry costs); routers' prices calibrated on dev (or, for a router fitted on train and "
        "dev, on their out-of-fold predictions); 95% CIs: percentile bootstrap.", "",
        markdown_table(header, body), "",
        "Per source (accuracy / mean cost):", "",
        markdown_table(["policy", *sources], per), "",
        "AUROC of \"the no-retrieval answer is wrong\" (the gates' score, 1 - P(correct | no "
        "retrieval) for routers):", "",
        markdown_table(["gate", "AUROC", "95% CI", *sources], auroc), "",
        f"![accuracy vs cost]({report['figure']})",
    ])  # fmt: skip


def saving_table(report: dict[str, Any]) -> str:
    """The short table the demo and the README lead with: the fixed policies, the per-source
    prior, each router at budget 1 and where it matches the best single strategy on its
    calibration questions, and the oracle: accuracy and mean cost (retrievals per question)
    with 95% CIs."""
    keep = ("never", "always ", "per-source prior", "oracle", " @ budget 1", f" @ {MATCH}",
            f" @ {BEST_DEV}")  # fmt: skip
    rows = [r for r in report["policies"] if any(k in r["policy"] for k in keep)]
    rows.sort(key=lambda r: r["policy"].startswith("oracle"))  # the oracle last: a bound
    body = [[r["policy"], _cell(r["overall"], "accuracy", 3), _cell(r["overall"], "mean_cost", 2)]
            for r in rows if " @ threshold" not in r["policy"]]  # fmt: skip
    return markdown_table(["policy", "accuracy [95% CI]", "mean cost [95% CI]"], body)
