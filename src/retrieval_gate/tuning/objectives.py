"""Threshold objectives on dev scores, and the exhaustive reference every study is checked
against. Each takes (labels, scores, recorded answers) of DEV questions and a threshold."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import metrics as M
from ..errors import ConfigError, MissingInputError


@dataclass(frozen=True)
class DevData:
    """What a threshold is tuned on: dev labels, gate scores and recorded answers; and the
    LLM calls a question costs without and with retrieval (the binary pair's specs; None:
    unknown)."""

    y: np.ndarray
    scores: np.ndarray
    closed: np.ndarray
    rag: np.ndarray
    llm_calls: tuple[float, float] | None = (1.0, 1.0)

    def require_answers(self) -> DevData:
        """Adaptive accuracy is measured on the questions with both recorded answers (the
        metric skips the others); retrieval rate stays over every dev question."""
        require_answers(self.closed, self.rag)
        return self

    def always_accuracy(self) -> float:
        known = ~np.isnan(self.closed) & ~np.isnan(self.rag)
        return float(np.mean(self.rag[known]))


def require_answers(closed: np.ndarray, rag: np.ndarray) -> None:
    """Recorded correctness without (`closed`) and with (`rag`) retrieval, NaN where unknown:
    some dev question must have both, or adaptive-accuracy objectives cannot be tuned (checked
    before any gate is built too: `tune`)."""
    closed, rag = ~np.isnan(closed), ~np.isnan(rag)
    if not np.any(closed & rag):
        raise MissingInputError(
            "adaptive-accuracy objectives need the labelling run's answers without and "
            "with retrieval for dev questions; the labelling run read has "
            f"{_missing_answers(closed, rag)}: pass --run-dir FOLDER, the folder `label` "
            "wrote them into (<labels-dir>/<generator>), or tune macro-f1, which needs the "
            "labels only"
        )


def _missing_answers(closed: np.ndarray, rag: np.ndarray) -> str:
    """Which recorded answers the dev questions lack, and where they come from."""
    if not rag.any():
        return ("no answer with retrieval (rag-gain.jsonl: an outcomes file's rag_correct or "
                "rag_prediction column, or `label --policy rag-gain`)")  # fmt: skip
    if not closed.any():
        return "no closed-book answer (closed-book.jsonl's match)"
    return "no dev question with both"


def figures(dev: DevData, t: float) -> dict[str, float | None]:
    """Dev figures at a threshold (what justifies a chosen threshold): the retrieval rate is
    the retrievals per question (one for each question sent to retrieval), beside the LLM
    calls per question."""
    d = dev.scores >= t
    return {
        "macro_f1": M.macro_f1(dev.y, d),
        "accuracy": M.accuracy(dev.y, d),
        "retrieval_rate": M.retrieval_rate(d),
        "llm_calls_per_question": llm_calls_per_question(d, dev.llm_calls),
        "adaptive_accuracy": M.adaptive_accuracy(d, dev.closed, dev.rag),
    }


def llm_calls_per_question(
    decisions: np.ndarray, calls: tuple[float, float] | None
) -> float | None:
    """Mean LLM calls of binary decisions: `calls` = (without, with retrieval)."""
    if calls is None or not len(decisions):
        return None
    return float(np.mean(np.where(decisions, calls[1], calls[0])))


def macro_f1(dev: DevData, t: float) -> float:
    return M.macro_f1(dev.y, dev.scores >= t)


def adaptive_accuracy(dev: DevData, t: float) -> float:
    return float(M.adaptive_accuracy(dev.scores >= t, dev.closed, dev.rag))


def min_retrieval(target: float) -> Callable[[DevData, float], float]:
    """Retrieval rate to MINIMISE subject to adaptive accuracy >= target x always-retrieve
    accuracy; an infeasible threshold scores 1 + its shortfall, worse than any feasible one."""

    def value(dev: DevData, t: float) -> float:
        need = target * dev.always_accuracy()
        acc = adaptive_accuracy(dev, t)
        rate = M.retrieval_rate(dev.scores >= t)
        return rate if acc >= need - 1e-12 else 1.0 + (need - acc)

    return value


@dataclass(frozen=True)
class Objective:
    name: str
    direction: str  # maximize | minimize
    value: Callable[[DevData, float], float]
    needs_answers: bool


def objective(name: str, target: float = 0.95) -> Objective:
    if name == "macro-f1":
        return Objective(name, "maximize", macro_f1, False)
    if name == "adaptive-accuracy":
        return Objective(name, "maximize", adaptive_accuracy, True)
    if name == "min-retrieval":
        return Objective(f"min-retrieval@{target:g}", "minimize", min_retrieval(target), True)
    raise ConfigError(f"unknown objective {name!r}; use macro-f1, adaptive-accuracy, min-retrieval")


def candidate_thresholds(scores: np.ndarray) -> np.ndarray:
    """Every distinct decision a threshold in [0, 1] can make (retrieve iff score >= it, as
    every gate): each distinct score, and one above all where some threshold is. A top score
    of 1.0 has none: its "above all", 1.0000000000000002, read 1.000 in the report (which
    retrieves for the questions scored 1.0) and no flag, gate or run took it."""
    u = np.unique(np.clip(scores, 0.0, 1.0))
    return u if u[-1] >= 1.0 else np.r_[u, np.nextafter(u[-1], np.inf)]


def retrieved_at_every_threshold(scores: np.ndarray) -> float:
    """The share of questions scored 1.0, retrieved for at every threshold in [0, 1]: above
    0, no threshold of the gate never retrieves."""
    return float(np.mean(np.asarray(scores) >= 1.0)) if len(scores) else 0.0


def exhaustive_best(obj: Objective, dev: DevData) -> tuple[float, float]:
    """(threshold, value) of the best candidate threshold: the reference optimum. Of thresholds
    tied on the value, the highest (the fewest retrievals, as `popularity.best_cut` and
    `pricing.point_for_budget` break ties): argmax's first, the lowest, retrieved for every
    dev question where 96% made the same adaptive accuracy."""
    ts = candidate_thresholds(dev.scores)  # ascending: each one retrieves for fewer questions
    values = np.array([obj.value(dev, t) for t in ts])
    best = values.max() if obj.direction == "maximize" else values.min()
    i = int(np.flatnonzero(values == best)[-1])
    return float(ts[i]), float(values[i])
