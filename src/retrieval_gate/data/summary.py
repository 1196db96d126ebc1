"""`retrieval-gate data summary`: one row per dataset and source."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..questions import Question
from ..tables import markdown_table


def _subsources(q: Question) -> list[str]:
    """The parts of a dataset a question belongs to (a PopQA question may be in several files)."""
    for key in ("data_source", "domain"):
        if key in q.extra:
            return [str(q.extra[key])]
    if q.source == "popqa":
        return [f"file: {s}" for s in q.extra.get("popqa_subsets", [])]
    if q.source == "freshqa":
        return [str(q.fact_type)]
    return []


def summary_rows(questions: Sequence[Question]) -> list[dict[str, object]]:
    """Rows for the dataset totals and for each source inside a dataset."""
    rows = []
    by_dataset: dict[str, list[Question]] = {}
    for q in questions:
        by_dataset.setdefault(q.source, []).append(q)
    for dataset in sorted(by_dataset):
        qs = by_dataset[dataset]
        rows.append(_row(dataset, "ALL (merged)" if dataset == "popqa" else "ALL", qs))
        by_sub: dict[str, list[Question]] = {}
        for q in qs:
            for sub in _subsources(q):
                by_sub.setdefault(sub, []).append(q)
        if len(by_sub) > 1:
            rows += [_row(dataset, sub, by_sub[sub]) for sub in sorted(by_sub)]
    return rows


def _row(dataset: str, source: str, qs: Sequence[Question]) -> dict[str, object]:
    pops = [q.s_pop for q in qs if q.s_pop is not None]
    quartiles = "-"
    if pops:
        quartiles = "/".join(f"{v:.0f}" for v in np.percentile(pops, [25, 50, 75]))
    facts = Counter(q.fact_type for q in qs if q.fact_type)
    return {
        "dataset": dataset,
        "source": source,
        "rows": len(qs),
        "answers/q": f"{np.mean([len(q.answers) for q in qs]):.1f}",
        "s_pop q1/q2/q3": quartiles,
        "fact types": ", ".join(f"{k}:{v}" for k, v in sorted(facts.items())) or "-",
        "with docs": sum(1 for q in qs if q.contexts),
    }


def format_table(rows: Sequence[dict[str, object]]) -> str:
    """A GitHub-markdown table (readable in a terminal too)."""
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    return markdown_table(cols, [[r[c] for c in cols] for r in rows], pad=True)
