"""Percentile bootstrap confidence intervals for any metric of (labels, scores, decisions)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def min_resamples(level: float = 0.95) -> int:
    """The fewest resamples whose percentile interval at `level` is one: each tail (2.5% at
    95%) needs a resample of its own. Below it the quantiles are the sample's extremes (one
    resample: a zero-width "CI" that could exclude the point estimate)."""
    return math.ceil(round(2 / (1 - level), 9))  # 40 at 95%


def bootstrap_ci(
    metric: Callable[[np.ndarray], float | None],
    n: int,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """CI of `metric(indices)` over resamples of range(n) with replacement. Resamples on which
    the metric is undefined (None) are skipped; None if most are, or if fewer than
    `min_resamples(level)` are defined (too few for the interval's tails)."""
    if n_resamples < min_resamples(level):  # no interval to estimate: not worth the loop
        return None
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        v = metric(rng.integers(0, n, n))
        if v is not None:
            values.append(v)
    if len(values) < max(n_resamples / 2, min_resamples(level)):
        return None
    alpha = (1 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)
