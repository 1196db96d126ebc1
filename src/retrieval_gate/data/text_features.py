"""Text features: what a stacked router (`model.head: stacked`, training/stacked.py) reads
from the question text beside its encoder embedding, computed the same way in training, in
PyTorch scoring and in an ONNX deployment (numpy only: no scikit-learn, no torch).

Two kinds of columns:
- TF-IDF projections: word (1-2) and character (2-5, case kept) n-gram TF-IDF vectors, as
  scikit-learn's `TfidfVectorizer(sublinear_tf=True)` computes them (the vocabulary and idf
  fitted there are stored here), multiplied by fitted linear weights: one column per output of
  the logistic models that read them (each strategy's correctness, each source's odds). The
  sparse vectors never leave this file: only their k projected values go into the graph.
- Shape: eleven cheap facts about the wording (length, capitalised words, a trailing '?',
  quotes, commas, digits, " or ", a leading auxiliary verb): how the question sets differ in
  style, which is much of what tells a router which kind of question it has.

`TextFeatures` has the shape of `SideFeatures` (`names`, `width`, `matrix`, `to_dict`), so
the data module, the exporter and both gate backends carry it the same way."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ..questions import Question

SHAPE_NAMES = (
    "words/30", "capitalised_share", "ends_with_?", "starts_lowercase", "has_quote", "has_comma",
    "has_digit", "commas/3", "has_or", "starts_with_auxiliary", "chars/150",
)  # fmt: skip
_AUXILIARY = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have)\b")
_OR = re.compile(r"\bor\b")
_WORD = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern
_SPACES = re.compile(r"\s\s+")


def shape_features(texts: Sequence[str]) -> np.ndarray:
    """(n, 11) float32, columns as SHAPE_NAMES."""
    rows = []
    for t in texts:
        words = t.split()
        caps = sum(1 for w in words[1:] if w[:1].isupper())
        rows.append([
            len(words) / 30, caps / max(1, len(words)), t.strip().endswith("?"), t[:1].islower(),
            '"' in t, "," in t, any(c.isdigit() for c in t), t.count(",") / 3,
            bool(_OR.search(t)), bool(_AUXILIARY.match(t.lower())), len(t) / 150,
        ])  # fmt: skip
    return np.asarray(rows, np.float32).reshape(len(texts), len(SHAPE_NAMES))


@dataclass(frozen=True)
class Ngrams:
    """One fitted TF-IDF vocabulary: `analyzer` "word" (lower-cased tokens of two or more word
    characters) or "char_wb" (character n-grams inside space-padded words), scikit-learn's
    analyzers re-implemented so deployments need no scikit-learn (tests check they agree)."""

    analyzer: str
    ngram_range: tuple[int, int]
    lowercase: bool
    terms: tuple[str, ...]
    idf: tuple[float, ...]

    @classmethod
    def from_vectorizer(cls, vectorizer: Any) -> Ngrams:
        """From a fitted `TfidfVectorizer` (sublinear_tf, l2 norm, no stop words)."""
        vocab = vectorizer.vocabulary_
        terms = sorted(vocab, key=vocab.get)
        return cls(vectorizer.analyzer, tuple(vectorizer.ngram_range), vectorizer.lowercase,
                   tuple(terms), tuple(float(x) for x in vectorizer.idf_))  # fmt: skip

    def __post_init__(self) -> None:  # lookups built once (not part of equality or to_dict)
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(self.terms)})
        object.__setattr__(self, "_idf", np.asarray(self.idf, np.float64))
        # words repeat across questions: each word's known character n-grams counted once
        object.__setattr__(self, "_word_ids", lru_cache(maxsize=1 << 16)(self._known_in_word))

    def _known_in_word(self, word: str) -> Counter[int]:
        index = self._index  # type: ignore[attr-defined]
        return Counter(index[g] for g in _char_grams(word, *self.ngram_range) if g in index)

    def counts(self, text: str) -> Counter[int]:
        """Column -> count of the vocabulary's n-grams in one text, as scikit-learn's analyzer
        lists them: lower-cased word n-grams, or character n-grams of each word."""
        if self.lowercase:
            text = text.lower()
        if self.analyzer == "word":
            index, (low, high) = self._index, self.ngram_range  # type: ignore[attr-defined]
            tokens = _WORD.findall(text)
            grams = (" ".join(tokens[i : i + n]) for n in range(low, high + 1)
                     for i in range(len(tokens) - n + 1))  # fmt: skip
            return Counter(index[g] for g in grams if g in index)
        out: Counter[int] = Counter()
        for word in _SPACES.sub(" ", text).split():
            out.update(self._word_ids(word))  # type: ignore[attr-defined]
        return out

    def vector(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Column indices and L2-normalised (1 + log tf) x idf weights of one text."""
        counts = self.counts(text)
        if not counts:
            return np.zeros(0, int), np.zeros(0)
        cols = np.fromiter(counts.keys(), int, len(counts))
        tf = np.fromiter(counts.values(), float, len(counts))
        w = (1 + np.log(tf)) * self._idf[cols]  # type: ignore[attr-defined]
        return cols, w / np.sqrt(w @ w)


