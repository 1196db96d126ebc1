"""Retrievers: BM25, dense MiniLM, and the questions' own contexts, over a corpus that is
every document the datasets carry (or the user's `--corpus` file).

`build_retriever("bm25" | "dense" | "contexts", documents)` picks one by name."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from .base import Document, Hit, Retriever
from .bm25 import BM25Retriever
from .contexts import ContextRetriever
from .corpus import documents_of, load_corpus
from .dense import DenseRetriever, MiniLMEncoder

RETRIEVERS = ("bm25", "dense", "contexts")


def build_retriever(name: str, documents: Sequence[Document] | None = None) -> Retriever:
    """A retriever by name; BM25 and dense need `documents` (see `load_corpus`)."""
    if name == "contexts":
        return ContextRetriever()
    if name not in RETRIEVERS:
        raise ConfigError(f"unknown retriever {name!r}; choose one of {', '.join(RETRIEVERS)}")
    docs = documents if documents is not None else load_corpus()
    return BM25Retriever(docs) if name == "bm25" else DenseRetriever(docs)


__all__ = [
    "RETRIEVERS",
    "BM25Retriever",
    "ContextRetriever",
    "DenseRetriever",
    "Document",
    "Hit",
    "MiniLMEncoder",
    "Retriever",
    "build_retriever",
    "documents_of",
    "load_corpus",
]
