"""The given-contexts retriever: a question's own documents (RetrievalQA's top-5 contexts,
PopQA's paragraphs), in the order the dataset lists them."""

from __future__ import annotations

from collections.abc import Sequence

from ..questions import Question
from .base import Hit
from .corpus import context_document


class ContextRetriever:
    """Top-k of the question's own contexts; score 1/rank keeps the dataset's order."""

    name = "contexts"

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Hit]]:
        out = []
        for q in questions:
            docs = [context_document(c) for c in q.contexts if c.get("text", "").strip()]
            out.append([Hit(d, 1.0 / (r + 1)) for r, d in enumerate(docs[:k])])
        return out
