"""Mallen et al.'s adaptive retrieval: retrieve iff the subject's popularity (s_pop, monthly
Wikipedia page views) is below a threshold, one threshold per relation type chosen by brute
force to maximise adaptive accuracy (or one global threshold). Any other numeric signal of
yours (a column of your question file: a channel's hit count, an index score) can stand in
for s_pop (`feature`): "retrieve when it is low".

Scores: sigmoid(log1p(t_r) - log1p(s_pop)), so the gate's threshold 0.5 is exactly
"s_pop < t_r" (a question exactly at its cut scores just below 0.5) and the scores still rank
questions (ROC curve) on the popularity scale.
Questions without s_pop (every source but PopQA) or of a relation never seen in fitting fall
back: unseen relation -> the global threshold; no s_pop -> a constant score, the share of
fitting questions without s_pop that need retrieval (so at 0.5 the gate takes their majority
label)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import MissingInputError
from ..questions import Question, feature_value
from .base import Questions, as_questions

_BELOW_HALF = float(np.nextafter(0.5, 0.0))  # the largest score below the threshold 0.5


def candidate_cuts(s_pop: np.ndarray) -> np.ndarray:
    """Every distinct decision a popularity threshold can make: a cut between consecutive
    distinct s_pop values, one below all (never retrieve) and one above all (always retrieve)."""
    distinct = np.unique(np.asarray(s_pop, float))
    return np.r_[distinct[0] - 0.5, (distinct[:-1] + distinct[1:]) / 2, distinct[-1] + 1.0]


def best_cut(s_pop: np.ndarray, if_retrieved: np.ndarray, if_kept: np.ndarray) -> float:
    """The threshold t maximising sum(if_retrieved[s_pop < t]) + sum(if_kept[s_pop >= t]),
    over the candidate cuts; O(n log n) with cumulative sums. Ties go to the smallest t
    (fewest retrievals: retrieval costs)."""
    order = np.argsort(s_pop, kind="mergesort")
    s, r, k = np.asarray(s_pop, float)[order], if_retrieved[order], if_kept[order]
    cuts = candidate_cuts(s)
    n_below = np.searchsorted(s, cuts)  # questions with s_pop < cut
    gain_r = np.r_[0.0, np.cumsum(r)][n_below]
    gain_k = k.sum() - np.r_[0.0, np.cumsum(k)][n_below]
    return float(cuts[int(np.argmax(gain_r + gain_k))])


@dataclass
class PopularityGate:
    """Retrieve iff s_pop < threshold of the question's relation."""

    relation_thresholds: dict[str, float]
    global_threshold: float
    fallback_score: float
    name: str = "popularity"
    threshold: float = 0.5
    feature: str = "s_pop"
    log_scale: bool = True  # compare log1p(value) (counts, views); False: signals that go below 0

    def cut_for(self, q: Question) -> float:
        return self.relation_thresholds.get(q.relation or "", self.global_threshold)

    def scores(self, questions: Questions) -> np.ndarray:
        questions = as_questions(questions)
        out = np.full(len(questions), self.fallback_score, dtype=float)
        for i, q in enumerate(questions):
            value = feature_value(q, self.feature)
            if value is not None:
                cut = self.cut_for(q)
                if self.log_scale:  # cuts are > -1
                    z = np.log1p(cut) - np.log1p(max(value, 0.0))
                else:
                    z = cut - value
                score = 1.0 / (1.0 + np.exp(-z))
                # the fitted rule is strict (retrieve iff below the cut): a question at the cut,
                # scored 0.5 (or rounded to it), falls just below the threshold
                out[i] = score if value < cut else min(score, _BELOW_HALF)
        return out


