"""The stacked router's text features and head (`model.head: stacked`): the n-gram analyzers
match scikit-learn's exactly (deployments run them without it), the stored form round-trips,
and the logistic models collapse into `StackedHead` + projections without changing a
probability. The end-to-end run (train, export, from_pretrained) is in test_router.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.sparse import csr_matrix, hstack
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from retrieval_gate.data.features import SideFeatures, features_from_dict
from retrieval_gate.data.text_features import SHAPE_NAMES, Ngrams, TextFeatures, shape_features
from retrieval_gate.errors import ConfigError

ODD = [
    "Who wrote  Hamlet?",  # two spaces
    "what is   the capital\tof\nfrance",
    "Ça va? Übermäßig großes Ölfass, née 1901 — “quoted” 'x'",
    "a b c d",  # words shorter than every n-gram
    "??? !!!",
    "Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
    "Is 3.14 > 3? Yes, or no.",
    "ζζζ ξξξ",  # no n-gram of the bundle's vocabularies
]


def _bundle_texts(n: int = 400) -> list[str]:
    from retrieval_gate.data.adaptive_rag import load_release

    return [r.question.text for r in load_release()[:n]]


@pytest.mark.parametrize(
    "vectorizer",
    [
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
        TfidfVectorizer(
            analyzer="char_wb", ngram_range=(2, 5), min_df=3, sublinear_tf=True, lowercase=False
        ),  # fmt: skip
    ],
    ids=["word", "char_wb"],
)
def test_ngrams_match_scikit_learn(vectorizer):
    texts = _bundle_texts() + ODD
    expected = vectorizer.fit_transform(texts).toarray()
    ngrams = Ngrams.from_vectorizer(vectorizer)
    got = np.zeros_like(expected)
    for i, text in enumerate(texts):
        cols, w = ngrams.vector(text)
        got[i, cols] = w
    np.testing.assert_allclose(got, expected, atol=1e-12)


def _features(texts: list[str], seed: int = 0) -> TextFeatures:
    word = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3), sublinear_tf=True,
                            lowercase=False).fit(texts)  # fmt: skip
    ngrams = (Ngrams.from_vectorizer(word), Ngrams.from_vectorizer(chars))
    rows = sum(len(n.terms) for n in ngrams)
    proj = np.random.default_rng(seed).normal(size=(rows, 3)).astype(np.float32)
    return TextFeatures(ngrams, proj, ("correct:a", "correct:b", "source:x"))


def test_text_features_round_trip_and_need_nothing_beside_the_text():
    texts = _bundle_texts(60)
    feats = _features(texts)
    again = features_from_dict(feats.to_dict())
    assert isinstance(again, TextFeatures) and again.from_text and not SideFeatures.from_text
    assert again.names == (*feats.outputs, *SHAPE_NAMES) and again.width == 3 + len(SHAPE_NAMES)
    m = feats.matrix(texts + ODD)
    assert m.shape == (len(texts) + len(ODD), feats.width) and m.dtype == np.float32
    # six significant digits stored: equal to about 1e-5
    np.testing.assert_allclose(again.matrix(texts + ODD), m, rtol=1e-4, atol=2e-5)
    assert (m[-1, :3] == 0).all() and m[-2, :3].any()  # no known n-gram: projections 0
    np.testing.assert_array_equal(m[:, 3:], shape_features(texts + ODD))
    # the projection is TF-IDF (as scikit-learn computes it) times the stored weights
    word = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3), sublinear_tf=True,
                            lowercase=False).fit(texts)  # fmt: skip
    X = hstack([word.transform(texts), chars.transform(texts)]).toarray()
    np.testing.assert_allclose(m[: len(texts), :3], X @ feats.projection, rtol=1e-4, atol=1e-5)


def test_the_stacked_models_collapse_into_the_head_without_changing_a_probability():
    """fit_stacked's head + projections give the probabilities of the scikit-learn models they
    came from: the source model, then the heads over [word TF-IDF, embedding, shape, P(source)]."""
    from retrieval_gate.training import stacked

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
    features = stacked.fit_stacked(body, texts, sources, Y, E, ("a", "b", "c"))
    new = _bundle_texts(340)[300:]
    E_new = rng.normal(size=(len(new), 8))
    with torch.no_grad():
        x = torch.from_numpy(np.hstack([E_new, features.matrix(new)]).astype(np.float32))
        got = body.head(x).sigmoid().numpy()
    # the same models, fitted here with scikit-learn's own transforms
    En, En_new = (e / np.linalg.norm(e, axis=1, keepdims=True) for e in (E, E_new))
    word, chars = stacked._vectorizers(len(texts))
    Xw, Xc = word.fit_transform(texts), chars.fit_transform(texts)
    dense, dense_new = (csr_matrix(np.hstack([e, shape_features(t)])) for e, t in
                        ((En, texts), (En_new, new)))  # fmt: skip
    source, Q = stacked._source_model(hstack([Xw, Xc, dense]).tocsr(), np.array(sources), 0)
    Q_new = source.predict_proba(hstack([word.transform(new), chars.transform(new), dense_new]))
    want = np.stack([
        LogisticRegression(C=stacked.HEAD_C, max_iter=3000)
        .fit(hstack([Xw, dense, csr_matrix(Q)]).tocsr(), Y[:, s])
        .predict_proba(hstack([word.transform(new), dense_new, csr_matrix(Q_new)]).tocsr())[:, 1]
        for s in range(3)
    ], axis=1)  # fmt: skip
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert features.outputs == ("correct:a", "correct:b", "correct:c", "source:hotpotqa",
                                "source:nq", "source:squad")  # fmt: skip


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"task": "binary"}, "needs data.task=strategies"),
        ({"task": "strategies", "features": ["s_pop"]}, "drop data.features"),
    ],
)
def test_a_stacked_head_is_a_router_head_on_text_alone(data, message):
    from retrieval_gate.training.config import TrainConfig

    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict({"model": {"head": "stacked"}, "data": data})
