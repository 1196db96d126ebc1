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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..data.answer_confidence import (  # noqa: F401  (the label rows' vocabulary, re-exported)
    FEATURES,
    MEAN_LOGPROB,
    TOKEN_LOGPROBS,
    logprob_features,
    parse_mean_logprob,
    parse_token_logprobs,
)
from ..questions import Question
from .label_files import LabelFile, meta_path

DECIMALS = 4


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


def feature_matrix(records: Mapping[str, AnswerLogprobs], ids: Sequence[str]) -> np.ndarray:
    """(len(ids), 4) features in `ids`' order; an id without a record is a row of NaN."""
    empty = AnswerLogprobs()
    return np.stack([records.get(i, empty).features() for i in ids]) if ids else np.empty((0, 4))


def with_answer_logprobs(
    questions: dict[str, Question], label_file: str | Path | None
) -> dict[str, Question]:
    """The questions with their closed-book answer's log-probabilities from the label file in
    `extra`, where the questions file did not carry them already."""
    records = answer_logprobs(label_file) if label_file is not None else {}
    out = dict(questions)
    for qid, rec in records.items():
        q = out.get(qid)
        if q is None or TOKEN_LOGPROBS in q.extra or MEAN_LOGPROB in q.extra:
            continue
        given = ({TOKEN_LOGPROBS: list(rec.token_logprobs)} if rec.token_logprobs
                 else {MEAN_LOGPROB: rec.mean_logprob})  # fmt: skip
        out[qid] = replace(q, extra={**q.extra, **given})
    return out