def payoffs(y: np.ndarray, closed: np.ndarray, rag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What retrieving / not retrieving is worth per question: the recorded answer's
    correctness where the labelling run has both answers, else agreement with the label."""
    known = ~np.isnan(closed) & ~np.isnan(rag)
    if_retrieved = np.where(known, rag, y == 1).astype(float)
    if_kept = np.where(known, closed, y == 0).astype(float)
    return if_retrieved, if_kept


def fit_popularity(
    questions: Sequence[Question],
    y: np.ndarray,
    closed: np.ndarray,
    rag: np.ndarray,
    per_relation: bool = True,
    min_per_relation: int = 5,
    feature: str = "s_pop",
) -> PopularityGate:
    """Brute-force thresholds on the given (dev) questions maximising adaptive accuracy."""
    if_r, if_k = payoffs(np.asarray(y), np.asarray(closed, float), np.asarray(rag, float))
    values = [feature_value(q, feature) for q in questions]
    has_pop = np.array([v is not None for v in values], dtype=bool)
    if not has_pop.any():
        raise MissingInputError(
            f"popularity gate: no fitting question has a value for {feature!r}"
            + (" (only PopQA has s_pop; pass --feature COLUMN)" if feature == "s_pop" else "")
        )
    pops = np.array([v if v is not None else -1 for v in values], dtype=float)
    global_t = best_cut(pops[has_pop], if_r[has_pop], if_k[has_pop])
    thresholds: dict[str, float] = {}
    if per_relation:
        relations = np.array([q.relation or "" for q in questions])
        for rel in sorted(set(relations[has_pop]) - {""}):
            m = has_pop & (relations == rel)
            if m.sum() >= min_per_relation:  # too few questions: the global threshold is safer
                thresholds[rel] = best_cut(pops[m], if_r[m], if_k[m])
    no_pop = ~has_pop
    fallback = float(np.mean(np.asarray(y)[no_pop])) if no_pop.any() else 1.0
    name = "popularity" if per_relation else "popularity-global"
    log_scale = bool((pops[has_pop] >= 0).all())
    return PopularityGate(
        thresholds, global_t, fallback, name, feature=feature, log_scale=log_scale
    )


def mallen_protocol(
    questions: Sequence[Question],
    y: np.ndarray,
    closed: np.ndarray,
    rag: np.ndarray,
    n_splits: int = 100,
    fit_share: float = 0.75,
    seed: int = 0,
    per_relation: bool = True,
    feature: str = "s_pop",
) -> dict[str, float]:
    """Mallen's protocol: fit thresholds on a random 75%, measure adaptive accuracy on the
    other 25%, repeat over `n_splits` seeds; mean and std of the held-out accuracy and of the
    retrieval rate. Only questions with a `feature` value (the gate's signal: s_pop unless
    --feature names another) and both recorded answers take part."""
    from ..metrics import adaptive_accuracy

    closed, rag = np.asarray(closed, float), np.asarray(rag, float)
    keep = [
        i
        for i, q in enumerate(questions)
        if feature_value(q, feature) is not None
        and not np.isnan(closed[i])
        and not np.isnan(rag[i])
    ]
    if len(keep) < 8:
        raise MissingInputError(
            f"Mallen protocol needs questions with {feature} and answers; got {len(keep)}"
        )
    qs = [questions[i] for i in keep]
    y, closed, rag = np.asarray(y)[keep], closed[keep], rag[keep]
    rng = np.random.default_rng(seed)
    accs, rates = [], []
    for _ in range(n_splits):
        perm = rng.permutation(len(qs))
        cut = int(round(fit_share * len(qs)))
        fit, held = perm[:cut], perm[cut:]
        gate = fit_popularity([qs[i] for i in fit], y[fit], closed[fit], rag[fit], per_relation,
                              feature=feature)  # fmt: skip
        d = gate.scores([qs[i] for i in held]) >= gate.threshold
        accs.append(adaptive_accuracy(d, closed[held], rag[held]))
        rates.append(float(d.mean()))
    return {
        "n_questions": len(qs),
        "n_splits": n_splits,
        "adaptive_accuracy_mean": float(np.mean(accs)),
        "adaptive_accuracy_std": float(np.std(accs)),
        "retrieval_rate_mean": float(np.mean(rates)),
        "closed_book_accuracy": float(closed.mean()),
        "always_retrieve_accuracy": float(rag.mean()),
    }