def _char_grams(word: str, low: int, high: int) -> tuple[str, ...]:
    """scikit-learn's char_wb n-grams of one word, padded with a space each side."""
    w, out = f" {word} ", []
    for n in range(low, high + 1):
        out.extend(w[i : i + n] for i in range(max(1, len(w) - n + 1)))
        if len(w) <= n:  # a short word counts once, as in scikit-learn
            break
    return tuple(out)


@dataclass(frozen=True)
class TextFeatures:
    """TF-IDF projections (`outputs`: one name a column) and the shape columns of a text."""

    ngrams: tuple[Ngrams, ...]
    projection: np.ndarray  # (sum of vocabulary sizes, len(outputs)) float32
    outputs: tuple[str, ...]
    from_text: ClassVar[bool] = True  # computed from the question text: nothing to pass

    def __post_init__(self) -> None:
        # each vocabulary's rows of `projection` (not part of equality or to_dict)
        bounds = np.cumsum([0, *(len(ng.terms) for ng in self.ngrams)])
        blocks = [self.projection[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        object.__setattr__(self, "_blocks", blocks)

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.outputs, *SHAPE_NAMES)

    @property
    def width(self) -> int:
        return len(self.outputs) + len(SHAPE_NAMES)

    def matrix(
        self, questions: Sequence[Question] | Sequence[str], strict: bool = True
    ) -> np.ndarray:
        """(n, width) float32: the projections, then the shape columns. `strict` is accepted
        for `SideFeatures`' signature: text is never missing."""
        texts = [q.text if isinstance(q, Question) else q for q in questions]
        proj = np.zeros((len(texts), len(self.outputs)), np.float32)
        for i, text in enumerate(texts):
            for ng, block in zip(self.ngrams, self._blocks, strict=True):  # type: ignore[attr-defined]
                cols, w = ng.vector(text)
                proj[i] += w @ block[cols]
        return np.concatenate([proj, shape_features(texts)], axis=1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "text",
            "outputs": list(self.outputs),
            "shape": list(SHAPE_NAMES),
            "ngrams": [
                {
                    "analyzer": ng.analyzer,
                    "ngram_range": list(ng.ngram_range),
                    "lowercase": ng.lowercase,
                    "terms": list(ng.terms),
                    "idf": list(ng.idf),
                }
                for ng in self.ngrams
            ],  # fmt: skip
            # six significant digits: the weights of a few ten thousand n-grams stay a few MB
            "projection": [[float(f"{x:.6g}") for x in row] for row in self.projection.tolist()],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TextFeatures:
        ngrams = tuple(Ngrams(n["analyzer"], tuple(n["ngram_range"]), bool(n["lowercase"]),
                              tuple(n["terms"]), tuple(n["idf"])) for n in d["ngrams"])  # fmt: skip
        width = len(d["outputs"])
        projection = np.asarray(d["projection"], np.float32).reshape(-1, width)
        return cls(ngrams, projection, tuple(d["outputs"]))
