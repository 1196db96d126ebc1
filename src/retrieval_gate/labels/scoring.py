"""How a generated answer is judged against the gold answers, and the criteria a policy may
use to call it correct.

Loose match (a gold answer inside the prediction) is RetrievalQA's and PopQA's metric, but a
135M model guessing a relation's commonest answer ("football", "Christianity", "red") gets it
right by chance: Mallen et al. warn about exactly this. So each answer also records whether it
names one of its relation's frequent gold answers (`guess`), and the default criterion counts
a loose match only when it is not such a guess."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from ..questions import Question, exact_match, is_idk, match, normalize_answer, token_f1

CRITERIA = ("loose-no-guess", "loose", "em", "f1")
DEFAULT_CRITERION = "loose-no-guess"
F1_THRESHOLD = 0.5
# A gold answer is a relation's "frequent" answer when at least this share of the relation's
# questions (and at least FREQUENT_MIN of them) have it.
FREQUENT_SHARE = 0.05
FREQUENT_MIN = 3


def frequent_answers(questions: Sequence[Question]) -> dict[tuple[str, str], set[str]]:
    """(source, relation) -> its frequent normalised gold answers (questions without a relation
    have none)."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    sizes: Counter[tuple[str, str]] = Counter()
    for q in questions:
        if q.relation is None:
            continue
        key = (q.source, q.relation)
        sizes[key] += 1
        counts[key].update({normalize_answer(a) for a in q.answers} - {""})
    return {
        key: {a for a, n in c.items() if n >= FREQUENT_MIN and n / sizes[key] >= FREQUENT_SHARE}
        for key, c in counts.items()
    }


def judge(prediction: str, q: Question, frequent: dict[tuple[str, str], set[str]]) -> dict:
    """Every per-answer measure label files keep: match, em, f1, idk, guess."""
    common = frequent.get((q.source, q.relation or ""), set())
    guess = bool(common) and match(prediction, common)
    return {
        "match": match(prediction, q.answers),
        "em": exact_match(prediction, q.answers),
        "f1": round(token_f1(prediction, q.answers), 3),
        "idk": is_idk(prediction),
        "guess": guess,
    }


def correct(row: dict[str, Any], criterion: str = DEFAULT_CRITERION) -> bool:
    """Whether a judged answer counts as correct under `criterion`."""
    if criterion == "loose-no-guess":
        return bool(row["match"]) and not row["guess"]
    if criterion == "loose":
        return bool(row["match"])
    if criterion == "em":
        return bool(row["em"])
    if criterion == "f1":
        return float(row["f1"]) >= F1_THRESHOLD
    raise ConfigError(f"unknown criterion {criterion!r}; choose one of {', '.join(CRITERIA)}")


MEASURES = ("match", "em", "f1", "guess")


def measures(row: dict[str, Any]) -> dict[str, Any]:
    """The fields `correct` needs, copied into rag-gain and rrcp rows as `closed` so those rows
    can be relabelled on their own."""
    return {k: row[k] for k in MEASURES}
