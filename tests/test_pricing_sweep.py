"""`pricing.sweep` finds every routing one price makes from each question's changes, in
O(n log n); it must give exactly the rows of routing every question at every candidate price
(the former implementation, kept here as the reference: O(n^2) time and memory, which ran
100,000 questions of traffic out of 24 GB)."""

from __future__ import annotations

import numpy as np

from retrieval_gate.pricing import breakpoints, outcome, route_indices, sweep


def _reference(P, costs, correct=None, paid=None):
    paid = np.asarray(costs, float) if paid is None else np.asarray(paid, float)
    rows: dict[bytes, tuple] = {}
    candidates = breakpoints(P, costs)
    for price in candidates:
        choice = route_indices(P, price, costs)
        key = choice.tobytes()
        if key in rows:
            if price == candidates[-1]:
                rows[key] = (float(price), *rows[key][1:])
            continue
        ok, spent = outcome(choice, correct if correct is not None else np.zeros_like(P), paid)
        shares = np.bincount(choice, minlength=P.shape[1]) / max(len(choice), 1)
        rows[key] = (float(price), float(spent.mean()), float(ok.mean()), shares)
    return sorted(rows.values(), key=lambda r: r[0])


def test_the_sweep_gives_the_rows_of_routing_at_every_candidate_price():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, S = int(rng.integers(1, 60)), int(rng.integers(2, 5))
        P = rng.random((n, S))
        if rng.random() < 0.5:  # a coarse grid: ties between strategies and between questions
            P = np.round(P * 5) / 5
        costs = sorted(rng.choice([0.0, 1.0, 1.0, 2.0, 3.35, 5.0], size=S).tolist())
        correct = (rng.random((n, S)) < 0.5).astype(float)
        paid = rng.random((n, S)) * 3 if rng.random() < 0.3 else None
        want, got = _reference(P, costs, correct, paid), sweep(P, costs, correct, paid)
        assert got.price.tolist() == [r[0] for r in want] and got.n == n
        np.testing.assert_allclose(got.mean_cost, [r[1] for r in want], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(got.accuracy, [r[2] for r in want])
        np.testing.assert_allclose(got.shares, [r[3] for r in want], rtol=0, atol=1e-12)


def test_the_sweep_of_many_questions_is_linear():
    P = np.random.default_rng(1).random((100_000, 3))
    # about 2 s and 200 MB; the former O(n^2) sweep: hours, and out of memory
    curve = sweep(P, [0, 1, 3.35])
    assert curve.n == 100_000 and len(curve.price) > 50_000
    assert curve.mean_cost[0] > curve.mean_cost[-1] == 0.0  # the top price: all to the cheapest
