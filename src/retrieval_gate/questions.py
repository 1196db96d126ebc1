"""The one record every dataset becomes, and the answer metrics of RetrievalQA and PopQA."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import InputError, clipped

# One rule for "the model declined", used by label files (`idk`) and the confidence gate alike.
# "Unknown" declines as the whole answer or what something "is"/"remains", not inside a real
# answer ("Unknown Pleasures").
_IDK = re.compile(
    r"\b(i don'?t know|i do not know|not sure|no information|cannot answer|"
    r"can'?t answer|unable to (answer|determine|find|provide)|i'?m sorry|no idea|"
    r"(is|are|was|were|remains?) unknown)\b|^\W*unknown\W*$",
    re.IGNORECASE,
)
# Instruct models often write the typographic apostrophe ("I don’t know"), which the rule's
# "'" missed: read as the plain one.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


# A visible character: any but those of Unicode's categories Cc (controls), Cf (format: zero-
# width, direction and tag marks), Zs, Zl, Zp (spaces, separators), and the few others that
# render as nothing: the combining grapheme joiner U+034F, variation selectors (FE00-FE0F,
# E0100-E01EF, Mongolian 180B-180F), Khmer's inherent vowels 17B4-17B5, the Hangul fillers
# (115F, 1160, 3164, FFA0) and the blank braille pattern U+2800. A question of only those
# ("\x00", U+200B, U+2066) has no text for a tokenizer, yet was scored. A combining mark on a
# letter is text: the letter is visible. Ranges listed (Unicode 14) so that the pattern means
# the same to Python's re, pydantic's Rust regex and a client's ECMA regex (the HTTP schema's,
# `u` flag: the astral ranges are the characters themselves, as no escape is read by all three).
VISIBLE = (
    r"[^\x00-\x20\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    r"\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f\u205f-\u2064"
    r"\u2066-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)


def has_text(text: str) -> bool:
    """Whether `text` has a visible character (`VISIBLE`): a question, not a blank."""
    return re.search(VISIBLE, text) is not None


def is_idk(prediction: str) -> bool:
    """The model declined ("I don't know", "I'm sorry", an empty answer)."""
    return not prediction.strip() or bool(_IDK.search(prediction.translate(_APOSTROPHES)))


@dataclass(frozen=True)
class Question:
    """A short-form question with its gold answers and whatever metadata its source has.

    `source` is the dataset name (popqa, retrievalqa, ...); `split` is the project's own
    train/dev/test assignment (see `retrieval_gate.data.splits`), None until assigned.
    Official splits and other source-specific fields live in `extra`.
    """

    id: str
    text: str
    answers: tuple[str, ...]
    source: str
    split: str | None = None
    s_pop: int | None = None
    o_pop: int | None = None
    relation: str | None = None
    entity: str | None = None
    date: str | None = None
    fact_type: str | None = None
    false_premise: bool | None = None
    hops: str | None = None
    contexts: tuple[dict[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.id:
            raise InputError("Question needs a non-empty id")
        if not isinstance(self.text, str) or not has_text(self.text):
            raise InputError(f"Question {self.id!r} has an empty question text")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["answers"] = list(self.answers)
        d["contexts"] = [dict(c) for c in self.contexts]
        return d

    def digest(self, leave_out: Iterable[str] = ("split",)) -> str:
        """A short hash of the question's fields but `leave_out`: a cached result's key beside
        the id, so a question edited under the same id (or another file's row numbered like
        it) is not given the old one's result."""
        skip = set(leave_out)
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        text = json.dumps(kept, sort_keys=True, default=_plain)  # tuples as lists, as to_dict
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def key(self, leave_out: Iterable[str] = ("split",)) -> str:
        """`id:digest`: the question in a cached result's key, by id and content."""
        return f"{self.id}:{self.digest(leave_out)}"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Question:
        d = dict(d)
        d["answers"] = tuple(d.get("answers") or ())
        d["contexts"] = tuple(d.get("contexts") or ())
        return cls(**d)


