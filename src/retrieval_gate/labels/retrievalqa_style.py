"""`retrievalqa-style` policy: RetrievalQA's model-agnostic recipe rebuilt with what we have.

- label 1 (needs retrieval): new-world or private knowledge (FreshQA fast-changing questions,
  every ToolQA question, every RetrievalQA row), and long-tail questions (PopQA s_pop < 100)
  that the reference generator fails closed-book;
- label 0: questions the reference generator answers right closed-book (and that are not
  new-world or private);
- everything else is dropped (label null, with its reason) and counted in the provenance.

RetrievalQA used GPT-4 (fails -> long tail) and GPT-2 (answers -> no retrieval) as references;
here the reference is the generator of the closed-book label file.

Rows: id, label, reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..questions import Question
from .label_files import LabelFile
from .policy_loop import provenance
from .scoring import DEFAULT_CRITERION, correct
from .simple import LONG_TAIL_S_POP


def new_world_or_private(q: Question) -> str | None:
    if q.source == "toolqa":
        return "private"
    if q.source == "retrievalqa":
        return "retrievalqa"
    if q.source == "freshqa" and q.fact_type == "fast-changing":
        return "new-world"
    return None


def style_row(q: Question, closed: dict[str, Any] | None, criterion: str) -> dict[str, Any]:
    reason = new_world_or_private(q)
    if reason:
        return {"id": q.id, "label": 1, "reason": reason}
    if closed is None:
        return {"id": q.id, "label": None, "reason": "no-closed-book-answer"}
    if correct(closed, criterion):
        return {"id": q.id, "label": 0, "reason": "answered-closed-book"}
    if q.s_pop is not None and q.s_pop < LONG_TAIL_S_POP:
        return {"id": q.id, "label": 1, "reason": "long-tail-failed"}
    return {"id": q.id, "label": None, "reason": "failed-not-long-tail"}


def label_retrievalqa_style(
    questions: Sequence[Question],
    out: LabelFile,
    closed: LabelFile,
    criterion: str = DEFAULT_CRITERION,
) -> dict[str, Any]:
    """Rebuilt from the closed-book file each time (no generation: cheap, always current)."""
    rows = [style_row(q, closed.rows.get(q.id), criterion) for q in questions]
    counts = Counter(r["reason"] for r in rows)
    meta = provenance(
        "retrievalqa-style",
        closed_book_file=closed.path.name,
        reference=closed.meta.get("generator") if closed.rows else None,
        generator_checksum=closed.meta.get("generator_checksum") if closed.rows else None,
        criterion=criterion,
        long_tail_s_pop=LONG_TAIL_S_POP,
        reasons=dict(sorted(counts.items())),
        dropped=sum(r["label"] is None for r in rows),
        rows=len(rows),
    )
    out.write_meta(meta)  # provenance first, then the rows (temp file + rename)
    out.rewrite(rows)
    return {"rows": len(rows), "dropped": meta["dropped"]}
