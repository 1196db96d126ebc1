"""The one interface every decision-maker implements, and the optional capabilities some have.

A capability is a small `runtime_checkable` protocol, asked with `isinstance(gate, HasChecksum)`
(never `getattr`/`hasattr`), so what a caller relies on is named and typed in one place."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import PurePath
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..data.answer_confidence import TOKEN_LOGPROBS, parse_token_logprobs
from ..errors import ConfigError, DataError, InputError, clipped
from ..generation.base import Generator
from ..questions import Question
from ..strategies import StrategyRegistry

# What a gate scores: `Question`s, or bare question texts.
Questions = Sequence[Question] | Sequence[str]


@runtime_checkable
class Gate(Protocol):
    """Decides, from the question alone, whether the generator needs retrieval.

    `scores` returns P(needs retrieval) in [0, 1], one float per question, so every gate has
    an ROC curve; `decide` thresholds it (retrieve iff score >= threshold). Questions may be
    `Question`s or bare strings (see `as_questions`)."""

    name: str
    threshold: float

    def scores(self, questions: Questions) -> np.ndarray: ...


def decide(gate: Gate, questions: Questions) -> np.ndarray:
    """Boolean retrieve decisions of a gate at its threshold."""
    return np.asarray(gate.scores(questions)) >= gate.threshold


# Per-question side features: a mapping of columns, or one mapping per question.
Features = Mapping[str, Sequence[float]] | Sequence[Mapping[str, float]]


# Per question, its closed-book answer's token log-probabilities (None: no answer given).
TokenLogprobs = Sequence[Sequence[float] | None]


def as_questions(
    questions: str | Questions,
    features: Features | None = None,
    token_logprobs: TokenLogprobs | Sequence[float] | None = None,
) -> list[Question]:
    """`Question`s as they are; a bare string becomes one (id its position "0", "1", ...;
    source "api"), so every gate takes what a user has at hand. Side `features` and the
    answers' `token_logprobs` (one list, or None, per question; one list for one string) ride
    along in `Question.extra` (merged over any `extra` a given Question already has)."""
    if isinstance(questions, str):
        items = [questions]
    else:
        _refuse_container(questions)
        try:
            items = list(questions)
        except TypeError:  # None, a number: not one question nor a list of them
            raise InputError(f"questions is {questions!r}: expected a question string or a list "
                             "of them") from None  # fmt: skip
    rows = _features_for(features, len(items), isinstance(questions, str))
    if token_logprobs is not None:
        one = isinstance(questions, str)
        for row, value in zip(rows, _answers_for(token_logprobs, len(items), one), strict=True):
            row[TOKEN_LOGPROBS] = value
    out = []
    for i, (item, extra) in enumerate(zip(items, rows, strict=True)):
        if isinstance(item, Question):
            out.append(replace(item, extra={**item.extra, **extra}) if extra else item)
        elif isinstance(item, str) and item.strip():
            out.append(Question(id=str(i), text=item, answers=(), source="api", extra=extra))
        else:
            got = "bytes: decode it to a str first" if isinstance(item, bytes) else repr(item)
            raise InputError(f"question {i} is {got}: expected a non-empty string or Question")
    return out


def checked_threshold(value: Any, what: str = "threshold") -> float:
    """A decision threshold: a real number from 0 to 1 (retrieve at P(needs retrieval) >= it).
    NaN, 2 or -1 were compared as given (nothing or everything retrieved), "0.5" failed at the
    first comparison, True was 1."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and 0 <= value <= 1):
        raise InputError(f"{what} must be a number in [0, 1], got {value!r}")
    return float(value)


def _refuse_container(questions: Any) -> None:
    """A table, a mapping or bytes iterates as its column names, keys or byte values: scored
    as such, a DataFrame of questions gave one score (of "question")."""
    if hasattr(questions, "columns") and hasattr(questions, "iloc"):
        raise InputError(
            "questions is a DataFrame, whose items are its column names: pass "
            "its question column, e.g. df['question'] (others: features=)"
        )
    if isinstance(questions, Mapping):
        raise InputError("questions is a mapping, whose items are its keys: pass the list of "
                         "question strings (side values: features=)")  # fmt: skip
    if isinstance(questions, bytes | bytearray):
        raise InputError("questions is bytes: decode it to a str first (e.g. "
                         "data.decode('utf-8'))")  # fmt: skip
    if isinstance(questions, set | frozenset):  # scored in no set order: not matchable
        raise InputError(f"questions is a {type(questions).__name__}, whose order is arbitrary "
                         "(scores could not be matched to questions): pass an ordered sequence "
                         "(list, tuple, array, Series)")  # fmt: skip


