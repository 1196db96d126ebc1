"""The Retriever interface and the document record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..questions import Question


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    def as_prompt_text(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Hit:
    document: Document
    score: float


@runtime_checkable
class Retriever(Protocol):
    """Top-k documents for each question, best first, in one batched call."""

    name: str

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Hit]]: ...
