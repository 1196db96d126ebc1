"""Evaluate like the Adaptive-RAG paper, and better (issue 25 item 7): on strategy labels, the
accuracy, mean cost and LLM calls per question of every routing policy on the test questions,
overall and per source, with bootstrap CIs, and the accuracy-vs-cost curve as a figure (its x:
the cost, LLM calls, or both panels).

Two cost axes (issue 37): the mean cost is in the strategies' unit (retrievals unless a
strategies file prices them otherwise; per question where the labels carry costs), the LLM
calls per question come from each strategy's spec (`StrategySpec.expected_llm_calls`:
multi-step, its expected steps).

Policies: always one strategy (never = the first, always-one, always-multi, ...), the
per-source prior (each dataset's best strategy on dev), every router evaluated (the TF-IDF
router, the learned router ...) at budgets 0.5 / 1.0 / 2.0 and at its default operating point,
every binary gate (the first two strategies, at its threshold), and the oracle (the cheapest
strategy that answers; none does: the first, at no cost)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import metrics as M
from ..errors import ConfigError
from ..figures import panels, save_figure
from ..gates.base import Gate, is_router
from ..gates.strategy_routers import labels_costs
from ..labels.evalset import EvalSet
from ..pricing import (
    Calibration,
    default_costs,
    llm_calls_for,
    outcome,
    point_for_accuracy,
    route_indices,
)
from ..strategies import COST_AXES, StrategyRegistry
from ..tables import markdown_table
from ..tuning.router_budgets import other_labels, same_strategies
from .answer_gate import (
    ALONE,
    FIRST,
    THEN_ANSWER_GATE,
    AnswerGate,
    answer_gate_alone,
    answer_gate_caption,
    next_strategy,
)
from .bootstrap import bootstrap_ci

log = logging.getLogger(__name__)
BUDGETS = (0.5, 1.0, 2.0)
AXES = (*COST_AXES, "both")  # the figure's x: --cost-axis
AXIS_LABEL = {"retrievals": "mean cost per question (test; the strategies' cost, retrievals by default)",
              "llm_calls": "mean LLM calls per question (test; the strategies' specs)"}  # fmt: skip


@dataclass
class Policy:
    name: str
    choice: np.ndarray  # index of each test question's strategy
    escalated: np.ndarray | None = None  # a cascade's: answered first without retrieval too

    def then(self, answer: AnswerGate | None, costs: Sequence[float], budget: float | None,
             ) -> list[Policy]:  # fmt: skip
        """This policy, and with an answer gate, the cascade starting from it."""
        if answer is None:
            return [self]
        return [self, self.cascade(answer, costs, budget,
                                   self.name.replace(" @ ", f" {THEN_ANSWER_GATE} @ ", 1))]  # fmt: skip

    def cascade(self, answer: AnswerGate, costs: Sequence[float], budget: float | None,
                name: str) -> Policy:  # fmt: skip
        escalated = answer.escalated(self.choice, costs, budget)
        return Policy(name, np.where(escalated, next_strategy(costs), self.choice), escalated)


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
RECORDED = "its recorded strategies"  # a recorded router's policy (`--gates recorded`)


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


def gate_policies(
    gates: Mapping[str, Gate],
    test: EvalSet,
    dev: EvalSet,
    answer: AnswerGate | None = None,
    costs: Sequence[float] | None = None,
    labels: str | Path | None = None,
) -> list[Policy]:
    """Routers at the budgets, at their default and where they match the best single
    strategy's dev accuracy; binary gates between the first two; recorded strategies as
    they are. With `answer`, each policy but the matching point is followed by its cascade
    (evaluation/answer_gate.py), escalating to the next strategy by `costs` (the table's).
    `labels` (where `test` comes from): a router trained on other labels is scored here, its
    matching row named for the labels its stored curve was read on (`_calibrated_on`)."""
    costs = tuple(costs) if costs is not None else default_costs(test.strategies)
    out = []
    for name, gate in gates.items():
        if getattr(gate, "routes", None):  # a recorded router's decisions (gates/recorded.py)
            choice = gate.strategy_choice(test.questions, test.strategies)  # type: ignore[attr-defined]
            policy = Policy(f"{name} @ {RECORDED}", choice)
            out += policy.then(answer, costs, None)
            continue
        if not is_router(gate):
            decide = np.asarray(gate.scores(test.questions)) >= gate.threshold
            policy = Policy(f"{name} @ threshold {gate.threshold:.3g}", decide.astype(int))
            out += policy.then(answer, costs, None)
            continue
        P = _strategy_proba(gate, test.questions)
        cal = gate.calibration  # type: ignore[attr-defined]
        where = _calibrated_on(gate, cal, labels)  # its stored curve: of these labels?
        for budget in [*(b for b in BUDGETS if min(cal.costs) <= b <= max(cal.costs)), None]:
            label = f"budget {budget:g}" if budget is not None else (
                f"default (budget {cal.default_budget:g})")  # fmt: skip
            policy = Policy(f"{name} @ {label}", route_indices(P, cal.price(budget), cal.costs))
            out += policy.then(answer, cal.costs, budget)
        match = matching_price(cal, dev)
        if match is not None:
            price, cost, reached = match
            label = f"{MATCH} {where}" if reached else (
                f"{BEST_DEV} {where}, short of the best single strategy's")  # fmt: skip
            out.append(Policy(f"{name} @ {label} (budget there {cost:.2f})",
                              route_indices(P, price, cal.costs)))  # fmt: skip
    return out


def _calibrated_on(gate: Gate, cal: Calibration, labels: str | Path | None) -> str:
    """Where a router's stored curve was read: its calibration questions, and, for a router
    trained on other labels than these (legitimate: a router judged on another LLM's outcomes
    or other questions), that they are of those labels, said once with both checksums."""
    other = None if labels is None else other_labels(gate, labels)
    if other is None:
        return cal.calibrated_on
    log.warning(f"{other[0]}: its budget prices and its matching row are read on its own "
                f"{cal.calibrated_on} calibration curve, of the labels it was trained on; "
                "its test figures are these labels'. Retrain it on these labels to calibrate "
                "it on them")  # fmt: skip
    return f"{cal.calibrated_on} of the labels it was trained on"


def alone_policies(
    answer: AnswerGate, test: EvalSet, dev: EvalSet, costs: Sequence[float], own: bool = True
) -> list[Policy]:
    """The answer gate alone at its own threshold, and at each budget it can spend at the
    threshold most accurate on dev within it (no cap on test: the threshold is the operating
    point, as a gate's is)."""
    first = Policy("", np.full(len(test), FIRST))
    out = [first.cascade(answer, costs, None, answer_gate_alone(answer))]
    for budget in BUDGETS:
        t = answer.threshold_for(budget, dev.costs_paid(costs, own), dev.correct)
        if t is not None and budget <= costs[FIRST] + costs[next_strategy(costs)]:
            named = replace(answer, threshold=t)
            out.append(first.cascade(named, costs, None, f"{ALONE} @ budget {budget:g} "
                                     f"(threshold {t:.3g}, set on dev)"))  # fmt: skip
    return out


def _stats(policy: Policy, test: EvalSet, paid: np.ndarray, rows: np.ndarray, reps: int,
           calls: np.ndarray | None = None) -> dict:  # fmt: skip
    """Accuracy, mean cost and (with `calls`, each strategy's) mean LLM calls, with CIs."""
    ok, cost = outcome(policy.choice[rows], test.correct[rows], paid[rows])
    twice = np.zeros(len(rows), bool) if policy.escalated is None else policy.escalated[rows]
    cost = cost + np.where(twice, paid[rows, FIRST], 0.0)  # the closed-book answer, paid too
    shares = np.bincount(policy.choice[rows], minlength=len(test.strategies)) / len(rows)
    out = {"n": int(len(rows)), **_mean_ci("accuracy", ok, reps), **_mean_ci("mean_cost", cost, reps),
           "mean_llm_calls": None, "mean_llm_calls_ci95": None}  # fmt: skip
    if calls is not None:
        llm = calls[policy.choice[rows]] + np.where(twice, calls[FIRST], 0.0)
        out |= _mean_ci("mean_llm_calls", llm, reps)
    if policy.escalated is not None:
        out["escalated"] = float(twice.mean())
    return out | {"shares": dict(zip(test.strategies, shares.tolist(), strict=True))}


def _mean_ci(key: str, values: np.ndarray, reps: int) -> dict:
    ci = bootstrap_ci(lambda i: float(values[i].mean()), len(values), reps)
    return {key: float(values.mean()), f"{key}_ci95": ci}


def routing_report(
    test: EvalSet,
    dev: EvalSet,
    gates: Mapping[str, Gate],
    out_dir: Path,
    stem: str,
    n_resamples: int = 1000,
    costs: Sequence[float] | None = None,
    registry: StrategyRegistry | None = None,
    axis: str = "retrievals",
    answer: AnswerGate | None = None,
    labels: str | Path | None = None,
) -> dict[str, Any]:
    """Every policy on `test`: overall and per source, with CIs; AUROC of "the no-retrieval
    answer is wrong" per gate; the accuracy-vs-cost figure (x: `axis`, one of AXES).
    `registry` (--strategies) declares the strategies' LLM calls (default: a router's own
    specs, else the built-ins'). `answer` (--answer-gate): each gate's policies are followed
    by their cascade, and the answer gate's AUROC on the recorded answers is listed.
    `labels`: the label file `test` comes from (`gate_policies`)."""
    for gate in gates.values():
        same_strategies(gate, test.strategies)
    costs, gates, own = _priced(gates, dev, costs)
    paid = test.costs_paid(costs, own)
    per_strategy = _llm_calls(gates, test.strategies, registry)
    calls = None if per_strategy is None else np.asarray(per_strategy, float)
    policies = fixed_policies(test, dev) + gate_policies(gates, test, dev, answer, costs,
                                                         labels)  # fmt: skip
    if answer is not None:  # the answer gate alone: every question answered closed-book first
        policies += alone_policies(answer, test, dev, costs, own)
    everything = np.arange(len(test))
    sources = sorted(set(test.sources.tolist()))
    rows = []
    for p in policies:
        row = {"policy": p.name, "overall": _stats(p, test, paid, everything, n_resamples, calls)}
        row["per_source"] = {s: _stats(p, test, paid, np.flatnonzero(test.sources == s),
                                       n_resamples, calls) for s in sources}  # fmt: skip
        rows.append(row)
    y = 1 - test.correct[:, 0]
    scored = {name: np.asarray(gate.scores(test.questions), float) for name, gate in gates.items()}
    if answer is not None:
        scored[f"{answer.name} (answer gate, on the recorded answers)"] = answer.scores
    auroc = {name: _auroc(y, s, test.sources, n_resamples) for name, s in scored.items()}
    figure = accuracy_cost_figure(test, gates, rows, paid, out_dir / f"{stem}-accuracy-cost.png",
                                  calls, axis, answer)  # fmt: skip
    return {"strategies": list(test.strategies), "costs": list(costs), "llm_calls": per_strategy,
            "n_test": len(test), "policies": rows, "auroc_no_retrieval_wrong": auroc,
            "figure": figure.name, "figure_axis": axis,
            "answer_gate": None if answer is None else answer.summary()}  # fmt: skip


def _auroc(y: np.ndarray, s: np.ndarray, sources: np.ndarray, reps: int) -> dict[str, Any]:
    """AUROC of `s` for `y`, with its CI and per source."""
    return {"auroc": M.auroc(y, s),
            "ci95": bootstrap_ci(lambda i: M.auroc(y[i], s[i]), len(y), reps),
            "per_source": {src: M.auroc(y[sources == src], s[sources == src])
                           for src in sorted(set(sources.tolist()))}}  # fmt: skip


def registry_costs(
    registry: StrategyRegistry | None, strategies: Sequence[str]
) -> tuple[float, ...] | None:
    """`--strategies FILE.yaml`'s costs of a label file's strategies (None: no file given);
    a strategy the file does not declare, or costs not cheapest first in the label file's
    order, is refused, naming it."""
    if registry is None:
        return None
    return registry.costs_in_order(strategies, "the label file's strategies")


def _llm_calls(
    gates: Mapping[str, Gate], strategies: Sequence[str], registry: StrategyRegistry | None
) -> tuple[float, ...] | None:
    """Each strategy's LLM calls per question: --strategies' specs, else the routers' own (of
    these strategies; two that declare different ones are refused: the fixed policies' rows
    would follow whichever came first), else the built-ins'; None: no spec declares them all."""
    said = {}
    for name, gate in gates.items():
        cal = gate.calibration if is_router(gate) else None  # type: ignore[attr-defined]
        if cal is not None and tuple(cal.strategies) == tuple(strategies):
            if (calls := cal.llm_calls(registry)) is not None:
                said[name] = calls
    _one_list(said, "LLM calls per question", "evaluate them apart, or pass --strategies FILE "
              "to declare the LLM calls")  # fmt: skip
    return next(iter(said.values()), None) or llm_calls_for(strategies, registry)


def _priced(
    gates: Mapping[str, Gate], dev: EvalSet, costs: Sequence[float] | None
) -> tuple[tuple[float, ...], dict[str, Gate], bool]:
    """One price list for every policy: --strategies' (`costs`), else the routers' own (a
    loaded router's calibration), else the labels' per-question costs or retrievals
    (`labels_costs`); a router fitted here (router-tfidf, router-prior) is calibrated at it,
    and a loaded one calibrated at other costs is refused: its budgets would not be the
    table's. The flag: whether the list is in the labels' unit, not --strategies' (else their
    per-question costs, of another unit, are set aside: `EvalSet.costs_paid`)."""
    strategies = dev.strategies
    own = {name: tuple(gate.calibration.costs) for name, gate in gates.items()  # type: ignore[attr-defined]
           if is_router(gate) and gate.calibration is not None  # type: ignore[attr-defined]
           and not hasattr(gate, "at_costs")}  # fmt: skip
    labels_own = costs is None  # --strategies' prices are in a unit of their own
    if costs is None:
        _one_list(own, "costs", "evaluate them apart")
        costs = next(iter(own.values()), None) or labels_costs(dev)
    costs = tuple(float(c) for c in costs)
    if off := {n: c for n, c in own.items() if not np.allclose(c, costs)}:
        name, theirs = next(iter(off.items()))
        raise ConfigError(f"router {name!r} was calibrated at costs {list(theirs)} of "
                          f"{list(strategies)}; --strategies prices them at {list(costs)}, so its "
                          "budgets are not this table's: pass a strategies file with its costs, "
                          "or evaluate it without --strategies")  # fmt: skip
    return costs, {n: g.at_costs(costs, labels_own) if hasattr(g, "at_costs") else g  # type: ignore[attr-defined]
                   for n, g in gates.items()}, labels_own  # fmt: skip


def _one_list(said: Mapping[str, tuple[float, ...]], what: str, fix: str) -> None:
    """Refuses two routers that price the same strategies differently, naming both."""
    distinct = {}
    for name, values in said.items():
        if not any(np.allclose(values, v) for v in distinct.values()):
            distinct[name] = values
    if len(distinct) > 1:
        (a, x), (b, y) = list(distinct.items())[:2]
        raise ConfigError(f"routers {a!r} and {b!r} declare different {what} for the same "
                          f"strategies ({list(x)} and {list(y)}): one table needs one list; "
                          f"{fix}")  # fmt: skip


def check_axis(axis: str, flag: str = "--cost-axis") -> str:
    """The figure's x axis, one of AXES (refused naming the flag)."""
    if axis not in AXES:
        raise ConfigError(f"{flag} {axis!r}: one of {', '.join(AXES)}")
    return axis


def accuracy_cost_figure(
    test: EvalSet,
    gates: Mapping[str, Gate],
    rows: list[dict],
    paid: np.ndarray,
    path: Path,
    calls: np.ndarray | None = None,
    axis: str = "retrievals",
    answer: AnswerGate | None = None,
) -> Path:
    """Test accuracy vs mean cost (`axis` retrievals, the default), vs mean LLM calls
    (`llm_calls`; `calls`: each strategy's), or both side by side: each router over its dev
    curve's prices, each fixed policy and operating point as a point. Without `calls` the
    LLM-calls panel is left out. With `answer`, the answer gate alone over its thresholds is a
    line too."""
    shown = ["retrievals", "llm_calls"] if check_axis(axis) == "both" else [axis]
    if calls is None and axis != "retrievals":  # no spec declares them: the cost alone
        log.warning(f"--cost-axis {axis}: the strategies declare no LLM calls; plotting cost")
        shown = ["retrievals"]
    lines = _router_lines(test, gates, paid, calls)
    if answer is not None:
        lines[f"{ALONE}, over its thresholds"] = answer.threshold_line(test.correct, paid, calls)
    fig, axes = panels(len(shown))
    for ax, which in zip(axes, shown, strict=True):
        x = 0 if which == "retrievals" else 1
        for name, pts in lines.items():
            pts = sorted(pts, key=lambda p: (p[x], p[2]))
            ax.plot([p[x] for p in pts], [p[2] for p in pts], "-", lw=1.2, label=f"{name} (test)")
        key = "mean_cost" if which == "retrievals" else "mean_llm_calls"
        drawn = [(p[0], p[2]) for pts in lines.values() for p in pts]
        for row in rows:
            o, name = row["overall"], row["policy"]
            # a router's operating point is left to its line where a drawn point is it (one
            # calibrated on traffic reads its prices on the traffic curve: on no drawn point)
            point = " @ budget" in name or " @ default" in name
            at = (o["mean_cost"], o["accuracy"])
            on = any(np.allclose(at, d, rtol=1e-9, atol=1e-12) for d in drawn)
            if point and on and THEN_ANSWER_GATE not in name:
                continue  # on the router's line
            ax.plot(o[key], o["accuracy"], "o", ms=5, label=row["policy"][:48])
        ax.set(xlabel=AXIS_LABEL[which], ylabel="accuracy (test)",
               title=f"accuracy vs {'cost' if x == 0 else 'LLM calls'} on the test questions")  # fmt: skip
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def _strategy_proba(router: Gate, questions: Sequence[Any]) -> np.ndarray:
    """A router's probabilities, through the batch it keeps where it keeps one (RoutingMixin's
    `proba`): the report asks its policies, its scores and its curve of the same test
    questions, and the router ran three times (1,350 questions scored for 450)."""
    proba = getattr(router, "proba", None) or router.strategy_proba  # type: ignore[attr-defined]
    return np.asarray(proba(questions))


def _router_lines(
    test: EvalSet, gates: Mapping[str, Gate], paid: np.ndarray, calls: np.ndarray | None
) -> dict[str, list[tuple[float, float, float]]]:
    """Each router's (mean cost, mean LLM calls, accuracy) on test at its dev curve's prices."""
    out = {}
    for name, gate in gates.items():
        if not is_router(gate):
            continue
        P = _strategy_proba(gate, test.questions)
        cal = gate.calibration  # type: ignore[attr-defined]
        pts = []
        for price in cal.dev.price:
            choice = route_indices(P, price, cal.costs)
            ok, cost = outcome(choice, test.correct, paid)
            llm = float(calls[choice].mean()) if calls is not None else float("nan")
            pts.append((float(cost.mean()), llm, float(ok.mean())))
        out[name] = pts
    return out


def _cell(stats: dict, key: str, digits: int) -> str:
    ci = stats.get(f"{key}_ci95")
    if stats.get(key) is None:  # LLM calls where no spec declares them (or older results)
        return "n/a"
    value = f"{stats[key]:.{digits}f}"
    return value + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def routing_markdown(report: dict[str, Any]) -> str:
    cascade = report.get("answer_gate")
    header = ["policy", "accuracy [95% CI]", "mean cost [95% CI]", "LLM calls/q [95% CI]",
              *(f"% {s}" for s in report["strategies"]),
              *(["% escalated"] if cascade else [])]  # fmt: skip
    digits = cost_digits(report)
    body = [[r["policy"], *_cells(r["overall"], digits),
             *(f"{100 * v:.0f}" for v in r["overall"]["shares"].values()),
             *([_escalated_cell(r["overall"])] if cascade else [])]
            for r in report["policies"]]  # fmt: skip
    sources = list(report["policies"][0]["per_source"]) if report["policies"] else []
    per = [[r["policy"], *(_per_source_cell(r["per_source"][s], digits) for s in sources)]
           for r in report["policies"]]  # fmt: skip
    au = report["auroc_no_retrieval_wrong"]
    auroc = [[n, a["auroc"], f"[{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}]" if a["ci95"] else "n/a",
              *(a["per_source"][s] for s in sources)] for n, a in au.items()]  # fmt: skip
    return "\n".join([
        "### Routing: the saving (test)", "",
        saving_table(report), "",
        "### Routing: accuracy, mean cost and LLM calls per question (test)", "",
        f"{report['n_test']} test questions; {_axes(report)}; routers' prices calibrated on "
        "dev (or, for a router fitted on train and dev, on their out-of-fold predictions); 95% "
        "CIs: percentile bootstrap.", "",
        markdown_table(header, body), "",
        *([answer_gate_caption(report), ""] if cascade else []),
        "Per source (accuracy / mean cost / LLM calls per question):", "",
        markdown_table(["policy", *sources], per), "",
        "AUROC of \"the no-retrieval answer is wrong\" (the gates' score, 1 - P(correct | no "
        "retrieval) for routers):", "",
        markdown_table(["gate", "AUROC", "95% CI", *sources], auroc), "",
        f"![accuracy vs cost]({report['figure']})",
    ])  # fmt: skip


def _escalated_cell(stats: dict) -> str:
    share = stats.get("escalated")
    return "" if share is None else f"{100 * share:.0f}"


def cost_digits(report: dict[str, Any]) -> int:
    """Decimals for mean costs: two for retrievals, enough for three significant digits of the
    dearest strategy where costs are small money (a price of $0.0004 read 0.00 everywhere)."""
    top = max((abs(c) for c in report.get("costs") or ()), default=0.0)
    return 2 if not 0 < top < 1 else max(2, 2 - math.floor(math.log10(top)))


def _cells(stats: dict, digits: int = 2) -> list[str]:
    """Accuracy, mean cost (`digits` decimals) and LLM calls per question, each with its CI."""
    return [_cell(stats, "accuracy", 3), _cell(stats, "mean_cost", digits),
            _cell(stats, "mean_llm_calls", 2)]  # fmt: skip


def _per_source_cell(stats: dict, digits: int = 2) -> str:
    calls = stats.get("mean_llm_calls")
    llm = "n/a" if calls is None else f"{calls:.2f}"
    return f"{stats['accuracy']:.3f} / {stats['mean_cost']:.{digits}f} / {llm}"


def _axes(report: dict[str, Any]) -> str:
    """Both cost axes per strategy, as the caption says them."""
    names = report["strategies"]
    costs = ", ".join(f"{s} {c:g}" for s, c in zip(names, report["costs"], strict=True))
    calls = report.get("llm_calls")
    llm = "n/a (no spec declares them)" if calls is None else ", ".join(
        f"{s} {c:g}" for s, c in zip(names, calls, strict=True))  # fmt: skip
    return (f"mean cost: {costs} (retrievals unless the strategies give another unit; per "
            f"question where the labels carry costs); LLM calls per question, from each "
            f"strategy's spec (multi-step: its expected steps): {llm}")  # fmt: skip


def saving_table(report: dict[str, Any]) -> str:
    """The short table the demo and the README lead with: the fixed policies, the per-source
    prior, each router at budget 1 and where it matches the best single strategy on its
    calibration questions, and the oracle: accuracy, mean cost (retrievals per question) and
    LLM calls per question, with 95% CIs."""
    keep = ("never", "always ", "per-source prior", "oracle", " @ budget 1", f" @ {MATCH}",
            f" @ {BEST_DEV}", ALONE, f" @ {RECORDED}")  # fmt: skip
    rows = [r for r in report["policies"] if any(k in r["policy"] for k in keep)]
    rows.sort(key=lambda r: r["policy"].startswith("oracle"))  # the oracle last: a bound
    body = [[r["policy"], *_cells(r["overall"], cost_digits(report))] for r in rows
            if " @ threshold" not in r["policy"] or ALONE in r["policy"]]  # fmt: skip
    return markdown_table(["policy", "accuracy [95% CI]", "mean cost [95% CI]",
                           "LLM calls/q [95% CI]"], body)  # fmt: skip
