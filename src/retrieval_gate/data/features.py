"""Side features: numeric signals a user has beside the question text (entity popularity, a
channel, a cheap index hit count), fed to the learned gate next to the text embedding.

Each feature becomes two inputs: its value, log-scaled (sign(v) * log1p(|v|): page views and
hit counts span orders of magnitude) and standardised with the mean and std of the training
split (stored in the run, the ONNX metadata, and used again at inference), clipped to
[-CLIP, CLIP], and a 0/1 flag saying it was missing. A missing value (an empty cell, null,
NaN) is scaled to 0, the training mean, and flagged, so the gate learns what "unknown" means
instead of guessing it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import DataError
from ..questions import Question, feature_value

_FIELDS = set(Question.__dataclass_fields__)
# standardised inputs are clipped: one value far outside training's (views of 1e300: 340 std
# out) cannot swamp the question; training's own reach at most sqrt(n - 1) std
CLIP = 8.0


def _log(values: np.ndarray) -> np.ndarray:
    return np.sign(values) * np.log1p(np.abs(values))


@dataclass(frozen=True)
class SideFeatures:
    """Feature names with the training statistics of their log-scaled values."""

    names: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    from_text: ClassVar[bool] = False  # columns a user passes beside the text

    @property
    def width(self) -> int:
        """Inputs the gate receives: one value and one missing flag per feature."""
        return 2 * len(self.names)

    @classmethod
    def fit(cls, questions: Sequence[Question], names: Sequence[str]) -> SideFeatures:
        """Statistics from `questions` (the training split); a clear error for a column no
        question has a value in."""
        raw = _raw(questions, names, strict=False)
        mean, std = [], []
        for j, name in enumerate(names):
            column = _log(raw[:, j][~np.isnan(raw[:, j])])
            if not len(column):
                raise DataError(
                    f"data.features: no training question has a value for {name!r} (a column "
                    "of data.questions, or s_pop / o_pop)"
                )
            mean.append(float(column.mean()))
            std.append(float(column.std()) or 1.0)
        return cls(tuple(names), tuple(mean), tuple(std))

    def matrix(self, questions: Sequence[Question], strict: bool = True) -> np.ndarray:
        """(n, width) float32: scaled values (0 where missing), then the missing flags.
        `strict`: a question that lacks a feature's column altogether is an error (a caller
        that forgot to pass it), while an explicit null is a missing value."""
        raw = _raw(questions, self.names, strict)
        missing = np.isnan(raw)
        scaled = np.clip((_log(np.nan_to_num(raw)) - np.array(self.mean)) / np.array(self.std),
                         -CLIP, CLIP)  # fmt: skip
        scaled[missing] = 0.0
        return np.concatenate([scaled, missing.astype(float)], axis=1).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "mean": list(self.mean), "std": list(self.std),
                "scaling": f"(sign(v)*log1p(|v|) - mean) / std, clipped to +-{CLIP:g}; "
                           "missing -> 0 with flag 1"}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SideFeatures | None:
        if not d:
            return None
        return cls(tuple(d["names"]), tuple(d["mean"]), tuple(d["std"]))


def _raw(questions: Sequence[Question], names: Sequence[str], strict: bool) -> np.ndarray:
    out = np.full((len(questions), len(names)), np.nan)
    for i, q in enumerate(questions):
        for j, name in enumerate(names):
            if strict and name not in _FIELDS and name not in q.extra:
                raise DataError(
                    f"question {q.id!r} has no {name!r}: this gate uses the side features "
                    f"{', '.join(names)}; pass them in Question.extra (or a column of "
                    "--questions; null when unknown)"
                )
            value = feature_value(q, name)
            if value is not None:
                out[i, j] = value
    return out