def _answers_for(
    token_logprobs: TokenLogprobs | Sequence[float], n: int, one: bool
) -> list[list[float] | None]:
    lists = [token_logprobs] if one else _entries(token_logprobs, n)
    if len(lists) != n:
        raise InputError(f"token_logprobs has {len(lists)} entries for {n} question"
                         f"{'s' * (n != 1)}: give one list (or None, null in JSON) per "
                         "question")  # fmt: skip
    out = []
    for i, value in enumerate(lists):
        try:
            parsed = parse_token_logprobs(value)
        except DataError as e:
            raise InputError(f"token_logprobs[{i}]: {e}") from None
        if parsed == []:
            raise InputError(f"token_logprobs[{i}] is empty: give the answer's tokens' "
                             "log-probabilities, or None for no answer")  # fmt: skip
        out.append(parsed)
    return out


def _entries(token_logprobs: Any, n: int) -> list[Any]:
    """token_logprobs' entries, one per question: a number, a text or a mapping was iterated
    (a raw TypeError "'int' object is not iterable", or a list split into its characters)."""
    one_value = isinstance(token_logprobs, str | bytes | Mapping)
    if not one_value:
        try:
            return list(token_logprobs)
        except TypeError:
            pass
    raise InputError(f"token_logprobs: {clipped(repr(token_logprobs))} is not a list of "
                     "log-probabilities per question: give one list (e.g. [-0.1, -2.3, 0.0]), "
                     f"or None, for each of the {n} questions")  # fmt: skip


def _features_for(features: Features | None, n: int, one: bool = False) -> list[dict[str, Any]]:
    """One mapping of side values per question, from a mapping of columns (a DataFrame too;
    for one question string, a mapping of its values) or one mapping per question."""
    if features is None:
        return [{} for _ in range(n)]
    if hasattr(features, "columns") and hasattr(features, "iloc"):  # a pandas DataFrame
        features = {str(c): features[c] for c in features.columns}
    if isinstance(features, Mapping):
        # by position: a pandas Series indexed by its labels (a filtered frame's 3, 7, ...)
        # would otherwise be read at labels 0, 1, ... (a KeyError, or other rows' values)
        columns = {name: _column(name, column, one) for name, column in features.items()}
        for name, column in columns.items():
            if len(column) != n:
                raise InputError(f"feature {name!r} has {len(column)} values for {n} question"
                                 f"{'s' * (n != 1)}: give one per question (None, null in JSON: "
                                 "unknown)")  # fmt: skip
        return [{name: column[i] for name, column in columns.items()} for i in range(n)]
    if isinstance(features, str | bytes):  # was split into its characters, one row each
        raise InputError(f"features is {clipped(repr(features))}, a text: give a mapping of "
                         "columns ({name: values}) or one mapping per question")  # fmt: skip
    try:
        rows = list(features)
    except TypeError:  # a number: a TypeError from list()
        raise InputError(f"features is {features!r}: give a mapping of columns ({{name: "
                         "values}) or one mapping per question") from None  # fmt: skip
    if len(rows) != n:
        raise InputError(f"features has {len(rows)} rows for {n} questions")
    if bad := next((r for r in rows if not isinstance(r, Mapping)), None):
        raise InputError(f"features: a row is {bad!r}; give one mapping per question, or a "
                         "mapping of columns ({name: values})")  # fmt: skip
    return [dict(row) for row in rows]


def _column(name: str, values: Any, one: bool) -> list[Any]:
    """A feature column's values; for one question string, its value may be given alone. Text
    was split into its characters (one a question), a number was a TypeError."""
    if isinstance(values, str | bytes | Mapping) or not hasattr(values, "__iter__"):
        if one:
            return [values]
        raise InputError(f"feature {name!r} is {values!r}: give a list of values, one per "
                         "question (None, null in JSON: unknown)")  # fmt: skip
    return list(values)


