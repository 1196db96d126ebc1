"""The document collection retrievers search.

Default corpus: every document the datasets carry (RetrievalQA's `context` lists and the PopQA
paragraphs), deduplicated by content. A document's id is a hash of its title and text, so it
stays the same whichever question or file brought it in. Users point `--corpus` at their own
rows of `{"id"?, "title"?, "text"}` (a BEIR `_id`, a Pyserini `contents` read the same) in any
row file the question readers take: JSONL, a `.json` array, CSV, TSV, Parquet."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..data.user_questions import read_rows
from ..errors import DataError
from ..questions import Question, row_id
from .base import Document

log = logging.getLogger(__name__)


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
        return read_corpus(Path(path))
    if questions is None:
        from ..data import load_all

        questions = load_all()
    docs = documents_of(questions)
    if not docs:
        raise DataError(
            "the questions carry no documents; pass --corpus FILE (rows of {id, title, text})"
        )
    return docs


# Document field -> the columns it is read from, in order: this project's, BEIR's, Pyserini's.
CORPUS_COLUMNS = {"id": ("id", "_id", "docid"), "text": ("text", "contents")}


def read_corpus(path: Path) -> list[Document]:
    """The documents of a corpus file; a bad row raises, naming the file and row."""
    if not path.is_file():
        raise DataError(
            "corpus file not found; pass --corpus with a file of {id, title, text} rows", path
        )
    if path.suffix.lower() == ".txt":
        raise DataError("a corpus is rows with a 'text' field (optional 'id', 'title'): pass a "
                        ".jsonl, .json, .csv, .tsv or .parquet file", path)  # fmt: skip
    docs: dict[str, Document] = {}
    repeated = 0
    for lineno, row in read_rows(str(path)):
        text = _first(row, CORPUS_COLUMNS["text"])
        if not isinstance(text, str) or not text.strip():
            raise DataError("corpus row needs a non-empty 'text' (or 'contents') field", path,
                            lineno)  # fmt: skip
        title = str(row.get("title") or "")
        given = _first(row, CORPUS_COLUMNS["id"])
        unnamed = given is None or (isinstance(given, str) and not given)
        # a list or true/false was read as "[1]" or "True": refused
        doc_id = document_id(title, text) if unnamed else row_id(given, path, lineno, "document")
        doc = Document(id=doc_id, title=title, text=text)
        if docs.setdefault(doc_id, doc) != doc:
            raise DataError(f"document id {doc_id!r} names two different documents; give each "
                            "its own id", path, lineno)  # fmt: skip
        repeated += docs[doc_id] is not doc
    if not docs:
        raise DataError("corpus file has no documents", path)
    if repeated:  # a passage split twice, a file concatenated: the same document, kept once
        log.info(f"{path}: {repeated} repeated document row(s) kept once")
    return list(docs.values())


def _first(row: dict, columns: tuple[str, ...]) -> object:
    return next((row[c] for c in columns if row.get(c) is not None), None)
