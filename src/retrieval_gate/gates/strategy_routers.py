"""Routers (issue 25): gates that also pick a retrieval strategy per question, for a budget.

Every router here estimates P(correct | strategy) (`strategy_proba`, (n, S)) and routes by
`routing`: argmax_s P_s - price x cost_s, the price read from its `Calibration` for the budget
asked (None: its default operating point). As a `Gate`, its score is P(needs retrieval) =
1 - P(correct | no retrieval). `RoutingMixin` is that shared part; the learned router (torch,
`gates.learned`) and its export (`gates.onnx`) add only `strategy_proba`; the two baselines
below fit on the train split of strategy labels and calibrate on dev."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..blas import one_blas_thread
from ..errors import MissingInputError
from ..labels.evalset import EvalSet
from ..pricing import Calibration, default_budget, default_costs, route_indices
from ..strategies import StrategyRegistry
from .base import Questions, as_questions


class RoutingMixin:
    """`route`, `costs` and `scores` from `strategy_proba` and a `calibration`."""

    strategies: tuple[str, ...]
    calibration: Calibration
    _last: tuple[tuple[str, ...], np.ndarray] | None = None  # the last batch's P, see `proba`
    strategy_proba: Callable[[Questions], np.ndarray]  # each router's own: P(correct | strategy)

    @property
    def costs(self) -> dict[str, float]:
        """Each strategy's cost in the router's unit (default: retrievals)."""
        return dict(zip(self.strategies, self.calibration.costs, strict=True))

    @property
    def budget(self) -> float:
        """The default budget: `route(budget=None)` routes at the best dev accuracy within it
        (the default price), which may spend less; `route(budget=b)` spends up to b."""
        return self.calibration.default_budget

    def strategy_registry(self) -> StrategyRegistry:
        """Its strategies' specs (`gates.base.CarriesStrategies`), costs its own."""
        return self.calibration.registry()

    def proba(self, questions: Questions) -> np.ndarray:
        """`strategy_proba`, computed once for a batch asked for twice in a row: the RAG loop
        and the service take `scores` and then `route` of the same questions."""
        qs = as_questions(questions)
        key, last = tuple(repr(q) for q in qs), self._last
        if last is not None and last[0] == key:
            return last[1]
        P = self.strategy_proba(qs)
        self._last = (key, P)
        return P

    def scores(self, questions: Questions) -> np.ndarray:
        """P(needs retrieval) = 1 - P(correct | no retrieval)."""
        return 1.0 - self.proba(questions)[:, 0]

    def route_indices(self, questions: Questions, budget: float | None = None) -> np.ndarray:
        price = self.calibration.price(budget)  # checks the budget before any scoring
        return route_indices(self.proba(questions), price, self.calibration.costs)

    def route(self, questions: Questions, budget: float | None = None) -> list[str]:
        """One strategy name per question, for `budget` (mean cost per question, from 0 to
        the dearest strategy's cost; None: the default operating point)."""
        return [self.strategies[i] for i in self.route_indices(questions, budget)]


def _need_strategies(split: EvalSet | None, gate: str) -> EvalSet:
    if split is None or not split.has_strategies or not len(split):
        raise MissingInputError(
            f"gate {gate!r} needs strategy labels (a strategies.jsonl, a release folder or "
            "adaptive-rag as --labels)"
        )
    return split


class FittedRouter(RoutingMixin):
    """A router whose P(correct | strategy) comes from a fitted function of the questions,
    calibrated on dev at `budget` (None: `pricing.default_budget` of its costs)."""

    def __init__(self, name: str, predict, strategies: Sequence[str], dev: EvalSet,  # noqa: ANN001
                 costs: Sequence[float] | None = None, budget: float | None = None,
                 labels_priced: bool | None = None):  # fmt: skip
        self.name = name
        self.threshold = 0.5
        self._predict = predict
        self.strategies = tuple(strategies)
        # whether the labels' per-question costs are its unit: priced by them (no costs given),
        # or by a list said to be in their unit (a loaded router's own); not --strategies'
        self.labels_priced = costs is None if labels_priced is None else labels_priced
        costs = tuple(costs) if costs is not None else labels_costs(dev)
        self._dev, self._budget = dev, budget  # None kept: re-read at other costs (`at_costs`)
        P = self.strategy_proba(dev.questions)
        at = budget if budget is not None else default_budget(costs)
        self.calibration = Calibration.fit(self.strategies, costs, P, dev.correct,
                                           dev.costs_paid(costs, self.labels_priced), at)  # fmt: skip

    def at_costs(self, costs: Sequence[float], labels_own: bool = False) -> FittedRouter:
        """This router calibrated at `costs` (the price list of the table it stands in):
        fitted here, it has no costs of its own. `labels_own`: the list is in the labels'
        unit (not --strategies'), so their per-question costs price its questions."""
        same_unit = labels_own == self.labels_priced or self._dev.paid is None
        if np.allclose(costs, self.calibration.costs) and same_unit:
            return self
        return FittedRouter(self.name, self._predict, self.strategies, self._dev, costs,
                            self._budget, labels_own)  # fmt: skip

    def at_budget(self, budget: float) -> FittedRouter:
        """This router with its default operating point at `budget` (tune's --budget): fitted
        here, it has no model.budget of its own."""
        if budget == self.calibration.default_budget:
            return self
        return FittedRouter(self.name, self._predict, self.strategies, self._dev,
                            self.calibration.costs, budget, self.labels_priced)  # fmt: skip

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        return self._predict(qs) if qs else np.zeros((0, len(self.strategies)))


