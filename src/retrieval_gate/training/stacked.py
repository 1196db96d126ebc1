"""The stacked head (`model.head: stacked`): the strongest question-only router the router
research found on the Adaptive-RAG outcomes (docs/router.md), fitted in seconds; the same
models make a binary (or 3-way) gate on a frozen encoder (docs/train.md).

1. A source classifier: multinomial logistic regression (C=10) over TF-IDF unigrams and bigrams
   of the encoder's token ids, the frozen encoder's L2-normalised embedding and the wording's
   shape, giving P(source | text): which question set a question looks like (on the bundle:
   NQ, SQuAD, TriviaQA, HotpotQA, 2Wiki, MuSiQue). On the training rows it is cross-fitted (3
   folds), so the heads learn from posteriors as noisy as the ones they will see.
2. The heads (C=0.1) over the same TF-IDF, the embedding, the shape and that posterior. A
   router's: one logistic head per strategy, P(correct | strategy), independent heads (no
   treatment needed for questions that no strategy answers). A gate's: one logistic model over
   its classes, weighted as the linear head's loss weighs them (`data.balance`); the binary
   gate's is one head, P(needs retrieval), written as the logits [0, z] its softmax reads.

It fits on `model.fit_on`: the train split (the router's price then calibrated on dev), or train
and dev together, with the price calibrated on out-of-fold predictions: the heads are also
fitted 5 times on 4/5 of those questions, and each question is scored by the heads that did not
see it. On the bundle (scripts/router_cv.py, 10 seeded splits, paired) train+dev raised routed
accuracy at budget 1.0 by 0.008 (standard error 0.003) and met the budget more tightly (test
mean cost over splits: standard deviation 0.05 instead of 0.10).

A two-stage gate (`model.answer_confidence: true`, a binary gate) adds a second level: a
logistic model over [the question-only logit, the side features, the answer's confidence
(data/answer_confidence.py)], fitted on the training questions that carry their closed-book
answer's log-probabilities, with the question-only logit cross-fitted (3 folds) so it is as
noisy there as on new questions. A question with an answer is scored by it; one without keeps
the question-only logit (`has_answer` switches between them inside the graph). Few inputs, its
strength chosen by cross-validated AUROC: it weighs the answer's confidence as much as it is
worth, which on a strong LLM's answers is most of the decision.

Every model is linear in the sparse TF-IDF vector, so its weights collapse into one projection
row per token and per bigram (`TokenTfidf`, computed from `input_ids` inside the model), and
the rest is `StackedHead`: two small linear layers on top of the body, the same module in
PyTorch, in the run folder and in the ONNX graph. Only the eleven shape columns are computed
beside the text (`data.text_features`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import work
from ..blas import one_blas_thread
from ..data.answer_confidence import AnswerConfidence
from ..data.features import SideFeatures
from ..data.text_features import SHAPE_NAMES, TextFeatures, TokenLayout, shape_features
from ..errors import DataError
from ..labels.logprobs import with_answer_logprobs
from .datamodule import GateDataModule

log = logging.getLogger(__name__)

SOURCE_C, HEAD_C, FOLDS = 10.0, 0.1, 3
SECOND_CS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # the answer level's strengths, tried
SELECT_FOLDS = 5  # folds choosing them: 21 candidates, cheap fits, so less noise is worth it
CALIBRATION_FOLDS = 5  # out-of-fold predictions to calibrate on when dev is fitted on
CORRECT, CLASS, SOURCE = "correct:", "class:", "source:"  # output names: router / gate heads


@dataclass(frozen=True)
class OutOfFold:
    """Out-of-fold P(correct | strategy) of the questions a stacked head was fitted on (each
    from the heads fitted without it), with their split and recorded correctness."""

    ids: list[str]
    splits: list[str]
    P: np.ndarray
    Y: np.ndarray


class TokenTfidf(nn.Module):
    """A question's TF-IDF over its token unigrams and bigrams, as scikit-learn computes it
    (sublinear tf, smooth idf, L2-normalised over both), times fitted weights: (batch, outputs).

    One table holds a row [idf, weights...] per term: a unigram's row is its token id; a bigram
    (a, b) is hashed to a slot, its key a x V + b, row V + slot, and a lookup checks the key
    (`bigram_key`), so a bigram never seen in training finds the last row, all zeros. Special
    tokens (padding among them) are in no term, so they weigh nothing and no mask is needed.
    Written for a small graph: each node costs a question scored alone."""

    def __init__(self, layout: TokenLayout, outputs: int):
        super().__init__()
        self.vocabulary, slots = layout.vocabulary, layout.bigram_slots
        self.register_buffer("table", torch.zeros(self.vocabulary + slots + 1, 1 + outputs))
        self.register_buffer("bigram_key", torch.full((slots,), -1, dtype=torch.long))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        v, slots = self.vocabulary, len(self.bigram_key)
        keys = input_ids[:, :-1] * v + input_ids[:, 1:]
        slot = keys % slots
        bigrams = torch.where(self.bigram_key[slot] == keys, v + slot, v + slots)
        rows = torch.cat([input_ids, bigrams], dim=1)
        found = self.table[rows]
        idf, proj = found[..., 0], found[..., 1:]
        # tf: the term's count in the row; its positions share idf x (1 + log tf) between them
        tf = (rows[:, :, None] == rows[:, None, :]).to(idf.dtype).sum(-1)
        w = idf * (1.0 + tf.log()) / tf
        norm = (w * w * tf).sum(-1, keepdim=True).sqrt().clamp_min(1e-12)
        return (w[..., None] * proj).sum(1) / norm


class StackedHead(nn.Module):
    """[pooled embedding | shape | side features | answer confidence] and the tokens -> the
    logits (one per strategy, or per class)."""

    def __init__(self, hidden: int, features: TextFeatures, num_classes: int):
        super().__init__()
        self.hidden = hidden
        self.n_sources = sum(o.startswith(SOURCE) for o in features.outputs)
        self.n_heads = len(features.outputs) - self.n_sources
        self.n_shape = features.text_width  # the columns the question-only models read
        if self.n_heads != num_classes:
            raise DataError(
                f"stacked head: the text features carry {self.n_heads} head "
                f"projections for {num_classes} outputs; re-train the run"
            )
        self.tokens = TokenTfidf(features.tokens, self.n_heads + self.n_sources)
        base = hidden + self.n_shape
        self.source = nn.Linear(base, self.n_sources) if self.n_sources else None
        self.out = nn.Linear(base + self.n_sources, num_classes)
        self.second = None  # a two-stage gate's: [question logit, side, confidence] -> logit
        if features.confidence is not None:
            if num_classes != 2:
                raise DataError("model.answer_confidence is for a binary gate (data.task="
                                f"binary), not {num_classes} outputs")  # fmt: skip
            self.second = nn.Linear(1 + features.width - len(SHAPE_NAMES), 1)

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        # The two logistic layers regrouped so the graph has few nodes (each costs a router
        # time one question at a time): one product for the embedding's share of every logit,
        # one for the shape's, the token TF-IDF added as it is; the weights' regrouping
        # depends on weights only, so ONNX Runtime folds it at load.
        h, a, b = self.hidden, self.n_heads, self.n_sources
        emb, shape = x[:, :h], x[:, h : h + self.n_shape]
        emb = emb / emb.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        out_w = self.out.weight
        layers = [(out_w, self.out.bias)] + ([(self.source.weight, self.source.bias)] if b else [])
        w_emb = torch.cat([w[:, :h] for w, _ in layers])
        w_shape = torch.cat([w[:, h : h + self.n_shape] for w, _ in layers])
        z = (emb @ w_emb.T + shape @ w_shape.T + self.tokens(input_ids)
             + torch.cat([bias for _, bias in layers]))  # fmt: skip
        if b:
            posterior = z[:, a:].softmax(-1)
            z = z[:, :a] + posterior @ out_w[:, h + self.n_shape :].T
        if self.second is None:
            return z
        # the answer's level: its logit where the question came with an answer (has_answer,
        # the last column), the question-only logit where it did not
        zq = z[:, 1:] - z[:, :1]
        z2 = self.second(torch.cat([zq, x[:, h + len(SHAPE_NAMES) :]], dim=-1))
        return torch.cat([z[:, :1], z[:, :1] + zq + x[:, -1:] * (z2 - zq)], dim=-1)


@torch.inference_mode()
def embed(module: nn.Module, dm: GateDataModule, split: str) -> np.ndarray:
    """The frozen body's pooled embedding of every row of `split`, in its row order (read in
    length order: `GateDataModule.in_row_order`)."""
    module.eval()
    return dm.in_row_order(
        split,
        lambda b: module.body(b["input_ids"], b["attention_mask"]).float().numpy(),
        f"frozen body: {split}",
    )


class TokenNgrams:
    """The token unigrams and bigrams of a question, as `TokenTfidf` reads them: special
    tokens dropped, and no bigram across one (scikit-learn's analyzer for `TfidfVectorizer`)."""

    def __init__(self, vocabulary: int, special: set[int]):
        self.vocabulary, self.special = vocabulary, special

    def __call__(self, ids: Sequence[int]) -> list[int]:
        """Unigrams as their token id, bigrams as `vocabulary + key` (key = a x V + b)."""
        ok = [i not in self.special for i in ids]
        terms = [i for i, keep in zip(ids, ok, strict=True) if keep]
        v = self.vocabulary
        pairs = zip(ids, ids[1:], ok, ok[1:], strict=False)  # each token with the next
        terms += [v + a * v + b for a, b, ka, kb in pairs if ka and kb]
        return terms


def _vectorizer(analyzer: TokenNgrams, n: int, vocabulary: Sequence[int] | None = None) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer

    few = n < 200  # a small training set keeps every n-gram (min_df 1), else drops the rarest
    return TfidfVectorizer(analyzer=analyzer, min_df=1 if few else 2, sublinear_tf=True,
                           lowercase=False, vocabulary=vocabulary)  # fmt: skip


def _hash_bigrams(keys: np.ndarray, df: np.ndarray) -> tuple[int, np.ndarray]:
    """(the table's slot count: a prime near 32 x the keys, and each key's slot, key % slots,
    or -1): keys in falling document frequency, so of two that share a slot the rarer is left
    out (about 1.5% of them)."""
    slots = _prime_from(max(1031, 32 * len(keys)))
    taken = np.zeros(slots, bool)
    where = np.full(len(keys), -1)
    for k in np.lexsort((keys, -df)):
        slot = int(keys[k]) % slots
        if not taken[slot]:
            taken[slot], where[k] = True, slot
    return slots, where


def _prime_from(n: int) -> int:
    while any(n % d == 0 for d in range(2, int(n**0.5) + 1)):
        n += 1
    return n


def token_tfidf(
    token_ids: Sequence[Sequence[int]], special: set[int], vocabulary: int
) -> tuple[Any, Any, np.ndarray, np.ndarray, TokenLayout]:
    """The fitted vectorizer, its TF-IDF of the rows, each term (a unigram: its token id; a
    bigram: vocabulary + its key) and its table row (a unigram: its token id; a bigram:
    vocabulary + its slot), and the tables' layout."""
    analyzer = TokenNgrams(vocabulary, special)
    vec = _vectorizer(analyzer, len(token_ids))
    X = vec.fit_transform(token_ids)
    terms = np.array(vec.get_feature_names_out(), dtype=np.int64)
    bigram = terms >= vocabulary
    df = np.asarray((X > 0).sum(axis=0)).ravel()
    slots, where = _hash_bigrams(terms[bigram] - vocabulary, df[bigram])
    if (where < 0).any():  # rare: refit without them, so the norms match the graph's
        log.info(
            f"stacked head: {(where < 0).sum()} of {len(where)} bigrams shared a hash "
            "slot with a more frequent one; left out"
        )
        kept = np.concatenate([terms[~bigram], terms[bigram][where >= 0]])
        vec = _vectorizer(analyzer, len(token_ids), kept.tolist())
        X = vec.fit_transform(token_ids)
        terms, where = kept, where[where >= 0]
        bigram = terms >= vocabulary
    rows = terms.copy()
    rows[bigram] = vocabulary + where
    return vec, X, terms, rows, TokenLayout(vocabulary, slots)


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


def _out_of_fold(X: Any, Y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Each row's P(correct | strategy) from a router's heads fitted on the other folds."""
    from sklearn.model_selection import KFold

    P = np.zeros(Y.shape)
    for a, b in KFold(folds, shuffle=True, random_state=seed).split(X):
        coef, bias = _heads(X[a], Y[a])
        P[b] = 1.0 / (1.0 + np.exp(-(X[b] @ coef.T + bias)))
    return P


def _heads(
    X: Any, Y: np.ndarray, class_weight: dict[int, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(coef, intercept), a row per logit. `Y` (n, S), a router's recorded correctness: one
    logistic head per strategy (a strategy every, or no, training question answers gets a
    constant head). `Y` (n,), a gate's class indices: one logistic model over the classes
    (`class_weight`: index -> weight), its rows such that softmax gives its probabilities."""
    from sklearn.linear_model import LogisticRegression

    if Y.ndim == 1:
        y = Y.astype(int)
        if len(np.unique(y)) < 2:
            raise DataError(f"stacked head: every training question has label {y[0]}: "
                            "a gate needs both kinds")  # fmt: skip
        m = LogisticRegression(C=HEAD_C, max_iter=3000, class_weight=class_weight).fit(X, y)
        return _softmax_weights(m)
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


def fit_stacked_head(
    module: nn.Module, dm: GateDataModule, seed: int = 0, fit_on: tuple[str, ...] = ("train",)
) -> OutOfFold | None:
    """Fits `module`'s stacked head on `dm`'s `fit_on` splits and puts the shape columns it
    reads beside every row of `dm` (for validation, test and the router's calibration). With
    dev among them (routers only), returns the out-of-fold predictions the price is to be
    calibrated on."""
    rows = [r for split in fit_on for r in dm.rows[split]]
    E = np.concatenate([embed(module, dm, split) for split in fit_on])
    texts = [r[1] for r in rows]
    tok = dm.tokenizer  # the ids the model sees: truncated as the collate truncates them
    ids = tok(texts, truncation=True, max_length=dm.cfg.max_length)["input_ids"]
    # training work: each fitted question is read once by the frozen body (no epochs)
    work.add(train_examples=len(rows), train_tokens=sum(len(i) for i in ids))
    # without a source model (model.source_model: false) every row counts as one source
    keep = module.config.source_model
    sources = [(dm.questions[r[0]].source or "") if keep else "" for r in rows]
    Y = np.array([r[-1] for r in rows], float)  # (n, S) correctness, or (n,) class indices
    folds = CALIBRATION_FOLDS if "dev" in fit_on else 0
    special = {*tok.all_special_ids, tok.pad_token_id}  # in no term: no mask needed
    heads = dm.outputs  # a router's strategies, or the gate's classes
    weights = dm.class_weights()  # a gate's, as its linear head's loss; a router: None
    class_weight = None if weights is None else dict(enumerate(weights.tolist()))
    side = dm.side_features if isinstance(dm.side_features, SideFeatures) else None
    confidence = None
    if module.config.answer_confidence:  # a two-stage gate: its answers' log-probabilities
        named = f"data.questions={dm.cfg.questions}" if dm.cfg.questions else None
        dm.questions = with_answer_logprobs(dm.questions, dm.path, named)
        confidence = AnswerConfidence.fit([dm.questions[r[0]] for r in rows])
    columns = TextFeatures((), TokenLayout(0, 0), side, confidence)  # the columns beside the text
    F = columns.matrix([dm.questions[r[0]] for r in rows], strict=False)
    features, P = fit_stacked(module, texts, ids, special, len(tok), sources, Y, E, heads,
                              seed, folds, class_weight, F, columns)  # fmt: skip
    dm.attach_features(features)
    if P is None:
        return None
    splits = [split for split in fit_on for _ in dm.rows[split]]
    return OutOfFold([r[0] for r in rows], splits, P, Y)


@one_blas_thread()
def fit_stacked(
    module: nn.Module, texts: list[str], token_ids: Sequence[Sequence[int]], special: set[int],
    vocabulary: int, sources: list[str], Y: np.ndarray, E: np.ndarray,
    heads: tuple[str, ...], seed: int = 0, folds: int = 0,
    class_weight: dict[int, float] | None = None, F: np.ndarray | None = None,
    columns: TextFeatures | None = None,
) -> tuple[TextFeatures, np.ndarray | None]:  # fmt: skip
    """Fits the source model and the heads on the training rows (texts, their token ids, the
    tokenizer's special ids and vocabulary size, their sources, the targets `Y`: a router's
    strategies' recorded correctness (n, S), or a gate's class indices (n,), the frozen
    embeddings `E`), puts the weights into `module.head` (a `StackedHead`) and returns the text
    features the head reads, and with `folds` (routers) the rows' out-of-fold
    P(correct | strategy) (else None). `heads`: the strategies, or the gate's classes. `F`:
    the rows' columns beside the text as `columns` (a `TextFeatures` giving the side features
    and answer confidence, if any) computes them; default: the shape alone."""
    from scipy.sparse import csr_matrix, hstack

    E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    vec, Xt, terms, rows, layout = token_tfidf(token_ids, special, vocabulary)
    F = shape_features(texts) if F is None else F
    side, confidence = (None, None) if columns is None else (columns.side, columns.confidence)
    text_width = F.shape[1] - (confidence.width if confidence is not None else 0)
    dense = csr_matrix(np.hstack([E, F[:, :text_width]]))
    src = np.asarray(sources)
    classes = np.unique(src)
    if len(classes) > 1:
        source, Q = _source_model(hstack([Xt, dense]).tocsr(), src, seed)
        src_coef, src_bias = _softmax_weights(source)
    else:  # one source (or none given, or model.source_model: false): no posterior to learn
        log.info("stacked head: no source model (model.source_model: false, or one source)")
        classes, Q = classes[:0], np.zeros((len(texts), 0))
        src_coef, src_bias = np.zeros((0, Xt.shape[1] + dense.shape[1])), np.zeros(0)
    X = hstack([Xt, dense, csr_matrix(Q)]).tocsr()
    head_coef, head_bias = _heads(X, Y, class_weight)
    if len(head_coef) != len(heads):  # a gate whose training questions lack a class
        raise DataError(f"stacked head: the training questions have {len(head_coef)} of the "
                        f"{len(heads)} classes ({', '.join(heads)})")  # fmt: skip
    v = Xt.shape[1]
    prefix = CORRECT if Y.ndim == 2 else CLASS
    outputs = (*(prefix + s for s in heads), *(SOURCE + str(c) for c in classes))
    features = TextFeatures(outputs, layout, side, confidence)
    module.set_head(features)
    head = module.head
    with torch.no_grad():
        proj = np.vstack([head_coef[:, :v], src_coef[:, :v]]).T
        _fill_tables(head.tokens, terms, rows, vec.idf_, proj)
        if head.source is not None:
            head.source.weight.copy_(torch.from_numpy(src_coef[:, v:]))
            head.source.bias.copy_(torch.from_numpy(src_bias))
        head.out.weight.copy_(torch.from_numpy(head_coef[:, v:]))
        head.out.bias.copy_(torch.from_numpy(head_bias))
        if head.second is not None:
            rest = F[:, len(SHAPE_NAMES) :]
            w, b = _second_level(X, Y, rest, rest.shape[1] - confidence.width, class_weight, seed)
            head.second.weight.copy_(torch.from_numpy(w[None, :]))
            head.second.bias.fill_(b)
    return features, _out_of_fold(X, Y, folds, seed) if folds else None


def _second_level(
    X: Any, Y: np.ndarray, rest: np.ndarray, n_side: int,
    class_weight: dict[int, float] | None, seed: int,
) -> tuple[np.ndarray, float]:  # fmt: skip
    """The two-stage gate's answer level: (weights, bias) of a logistic model over [the
    cross-fitted question-only logit, `rest`: `n_side` side features, then the answer
    confidence], fitted on the rows that carry an answer (`has_answer`, the last column)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    y = Y.astype(int)
    has = rest[:, -1] > 0
    if has.sum() < 2 * FOLDS or np.bincount(y[has], minlength=2).min() < FOLDS:
        raise DataError(f"model.answer_confidence: {int(has.sum())} training questions carry "
                        "their answer's log-probabilities, too few of each label to fit on "
                        f"(at least {FOLDS} right and {FOLDS} wrong answers)")  # fmt: skip
    zq = np.zeros(len(y))
    for a, b in StratifiedKFold(FOLDS, shuffle=True, random_state=seed).split(rest, y):
        coef, bias = _heads(X[a], y[a], class_weight)
        zq[b] = X[b] @ (coef[1] - coef[0]) + (bias[1] - bias[0])
    Z, y = np.hstack([zq[:, None], rest])[has], y[has]
    sets = _input_sets(Z.shape[1], n_side)
    keep, c = _strongest(Z, y, sets, class_weight, seed)
    log.info(f"two-stage gate: the answer level fitted on the {len(y)} training questions "
             f"with answers, on {SECOND_INPUTS[keep]} (C={c})")  # fmt: skip
    cols = sets[keep]
    m = LogisticRegression(C=c, max_iter=3000, class_weight=class_weight).fit(Z[:, cols], y)
    coef, bias = _softmax_weights(m)
    w = np.zeros(Z.shape[1])
    w[cols] = coef[1] - coef[0]  # the inputs left out weigh nothing
    return w, float(bias[1] - bias[0])


# The answer level's input sets, tried with every strength: the question may tell nothing
# beside a strong LLM's confidence (then its noise costs AUROC), or much beside a weak one's.
SECOND_INPUTS = ("the answer alone", "question logit and answer", "question, side and answer")


def _input_sets(width: int, n_side: int) -> list[np.ndarray]:
    """Column indices of Z = [question logit, side..., answer...] for each `SECOND_INPUTS`."""
    answer = np.arange(1 + n_side, width)
    return [answer, np.r_[0, answer], np.arange(width)]


def _strongest(
    Z: np.ndarray, y: np.ndarray, sets: list[np.ndarray],
    class_weight: dict[int, float] | None, seed: int,
) -> tuple[int, float]:  # fmt: skip
    """The answer level's input set and C of best cross-validated AUROC: few inputs, and how
    much the answer is worth beside the question differs from one LLM to the next. Ties go
    to the fewer inputs (the sets are tried in that order)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    # as many folds as the rarer answer allows (3 to 4 of a kind passed `_second_level`'s
    # check, and 5 folds were a scikit-learn traceback)
    n = min(SELECT_FOLDS, int(np.bincount(y, minlength=2).min()))
    folds = list(StratifiedKFold(n, shuffle=True, random_state=seed).split(Z, y))
    oof = np.zeros(len(y))

    def auc(choice: tuple[int, float]) -> float:
        cols = sets[choice[0]]
        for a, b in folds:
            m = LogisticRegression(C=choice[1], max_iter=3000, class_weight=class_weight)
            oof[b] = m.fit(Z[a][:, cols], y[a]).decision_function(Z[b][:, cols])
        return float(roc_auc_score(y, oof))

    return max(((k, c) for k in range(len(sets)) for c in SECOND_CS), key=auc)


def _fill_tables(
    tokens: TokenTfidf, terms: np.ndarray, rows: np.ndarray, idf: np.ndarray, proj: np.ndarray
) -> None:
    """Each vocabulary term's idf and projected weights into its table row, and each bigram's
    key into its slot (a lookup checks it)."""
    v = tokens.vocabulary
    bi = rows >= v
    tokens.bigram_key[torch.from_numpy(rows[bi] - v)] = torch.from_numpy(terms[bi] - v)
    tokens.table[torch.from_numpy(rows)] = torch.from_numpy(np.hstack([idf[:, None], proj])).float()
