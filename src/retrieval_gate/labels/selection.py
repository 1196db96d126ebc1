"""Which questions the labelling run covers: every question of the small datasets and a fixed,
relation-stratified sample of EntityQuestions (labelling all 22k on 2 CPU cores is not worth
the hours; 6,000 across the 24 relations keeps every relation represented)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from ..data import load_dataset
from ..questions import Question

FULL_SOURCES = ("popqa", "triviaqa", "freshqa", "toolqa", "retrievalqa")
EQ_SAMPLE = 6000
EQ = "entityquestions"  # the one dataset sampled (EQ_SAMPLE questions by relation)


def sample_by_relation(questions: Sequence[Question], n: int, seed: int = 0) -> list[Question]:
    """`n` questions spread evenly over relations (a relation smaller than its share gives
    all it has and the rest is spread over the others), in a fixed seeded order."""
    groups: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        groups[q.relation or ""].append(q)
    rng = random.Random(seed)
    pools = {r: rng.sample(g, len(g)) for r, g in sorted(groups.items())}
    take = dict.fromkeys(pools, 0)
    left = min(n, len(questions))
    while left:
        open_ = [r for r in pools if take[r] < len(pools[r])]
        share = max(1, left // len(open_))
        for r in open_:
            k = min(share, len(pools[r]) - take[r], left)
            take[r] += k
            left -= k
            if not left:
                break
    return [q for r in pools for q in pools[r][: take[r]]]


def labelling_questions(
    datasets: Sequence[str] | None = None, eq_sample: int = EQ_SAMPLE, seed: int = 0
) -> list[Question]:
    """The questions of `datasets` (default: the full label set), EntityQuestions sampled."""
    out: list[Question] = []
    for name in datasets or (*FULL_SOURCES, EQ):
        qs = load_dataset(name)
        if name == EQ and eq_sample and eq_sample < len(qs):
            qs = sample_by_relation(qs, eq_sample, seed)
        out.extend(qs)
    return out
