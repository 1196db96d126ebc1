"""Decision and score metrics of a gate, in numpy (fast enough to bootstrap), each checked
against scikit-learn in tests. Label 1 = needs retrieval; a decision True = retrieve.

Metrics that are undefined on a sample (AUROC/AP with one class only) return None; callers
report them as n/a with the reason instead of a made-up number."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from .errors import InputError

# One bin count for every ECE the package reports: training logs, model cards, `evaluate`.
ECE_BINS = 10


def _arrays(y, d) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y).astype(int)
    d = np.asarray(d)
    if y.shape != d.shape:
        raise InputError(f"labels and predictions differ in shape: {y.shape} vs {d.shape}")
    return y, d


def accuracy(y, decisions) -> float:
    y, d = _arrays(y, decisions)
    return float(np.mean(y == d.astype(int)))


def macro_prf(y, decisions) -> tuple[float, float, float]:
    """Macro precision, recall and F1 over the classes in the labels or decisions, as
    scikit-learn's (zero_division=0): over both always, a perfect gate on a one-class source
    read 0.5."""
    y, d = _arrays(y, decisions)
    d = d.astype(int)
    ps, rs, fs = [], [], []
    for c in np.union1d(y, d) if len(y) else (0, 1):
        tp = np.sum((d == c) & (y == c))
        pred, true = np.sum(d == c), np.sum(y == c)
        p = tp / pred if pred else 0.0
        r = tp / true if true else 0.0
        ps.append(p)
        rs.append(r)
        fs.append(2 * p * r / (p + r) if p + r else 0.0)
    return float(np.mean(ps)), float(np.mean(rs)), float(np.mean(fs))


def macro_f1(y, decisions) -> float:
    return macro_prf(y, decisions)[2]


def auroc(y, scores) -> float | None:
    """Area under the ROC curve (Mann-Whitney with average ranks for ties); None if one class."""
    y, s = _arrays(y, scores)
    n1 = int(y.sum())
    n0 = len(y) - n1
    if n1 == 0 or n0 == 0:
        return None
    ranks = rankdata(s)
    return float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def average_precision(y, scores) -> float | None:
    """Step-wise average precision as scikit-learn defines it; None without positives."""
    y, s = _arrays(y, scores)
    if y.sum() == 0:
        return None
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.where(np.diff(s))[0], len(s) - 1]  # last index of each distinct score
    tps = np.cumsum(y)[last]
    precision = tps / (last + 1)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def reliability(y, scores, n_bins: int = ECE_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per non-empty uniform bin: mean predicted probability, observed frequency, count
    (the bins of scikit-learn's calibration_curve)."""
    y, s = _arrays(y, scores)
    bins = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(bins[1:-1], s)
    total = np.bincount(ids, minlength=n_bins)
    pred = np.bincount(ids, weights=s, minlength=n_bins)
    true = np.bincount(ids, weights=y, minlength=n_bins)
    keep = total > 0
    return pred[keep] / total[keep], true[keep] / total[keep], total[keep]


def ece(y, scores, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error of P(needs retrieval): count-weighted |observed - predicted|."""
    pred, true, count = reliability(y, scores, n_bins)
    return float(np.sum(count * np.abs(true - pred)) / np.sum(count))


def retrieval_rate(decisions) -> float:
    return float(np.mean(np.asarray(decisions, dtype=bool)))


def retrieval_accuracy(y, decisions) -> float | None:
    """RetrievalQA's retrieval accuracy: share of need-retrieval questions the gate retrieves for."""
    y, d = _arrays(y, decisions)
    if y.sum() == 0:
        return None
    return float(np.mean(d[y == 1].astype(bool)))


def adaptive_accuracy(decisions, closed_correct, rag_correct) -> float | None:
    """QA accuracy when the gate routes: the with-retrieval answer's correctness where it
    retrieves, the closed-book answer's elsewhere (Mallen's adaptive retrieval). Only questions
    with BOTH answers recorded count (NaN marks a missing one), so every gate is measured on the
    same questions; None if there are none."""
    closed = np.asarray(closed_correct, float)
    rag = np.asarray(rag_correct, float)
    known = ~np.isnan(closed) & ~np.isnan(rag)
    if not known.any():
        return None
    d = np.asarray(decisions, dtype=bool)[known]
    return float(np.mean(np.where(d, rag[known], closed[known])))
