"""Answer confidence: what a two-stage gate (`model.answer_confidence: true`, docs/train.md)
reads of the LLM's closed-book answer beside the question: the answer's token
log-probabilities, as vLLM and OpenAI-compatible servers return them.

A question carries them in `Question.extra` (a `token_logprobs` column of a questions file: a
JSON list of natural-log probabilities, `[-0.1, -2.3, 0.0]`, or the `logprobs` object of an
OpenAI-compatible reply; or `mean_logprob` alone), or the training run reads them from the
label file `label` wrote (labels/logprobs.py). A log-probability is a finite number <= 0 (0.0,
a token of probability 1, is valid); anything else is refused naming the question (or the
file, row and column).

`AnswerConfidence` turns them into the gate's inputs: mean, min, first-token log-probability
and log(1 + answer tokens), standardised with the training split's statistics (stored in the
run and the export), a missing flag for each of the last three (a label file holding the mean
only), and `has_answer`: 1 when the question came with its answer's log-probabilities. A
question without them (`has_answer` 0) gets the question-only score of the same gate."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from ..questions import Question
from ..strict_rows import loads
from .features import CLIP  # standardised inputs are clipped: one extreme answer cannot swamp
from .list_cells import list_cell

TOKEN_LOGPROBS = "token_logprobs"
MEAN_LOGPROB = "mean_logprob"
FEATURES = ("mean_logprob", "min_logprob", "first_logprob", "answer_tokens")
HAS_ANSWER = "has_answer"
# No answer token is this unlikely (p < e^-100000); below it is a placeholder, e.g. float32's
# lowest for a masked token, and two of them made the mean -inf (written as -Infinity).
LOWEST = -1e5
SAME_LOGPROB = 1e-6  # two columns' log-probabilities this close are one answer's


def _number(value: Any, what: str, path: str | Path | None, line: int | None) -> float:
    """One log-probability: a finite real number from LOWEST to 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{what} {value!r} is not a number", path, line)
    try:
        x = float(value)
    except OverflowError:  # an int past the float range (JSON reads -10**400 exactly)
        x = math.inf if value > 0 else -math.inf
    if not math.isfinite(x):
        shown = f"{x} (an integer past the float range)" if isinstance(value, int) else x
        raise DataError(f"{what} is {shown}: a log-probability is a finite number <= 0",
                        path, line)  # fmt: skip
    if x > 0:
        raise DataError(
            f"{what} is {x:g}, above 0: a log-probability (natural log of a probability) is "
            "<= 0; were probabilities or negated log-probabilities recorded?",
            path,
            line,
        )
    if x < LOWEST:
        raise DataError(f"{what} is {x:g}, below {LOWEST:g}: no answer token is that unlikely; "
                        "was a placeholder (e.g. float32's lowest) recorded for a missing value? "
                        "leave the cell empty instead", path, line)  # fmt: skip
    return x


def parse_token_logprobs(
    value: Any,
    path: str | Path | None = None,
    line: int | None = None,
    column: str = TOKEN_LOGPROBS,
) -> list[float] | None:
    """A `token_logprobs` cell: a JSON list of numbers <= 0 (a JSON text in a CSV cell), None
    when empty or null. An OpenAI-compatible server's `logprobs` object, or its list of chat
    token entries, is read as that list. An empty list is returned as []: the caller refuses
    it where the row has an answer."""
    if _no_cell(value):
        return None
    if isinstance(value, str):
        try:
            value = loads(value)  # a list, or an OpenAI-compatible `logprobs` object
        except ValueError:  # not JSON, nested too deeply, a key twice
            listed = list_cell(value)  # a Python list's or a numpy array's repr
            if listed is None:
                raise DataError(
                    f"column {column!r}: {value[:60]!r} is not a JSON list of log-probabilities "
                    "(e.g. [-0.1, -2.3, 0.0])",
                    path,
                    line,
                ) from None
            value = listed
    if isinstance(value, np.ndarray):  # a Parquet list column
        value = value.tolist()
    value = _openai_logprobs(value)
    if not isinstance(value, list | tuple):
        raise DataError(
            f"column {column!r}: {value!r} is not a list of log-probabilities "
            "(e.g. [-0.1, -2.3, 0.0])",
            path,
            line,
        )
    out = []
    for k, v in enumerate(value):
        where = f"column {column!r}, token {k + 1}:"
        out.append(_number(_entry(v, where, path, line), where, path, line))
    return out


