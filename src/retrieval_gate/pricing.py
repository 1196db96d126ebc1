"""A router's decision rule and its price for a budget (issue 25). A leaf: numpy only, so the
training run (calibration on dev), the gates (ONNX without torch) and tuning share it.

A router estimates P(correct | strategy) for each question: `P` of shape (n, S), strategies in
cost order. With each strategy's cost `c` (the user's unit: retrievals, ms, tokens, money) and
a price `lam`, a question goes to argmax_s P_s - lam * c_s (a tie goes to the cheaper one).
lam = 0 is the most accurate routing; as lam rises the mean cost falls, in steps: the routing
only changes at a price where two strategies tie for some question. `sweep` visits every such
breakpoint, so every routing one price can make is seen once (an exact search, no sampler).

A budget is a mean cost per question. `point_for_budget` picks, on a calibration curve (dev
questions with their outcomes, or a user's own unlabelled traffic), the smallest price whose
mean cost stays within the budget (the budget met); the default operating point a router is
trained with is the best dev accuracy within its budget.

LLM calls per question are the cost model's second axis (each strategy's from its spec,
`StrategySpec.expected_llm_calls`): a price's routing makes `shares @ calls` of them on
average, so a budget on LLM calls is read off the same curve (`spend=`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import ConfigError, InputError
from .strategies import (
    BUILTIN,
    DEFAULT_COSTS,
    MAX_COST,
    StrategyRegistry,
    is_cost,
    specs_of,
    with_cost,
)

_TIE = 1e-12  # breaks ties toward the cheaper strategy
_NUDGE = 1e-9  # a candidate price past its breakpoint, as a share of it (`breakpoints`)


def default_costs(strategies: Sequence[str]) -> tuple[float, ...]:
    """Retrievals per question for the built-in strategies (the registry's); other names
    need costs."""
    unknown = [s for s in strategies if s not in DEFAULT_COSTS]
    if unknown:
        raise InputError(
            f"strategy {unknown[0]!r} has no default cost: give each strategy's cost, in cost "
            f"order of {', '.join(strategies)} (a strategies file's `cost:` entries with "
            "--strategies FILE, per-question `<strategy>_cost` columns in the outcomes, or "
            "model.costs in a training config)"
        )
    return tuple(DEFAULT_COSTS[s] for s in strategies)


def check_costs(costs: Sequence[float], strategies: Sequence[str], flag: str = "costs") -> None:
    if len(costs) != len(strategies):
        raise InputError(f"{flag}: {len(costs)} costs for {len(strategies)} strategies "
                         f"({', '.join(strategies)}); give one each, cheapest first")  # fmt: skip
    if not all(is_cost(c) for c in costs):
        raise InputError(f"{flag} {list(costs)}: a cost is a number from 0 to {MAX_COST:g} "
                         "(past it sums of costs overflow)")  # fmt: skip


def check_budget(
    budget: float | None, costs: Sequence[float], flag: str = "budget", unit: str = "cost"
) -> None:
    """A budget (mean `unit` per question: cost, or LLM calls) between the cheapest strategy's
    and the dearest's: below the cheapest (a default of 1 with costs in milliseconds) every
    question went to it, unsaid."""
    if budget is None:
        return
    top, bottom = max(costs), min(costs)
    bottom = bottom if math.isfinite(bottom) else 0.0  # unknown before a model loads
    ok = isinstance(budget, numbers.Real) and not isinstance(budget, bool)  # np.float32 too
    if not (ok and math.isfinite(budget) and _within(float(budget), bottom, top)):
        top_known = f" ({_shown(top)})" if math.isfinite(top) else ""
        low = "0" if bottom <= 0 else f"the cheapest strategy's ({_shown(bottom)})"
        raise InputError(f"{flag} {budget!r}: a budget is a mean {unit} per question from "
                         f"{low} to the most expensive strategy's{top_known}")  # fmt: skip


def _within(budget: float, bottom: float, top: float) -> bool:
    """bottom <= budget <= top, up to rounding: a router's costs are means of per-question
    costs (0.6 of every question stored 0.5999999999999976), and a budget of exactly the
    dearest strategy's cost (always that one) was refused naming that very cost."""
    near = [math.isclose(budget, x, rel_tol=1e-9, abs_tol=1e-12) for x in (bottom, top)]
    return (bottom <= budget or near[0]) and (budget <= top or near[1])


def _shown(x: float) -> str:
    """A limit as typed (`:g`), in full where `:g` rounds it (0.6667667 showed as 0.666767,
    which reads as another limit than the one applied)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def default_budget(costs: Sequence[float]) -> float:
    """The default budget of a router fitted without one (router-tfidf, router-prior): one
    retrieval a question, model.budget's default, where the costs span it; else (costs in
    milliseconds, tokens, money) halfway from the cheapest strategy's cost to the dearest's,
    not 1, which lay outside them and was refused naming a flag those verbs lack."""
    bottom, top = min(costs), max(costs)
    return 1.0 if bottom <= 1.0 <= top else (bottom + top) / 2


def llm_calls_for(
    names: Sequence[str], *registries: StrategyRegistry | None
) -> tuple[float, ...] | None:
    """Each strategy's LLM calls per question from the first registry that declares them all
    (e.g. --strategies, then a router's own specs), else the built-ins; None: none does."""
    for reg in (*registries, BUILTIN):
        if reg is not None and all(n in reg for n in names):
            return reg.llm_calls(names)
    return None


def route_indices(P: np.ndarray, price: float, costs: Sequence[float]) -> np.ndarray:
    """Index of each question's strategy at `price`."""
    c = np.asarray(costs, float)
    value = P - price * c[None, :] - _TIE * np.arange(P.shape[1])[None, :]
    return np.argmax(value, axis=1)


def breakpoints(P: np.ndarray, costs: Sequence[float]) -> np.ndarray:
    """Every price at which some question's routing changes, plus 0 and one past them all:
    one candidate per interval between breakpoints (each just past its breakpoint). The last
    one exceeds 1 / (smallest cost step), so it sends ANY question (P in [0, 1]) to the
    cheapest strategy: a budget of that strategy's cost holds on new questions too."""
    c = np.asarray(costs, float)
    found = [np.zeros(1)]
    for a in range(P.shape[1]):
        for b in range(a + 1, P.shape[1]):
            if c[b] > c[a]:
                found.append((P[:, b] - P[:, a]) / (c[b] - c[a]))
    prices = np.unique(np.concatenate(found))
    prices = prices[prices >= 0]
    steps = np.diff(np.unique(c))
    top = max(prices.max() if len(prices) else 0.0, 1.0 / steps.min() if len(steps) else 0.0)
    # each just past its breakpoint by a share of it, not by a fixed 1e-9: with costs of 1e11
    # the breakpoints are about 1e-11 and 1e-9 passed most of them (2 routings of 832). The
    # share keeps the old guard: a breakpoint found apart from another only by rounding still
    # lands on the same side (ties at the breakpoint itself go cheaper by `_TIE`)
    nudged = prices * (1.0 + _NUDGE)
    return np.unique(np.concatenate([[0.0], nudged, [top + 1.0]]))


def answer_read_calls(calls: tuple[float, float] | None) -> tuple[float, float] | None:
    """LLM calls without and with retrieval of a gate that reads the closed-book answer first
    (a two-stage gate): that answer is paid either way."""
    return None if calls is None else (calls[0], calls[0] + calls[1])


def binary_llm_calls(
    strategies: Sequence[str] = (), registry: StrategyRegistry | None = None
) -> tuple[float, float] | None:
    """LLM calls a question costs a binary gate without and with retrieval: the specs of the
    label file's first two strategies (strategy labels: the binary view's pair), else the
    registry's binary pair (default: the built-ins'); None: no spec known."""
    if strategies:
        calls = llm_calls_for(tuple(strategies[:2]), registry)
        return None if calls is None else (calls[0], calls[1])
    reg = registry or BUILTIN
    try:
        closed, retrieving = reg.binary_pair()
    except ConfigError:  # a registry without a pair: the column is n/a, the rest goes on
        return None
    return reg[closed].expected_llm_calls, reg[retrieving].expected_llm_calls


@dataclass(frozen=True)
class Curve:
    """One row per distinct routing a price makes: its price (the smallest found), the mean
    cost per question and (with outcomes) the accuracy, sorted by price; with outcomes also
    each single strategy's accuracy on the same questions (`single`), and how many (`n`)."""

    price: np.ndarray
    mean_cost: np.ndarray
    accuracy: np.ndarray | None
    shares: np.ndarray  # (k, S): share of questions sent to each strategy
    single: np.ndarray | None = None  # (S,): always that strategy's accuracy (with outcomes)
    n: int = 0  # questions swept (0: not recorded, as in older exports)

    def mean_llm_calls(self, calls: Sequence[float]) -> np.ndarray:
        """Each row's mean LLM calls per question, given each strategy's (`calls`, (S,))."""
        return self.shares @ np.asarray(calls, float)

    def to_dict(self) -> dict[str, Any]:
        return {"price": self.price.tolist(), "mean_cost": self.mean_cost.tolist(),
                "accuracy": None if self.accuracy is None else self.accuracy.tolist(),
                "shares": self.shares.tolist(),
                "single": None if self.single is None else self.single.tolist(), "n": self.n}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Curve:
        acc, single = d.get("accuracy"), d.get("single")
        return cls(np.asarray(d["price"], float), np.asarray(d["mean_cost"], float),
                   None if acc is None else np.asarray(acc, float),
                   np.asarray(d["shares"], float),
                   None if single is None else np.asarray(single, float), int(d.get("n", 0)))  # fmt: skip


def outcome(
    choice: np.ndarray, correct: np.ndarray, costs: np.ndarray | Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Per-question correctness and cost of a routing; `costs` (S,) or per question (n, S)."""
    rows = np.arange(len(choice))
    c = np.asarray(costs, float)
    paid = c[rows, choice] if c.ndim == 2 else c[choice]
    return correct[rows, choice], paid


def sweep(
    P: np.ndarray,
    costs: Sequence[float],
    correct: np.ndarray | None = None,
    paid: np.ndarray | None = None,
) -> Curve:
    """Every routing one price makes on these questions. `costs`: the decision rule's (S,);
    `paid`: what each question actually costs (n, S) where known (default: `costs`).

    Each question's strategy only gets cheaper as the price rises, and changes only near its
    own breakpoints, so the routings are found from each question's changes in price order:
    O(n log n) time and O(n) memory, where routing every question at every candidate price
    took O(n^2) of both (100,000 questions of traffic ran out of 24 GB)."""
    P = np.asarray(P, float)
    n, S = P.shape
    c = np.asarray(costs, float)
    per_question = paid is not None and np.ndim(paid) == 2
    paid_ = np.asarray(paid, float) if paid is not None else c
    right = np.zeros_like(P) if correct is None else np.asarray(correct, float)
    candidates = breakpoints(P, costs)
    choice = route_indices(P, candidates[0], costs)
    rows_ = np.arange(n)
    counts = np.bincount(choice, minlength=S).astype(float)
    spent = paid_[rows_, choice].sum() if per_question else float(counts @ paid_)
    ok = right[rows_, choice].sum()
    table = [(float(candidates[0]), spent, ok, counts.copy())]
    k_at, who, new = _changes(P, c, candidates, choice)
    for start, stop in _runs(k_at):
        for i, s_new in zip(who[start:stop], new[start:stop], strict=True):
            old = choice[i]
            counts[old] -= 1
            counts[s_new] += 1
            if per_question:
                spent += paid_[i, s_new] - paid_[i, old]
            ok += right[i, s_new] - right[i, old]
            choice[i] = s_new
        if not per_question:
            spent = float(counts @ paid_)
        table.append((float(candidates[k_at[start]]), spent, ok, counts.copy()))
    # the all-cheapest routing keeps the safe top price: a budget of that cost holds on any
    # new question (`breakpoints`)
    table[-1] = (float(candidates[-1]), *table[-1][1:])
    size = max(n, 1)
    return Curve(
        np.array([r[0] for r in table]),
        # costs are >= 0: a negative sum is the drift of adding and taking back per-question
        # costs (-6.9e-15 printed a cost of -0.000 at the all-free routing)
        np.maximum(np.array([r[1] / size for r in table]), 0.0),
        None if correct is None else np.array([r[2] / size for r in table]),
        np.array([r[3] / size for r in table]),
        None if correct is None else right.mean(axis=0),
        n,
    )


def _changes(
    P: np.ndarray, c: np.ndarray, candidates: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidate index, question, its new strategy) of every change of a question's routing
    from one candidate price to the next, in price order. A question's routing is evaluated
    exactly (`route_indices`' rule) at the candidates around each of its breakpoints, where
    alone it can change."""
    n, S = P.shape
    last = len(candidates) - 1
    around = []
    for a in range(S):
        for b in range(a + 1, S):
            if c[b] > c[a]:
                k = np.searchsorted(candidates, (P[:, b] - P[:, a]) / (c[b] - c[a]))
                around += [np.clip(k + d, 1, last) for d in (-2, -1, 0, 1, 2)]
    if not around or last < 1:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0, int)
    who = np.tile(np.arange(n), len(around))
    at = np.concatenate(around)
    keep = np.unique(at * n + who)  # one evaluation per (candidate, question)
    at, who = keep // n, keep % n
    value = P[who] - candidates[at, None] * c[None, :] - _TIE * np.arange(S)[None, :]
    chosen = np.argmax(value, axis=1)
    order = np.lexsort((at, who))  # by question, then price
    at, who, chosen = at[order], who[order], chosen[order]
    before = np.where(np.r_[True, who[1:] != who[:-1]], start[who], np.r_[-1, chosen[:-1]])
    moved = chosen != before
    at, who, chosen = at[moved], who[moved], chosen[moved]
    order = np.argsort(at, kind="stable")
    return at[order], who[order], chosen[order]


def _runs(k_at: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of equal candidate indices."""
    if not len(k_at):
        return []
    cuts = np.flatnonzero(np.diff(k_at)) + 1
    bounds = np.r_[0, cuts, len(k_at)]
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def point_for_budget(
    curve: Curve, budget: float, best_accuracy: bool = False, spend: np.ndarray | None = None
) -> int:
    """Row of `curve` for a budget: the smallest price within it (the budget met, as nearly
    spent as one price allows), or with `best_accuracy` the best accuracy among the rows
    within it (ties: the cheaper); none within it: the cheapest routing. `spend`: what the
    budget bounds per row (default the mean cost; `Curve.mean_llm_calls` for LLM calls)."""
    spend = curve.mean_cost if spend is None else spend
    # rounding's slack as a share of the budget: a fixed 1e-9 was none at a budget of 5e11
    within = np.flatnonzero(spend <= budget + 1e-9 * abs(budget))
    if not len(within):
        return int(np.argmin(spend))
    if not best_accuracy or curve.accuracy is None:
        return int(within[np.argmin(curve.price[within])])
    best = curve.accuracy[within].max()
    tied = within[curve.accuracy[within] >= best - 1e-12]
    return int(tied[np.lexsort((curve.mean_cost[tied], spend[tied]))[0]])


def point_for_accuracy(curve: Curve, target: float, spend: np.ndarray | None = None) -> int | None:
    """Row of the cheapest routing (by `spend`, default the mean cost; ties: the lower mean
    cost) whose accuracy reaches `target` (None: none does)."""
    if curve.accuracy is None:
        raise InputError("an accuracy target needs outcomes (a strategy label file)")
    spend = curve.mean_cost if spend is None else spend
    ok = np.flatnonzero(curve.accuracy >= target - 1e-12)
    return None if not len(ok) else int(ok[np.lexsort((curve.mean_cost[ok], spend[ok]))[0]])


def pareto(curve: Curve) -> list[int]:
    """Rows on the accuracy-vs-cost front: no other row is as cheap and more accurate."""
    if curve.accuracy is None:
        raise InputError("a Pareto front needs outcomes (a strategy label file)")
    order = np.lexsort((-curve.accuracy, curve.mean_cost))
    front, best = [], -np.inf
    for i in order:
        if curve.accuracy[i] > best + 1e-12:
            front.append(int(i))
            best = curve.accuracy[i]
    return front


@dataclass(frozen=True)
class Calibration:
    """What a trained router carries (run metadata.json and ONNX metadata, key `router`): its
    strategies and costs, the calibration curve with outcomes (`dev`: on dev questions, or on
    out-of-fold predictions of the questions a router was fitted on, as `calibrated_on` says),
    optionally one on the user's own traffic (`tune --calibrate-on`; it then decides the price
    of a budget), and the default operating point `route(budget=None)` uses."""

    strategies: tuple[str, ...]
    costs: tuple[float, ...]
    dev: Curve
    default_budget: float
    default_price: float
    objective: str
    traffic: Curve | None = None
    traffic_source: str | None = None
    calibrated_on: str = "dev"
    specs: tuple[dict[str, Any], ...] | None = None  # each strategy's spec (issue 36)

    @property
    def fitted_on_dev(self) -> bool:
        """Whether the router was fitted on its calibration questions (out-of-fold curve):
        re-scoring them would be in-sample, so tuning reads the stored curve."""
        return self.calibrated_on != "dev"

    @classmethod
    def fit(
        cls,
        strategies: Sequence[str],
        costs: Sequence[float],
        P: np.ndarray,
        correct: np.ndarray,
        paid: np.ndarray | None = None,
        budget: float = 1.0,
        calibrated_on: str = "dev",
        registry: StrategyRegistry | None = None,
    ) -> Calibration:
        """The calibration curve of P on these questions (dev, or out-of-fold predictions),
        and the default price: the best accuracy there within `budget`."""
        check_costs(costs, strategies)
        check_budget(budget, costs, "model.budget")
        curve = sweep(P, costs, correct, paid)
        i = point_for_budget(curve, budget, best_accuracy=True)
        return cls(tuple(strategies), tuple(float(c) for c in costs), curve, float(budget),
                   float(curve.price[i]), f"best {calibrated_on} accuracy at budget {budget:g}",
                   calibrated_on=calibrated_on,
                   specs=None if registry is None else tuple(
                       with_cost(registry[s], c).to_dict()
                       for s, c in zip(strategies, costs, strict=True)))  # fmt: skip

    def registry(self) -> StrategyRegistry:
        """Its strategies as specs (what each one runs), costs the router's own: the specs
        it carries, else (routers before issue 36) its names resolved against the
        built-ins."""
        reg = specs_of(self.specs, self.strategies, "router calibration")
        return StrategyRegistry(tuple(with_cost(reg[s], c) for s, c in
                                      zip(self.strategies, self.costs, strict=True)),
                                "the router's own strategies")  # fmt: skip

    def llm_calls(self, registry: StrategyRegistry | None = None) -> tuple[float, ...] | None:
        """Each strategy's LLM calls per question: `registry`'s specs where it declares every
        strategy (--strategies), else the router's own (None: a router before issue 36 whose
        names are not built-ins)."""
        try:
            own = self.registry()
        except ConfigError:
            own = None
        return llm_calls_for(self.strategies, registry, own)

    def curve(self) -> Curve:
        """The curve a budget is read from: the user's traffic when calibrated on it."""
        return self.traffic if self.traffic is not None else self.dev

    def price(self, budget: float | None = None) -> float:
        """The price of a budget (None: the default operating point)."""
        if budget is None:
            return self.default_price
        check_budget(budget, self.costs)
        curve = self.curve()
        return float(curve.price[point_for_budget(curve, budget)])

    def on_traffic(self, P: np.ndarray, source: str, budget: float | None = None) -> Calibration:
        """The same router calibrated on unlabelled questions (a user's traffic): a budget
        then means that mean cost on them; the default price is re-read for `budget`
        (default: the default budget)."""
        curve = sweep(P, self.costs)
        budget = self.default_budget if budget is None else budget
        check_budget(budget, self.costs, "--budget")
        price = float(curve.price[point_for_budget(curve, budget)])
        objective = f"budget {budget:g} spent on {source}"
        return replace(
            self,
            default_budget=float(budget),
            default_price=price,
            objective=objective,
            traffic=curve,
            traffic_source=source,
        )

    def with_default(self, budget: float, price: float, objective: str) -> Calibration:
        check_budget(budget, self.costs)
        return replace(
            self, default_budget=float(budget), default_price=float(price), objective=objective
        )

    def to_dict(self) -> dict[str, Any]:
        return {"strategies": list(self.strategies), "costs": list(self.costs),
                "dev": self.dev.to_dict(), "default_budget": self.default_budget,
                "default_price": self.default_price, "objective": self.objective,
                "traffic": None if self.traffic is None else self.traffic.to_dict(),
                "traffic_source": self.traffic_source, "calibrated_on": self.calibrated_on,
                **({} if self.specs is None else {"specs": [dict(x) for x in self.specs]})}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        try:
            traffic = d.get("traffic")
            return cls(tuple(d["strategies"]), tuple(float(c) for c in d["costs"]),
                       Curve.from_dict(d["dev"]), float(d["default_budget"]),
                       float(d["default_price"]), str(d["objective"]),
                       None if traffic is None else Curve.from_dict(traffic),
                       d.get("traffic_source"), str(d.get("calibrated_on", "dev")),
                       None if d.get("specs") is None else tuple(dict(x) for x in d["specs"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"router calibration is incomplete or malformed ({e!r}); "
                             "re-train or re-export the router") from None  # fmt: skip
