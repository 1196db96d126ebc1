"""The stacked router's text features and head (`model.head: stacked`): the token n-gram TF-IDF
the model computes from `input_ids` equals scikit-learn's (padding, unseen n-grams and special
tokens included), the bigram hash table leaves out the rarer of two bigrams in one slot, the stored form
round-trips (an older kind is refused), and the logistic models collapse into `StackedHead`
without changing a probability. The end-to-end run (train, export, from_pretrained) is in
test_router.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.sparse import csr_matrix, hstack
from sklearn.linear_model import LogisticRegression

from retrieval_gate.data.features import SideFeatures
from retrieval_gate.data.gate_features import features_from_dict
from retrieval_gate.data.text_features import (
    SHAPE_NAMES,
    TextFeatures,
    TokenLayout,
    shape_features,
)
from retrieval_gate.errors import ConfigError, DataError
from retrieval_gate.questions import Question
from retrieval_gate.training import stacked

ODD = [
    "Who wrote  Hamlet?",  # two spaces
    "what is   the capital\tof\nfrance",
    "Ça va? Übermäßig großes Ölfass, née 1901 — “quoted” 'x'",
    "a b c d",
    "??? !!!",
    "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
    "Is 3.14 > 3? Yes, or no.",
    "ζζζ ξξξ",  # no n-gram of the bundle's vocabulary
]


def _bundle_texts(n: int = 400) -> list[str]:
    from retrieval_gate.data.adaptive_rag import load_release

    return [r.question.text for r in load_release()[:n]]


@pytest.fixture(scope="module")
def tokenizer():
    from retrieval_gate.models import minilm_path
    from retrieval_gate.training.backbones import load_tokenizer

    return load_tokenizer(minilm_path())


def _ids(tokenizer, texts: list[str], max_length: int = 128) -> list[list[int]]:
    return tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]


def _tables(tokenizer, texts: list[str], outputs: int = 3, seed: int = 0):
    """A TokenTfidf fitted on `texts`, random projections; and the scikit-learn vectorizer."""
    vocab = len(tokenizer)
    vec, X, terms, rows, layout = stacked.token_tfidf(
        _ids(tokenizer, texts), set(tokenizer.all_special_ids), vocab
    )
    proj = np.random.default_rng(seed).normal(size=(len(terms), outputs))
    module = stacked.TokenTfidf(layout, outputs)
    with torch.no_grad():
        stacked._fill_tables(module, terms, rows, vec.idf_, proj)
    return module, vec, proj


def _in_model(module, tokenizer, texts: list[str], max_length: int = 128) -> np.ndarray:
    batch = tokenizer(texts, truncation=True, max_length=max_length, padding=True,
                      return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        return module(batch["input_ids"]).numpy()  # padding is a special token: no mask needed


def test_token_tfidf_in_the_model_is_scikit_learns(tokenizer):
    texts = _bundle_texts(300)
    module, vec, proj = _tables(tokenizer, texts)
    new = _bundle_texts(400)[300:] + ODD  # unseen n-grams, odd spacing, unknown characters
    for batch in (texts[:40], new):  # padded batches of mixed lengths
        want = vec.transform(_ids(tokenizer, batch)).toarray() @ proj
        np.testing.assert_allclose(_in_model(module, tokenizer, batch), want, atol=2e-5)
    assert not _in_model(module, tokenizer, ["ζζζ ξξξ"]).any()  # nothing known: all zero
    # truncated as the model sees it: the n-grams past max_length count for nothing
    long = [" ".join(texts[:6])]
    want = vec.transform(_ids(tokenizer, long, 16)).toarray() @ proj
    np.testing.assert_allclose(_in_model(module, tokenizer, long, 16), want, atol=2e-5)


def test_of_two_bigrams_in_one_slot_the_rarer_is_left_out():
    keys = np.array([5, 5 + 1031, 7])  # 1031: the smallest table, a prime
    slots, where = stacked._hash_bigrams(keys, np.array([1, 2, 3]))
    assert slots == 1031 and where.tolist() == [-1, 5, 7]
    assert stacked._hash_bigrams(np.arange(100), np.ones(100))[0] == 3203  # prime >= 32 x 100


def test_text_features_round_trip_and_need_nothing_beside_the_text():
    feats = TextFeatures(("correct:a", "correct:b", "source:x"), TokenLayout(30522, 4096))
    again = features_from_dict(feats.to_dict())
    assert again == feats and again.from_text and not SideFeatures.from_text
    assert again.names == SHAPE_NAMES and again.width == len(SHAPE_NAMES)
    m = again.matrix(ODD)
    assert m.shape == (len(ODD), len(SHAPE_NAMES)) and m.dtype == np.float32
    old = {"kind": "text", "outputs": ["correct:a"], "ngrams": [], "projection": []}
    with pytest.raises(DataError, match="older kind"):
        features_from_dict(old)


def test_the_stacked_models_collapse_into_the_head_without_changing_a_probability(tokenizer):
    """fit_stacked's head gives the probabilities of the scikit-learn models it came from: the
    source model, then the heads over [token TF-IDF, embedding, shape, P(source)]."""

    texts = _bundle_texts(300)
    rng = np.random.default_rng(0)
    E = rng.normal(size=(len(texts), 8))
    sources = [["nq", "squad", "hotpotqa"][i % 3] for i in range(len(texts))]
    Y = (rng.uniform(size=(len(texts), 3)) < [0.3, 0.4, 0.5]).astype(float)
    Y[:, 2] = [s == "hotpotqa" or y for s, y in zip(sources, Y[:, 2], strict=True)]

    class Body(torch.nn.Module):  # the module fit_stacked fills: a config, a width, a head
        config = type("Cfg", (), {"head": "stacked", "dropout": 0.0})()
        num_classes = 3
        backbone = type("B", (), {"hidden_size": 8})()

        def set_head(self, features):
            self.features, self.head = features, stacked.StackedHead(8, features, 3)

    body = Body()
    special, vocab = set(tokenizer.all_special_ids), len(tokenizer)
    features, oof = stacked.fit_stacked(body, texts, _ids(tokenizer, texts), special, vocab,
                                        sources, Y, E, ("a", "b", "c"), folds=3)  # fmt: skip
    assert oof.shape == Y.shape and ((oof > 0) & (oof < 1)).all()
    new = _bundle_texts(340)[300:]
    E_new = rng.normal(size=(len(new), 8))
    batch = tokenizer(new, truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        x = torch.from_numpy(np.hstack([E_new, features.matrix(new)]).astype(np.float32))
        got = body.head(x, batch["input_ids"]).sigmoid().numpy()
    # the same models, fitted here with scikit-learn's own transforms
    (X, X_new), _ = _reference_inputs(tokenizer, texts, new, E, E_new, sources)
    want = np.stack([
        LogisticRegression(C=stacked.HEAD_C, max_iter=3000).fit(X, Y[:, s])
        .predict_proba(X_new)[:, 1]
        for s in range(3)
    ], axis=1)  # fmt: skip
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert features.outputs == ("correct:a", "correct:b", "correct:c", "source:hotpotqa",
                                "source:nq", "source:squad")  # fmt: skip


@pytest.mark.parametrize(
    ("data", "model", "message"),
    [
        ({"task": "binary"}, {"fit_on": ["train", "dev"]}, "with data.task=strategies"),
        ({"task": "3way"}, {"fit_on": ["train", "dev"]}, "threshold is tuned on dev"),
        ({"task": "strategies"}, {"answer_confidence": True}, "data.task=binary"),
        ({"task": "binary"}, {"answer_confidence": True, "head": "linear"}, "model.head=stacked"),
    ],
)
def test_a_stacked_head_reads_text_alone_and_fits_dev_for_routers_only(data, model, message):
    from retrieval_gate.training.config import TrainConfig

    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict({"model": {"head": "stacked", **model}, "data": data})


@pytest.mark.parametrize("task", ["binary", "3way", "strategies"])
def test_a_stacked_head_is_a_gate_head_and_a_router_head(task):
    from retrieval_gate.training.config import TrainConfig

    cfg = TrainConfig.from_dict({"model": {"head": "stacked"}, "data": {"task": task}})
    assert cfg.model.head == "stacked" and cfg.model.fit_on == ("train",)
    # a user's numeric columns join the stacked head's inputs (issue 37)
    side = {"task": task, "features": ["s_pop"]}
    assert TrainConfig.from_dict({"model": {"head": "stacked"}, "data": side}).data.features


def test_a_stacked_gate_is_one_logistic_model_over_the_same_inputs(tokenizer):
    """A binary gate's stacked head (class indices, not correctness per strategy): one
    class-weighted logistic model over [token TF-IDF, embedding, shape, P(source)], written as
    the logits [0, z], so softmax gives its P(needs retrieval); a 3-way gate's is multinomial."""

    texts = _bundle_texts(300)
    rng = np.random.default_rng(1)
    E = rng.normal(size=(len(texts), 8))
    sources = [["nq", "squad", "hotpotqa"][i % 3] for i in range(len(texts))]
    y = ((rng.uniform(size=len(texts)) < 0.3) | (np.array(sources) == "hotpotqa")).astype(int)
    weights = {0: 0.8, 1: 1.3}
    special, vocab = set(tokenizer.all_special_ids), len(tokenizer)
    new = _bundle_texts(340)[300:]
    E_new = rng.normal(size=(len(new), 8))
    batch = tokenizer(new, truncation=True, max_length=128, padding=True, return_tensors="pt")
    with_source, text_only = _reference_inputs(tokenizer, texts, new, E, E_new, sources)
    three = y + (E[:, 0] > 1) * y  # a 3-way gate, from one source (no source model: quicker)
    cases = [(("no_retrieval", "retrieval"), y, sources, with_source),
             (("no_retrieval", "retrieval", "complex"), three, [""] * len(texts), text_only)]  # fmt: skip
    for classes, target, srcs, (X, X_new) in cases:
        body = _Body(len(classes))
        features, oof = stacked.fit_stacked(body, texts, _ids(tokenizer, texts), special, vocab,
                                            srcs, target.astype(float), E, classes,
                                            class_weight=weights)  # fmt: skip
        assert oof is None and features.outputs[: len(classes)] == tuple(
            "class:" + c for c in classes
        )
        with torch.no_grad():
            x = torch.from_numpy(np.hstack([E_new, features.matrix(new)]).astype(np.float32))
            got = body.head(x, batch["input_ids"]).softmax(-1).numpy()
        want = (LogisticRegression(C=stacked.HEAD_C, max_iter=3000, class_weight=weights)
                .fit(X, target).predict_proba(X_new))  # fmt: skip
        np.testing.assert_allclose(got, want, atol=2e-4)
    with pytest.raises(DataError, match="label 1"):
        stacked.fit_stacked(_Body(2), texts, _ids(tokenizer, texts), special, vocab,
                            [""] * len(texts), np.ones(len(texts)), E, classes[:2])  # fmt: skip