def paid_at(router: Any, split: EvalSet) -> np.ndarray:
    """(n, S) what each strategy costs each question at `router`'s price list: the labels'
    per-question costs where the list is in their unit (a router fitted here without costs,
    or a trained one: its own list), else the list's own prices (`EvalSet.costs_paid`)."""
    return split.costs_paid(router.calibration.costs, getattr(router, "labels_priced", True))


def labels_costs(dev: EvalSet) -> tuple[float, ...]:
    """A fitted router's costs where none are given: the mean of the labels' per-question
    costs where they carry them for every strategy, else the built-ins' (other names are
    refused, saying where costs come from)."""
    if dev.paid is not None and len(dev) and not np.isnan(dev.paid).all(axis=0).any():
        return tuple(float(c) for c in np.nanmean(dev.paid, axis=0))
    return default_costs(dev.strategies)


def tfidf_router(
    train: EvalSet | None,
    dev: EvalSet | None,
    c: float = 0.1,
    costs: Sequence[float] | None = None,
) -> FittedRouter:
    """One logistic head per strategy over word (1-2) and character (2-5, case kept) TF-IDF
    n-grams: case and punctuation tell the question sets apart."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from .tfidf import min_df  # imports scikit-learn, which the base install lacks

    train, dev = _need_strategies(train, "router-tfidf"), _need_strategies(dev, "router-tfidf")
    n = len(train.questions)
    words = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df(n), sublinear_tf=True)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=min_df(n, 3),
                            sublinear_tf=True, lowercase=False)  # fmt: skip
    texts = [q.text for q in train.questions]
    try:
        X = hstack([words.fit_transform(texts), chars.fit_transform(texts)]).tocsr()
    except ValueError as e:  # sklearn's "empty vocabulary", a traceback
        raise MissingInputError(f"router-tfidf: the {n} training questions hold no word to fit "
                                f"on ({e})") from None  # fmt: skip
    heads = []
    with one_blas_thread():
        for s in range(train.correct.shape[1]):
            y = train.correct[:, s]
            heads.append(LogisticRegression(C=c, max_iter=3000).fit(X, y) if 0 < y.mean() < 1
                         else float(y.mean()))  # fmt: skip

    def predict(qs):  # noqa: ANN001, ANN202
        t = [q.text for q in qs]
        Xq = hstack([words.transform(t), chars.transform(t)]).tocsr()
        cols = [h.predict_proba(Xq)[:, 1] if not isinstance(h, float) else np.full(len(t), h)
                for h in heads]  # fmt: skip
        return np.stack(cols, axis=1)

    return FittedRouter("router-tfidf", predict, train.strategies, dev, costs)


def prior_router(dev: EvalSet | None, costs: Sequence[float] | None = None) -> FittedRouter:
    """Each source's mean correctness per strategy on dev (Adaptive-RAG's per-dataset prior,
    chosen on dev): at price 0 the best strategy per dataset. It reads `Question.source`, a
    side signal bare questions lack (they get the overall means)."""
    dev = _need_strategies(dev, "router-prior")
    sources = dev.sources
    table = {s: dev.correct[sources == s].mean(axis=0) for s in np.unique(sources)}
    overall = dev.correct.mean(axis=0)

    def predict(qs):  # noqa: ANN001, ANN202
        return np.stack([table.get(q.source, overall) for q in qs])

    return FittedRouter("router-prior", predict, dev.strategies, dev, costs)
