"""The stacked router head (`model.head: stacked`): the strongest question-only router the
router research found on the Adaptive-RAG outcomes (docs/router.md), fitted in seconds.

1. A source classifier: multinomial logistic regression (C=10) over word and character TF-IDF
   n-grams, the frozen encoder's L2-normalised embedding and the wording's shape, giving
   P(source | text): which question set a question looks like (on the bundle: NQ, SQuAD,
   TriviaQA, HotpotQA, 2Wiki, MuSiQue). On the training rows it is cross-fitted (3 folds), so
   the heads learn from posteriors as noisy as the ones they will see.
2. One logistic head per strategy (C=0.1) over word TF-IDF, the embedding, the shape and that
   posterior: P(correct | strategy), independent heads (no treatment needed for questions that
   no strategy answers).

Every model is linear in the sparse TF-IDF vector, so the vocabularies with their weights
collapse into a few projected columns (`data.text_features.TextFeatures`), computed beside the
text in numpy, and the rest is `StackedHead`: two small linear layers on top of the body, the
same module in PyTorch, in the run folder and in the ONNX graph."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.text_features import Ngrams, TextFeatures, shape_features
from ..errors import DataError
from .data import GateDataModule

log = logging.getLogger(__name__)

SOURCE_C, HEAD_C, FOLDS = 10.0, 0.1, 3
CORRECT, SOURCE = "correct:", "source:"


class StackedHead(nn.Module):
    """[pooled embedding | features] -> per-strategy logits; features as `TextFeatures`
    lays them out: the heads' TF-IDF projections, the source model's, then the shape."""

    def __init__(self, hidden: int, features: TextFeatures, num_classes: int):
        super().__init__()
        self.hidden = hidden
        self.n_heads = sum(o.startswith(CORRECT) for o in features.outputs)
        self.n_sources = sum(o.startswith(SOURCE) for o in features.outputs)
        self.n_shape = features.width - self.n_heads - self.n_sources
        if self.n_heads != num_classes:
            raise DataError(
                f"stacked head: the text features carry {self.n_heads} strategy "
                f"projections for {num_classes} strategies; re-train the run"
            )
        base = hidden + self.n_shape
        self.source = nn.Linear(base, self.n_sources) if self.n_sources else None
        self.out = nn.Linear(base + self.n_sources, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, a, b = self.hidden, self.n_heads, self.n_sources
        emb = nn.functional.normalize(x[:, :h], dim=-1)
        heads_tfidf, source_tfidf, shape = (
            x[:, h : h + a],
            x[:, h + a : h + a + b],
            x[:, h + a + b :],
        )
        base = torch.cat([emb, shape], dim=-1)
        if self.source is not None:
            posterior = (self.source(base) + source_tfidf).softmax(-1)
            base = torch.cat([base, posterior], dim=-1)
        return self.out(base) + heads_tfidf


@torch.inference_mode()
def embed(module: nn.Module, batches: Any) -> np.ndarray:
    """The frozen body's pooled embedding of every row the loader yields, in its order."""
    module.eval()
    return np.concatenate([module.backbone(b["input_ids"], b["attention_mask"]).float().numpy()
                           for b in batches])  # fmt: skip


def _vectorizers(n: int) -> list[Any]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    few = n < 200  # a small training set keeps every n-gram (min_df 1), else drops the rarest
    return [
        TfidfVectorizer(ngram_range=(1, 2), min_df=1 if few else 2, sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=1 if few else 3,
                        sublinear_tf=True, lowercase=False),  # case tells question sets apart
    ]  # fmt: skip


def _source_model(X: Any, sources: np.ndarray, seed: int) -> tuple[Any, np.ndarray]:
    """(model fitted on all rows, its cross-fitted posteriors of the same rows)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, StratifiedKFold

    classes = np.unique(sources)
    fit = LogisticRegression(C=SOURCE_C, max_iter=3000).fit(X, sources)
    smallest = min(int((sources == c).sum()) for c in classes)
    folds = (StratifiedKFold if smallest >= FOLDS else KFold)(
        FOLDS, shuffle=True, random_state=seed
    )
    posterior = np.zeros((len(sources), len(classes)))
    for a, b in folds.split(X, sources):
        part = LogisticRegression(C=SOURCE_C, max_iter=3000).fit(X[a], sources[a])
        cols = np.searchsorted(classes, part.classes_)  # a fold may lack a rare source
        if len(part.classes_) > 1:
            posterior[np.ix_(b, cols)] = part.predict_proba(X[b])
        else:
            posterior[b, cols[0]] = 1.0
    return fit, posterior


def _softmax_weights(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept) with one row per class, so softmax(coef x + b) = predict_proba (a
    two-class model stores one row: sigmoid(z) = softmax([0, z]))."""
    coef, bias = model.coef_, model.intercept_
    if coef.shape[0] == 1:
        coef, bias = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], bias])
    return coef, bias


