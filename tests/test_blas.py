"""scikit-learn's fits run on one BLAS thread (retrieval_gate.blas): numpy's and scipy's two
OpenBLAS pools otherwise take turns spinning on a 2-core machine. Every fitting path sees one
thread while it fits, and the limit is lifted after."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_info

from retrieval_gate.blas import one_blas_thread
from retrieval_gate.gates.length import LengthGate
from retrieval_gate.gates.probe import select_layer
from retrieval_gate.gates.strategy_routers import tfidf_router
from retrieval_gate.gates.tfidf import TfidfGate
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.questions import Question
from retrieval_gate.training import stacked


def _blas_threads() -> dict[str, int]:
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_one_blas_thread_limits_numpy_and_scipy_and_lifts_the_limit():
    before = _blas_threads()
    with one_blas_thread():
        inside = _blas_threads()
    assert len(inside) >= 2, f"numpy's and scipy's OpenBLAS should both be loaded: {inside}"
    assert set(inside.values()) == {1}
    assert _blas_threads() == before


def _questions(n: int) -> list[Question]:
    words = ["who", "wrote", "the", "capital", "film", "river", "born", "when", "which"]
    rng = np.random.default_rng(0)
    return [
        Question(f"q{i}", " ".join(rng.choice(words, size=3 + i % 7)) + "?", ("x",), "nq")
        for i in range(n)
    ]


def _fit_stacked() -> None:
    class Body(torch.nn.Module):
        config = type("Cfg", (), {"head": "stacked", "dropout": 0.0})()
        backbone = type("B", (), {"hidden_size": 4})()
        num_classes = 2

        def set_head(self, features):
            self.features, self.head = features, stacked.StackedHead(4, features, 2)

    rng = np.random.default_rng(0)
    texts = [q.text for q in _questions(60)]
    ids = [[1 + (hash(w) % 50) for w in t.split()] for t in texts]
    sources = ["nq" if i % 2 else "squad" for i in range(60)]
    Y = (rng.uniform(size=(60, 2)) < 0.5).astype(float)
    stacked.fit_stacked(Body(), texts, ids, {0}, 64, sources, Y, rng.normal(size=(60, 4)),
                        ("a", "b"), folds=3)  # fmt: skip


def _select_layer() -> None:
    rng = np.random.default_rng(0)
    x = {k: rng.normal(size=(40, 6)) for k in (1, 2)}
    y = np.arange(40) % 2
    select_layer(x, y, x, y, cs=(0.1, 1.0))


def _tfidf_router() -> None:
    qs = _questions(40)
    correct = (np.arange(80).reshape(40, 2) % 3 == 0).astype(float)
    nan = np.full(40, np.nan)
    split = EvalSet(tuple(qs), correct[:, 0], nan, nan, ("no_retrieval", "one_retrieval"), correct)
    tfidf_router(split, split)


FITS = {
    "stacked head": _fit_stacked,
    "probe layer choice": _select_layer,
    "tfidf gate": lambda: TfidfGate.fit(_questions(40), np.arange(40) % 2),
    "length gate": lambda: LengthGate.fit(_questions(40), np.arange(40) % 2),
    "tfidf router": _tfidf_router,
}


@pytest.mark.parametrize("fit", FITS.values(), ids=FITS.keys())
def test_every_fit_runs_on_one_blas_thread(fit, monkeypatch):
    seen: list[dict[str, int]] = []
    real = LogisticRegression.fit

    def spy(self, X, y, *args, **kwargs):
        seen.append(_blas_threads())
        return real(self, X, y, *args, **kwargs)

    monkeypatch.setattr(LogisticRegression, "fit", spy)
    before = _blas_threads()
    fit()
    assert seen and all(set(s.values()) == {1} for s in seen), seen
    assert _blas_threads() == before
