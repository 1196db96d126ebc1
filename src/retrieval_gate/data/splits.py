"""Deterministic, stratified, leakage-free train/dev/test splits."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..errors import ConfigError
from ..questions import Question, normalize_answer

SPLITS = ("train", "dev", "test")


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def sample_order(ids: Sequence[str], seed: int = 0) -> list[int]:
    """Positions of `ids` in a seeded order that depends on each id alone: a smaller sample
    (its first n) is part of every larger one with the same seed, whatever else is in the
    pool. `evaluate --limit N` and `rag --limit N --seed 0` both draw this way, so the RAG
    loop's questions are among evaluate's and their generations are served from the cache.
    Seed 0 keys an id by its own sha256 (the order `evaluate` has always used)."""
    keys = [hashlib.sha256(i.encode()).hexdigest() if seed == 0 else _rank(seed, i) for i in ids]
    return sorted(range(len(ids)), key=lambda k: keys[k])


def assign_splits(
    questions: Sequence[Question],
    labels: Mapping[str, int] | None = None,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    seed: int = 0,
) -> dict[str, str]:
    """question id -> "train" | "dev" | "test".

    Questions with the same normalised text form one group and land in one split, so no
    text leaks across splits. Groups are stratified by (source, label) and ordered by a
    seeded hash, so the result depends only on the ids, texts, labels and the seed, not on
    input order or Python's hash seed."""
    if abs(sum(fractions) - 1.0) > 1e-6 or min(fractions) < 0:
        raise ConfigError(f"split fractions must be >= 0 and sum to 1, got {fractions}")
    groups: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        groups[normalize_answer(q.text)].append(q)
    strata: dict[tuple[str, int | None], list[str]] = defaultdict(list)
    for key, members in groups.items():
        first = min(members, key=lambda q: q.id)
        label = labels.get(first.id) if labels is not None else None
        strata[(first.source, label)].append(key)
    return _cut([strata[k] for k in sorted(strata, key=str)], groups, seed, fractions)


def _cut(
    strata: list[list[str]],
    groups: Mapping[str, list[Question]],
    seed: int,
    fractions: tuple[float, float, float],
) -> dict[str, str]:
    """Each stratum's group keys in seeded-hash order, cut at the fractions."""
    out: dict[str, str] = {}
    for keys in strata:
        keys = sorted(keys, key=lambda k: _rank(seed, k))
        n = len(keys)
        cut_train = round(n * fractions[0])
        cut_dev = cut_train + round(n * fractions[1])
        for i, key in enumerate(keys):
            split = "train" if i < cut_train else "dev" if i < cut_dev else "test"
            for q in groups[key]:
                out[q.id] = split
    return out


def with_splits(questions: Sequence[Question], splits: Mapping[str, str]) -> list[Question]:
    """Questions carrying their split (those without one are dropped)."""
    return [replace(q, split=splits[q.id]) for q in questions if q.id in splits]


def canonical_questions() -> tuple[Question, ...]:
    """Every question with its canonical split (`assign_splits(load_all(), seed=0)`), the one
    train/dev/test assignment every table uses. Kept per process under the data folder's state
    (~1 s to compute): another folder (`RETRIEVAL_GATE_DATA`) or a changed file computes it
    afresh, so a long-lived process (a notebook, a test worker) never splits stale questions."""
    from .catalog import data_state, load_all

    state = data_state()
    if state not in _CANONICAL:
        questions = load_all()
        _CANONICAL.clear()
        _CANONICAL[state] = tuple(with_splits(questions, assign_splits(questions, seed=0)))
    return _CANONICAL[state]


_CANONICAL: dict[tuple, tuple[Question, ...]] = {}


def group_splits(
    questions: Sequence[Question],
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
) -> dict[str, str]:
    """question id -> split for questions that bring none (a user's own file).

    Like `assign_splits`, but the group that must not straddle splits is the question's
    entity when it has one (every question about one entity lands in one split) and its
    normalised text otherwise, and the strata are (source, relation), so each relation is
    spread over train/dev/test. Depends only on ids, texts, entities, relations and the seed."""
    groups: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        groups[group_key(q)].append(q)
    strata: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, members in groups.items():
        first = min(members, key=lambda q: q.id)
        strata[(first.source, first.relation or "")].append(key)
    return _cut([strata[k] for k in sorted(strata)], groups, seed, fractions)


def group_key(q: Question) -> str:
    """The group a question of a user's file shares its split with: its entity when it has
    one, else its normalised text (else its id, for a text of punctuation alone)."""
    key = f"entity:{normalize_answer(q.entity)}" if q.entity else normalize_answer(q.text)
    return key or q.id
