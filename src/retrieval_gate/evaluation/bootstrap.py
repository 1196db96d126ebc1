"""Percentile bootstrap confidence intervals for any metric of (labels, scores, decisions)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def bootstrap_ci(
    metric: Callable[[np.ndarray], float | None],
    n: int,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """CI of `metric(indices)` over resamples of range(n) with replacement. Resamples on which
    the metric is undefined (None) are skipped; None if most are."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(n_resamples):
        v = metric(rng.integers(0, n, n))
        if v is not None:
            values.append(v)
    if len(values) < n_resamples / 2:
        return None
    alpha = (1 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)
