"""Text features: what a stacked router (`model.head: stacked`, training/stacked.py) reads from
the question beside its encoder embedding. Two kinds:

- Token n-gram TF-IDF: unigrams and bigrams of the encoder's own token ids, TF-IDF weighted as
  scikit-learn's `TfidfVectorizer(sublinear_tf=True)` does, times fitted linear weights (one
  column per output of the logistic models that read them: each strategy's correctness, each
  source's odds). Computed inside the model from `input_ids` (`training.stacked.TokenTfidf`),
  so the ONNX graph needs nothing beside the tokens: no vocabulary lookups in Python, which one
  question at a time cost a router as much as a tenth of its encoder's time. This file only
  records their layout (`TokenLayout`).
- Shape: eleven cheap facts about the wording (length, capitalised words, a trailing '?',
  quotes, commas, digits, " or ", a leading auxiliary verb): how the question sets differ in
  style, case included, which the uncased tokens lose. Computed from the text in numpy: the
  graph's `features` input.

`TextFeatures` has the shape of `SideFeatures` (`names`, `width`, `matrix`, `to_dict`), so the
data module, the exporter and both gate backends carry it the same way. A stacked gate may also
read a user's side features (`data.features`) and its answer's confidence
(`model.answer_confidence`): their columns follow the shape's in the same `features` input."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from ..questions import Question
from .answer_confidence import AnswerConfidence
from .features import SideFeatures

SHAPE_NAMES = (
    "words/30", "capitalised_share", "ends_with_?", "starts_lowercase", "has_quote", "has_comma",
    "has_digit", "commas/3", "has_or", "starts_with_auxiliary", "chars/150",
)  # fmt: skip
# The counts (words/30, commas/3, chars/150) are capped: the bundled questions reach 3.7, 4.3
# and 4.0; past that a linear head extrapolates (a pasted 3,000-word question scored 0.002,
# "no retrieval"), so a longer question reads as one of 150 words, 15 commas, 750 characters.
SHAPE_CAP = 5.0
_COUNTS = [SHAPE_NAMES.index(n) for n in ("words/30", "commas/3", "chars/150")]
_AUXILIARY = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have)\b")
_OR = re.compile(r"\bor\b")


def shape_features(texts: Sequence[str]) -> np.ndarray:
    """(n, 11) float32, columns as SHAPE_NAMES, the counts capped at SHAPE_CAP."""
    rows = []
    for t in texts:
        words = t.split()
        caps = sum(1 for w in words[1:] if w[:1].isupper())
        rows.append([
            len(words) / 30, caps / max(1, len(words)), t.strip().endswith("?"), t[:1].islower(),
            '"' in t, "," in t, any(c.isdigit() for c in t), t.count(",") / 3,
            bool(_OR.search(t)), bool(_AUXILIARY.match(t.lower())), len(t) / 150,
        ])  # fmt: skip
    out = np.asarray(rows, np.float32).reshape(len(texts), len(SHAPE_NAMES))
    out[:, _COUNTS] = np.minimum(out[:, _COUNTS], SHAPE_CAP)
    return out


@dataclass(frozen=True)
class TokenLayout:
    """The sizes of a stacked head's token n-gram tables: the tokenizer's vocabulary (one
    unigram row per token id) and the bigram table's slots (a hash table, see TokenTfidf)."""

    vocabulary: int
    bigram_slots: int


@dataclass(frozen=True)
class TextFeatures:
    """A stacked head's features: the outputs its token TF-IDF projects onto (one name a column:
    `correct:<strategy>`, `class:<class>`, `source:<dataset>`), the token tables' layout; the
    columns computed outside the model: the shape, then a user's side features (`side`), then
    the answer's confidence (`confidence`, a two-stage gate)."""

    outputs: tuple[str, ...]
    tokens: TokenLayout
    side: SideFeatures | None = None
    confidence: AnswerConfidence | None = None

    @property
    def from_text(self) -> bool:
        """Whether the text alone gives every input (an answer's confidence may be missing: the
        question-only score)."""
        return self.side is None

    @property
    def names(self) -> tuple[str, ...]:
        side = () if self.side is None else self.side.names
        conf = () if self.confidence is None else self.confidence.names
        return (*SHAPE_NAMES, *side, *conf)

    @property
    def text_width(self) -> int:
        """The columns the question-only head reads: the shape and the side features."""
        return len(SHAPE_NAMES) + (0 if self.side is None else self.side.width)

    @property
    def width(self) -> int:
        return self.text_width + (0 if self.confidence is None else self.confidence.width)

    def matrix(
        self, questions: Sequence[Question] | Sequence[str], strict: bool = True
    ) -> np.ndarray:
        """(n, width) float32. Bare strings carry no side features (an error when the head
        reads some) and no answer (the question-only score)."""
        texts = [q.text if isinstance(q, Question) else q for q in questions]
        parts = [shape_features(texts)]
        qs = [q for q in questions if isinstance(q, Question)]
        if len(qs) < len(texts) and self.side is not None:
            raise DataError(f"this gate also reads the side features {', '.join(self.side.names)}"
                            ": pass Questions carrying them, not bare texts")  # fmt: skip
        if self.side is not None:
            parts.append(self.side.matrix(qs, strict))
        if self.confidence is not None:
            items = [q if isinstance(q, Question) else Question("text", q, (), "api")
                     for q in questions]  # fmt: skip
            parts.append(self.confidence.matrix(items))
        return np.concatenate(parts, axis=1).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "text", "outputs": list(self.outputs), "shape": list(SHAPE_NAMES),
                "tokens": {"vocabulary": self.tokens.vocabulary,
                           "bigram_slots": self.tokens.bigram_slots},
                "side": None if self.side is None else self.side.to_dict(),
                "answer_confidence": None if self.confidence is None
                else self.confidence.to_dict()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TextFeatures:
        if "tokens" not in d:  # the first stacked routers kept word/character vocabularies
            raise DataError("this stacked router's text features are of an older kind (word "
                            "and character vocabularies in its metadata): re-train it with this "
                            "version (`retrieval-gate train`), then re-export")  # fmt: skip
        t = d["tokens"]
        return cls(tuple(d["outputs"]), TokenLayout(int(t["vocabulary"]), int(t["bigram_slots"])),
                   SideFeatures.from_dict(d.get("side")),
                   AnswerConfidence.from_dict(d.get("answer_confidence")))  # fmt: skip
