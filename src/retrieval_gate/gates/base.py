"""The one interface every decision-maker implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..questions import Question


@runtime_checkable
class Gate(Protocol):
    """Decides, from the question alone, whether the generator needs retrieval.

    `scores` returns P(needs retrieval) in [0, 1], one float per question, so every gate has
    an ROC curve; `decide` thresholds it (retrieve iff score >= threshold)."""

    name: str
    threshold: float

    def scores(self, questions: Sequence[Question]) -> np.ndarray: ...


def decide(gate: Gate, questions: Sequence[Question]) -> np.ndarray:
    """Boolean retrieve decisions of a gate at its threshold."""
    return np.asarray(gate.scores(questions)) >= gate.threshold
