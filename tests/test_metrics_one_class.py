"""Macro precision, recall and F1 on one-class sets (a per-source row, a one-class split)
against scikit-learn's, which averages over the classes in the labels or the decisions: over
both always, a perfect gate on a one-class source read 0.500."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import precision_recall_fscore_support

from retrieval_gate import metrics as M


def one_class_cases():
    rng = np.random.default_rng(5)
    for label in (0, 1):
        for n in (1, 2, 7, 30):
            y = np.full(n, label)
            yield y, y.astype(bool)  # perfect: one class in labels and decisions
            yield y, ~y.astype(bool)  # all wrong: the other class only in the decisions
            yield y, rng.integers(0, 2, n).astype(bool)  # both in the decisions


@pytest.mark.parametrize("y, d", list(one_class_cases()))
def test_one_class_macro_prf_matches_sklearn(y, d):
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(y, d) == pytest.approx((p, r, f))
    assert M.macro_f1(y, d) == pytest.approx(f)


@pytest.mark.parametrize("label", [0, 1])
def test_a_perfect_gate_on_one_class_scores_one(label):
    y = np.full(5, label)
    assert M.macro_prf(y, y.astype(bool)) == (1.0, 1.0, 1.0)  # was 0.5 each
