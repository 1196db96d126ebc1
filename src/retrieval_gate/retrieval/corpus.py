"""The document collection retrievers search.

Default corpus: every document the datasets carry (RetrievalQA's `context` lists and the PopQA
paragraphs), deduplicated by content. A document's id is a hash of its title and text, so it
stays the same whichever question or file brought it in. Users point `--corpus` at their own
JSONL: one `{"id", "title"?, "text"}` object a line."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..data.bad_rows import BadRows
from ..data.jsonl_files import read_jsonl
from ..errors import DataError
from ..questions import Question
from .base import Document


def document_id(title: str, text: str) -> str:
    return "doc-" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]


def context_document(context: dict[str, str]) -> Document:
    title, text = context.get("title", ""), context.get("text", "")
    return Document(id=document_id(title, text), title=title, text=text)


def documents_of(questions: Iterable[Question]) -> list[Document]:
    """The questions' own contexts as documents, deduplicated, first-seen order."""
    docs: dict[str, Document] = {}
    for q in questions:
        for c in q.contexts:
            if c.get("text", "").strip():
                d = context_document(c)
                docs.setdefault(d.id, d)
    return list(docs.values())


def load_corpus(path: str | Path | None = None, questions: Sequence[Question] | None = None):
    """Documents from a JSONL file, or (no path) from the datasets' contexts (`questions`, or
    every dataset when None)."""
    if path is not None:
        return read_corpus_jsonl(Path(path))
    if questions is None:
        from ..data import load_all

        questions = load_all()
    docs = documents_of(questions)
    if not docs:
        raise DataError("the questions carry no documents; pass --corpus FILE.jsonl")
    return docs


def read_corpus_jsonl(path: Path) -> list[Document]:
    if not path.is_file():
        raise DataError("corpus file not found; pass --corpus with a JSONL file", path)
    docs: dict[str, Document] = {}
    for lineno, row in read_jsonl(path, BadRows()):  # a bad line raises, naming it
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise DataError("corpus row needs a non-empty 'text' field", path, lineno)
        title = str(row.get("title") or "")
        doc_id = str(row.get("id") or document_id(title, text))
        if doc_id in docs:
            raise DataError(f"duplicate document id {doc_id!r} in corpus", path, lineno)
        docs[doc_id] = Document(id=doc_id, title=title, text=text)
    if not docs:
        raise DataError("corpus file has no documents", path)
    return list(docs.values())
