"""Issue 36, part 2: a fourth strategy end to end. `configs/strategies/four.yaml`'s strategies
are labelled by `label_strategies` (what `label --policy strategies` runs) with a scripted
generator, a router is trained on that label file (a tiny backbone, the stacked head, the
file's specs in the config's `strategies:`), exported, loaded as `rag` and `serve` load it, and
routes through the RAG loop: the questions only the top-3 BM25 strategy answers land on
`bm25_top3`, with its 3 documents."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from retrieval_gate.labelling.loop_labelling import StrategyLabelling, label_strategies
from retrieval_gate.labels.strategy_labels import read_strategy_labels
from retrieval_gate.questions import Question
from retrieval_gate.rag.decisions import check_router, load_router
from retrieval_gate.rag.loop import AdaptiveRAG
from retrieval_gate.retrieval.base import Document, Hit
from retrieval_gate.strategies import load_strategies
from routers import ScriptedGenerator

ROOT = Path(__file__).resolve().parents[1]
FOUR = ROOT / "configs" / "strategies" / "four.yaml"
NAMES = ("no_retrieval", "bm25_top3", "one_retrieval", "multi_step")
# the third document ends in "alpha" (the last word a top-3 prompt shows), the fifth in "omega"
DOCS = [Document(f"d{i}", f"T{i}", f"Filler text {i} ends with {w}")
        for i, w in enumerate(["red", "blue", "alpha", "green", "omega"])]  # fmt: skip
POOLS = (["zorblat", "quenvik", "marrowind"], ["capital", "france", "paris"],
         ["tesque", "ulbrecht", "vantoby"])  # fmt: skip


class FixedBM25:
    """A stand-in `bm25` retriever: the same five documents, in order, for every query."""

    name = "bm25"

    def retrieve(self, questions, k=5):
        return [[Hit(d, 1.0 / (i + 1)) for i, d in enumerate(DOCS[:k])] for _ in questions]


def questions(n: int) -> list[Question]:
    """Kind 0: only bm25_top3 answers ("alpha"); kind 1: only one_retrieval ("omega"); kind 2:
    only multi_step (the scripted reasoner answers the question's last word)."""
    rng, out = random.Random(0), []
    for i in range(n):
        kind = i % 3
        words = rng.sample(POOLS[kind], 3)
        text = f"what is the {words[0]} of {words[1]} {words[2]} number n{i}"
        gold = ("alpha", "omega", f"n{i}")[kind]
        out.append(Question(id=f"q{i}", text=text, answers=(gold,), source=f"src{kind}"))
    return out


@pytest.mark.slow
def test_a_four_strategy_router_trained_on_strategy_labels_routes_to_bm25_top3(tmp_path):
    from retrieval_gate.export.build import build_export
    from retrieval_gate.training import train
    from tiny_backbones import tiny_backbone, tiny_config

    registry = load_strategies(FOUR)
    qs = questions(150)
    out = tmp_path / "labels" / "strategies.jsonl"
    out.parent.mkdir()
    request = StrategyLabelling(qs, out, "scripted", "bm25", k=5, chunk_size=50,
                                registry=registry)  # fmt: skip
    assert label_strategies(request, ScriptedGenerator(), FixedBM25())["rows"] == 150
    labels = read_strategy_labels(out)
    assert labels.strategies == NAMES
    assert {r["cheapest"] for r in labels.rows.values()} == set(NAMES[1:])

    model = tiny_backbone("roberta", tmp_path / "roberta", [q.text for q in qs])
    cfg = tiny_config(out, tmp_path / "ck", "encoder", str(model), pooling="cls")
    cfg = cfg.override("data.task=strategies", "model.head=stacked", "model.fit_on=[train,dev]",
                       "model.budget=2.0", f"strategies={FOUR}")  # fmt: skip
    run = train(cfg, questions=qs)
    export, report = build_export(run, tmp_path / "export" / "router4", ("fp32",), questions=qs)
    assert report["variants"]["fp32"]["passed"]

    router = load_router(export)  # what `rag --router` and `serve --router` load
    assert tuple(router.strategies) == NAMES
    assert check_router(router, 2.0)["bm25_top3"].k == 3  # its spec came with the export
    kind0 = [q for q in qs if q.source == "src0"][:12]
    kind1 = [q for q in qs if q.source == "src1"][:6]
    result = AdaptiveRAG(router, FixedBM25(), ScriptedGenerator(), k=5).run(kind0 + kind1)
    first = result.answers[: len(kind0)]
    assert sum(a.strategy == "bm25_top3" for a in first) >= 10, [a.strategy for a in first]
    for a in first:
        if a.strategy == "bm25_top3":
            assert len(a.documents) == 3 and a.answer == "alpha" and a.match
    assert all(a.strategy != "bm25_top3" for a in result.answers[len(kind0) :])
    assert result.costs.by_strategy["bm25_top3"].questions >= 10