def _heads(X: Any, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept) of one logistic head per strategy; a strategy every (or no) training
    question answers gets a constant head."""
    from sklearn.linear_model import LogisticRegression

    coef, bias = np.zeros((Y.shape[1], X.shape[1])), np.zeros(Y.shape[1])
    for s in range(Y.shape[1]):
        y = Y[:, s]
        if 0 < y.mean() < 1:
            m = LogisticRegression(C=HEAD_C, max_iter=3000).fit(X, y)
            coef[s], bias[s] = m.coef_[0], m.intercept_[0]
        else:
            p = float(np.clip(y.mean(), 1e-3, 1 - 1e-3))
            bias[s] = np.log(p / (1 - p))
    return coef, bias


def fit_stacked_head(module: nn.Module, dm: GateDataModule, seed: int = 0) -> None:
    """Fits `module`'s stacked head on `dm`'s train split and puts the text features it reads
    beside every row of `dm` (for validation, test and the router's calibration)."""
    rows = dm.rows["train"]
    E = embed(module, dm._eval_loader("train"))
    sources = [dm.questions[r[0]].source or "" for r in rows]
    Y = np.array([r[-1] for r in rows], float)
    dm.attach_features(
        fit_stacked(module, [r[1] for r in rows], sources, Y, E, dm.strategies, seed)
    )


def fit_stacked(
    module: nn.Module, texts: list[str], sources: list[str], Y: np.ndarray, E: np.ndarray,
    strategies: tuple[str, ...], seed: int = 0,
) -> TextFeatures:  # fmt: skip
    """Fits the source model and the heads on the training rows (texts, their sources, the
    strategies' recorded correctness `Y` (n, S), the frozen embeddings `E`), puts the weights
    into `module.head` (a `StackedHead`) and returns the text features the head reads."""
    from scipy.sparse import csr_matrix, hstack

    E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    word, chars = _vectorizers(len(texts))
    Xw, Xc = word.fit_transform(texts), chars.fit_transform(texts)
    S = shape_features(texts)
    dense = csr_matrix(np.hstack([E, S]))
    src = np.asarray(sources)
    classes = np.unique(src)
    if len(classes) > 1:
        source, Q = _source_model(hstack([Xw, Xc, dense]).tocsr(), src, seed)
        src_coef, src_bias = _softmax_weights(source)
    else:  # one source (or none given): no posterior to learn
        log.info("stacked head: the training questions have one source; no source model")
        classes, Q = classes[:0], np.zeros((len(texts), 0))
        src_coef, src_bias = np.zeros((0, Xw.shape[1] + Xc.shape[1] + dense.shape[1])), np.zeros(0)
    head_coef, head_bias = _heads(hstack([Xw, dense, csr_matrix(Q)]).tocsr(), Y)
    vw, vc = Xw.shape[1], Xc.shape[1]
    projection = np.zeros((vw + vc, len(strategies) + len(classes)), np.float32)
    projection[:vw, : len(strategies)] = head_coef[:, :vw].T
    projection[:, len(strategies) :] = src_coef[:, : vw + vc].T
    outputs = (*(CORRECT + s for s in strategies), *(SOURCE + str(c) for c in classes))
    ngrams = (Ngrams.from_vectorizer(word), Ngrams.from_vectorizer(chars))
    # through its stored form, so training scores with exactly what the run folder keeps
    features = TextFeatures.from_dict(TextFeatures(ngrams, projection, outputs).to_dict())
    module.set_head(features)
    head = module.head
    with torch.no_grad():
        if head.source is not None:
            head.source.weight.copy_(torch.from_numpy(src_coef[:, vw + vc :]))
            head.source.bias.copy_(torch.from_numpy(src_bias))
        head.out.weight.copy_(torch.from_numpy(head_coef[:, vw:]))
        head.out.bias.copy_(torch.from_numpy(head_bias))
    return features