def _plain(value: Any) -> Any:
    """A JSON value for a cell json cannot write: a numpy array whole (its str elides past
    1,000 items: two columns of answers' log-probabilities hashed alike), else its str."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPACES = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """Lower-case, delete punctuation (ASCII and Unicode) and articles, collapse spaces.

    SQuAD's normalisation, as RetrievalQA and PopQA use it ("U.S." -> "us", "1,000" -> "1000"),
    plus NFKC first so full-width forms compare equal to plain ones; accents are kept."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(
        ch
        for ch in text
        if not (ch in string.punctuation or unicodedata.category(ch).startswith("P"))
    )
    text = _ARTICLES.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def _golds(answers: Iterable[str]) -> list[str]:
    return [g for g in (normalize_answer(a) for a in answers) if g]


def match(prediction: str, answers: Iterable[str]) -> bool:
    """RetrievalQA / PopQA accuracy: some normalised gold answer is a substring of the
    normalised prediction."""
    pred = normalize_answer(prediction)
    return any(g in pred for g in _golds(answers))


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    pred = normalize_answer(prediction)
    return any(g == pred for g in _golds(answers))


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """SQuAD token F1, the best over gold answers (0.0 when there are none)."""
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for gold in _golds(answers):
        gold_tokens = gold.split()
        common = Counter(pred_tokens) & Counter(gold_tokens)
        overlap = sum(common.values())
        if overlap == 0:
            continue
        precision = overlap / len(pred_tokens)
        recall = overlap / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


_FIELDS = {f.name for f in fields(Question)}


def _missing_marker(value: Any) -> bool:
    """pandas' pd.NA (a nullable Int64 / Float64 / string column's missing cell) or pd.NaT,
    or numpy's masked element: unknown, as None and NaN are (`pd.NA == ""` was a raw
    TypeError, "boolean value of NA is ambiguous"). Looked up among the loaded modules, not
    imported: such a value exists only once its library is."""
    pd, ma = sys.modules.get("pandas"), sys.modules.get("numpy.ma")
    markers = (getattr(pd, "NA", None), getattr(pd, "NaT", None), getattr(ma, "masked", None))
    return any(value is m for m in markers if m is not None)


def feature_value(q: Question, name: str) -> float | None:
    """A numeric side signal of a question: its own field (`s_pop`, `o_pop`) or a column of
    your question file kept in `extra`. None when the question has no value for it; a value
    that is not a number is an error naming the question and the column."""
    value = getattr(q, name) if name in _FIELDS else q.extra.get(name)
    if value is None or (isinstance(value, str) and value == "") or _missing_marker(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past the floats
        number = math.inf  # refused below, as an infinite one is (the scaling would be NaN)
    if math.isinf(number):
        raise InputError(
            f"question {q.id!r}: feature column {name!r} (--feature / data.features) holds "
            f"{clipped(repr(value), 40)}, not a finite number; fix the cell or leave it empty "
            "(= unknown)"
        )
    return None if number != number else number  # NaN counts as missing


def bad_id(value: Any, what: str = "question") -> str:
    """What is wrong with an id `id_text` refuses, as JSON shows it, and the fix."""
    shown = json.dumps(value, ensure_ascii=False, default=repr)
    return (f"the id is {shown[:80]}: name each row's {what} by a text or a number (a number "
            "past the float range, such as 1e400, as text in quotes)")  # fmt: skip


def id_text(value: Any) -> str | None:
    """A row's id as the text every file matches on: a string as written, a number as JSON
    writes it (7 -> "7"); None for anything else: a list, an object, true/false, NaN or an
    infinity (1e400, past the float range, parses as one) were read as Python's
    "[1, 2]", "True" or "inf", an id nobody wrote."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's too
        return None
    if isinstance(value, numbers.Integral):  # exact at any size (10**400: no float, no crash)
        return str(value)
    return str(value) if math.isfinite(value) else None


def row_id(value: Any, path: str | Path, line: int, what: str = "question") -> str:
    """`id_text` of a file row's id; an id it refuses raises, naming the file and line."""
    text = id_text(value)
    if text is None:
        raise InputError(bad_id(value, what), path, line)
    return text


def by_id(questions: Sequence[Question]) -> dict[str, Question]:
    return {q.id: q for q in questions}