def _openai_logprobs(value: Any) -> Any:
    """An OpenAI-compatible response's whole `logprobs` object, as users often save it: chat's
    `{"content": [{"token", "logprob", ...}]}` or completions' `{"token_logprobs": [...]}`;
    also the `openai` client's object itself."""
    value = _plain(value)
    if isinstance(value, dict):
        for key in ("content", TOKEN_LOGPROBS):
            if isinstance(value.get(key), list):
                return value[key]
    return value


def _entry(v: Any, where: str, path: str | Path | None, line: int | None) -> Any:
    """A chat token entry (`{"token": "Paris", "logprob": -0.02, ...}`) read as its logprob;
    so is a vLLM position (`{token_id: Logprob}`, or its JSON `{"123": {"logprob": ...}}`)
    holding the sampled token alone, as `SamplingParams(logprobs=0)` returns it."""
    v = _plain(v)
    if isinstance(v, dict) and "logprob" in v:
        return v["logprob"]
    candidates = [_logprob_of(c) for c in v.values()] if isinstance(v, dict) else []
    if not candidates or None in candidates:
        return v
    if len(candidates) > 1:  # vLLM's logprobs=N: the top N and the sampled token, unmarked
        raise DataError(
            f"{where} holds {len(candidates)} candidate tokens' log-probabilities (vLLM's "
            "SamplingParams(logprobs=N)), not which one was generated: record the generated "
            "tokens' only, [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)], or "
            "generate with logprobs=0",
            path,
            line,
        )
    return candidates[0]


def _logprob_of(candidate: Any) -> Any:
    """vLLM's `Logprob` object, or its JSON dict: its logprob (None: not such a thing)."""
    if isinstance(candidate, dict):
        return candidate.get("logprob")
    return getattr(candidate, "logprob", None)


def _plain(value: Any) -> Any:
    """A pydantic model (the `openai` client's reply objects) as its dict."""
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def agreed_token_logprobs(
    row: dict[str, Any],
    columns: Sequence[str],
    path: str | Path | None,
    line: int,
    flag: str,
    names: Mapping[str, str] | None = None,
) -> list[float] | None:
    """`parse_token_logprobs` of the first of `columns` holding a value (None: none does),
    where every other one that holds a list reads the same (to SAME_LOGPROB): a harness's own
    `token_logprobs` beside the raw reply's `logprobs` that differ had the second dropped
    unseen. `flag` names one column to read (`--outcome-field`, `--field`); `names`: the
    file's own name of a column the row holds under its field's (`--outcome-field`), so a bad
    cell is refused under the name the user can find."""
    named = names or {}
    given = [(named.get(c, c), row[c]) for c in columns if not _no_cell(row.get(c))]
    if not given:
        return None
    first = parse_token_logprobs(given[0][1], path, line, given[0][0])
    for column, value in given[1:]:
        other = _parsed_or_none(value)
        if other is not None and not same_logprobs(first, other):
            raise DataError(f"columns {given[0][0]!r} and {column!r} both give the answer's "
                            f"token log-probabilities and differ ({str(first)[:60]} vs "
                            f"{str(other)[:60]}): keep one column, or name the one to read "
                            f"with {flag} {TOKEN_LOGPROBS}=COLUMN", path, line)  # fmt: skip
    return first


