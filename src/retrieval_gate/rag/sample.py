"""The questions a RAG comparison runs on: datasets, a canonical split, an optional filter to
questions that carry their own documents, and a seeded sample."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from ..data import canonical_questions
from ..data.splits import sample_order
from ..errors import DataError
from ..questions import Question

SPLITS = ("train", "dev", "test", "all")


def select_questions(
    datasets: Sequence[str] | None = None,
    split: str = "test",
    limit: int | None = None,
    seed: int = 0,
    with_contexts: bool = False,
    among: Collection[str] | None = None,
    pool: Sequence[Question] | None = None,
) -> list[Question]:
    """Questions of `datasets` (all when None) in the canonical split (`all`: every split),
    keeping only those with their own documents when `with_contexts` and those whose id is
    in `among` when given (e.g. the ids an oracle has labels for), then a seeded sample of
    `limit` (`data.splits.sample_order`: at seed 0 the questions `evaluate --limit` draws
    first) in a stable order (sorted by id). `pool`: the question set to draw
    from (default: the bundled datasets on the canonical split)."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} (--split); choose one of {', '.join(SPLITS)}")
    every = pool if pool is not None else canonical_questions()
    qs = [
        q
        for q in every
        if (not datasets or q.source in datasets)
        and (split == "all" or q.split == split)
        and (q.contexts or not with_contexts)
        and (among is None or q.id in among)
    ]
    if not qs:
        raise DataError(_none_left(every, datasets, split, with_contexts, among, pool is not None))
    if limit is not None and limit < len(qs):
        qs = [qs[i] for i in sample_order([q.id for q in qs], seed)[:limit]]
    return sorted(qs, key=lambda q: q.id)


def _none_left(
    every: Sequence[Question],
    datasets: Sequence[str] | None,
    split: str,
    with_contexts: bool,
    among: Collection[str] | None,
    own: bool,
) -> str:
    """Why no question is left, with what the questions do hold (sources, splits), so the
    flag to change is plain."""
    asked = (f"--dataset {' '.join(datasets)} " if datasets else "") + f"--split {split}"
    asked += " --with-contexts" if with_contexts else ""
    asked += " among the oracle's labelled questions" if among is not None else ""
    where = "your --questions" if own else "the bundled datasets"
    sources = Counter(q.source for q in every)
    splits = Counter(q.split for q in every)
    with_docs = sum(bool(q.contexts) for q in every)
    return (
        f"no questions for {asked} in {where}; they hold {len(every)} questions, sources: "
        + ", ".join(f"{s} {n}" for s, n in sorted(sources.items()))
        + "; splits: "
        + ", ".join(f"{s} {n}" for s, n in sorted(splits.items()))
        + f"; {with_docs} with their own documents"
    )