def _reference_inputs(tokenizer, texts, new, E, E_new, sources):
    """The stacked models' inputs as scikit-learn computes them, for the training `texts` and
    the `new` ones: ((X, X_new) with P(source), (X, X_new) without) over [token TF-IDF,
    normalised embedding, shape]."""
    from retrieval_gate.data.text_features import shape_features

    special, vocab = set(tokenizer.all_special_ids), len(tokenizer)
    En, En_new = (e / np.linalg.norm(e, axis=1, keepdims=True) for e in (E, E_new))
    vec, Xt, *_ = stacked.token_tfidf(_ids(tokenizer, texts), special, vocab)
    Xt_new = vec.transform(_ids(tokenizer, new))
    dense, dense_new = (csr_matrix(np.hstack([e, shape_features(t)])) for e, t in
                        ((En, texts), (En_new, new)))  # fmt: skip
    source, Q = stacked._source_model(hstack([Xt, dense]).tocsr(), np.array(sources), 0)
    Q_new = source.predict_proba(hstack([Xt_new, dense_new]))
    with_source = (hstack([Xt, dense, csr_matrix(Q)]).tocsr(),
                   hstack([Xt_new, dense_new, csr_matrix(Q_new)]).tocsr())  # fmt: skip
    return with_source, (hstack([Xt, dense]).tocsr(), hstack([Xt_new, dense_new]).tocsr())


