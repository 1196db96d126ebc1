"""The two non-adaptive policies every gate is compared with."""

from __future__ import annotations

import numpy as np

from .base import Questions


class ConstantGate:
    """Scores every question the same: 1.0 retrieves always, 0.0 never."""

    def __init__(self, name: str, score: float, threshold: float = 0.5):
        self.name = name
        self.score = float(score)
        self.threshold = threshold

    def scores(self, questions: Questions) -> np.ndarray:
        return np.full(len(questions), self.score)


def always_gate() -> ConstantGate:
    return ConstantGate("always", 1.0)


def never_gate() -> ConstantGate:
    return ConstantGate("never", 0.0)
