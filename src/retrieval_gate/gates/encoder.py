"""The scoring path `OnnxGate` and `LearnedGate` share: strings or `Question`s in, the side
features (for a gate trained with them) beside the text, each text cut to what its first
max_length tokens can span before tokenising, token ids batched in length order so
each batch pads only to similar lengths (right padding, as training), scores back in input
order. A backend implements two things: `encode` (token ids per text, truncated) and
`run_batch` (P(needs retrieval) of one padded batch)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import work
from ..data.gate_features import GateFeatures
from ..errors import InputError
from ..questions import has_text
from ..strict_rows import lone_surrogate_at
from .base import Questions, as_questions


def check_text(text: str, i: int = 0) -> None:
    """One text scorable (question `i` of its batch): non-empty, and valid Unicode (JSON may
    carry an escaped lone surrogate, which no tokenizer can encode). The adapters check each
    input with it (LangChain's return_exceptions: one bad input is that input's error)."""
    if not isinstance(text, str) or not has_text(text):
        raise InputError(f"question {i} is empty (or only whitespace or control "
                         "characters): cannot score an empty question text")  # fmt: skip
    if (at := lone_surrogate_at(text)) is not None:
        raise InputError(f"question {i} is not valid Unicode (a lone surrogate at "
                         f"character {at}); send UTF-8 text")  # fmt: skip


def check_texts(texts: Sequence[str]) -> None:
    """Every text scorable (`check_text`)."""
    for i, text in enumerate(texts):
        check_text(text, i)


def pad_right(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) int64, padded on the right to the batch's longest row."""
    width = max(len(row) for row in ids)
    input_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return input_ids, mask


# Padded tokens a CPU batch holds at most (rows x its longest row): on 60 RetrievalQA questions
# (13-35 tokens) batches of 64 rows took 3.6 ms a question, batches capped at 512 tokens 2.3.
MAX_BATCH_TOKENS = 512


# A text is cut to max_length * CHARS_PER_TOKEN characters before it is tokenised: the whole
# of it was tokenised before truncation, so one 10 MB line took 17 s and 2 GB (tens of MB, the
# process killed). Tokens of normal text run 3-6 characters; 32 a token leaves room for long
# words, numbers and runs of spaces, so the first max_length tokens, all a gate reads, are
# the same, and a text within the bound (every question) is not touched. A longer text has its
# runs of whitespace squeezed to one character first: whitespace is no WordPiece token, and 800
# spaces before a question left only spaces within the bound, scored as an empty question.
CHARS_PER_TOKEN = 32
_WHITESPACE_RUN = re.compile(r"(\s)\s+")


class EncoderGate(ABC):
    """A `Gate` over a text encoder; subclasses set `name`, `threshold`, `batch_size`,
    `pad_id` and `side_features` (None: text only)."""

    name: str
    threshold: float
    batch_size: int
    pad_id: int
    max_length: int  # tokens the encoder reads of a text
    side_features: GateFeatures | None  # a user's columns, or a stacked router's text features
    device: Any  # where it runs: a torch device, or the ONNX Runtime execution provider

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, truncated to the gate's max length, not padded."""

    @abstractmethod
    def run_batch(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None
    ) -> np.ndarray:
        """P(needs retrieval) of one right-padded batch (float32, one per row)."""

    def clip(self, texts: Sequence[str]) -> list[str]:
        """Each text cut to what its first `max_length` tokens span at most (`CHARS_PER_TOKEN`),
        for `encode`: the texts within that bound as they are, a longer one's runs of
        whitespace squeezed before the cut."""
        max_length = getattr(self, "max_length", None)  # a subclass of its own may lack one
        if max_length is None:
            return list(texts)
        bound = max_length * CHARS_PER_TOKEN
        return [text if len(text) <= bound else _WHITESPACE_RUN.sub(r"\1", text)[:bound]
                for text in texts]  # fmt: skip

    def scores(self, questions: Questions) -> np.ndarray:
        return self.score_texts(*self.features_of(questions))

    def score_texts(self, texts: Sequence[str], features: np.ndarray | None = None) -> np.ndarray:
        """P(needs retrieval) per text, in input order. `features`: one row of scaled side
        features per text (`side_features.matrix`), for gates that have them."""
        return self.batched(self.run_batch, texts, features, ())

    def features_of(self, questions: Questions) -> tuple[list[str], np.ndarray | None]:
        """Texts and (for a gate trained with them) scaled side features of questions."""
        side = self.side_features
        if side is None or side.from_text:  # the text is all it reads: no Question needed
            texts = [questions] if isinstance(questions, str) else list(questions)
            if all(isinstance(t, str) for t in texts):
                return texts, side.matrix(texts) if side else None
        qs = as_questions(questions)
        return [q.text for q in qs], side.matrix(qs) if side else None

    @property
    def max_batch_tokens(self) -> int | None:
        """MAX_BATCH_TOKENS on a CPU; None on a GPU, which pays for rows, not padding."""
        return None if "cuda" in str(self.device).lower() else MAX_BATCH_TOKENS

    def batches(self, lengths: Sequence[int]) -> list[np.ndarray]:
        """Row indices of each batch: in length order, at most `batch_size` rows and (past one
        row) at most `max_batch_tokens` padded tokens, so a few long questions do not pad a
        whole batch of short ones (on a CPU the padding is paid in full)."""
        order = np.argsort(lengths, kind="stable")
        out, start = [], 0
        for end in range(1, len(order) + 1):
            longest = lengths[order[end - 1]]
            cap = self.max_batch_tokens
            full = end - start > self.batch_size or (
                cap is not None and (end - start) * longest > cap
            )
            if full and end - 1 > start:
                out.append(order[start : end - 1])
                start = end - 1
        out.append(order[start:])
        return out

    def batched(
        self,
        run: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray],
        texts: Sequence[str],
        features: np.ndarray | None,
        row_shape: tuple[int, ...],
    ) -> np.ndarray:
        """`run` over length-ordered batches, its rows (of `row_shape`) back in input order."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, *row_shape), dtype=np.float32)
        check_texts(texts)
        side = self.side_features
        if features is None and side is not None and side.from_text:  # a stacked router's
            features = side.matrix(texts)
        if side is not None and features is None:
            raise InputError(
                f"gate {self.name} needs the side features {', '.join(side.names)}:"
                " score Questions (with them in Question.extra), not bare texts"
            )
        ids = self.encode(self.clip(texts))  # the side features saw them whole
        work.add(questions_scored=len(ids))
        out = np.empty((len(ids), *row_shape), dtype=np.float32)
        for idx in self.batches([len(row) for row in ids]):
            input_ids, mask = pad_right([ids[i] for i in idx], self.pad_id)
            feats = None if features is None else np.asarray(features[idx], dtype=np.float32)
            out[idx] = run(input_ids, mask, feats)
        return out