# ---------------------------------------------------------------- optional capabilities


@runtime_checkable
class HasChecksum(Protocol):
    """Its scores are a function of content it can name (weights, a model file, a generator
    and prompt): score caches and tuning studies are keyed by `checksum`, never by names."""

    checksum: str


@runtime_checkable
class Cached(Protocol):
    """It may look scores up in recorded answers; `uncached()` is the same gate computing
    every score, as deployment pays for it (timed costs and RAG passes use that one)."""

    def uncached(self) -> Gate: ...


@runtime_checkable
class AsksGenerator(Protocol):
    """It calls the generator to score (prompt and confidence gates): a service must not let
    it enter the engine while the engine generates."""

    generator: Callable[[], Generator]


@runtime_checkable
class HasMetadata(Protocol):
    """It carries the metadata of a trained gate (label meaning, threshold and the objective
    that chose it, backbone, provenance)."""

    metadata: Mapping[str, Any]


@runtime_checkable
class OnDevice(Protocol):
    """It runs on a device: the ONNX execution provider or the torch device (`str()` names it)."""

    device: Any


def uncached_gate(gate: Gate) -> Gate:
    """The gate computing every score (see `Cached`)."""
    return gate.uncached() if isinstance(gate, Cached) else gate


def gate_checksum(gate: Gate) -> str | None:
    """The gate's content checksum, None for a gate without one."""
    return gate.checksum if isinstance(gate, HasChecksum) else None


# ---------------------------------------------------------------- routers (issue 25)


@runtime_checkable
class Router(Gate, Protocol):
    """Picks a retrieval strategy per question, in `strategies` (cost order, the first one
    without retrieval). A router is also a `Gate`: `scores` = P(needs retrieval) = 1 - P(no
    retrieval suffices), so evaluation, tuning, serving and the adapters take it as any gate.

    `strategy_proba(questions)`: (n, len(strategies)) array of what its decision rule needs;
    `route(questions, budget)`: one strategy name per question, meeting `budget` (mean cost
    per question; None: the router's default operating point)."""

    strategies: tuple[str, ...]

    def strategy_proba(self, questions: Questions) -> np.ndarray: ...

    def route(self, questions: Questions, budget: float | None = None) -> list[str]: ...


@runtime_checkable
class CarriesStrategies(Protocol):
    """A router that carries its strategies' specs (issue 36: what each one retrieves, in how
    many steps; an export before it: its names resolved against the built-ins)."""

    def strategy_registry(self) -> StrategyRegistry: ...


def reads_answers(gate: object) -> bool:
    """Whether `gate` also reads the closed-book answer's log-probabilities (a two-stage gate,
    `model.answer_confidence`): scored with them, it pays for that answer."""
    return getattr(getattr(gate, "side_features", None), "confidence", None) is not None


def side_columns(gate: object) -> tuple[str, ...]:
    """The columns of a user's data a gate reads beside the text (`data.features`), which a
    caller passes per question; () for a gate of the text alone."""
    side = getattr(gate, "side_features", None)
    side = getattr(side, "side", side)  # a stacked head's: its user columns, if any
    return () if side is None or getattr(side, "from_text", True) else tuple(side.names)


def is_router(gate: object) -> bool:
    """Whether `gate` also routes between strategies (see `Router`)."""
    return isinstance(gate, Router)


def check_gate(gate: Any, what: str = "gate") -> None:
    """Refuses what is not a loaded `Gate` (`scores` and `threshold`): a folder's path was
    taken by the adapters and by `create_app`, and failed at the first question ("'str'
    object has no attribute 'scores'"). Here, below both (rag must not import integrations)."""
    if not callable(getattr(gate, "scores", None)) or not hasattr(gate, "threshold"):
        load = (f": load it first, RetrievalGate.from_pretrained({str(gate)!r})"
                if isinstance(gate, str | PurePath) else "")  # fmt: skip
        raise ConfigError(f"{what} is {type(gate).__name__}, not a gate{load}")
