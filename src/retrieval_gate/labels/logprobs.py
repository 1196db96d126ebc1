"""Answer log-probabilities as data: what label rows record of how sure the generator was.

A label row may hold, beside its answer:

    token_logprobs   the answer's token log-probabilities: natural-log probabilities of the
                     generated tokens, in order, as vLLM and OpenAI-compatible servers return
                     them (`logprobs.content[].logprob`), rounded to 4 decimals; null or absent
                     when the generator returned none. In `strategies.jsonl` rows:
                     {strategy: list or null}, one per strategy.
    mean_logprob     their mean (closed-book rows; every labelling run has written it)

Both are optional: older label files (the committed SmolLM2 labels hold only `mean_logprob`)
load as before. A log-probability is a finite number <= 0 (0.0, a token of probability 1, is
valid); anything else is refused naming the file, row and column.

`answer_logprobs(path)` reads them back per question id; `logprob_features` turns one answer's
into the four numbers a two-stage gate reads (mean, min, first token, length)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .files import LabelFile, meta_path

TOKEN_LOGPROBS = "token_logprobs"
MEAN_LOGPROB = "mean_logprob"
DECIMALS = 4
FEATURES = ("mean_logprob", "min_logprob", "first_logprob", "answer_tokens")


def _number(value: Any, what: str, path: str | Path | None, line: int | None) -> float:
    """One log-probability: a finite real number <= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{what} {value!r} is not a number", path, line)
    x = float(value)
    if not math.isfinite(x):
        raise DataError(f"{what} is {x}: a log-probability is a finite number <= 0", path, line)
    if x > 0:
        raise DataError(
            f"{what} is {x:g}, above 0: a log-probability (natural log of a probability) is "
            "<= 0; were probabilities or negated log-probabilities recorded?",
            path,
            line,
        )
    return x


def parse_token_logprobs(
    value: Any,
    path: str | Path | None = None,
    line: int | None = None,
    column: str = TOKEN_LOGPROBS,
) -> list[float] | None:
    """A `token_logprobs` cell: a JSON list of numbers <= 0 (a JSON text in a CSV cell), None
    when empty or null. An empty list is returned as []: the caller refuses it where the row
    has an answer."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError(
                f"column {column!r}: {value[:60]!r} is not a JSON list of log-probabilities "
                "(e.g. [-0.1, -2.3, 0.0])",
                path,
                line,
            ) from None
    if isinstance(value, np.ndarray):  # a Parquet list column
        value = value.tolist()
    if not isinstance(value, list | tuple):
        raise DataError(
            f"column {column!r}: {value!r} is not a list of log-probabilities "
            "(e.g. [-0.1, -2.3, 0.0])",
            path,
            line,
        )
    return [
        _number(v, f"column {column!r}, token {k + 1}:", path, line) for k, v in enumerate(value)
    ]


def parse_mean_logprob(
    value: Any,
    path: str | Path | None = None,
    line: int | None = None,
    column: str = MEAN_LOGPROB,
) -> float | None:
    """A `mean_logprob` cell: a number <= 0 (text in a CSV cell), None when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise DataError(f"column {column!r}: {value!r} is not a number", path, line) from None
    return _number(value, f"column {column!r}:", path, line)


def rounded(token_logprobs: Sequence[float] | None) -> list[float] | None:
    """As label rows keep them (4 decimals; -0.0 written as 0.0)."""
    if token_logprobs is None:
        return None
    return [round(float(x), DECIMALS) + 0.0 for x in token_logprobs]


def mean_of(token_logprobs: Sequence[float] | None) -> float | None:
    return round(float(np.mean(token_logprobs)), DECIMALS) if token_logprobs else None


@dataclass(frozen=True)
class AnswerLogprobs:
    """One answer's recorded log-probabilities: the tokens' when recorded, else the mean only."""

    token_logprobs: tuple[float, ...] | None = None
    mean_logprob: float | None = None

    def features(self) -> np.ndarray:
        return logprob_features(self.token_logprobs, self.mean_logprob)


def answer_logprobs(path: str | Path, strategy: str | None = None) -> dict[str, AnswerLogprobs]:
    """Per question id, the recorded log-probabilities of a label file's answer: a closed-book
    file's (`closed-book.jsonl`, also one made by `label --policy outcomes`), or in a
    `strategies.jsonl` the answer of `strategy` (default: the file's first strategy, the one
    without retrieval). Rows without any are left out; a file recording none gives {}."""
    label_file = LabelFile(path)
    if strategy is None and meta_path(label_file.path).exists():
        names = label_file.meta.get("strategies") or []
        strategy = names[0] if names else None
    out: dict[str, AnswerLogprobs] = {}
    for qid, row in label_file.rows.items():
        tokens = row.get(TOKEN_LOGPROBS)
        if isinstance(tokens, Mapping):
            tokens = tokens.get(strategy) if strategy is not None else None
        mean = row.get(MEAN_LOGPROB)
        if isinstance(mean, Mapping):
            mean = mean.get(strategy) if strategy is not None else None
        tokens = parse_token_logprobs(tokens, label_file.path, None, TOKEN_LOGPROBS)
        mean = parse_mean_logprob(mean, label_file.path, None, MEAN_LOGPROB)
        if not tokens and mean is None:
            continue
        if mean is None:
            mean = mean_of(tokens)
        out[qid] = AnswerLogprobs(tuple(tokens) if tokens else None, mean)
    return out


def logprob_features(
    token_logprobs: Sequence[float] | None, mean_logprob: float | None = None
) -> np.ndarray:
    """[mean, min, first-token, length] of one answer's token log-probabilities (`FEATURES`),
    float64. Without tokens (a label file holding the mean only) mean is `mean_logprob` and
    the other three are NaN; with neither all four are NaN. `mean_logprob` given with tokens
    is ignored (the tokens' own mean is exact)."""
    if token_logprobs is not None and len(token_logprobs):
        x = np.asarray(token_logprobs, dtype=np.float64)
        return np.array([x.mean(), x.min(), x[0], float(x.size)])
    mean = np.nan if mean_logprob is None else float(mean_logprob)
    return np.array([mean, np.nan, np.nan, np.nan])


def feature_matrix(records: Mapping[str, AnswerLogprobs], ids: Sequence[str]) -> np.ndarray:
    """(len(ids), 4) features in `ids`' order; an id without a record is a row of NaN."""
    empty = AnswerLogprobs()
    return np.stack([records.get(i, empty).features() for i in ids]) if ids else np.empty((0, 4))
