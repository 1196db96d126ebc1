"""BM25 over a corpus with bm25s (sparse, fast on CPU, one batched query call)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InputError, clipped
from ..questions import Question
from .base import Document, Hit


class BM25Retriever:
    """Lexical top-k: English stop words removed, Lucene BM25 scoring (bm25s defaults)."""

    name = "bm25"

    def __init__(self, documents: Sequence[Document]):
        import bm25s

        if not documents:
            raise InputError("BM25Retriever needs at least one document (--corpus)")
        self.documents = list(documents)
        self._bm25s = bm25s
        self.index = bm25s.BM25()
        tokens = bm25s.tokenize(
            [d.as_prompt_text() for d in self.documents], stopwords="en", show_progress=False
        )
        if not tokens.vocab:  # bm25s failed on it: "max() arg is an empty sequence"
            raise InputError(_no_words(self.documents))
        self.index.index(tokens, show_progress=False)

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Hit]]:
        if not questions:
            return []
        k = min(k, len(self.documents))
        tokens = self._bm25s.tokenize(
            [q.text for q in questions], stopwords="en", show_progress=False
        )
        idx, scores = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [_hits(self.documents, i, s) for i, s in zip(idx, scores, strict=True)]


def _no_words(documents: list[Document]) -> str:
    first = documents[0]
    return (f"no document of the corpus (--corpus) has an indexable word: BM25 skips English "
            f"stop words and one-character words, and that is all its {len(documents)} "
            f"document(s) hold (the first: id {first.id!r}, "
            f"{clipped(repr(first.as_prompt_text()), 60)}); give documents with words to "
            "search, or --retriever dense")  # fmt: skip


def _hits(documents: list[Document], idx: np.ndarray, scores: np.ndarray) -> list[Hit]:
    # bm25s pads with score-0 rows when fewer documents share a term; drop those
    return [Hit(documents[int(i)], float(s)) for i, s in zip(idx, scores, strict=True) if s > 0]
