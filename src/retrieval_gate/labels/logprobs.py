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
valid); anything else is refused naming the file, line, id and column, and so is an empty list
beside an answer (the row's `prediction`, unless recorded empty) or a `{strategy: list}` cell in
a file whose sidecar names no strategies.

`answer_logprobs(path)` reads them back per question id; `logprob_features` turns one answer's
into the four numbers a two-stage gate reads (mean, min, first token, length)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..data.answer_confidence import (  # noqa: F401  (the label rows' vocabulary, re-exported)
    FEATURES,
    MEAN_LOGPROB,
    TOKEN_LOGPROBS,
    logprob_features,
    parse_mean_logprob,
    parse_token_logprobs,
    same_logprobs,
)
from ..errors import DataError
from ..questions import Question, id_text
from ..strict_rows import loads
from .label_files import LabelFile, meta_path

DECIMALS = 4
MEAN_SLACK = 2 * 10**-DECIMALS  # two means each rounded to DECIMALS, one from rounded tokens


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
    without retrieval). Rows without any are left out; a file recording none gives {}. A bad
    cell is refused naming its line and id."""
    label_file = LabelFile(path)
    if strategy is None and meta_path(label_file.path).exists():
        names = label_file.meta.get("strategies") or []
        strategy = names[0] if names else None
    out: dict[str, AnswerLogprobs] = {}
    for qid, row in label_file.rows.items():
        try:
            record = _recorded(row, strategy)
        except DataError as e:
            line = _line_of(label_file.path, qid)
            raise DataError(f"id {qid!r}: {e.args[0]}", label_file.path, line) from None
        if record is not None:
            out[qid] = record
    return out


def _recorded(row: Mapping[str, Any], strategy: str | None) -> AnswerLogprobs | None:
    """One label row's answer log-probabilities (None: it records none); a bad cell raises a
    DataError the caller places. Without `strategy` (a closed-book file) a mapping is read as
    an OpenAI-compatible `logprobs` object, else refused: a `{strategy: list}` cell belongs to
    a strategies.jsonl, whose sidecar names the strategies."""
    cells = [_cell(row, column, strategy) for column in (TOKEN_LOGPROBS, MEAN_LOGPROB)]
    try:
        tokens = parse_token_logprobs(cells[0], None, None, TOKEN_LOGPROBS)
    except DataError as e:
        if not isinstance(cells[0], Mapping):
            raise
        raise DataError(f"{e.args[0]}; a {{strategy: list}} mapping is read only in a router's "
                        "strategies.jsonl, whose .meta.json names the strategies: give this "
                        "answer's list here") from None  # fmt: skip
    mean = parse_mean_logprob(cells[1], None, None, MEAN_LOGPROB)
    if tokens == [] and _answered(row, strategy):  # read as no answer, said nowhere
        raise DataError(f"column {TOKEN_LOGPROBS!r} is an empty list, but the row has an "
                        "answer (its `prediction` is not recorded empty): record its tokens' "
                        "log-probabilities, or leave the cell null")  # fmt: skip
    if not tokens and mean is None:
        return None
    return AnswerLogprobs(tuple(tokens) if tokens else None, mean if mean is not None
                          else mean_of(tokens))  # fmt: skip


def _cell(row: Mapping[str, Any], column: str, strategy: str | None) -> Any:
    """The column's cell, in a strategies.jsonl row its `strategy`'s."""
    value = row.get(column)
    if strategy is not None and isinstance(value, Mapping):
        return value.get(strategy)
    return value


def _answered(row: Mapping[str, Any], strategy: str | None) -> bool:
    """Whether the row holds an answer: any row but one whose `prediction` (a strategies row:
    `strategy`'s) is recorded empty. A label row judges an answer; one without the column
    still had one."""
    if "prediction" not in row:
        return True
    answer = _cell(row, "prediction", strategy)
    return not (answer is None or (isinstance(answer, str) and not answer.strip()))


def _line_of(path: Path, qid: str) -> int | None:
    """The line of `qid`'s row (the last one, which LabelFile keeps): read again only to name
    a refused row."""
    found = None
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                row = loads(raw)
            except ValueError:  # a half-written last line, which LabelFile skipped
                continue
            if isinstance(row, dict) and id_text(row.get("id")) == qid:
                found = n
    return found


def feature_matrix(records: Mapping[str, AnswerLogprobs], ids: Sequence[str]) -> np.ndarray:
    """(len(ids), 4) features in `ids`' order; an id without a record is a row of NaN."""
    empty = AnswerLogprobs()
    return np.stack([records.get(i, empty).features() for i in ids]) if ids else np.empty((0, 4))


def with_answer_logprobs(
    questions: dict[str, Question],
    label_file: str | Path | None,
    questions_file: str | Path | None = None,
) -> dict[str, Question]:
    """The questions with their closed-book answer's log-probabilities from the label file in
    `extra`, where the questions file did not carry them already. Where it carries them and
    the label file records others for a question (the questions saved from one LLM run, the
    labels imported from another), neither is taken unsaid: a DataError names both files
    (`questions_file`, default the --questions file) and the first such question."""
    records = answer_logprobs(label_file) if label_file is not None else {}
    out = dict(questions)
    differ = []
    for qid, rec in records.items():
        q = out.get(qid)
        if q is None:
            continue
        if TOKEN_LOGPROBS in q.extra or MEAN_LOGPROB in q.extra:  # its own (an empty cell: none)
            if not _agrees(q, rec):
                differ.append(qid)
            continue
        given = ({TOKEN_LOGPROBS: list(rec.token_logprobs)} if rec.token_logprobs
                 else {MEAN_LOGPROB: rec.mean_logprob})  # fmt: skip
        out[qid] = replace(q, extra={**q.extra, **given})
    if differ:
        raise DataError(
            f"{len(differ)} questions (the first: {differ[0]!r}) have their closed-book "
            f"answer's log-probabilities ({TOKEN_LOGPROBS} / {MEAN_LOGPROB}) in the questions "
            f"file ({questions_file or '--questions'}), and "
            "this label file records others for them: a two-stage gate would read answers the "
            "labels did not judge. Drop that column from the questions file (this file's are "
            "then read), or re-label from the answers the column records",
            label_file,
        )
    return out


def _agrees(q: Question, rec: AnswerLogprobs) -> bool:
    """Whether `q`'s own log-probabilities are the label file's `rec` (to the 4 decimals the
    label file keeps); an empty cell (the questions file says "no answer": never filled in)
    agrees."""
    tokens = parse_token_logprobs(q.extra.get(TOKEN_LOGPROBS))
    mean = parse_mean_logprob(q.extra.get(MEAN_LOGPROB))
    if tokens and rec.token_logprobs:
        return same_logprobs(rounded(tokens) or [], rec.token_logprobs)
    if not tokens and mean is None:
        return True
    mine = mean_of(rounded(tokens)) if tokens else mean
    # either mean may be rounded from the other's tokens: 4 decimals, twice
    return mine is not None and rec.mean_logprob is not None and (
        abs(mine - rec.mean_logprob) <= MEAN_SLACK)  # fmt: skip
