"""Generator-free policies: labels read off the datasets themselves.

- `retrievalqa`: needs retrieval = 1 - param_knowledge_answerable. The 250-row file here has
  no such field because every row needs retrieval (its README says so), so those rows get 1;
  the full 2,785-row file's field is used wherever a user has it.
- `popularity`: PopQA long-tail membership, s_pop < 100 (RetrievalQA's criterion)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..questions import Question

LONG_TAIL_S_POP = 100


def retrievalqa_rows(questions: Sequence[Question]) -> list[dict[str, Any]]:
    rows = []
    for q in questions:
        if q.source != "retrievalqa":
            continue
        pka = q.extra.get("param_knowledge_answerable")
        label = 1 if pka is None else 1 - int(pka)
        rows.append({"id": q.id, "label": label, "param_knowledge_answerable": pka})
    return rows


def popularity_rows(
    questions: Sequence[Question], threshold: int = LONG_TAIL_S_POP
) -> list[dict[str, Any]]:
    return [
        {"id": q.id, "label": int(q.s_pop < threshold), "s_pop": q.s_pop}
        for q in questions
        if q.source == "popqa" and q.s_pop is not None
    ]