class _Body(torch.nn.Module):
    """The module fit_stacked fills: a config, a width, a head."""

    config = type("Cfg", (), {"head": "stacked", "dropout": 0.0})()
    backbone = type("B", (), {"hidden_size": 8})()

    def __init__(self, num_classes: int):
        super().__init__()
        self.num_classes = num_classes

    def set_head(self, features):
        self.features = features
        self.head = stacked.StackedHead(8, features, self.num_classes)


def test_the_shape_counts_are_capped_past_the_bundled_questions_longest():
    """A pasted 3,000-word question scored 0.002 ("no retrieval") on the demo's gate: the
    linear head extrapolated words/30 = 100. Past 150 words, 15 commas, 750 characters a
    question reads as that long; the bundled questions (at most 112, 13, 596) are unchanged."""
    long = shape_features(["Who wrote Hamlet, then? " * 1000])[0]
    capped = {n: long[SHAPE_NAMES.index(n)] for n in ("words/30", "commas/3", "chars/150")}
    assert capped == {"words/30": 5.0, "commas/3": 5.0, "chars/150": 5.0}
    edge = shape_features(["w " * 150, "w " * 151, "w " * 149])[:, 0]
    assert edge.tolist() == [5.0, 5.0, pytest.approx(149 / 30)]


def test_side_features_are_clipped_at_eight_std():
    """Views of 1e300 were 340 std past training's: one column swamped the question."""
    side = SideFeatures(("views",), (10.0,), (2.0,))
    qs = [Question(f"q{i}", "a?", (), "s", extra={"views": v})
          for i, v in enumerate([1e300, -1e300, float(np.expm1(12.0)), None])]  # fmt: skip
    assert side.matrix(qs).tolist() == [[8.0, 0.0], [-8.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