def _no_cell(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _parsed_or_none(value: Any) -> list[float] | None:
    """A second column's list, or None where it reads as none (never read: nothing to weigh)."""
    try:
        return parse_token_logprobs(value)
    except DataError:
        return None


def same_logprobs(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two token lists are one answer's (each log-probability within SAME_LOGPROB)."""
    if len(a) != len(b):
        return False
    return all(
        math.isclose(x, y, rel_tol=0.0, abs_tol=SAME_LOGPROB) for x, y in zip(a, b, strict=True)
    )


def parse_mean_logprob(
    value: Any,
    path: str | Path | None = None,
    line: int | None = None,
    column: str = MEAN_LOGPROB,
) -> float | None:
    """A `mean_logprob` cell: a number <= 0 (text in a CSV cell), None when empty."""
    if _no_cell(value):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise DataError(f"column {column!r}: {value!r} is not a number", path, line) from None
    return _number(value, f"column {column!r}:", path, line)


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


def question_logprobs(q: Question) -> np.ndarray:
    """`logprob_features` of the answer a question carries in `extra` (`token_logprobs`, else
    `mean_logprob`); all NaN when it carries none. A bad cell names the question."""
    where = f"question {q.id!r}"
    try:
        tokens = parse_token_logprobs(q.extra.get(TOKEN_LOGPROBS))
        mean = parse_mean_logprob(q.extra.get(MEAN_LOGPROB))
    except DataError as e:
        raise DataError(f"{where}: {e.args[0] if e.args else e}") from None
    if tokens is not None and not tokens:
        raise DataError(f"{where}: column {TOKEN_LOGPROBS!r} is an empty list: an answer has at "
                        "least one token; leave the cell empty (null) when it has none")  # fmt: skip
    return logprob_features(tokens, mean)


def _transformed(raw: np.ndarray) -> np.ndarray:
    """The four raw features with the length log-scaled (answers of 1 to 100s of tokens)."""
    out = raw.copy()
    out[:, 3] = np.log1p(out[:, 3])
    return out


@dataclass(frozen=True)
class AnswerConfidence:
    """The training split's mean and std of the four transformed features, and which of them
    training saw at all (a label file holding `mean_logprob` only: the mean alone). A feature
    training never saw reads as missing when scoring too, so a gate trained on means scores
    full token lists as it was trained to."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    observed: tuple[bool, ...] = (True, True, True, True)
    # a training answer carried its mean alone: else such an answer, never seen, is read as
    # none (the question-only score); a gate trained on token lists scored a mean of -0.001
    # 0.994 (all but certain to need retrieval), as it did a mean of -3
    mean_alone: bool = True

    def reads(self, q: Question) -> bool:
        """Whether `q`'s answer is read: it carries token log-probabilities, or a mean alone
        where training saw one."""
        if q.extra.get(TOKEN_LOGPROBS) is not None:
            return True
        return self.mean_alone and q.extra.get(MEAN_LOGPROB) is not None

    @property
    def names(self) -> tuple[str, ...]:
        flags = tuple(f"{n}_missing" for n in FEATURES[1:])
        return (*FEATURES, *flags, HAS_ANSWER)

    @property
    def width(self) -> int:
        return 2 * len(FEATURES)

    @classmethod
    def fit(cls, questions: Sequence[Question]) -> AnswerConfidence:
        """Statistics from the training questions that carry an answer's log-probabilities; a
        clear error when none does."""
        raw = _transformed(np.stack([question_logprobs(q) for q in questions]))
        if np.isnan(raw[:, 0]).all():
            raise DataError(
                "model.answer_confidence: no training question has its closed-book answer's "
                "log-probabilities: label with `label --policy outcomes` from an outcomes file "
                "with a `token_logprobs` (or `mean_logprob`) column, or re-label with "
                "`label --policy closed-book`, which records them"
            )
        seen = [not np.isnan(c).all() for c in raw.T]
        mean = [float(np.nanmean(c)) if ok else 0.0 for c, ok in zip(raw.T, seen, strict=True)]
        std = [float(np.nanstd(c)) or 1.0 if ok else 1.0 for c, ok in zip(raw.T, seen, strict=True)]
        alone = bool((~np.isnan(raw[:, 0]) & np.isnan(raw[:, 1])).any())
        return cls(tuple(mean), tuple(std), tuple(seen), alone)

    def matrix(self, questions: Sequence[Question]) -> np.ndarray:
        """(n, width) float32: the scaled features (0 where missing), the three missing flags,
        `has_answer`."""
        if not questions:
            return np.zeros((0, self.width), np.float32)
        raw = _transformed(np.stack([question_logprobs(q) for q in questions]))
        raw[:, ~np.array(self.observed)] = np.nan
        if not self.mean_alone:
            raw[~np.isnan(raw[:, 0]) & np.isnan(raw[:, 1])] = np.nan
        missing = np.isnan(raw)
        scaled = np.clip((np.nan_to_num(raw) - np.array(self.mean)) / np.array(self.std),
                         -CLIP, CLIP)  # fmt: skip
        scaled[missing] = 0.0
        has = ~missing[:, :1]
        return np.concatenate([scaled, missing[:, 1:], has], axis=1).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "mean": list(self.mean), "std": list(self.std),
                "observed": list(self.observed), "mean_alone": self.mean_alone,
                "inputs": f"{TOKEN_LOGPROBS} (or {MEAN_LOGPROB}) per question; none: the "
                          "question-only score"}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> AnswerConfidence | None:
        if not d:
            return None
        try:
            seen = tuple(bool(x) for x in d.get("observed", (True,) * len(FEATURES)))
            # gates before the key: trained on means where a feature went unseen
            alone = bool(d.get("mean_alone", not all(seen)))
            return cls(tuple(map(float, d["mean"])), tuple(map(float, d["std"])), seen, alone)
        except (KeyError, TypeError, ValueError):
            raise DataError(
                "the gate's answer_confidence metadata is damaged (it needs `mean` "
                "and `std`, four numbers each): re-export the run"
            ) from None
