"""Retrievers on small corpora: BM25, dense MiniLM, given contexts; corpus loading."""

from __future__ import annotations

import json

import numpy as np
import pytest

from retrieval_gate.errors import DataError
from retrieval_gate.questions import Question
from retrieval_gate.retrieval import (
    BM25Retriever,
    ContextRetriever,
    DenseRetriever,
    MiniLMEncoder,
    Retriever,
    build_retriever,
    load_corpus,
)
from retrieval_gate.retrieval.corpus import document_id

DOCS = [
    {"title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"title": "Shakespeare", "text": "William Shakespeare wrote the tragedy Romeo and Juliet."},
    {"title": "Volcano", "text": "A volcano is a rupture in the crust of a planet."},
    {"title": "Football", "text": "Association football is a team sport played with a ball."},
]


def q(i, text, contexts=()):
    return Question(f"q{i}", text, ("x",), "popqa", contexts=tuple(contexts))


@pytest.fixture(scope="module")
def encoder():
    return MiniLMEncoder()


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(questions=[q(0, "a?", DOCS[:2]), q(1, "b?", DOCS[1:])])


def test_corpus_dedupes_with_stable_ids(corpus):
    assert len(corpus) == 4  # DOCS[1] came with both questions
    again = load_corpus(questions=[q(5, "c?", DOCS[::-1])])
    assert {d.id for d in corpus} == {d.id for d in again}
    assert corpus[0].id == document_id("Paris", DOCS[0]["text"])


def test_corpus_jsonl_and_its_errors(tmp_path):
    good = tmp_path / "c.jsonl"
    good.write_text("\n".join(json.dumps({"id": f"d{i}", **d}) for i, d in enumerate(DOCS)))
    assert [d.id for d in load_corpus(good)] == ["d0", "d1", "d2", "d3"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "text": "ok"}) + "\n" + json.dumps({"id": "b"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl, line 2: .*'text'"):
        load_corpus(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        json.dumps({"id": "a", "text": "x"}) + "\n" + json.dumps({"id": "a", "text": "y"})
    )
    with pytest.raises(DataError, match=r"dup.jsonl, line 2: document id 'a' names two"):
        load_corpus(dup)
    listed = tmp_path / "listed.jsonl"  # its id was read as the text "[1]"
    listed.write_text(
        json.dumps({"id": 0, "text": "x"}) + "\n" + json.dumps({"id": [1], "text": "y"})
    )
    with pytest.raises(DataError, match=r"listed.jsonl, line 2: the id is \[1\]: .* document by"):
        load_corpus(listed)
    listed.write_text(json.dumps({"id": 0, "text": "x"}))  # 0 is an id (it got a made-up one)
    assert [d.id for d in load_corpus(listed)] == ["0"]
    with pytest.raises(DataError, match="--corpus"):
        load_corpus(tmp_path / "missing.jsonl")


def test_a_corpus_reads_as_any_row_file_beir_and_pyserini_fields_too(tmp_path, caplog):
    """A corpus was JSONL only: a CSV or a `.json` array was "line 1: malformed JSON", a BEIR
    `_id` was dropped, a Pyserini `contents` refused, a repeated passage refused."""
    import pandas as pd

    frame = pd.DataFrame([{"id": f"d{i}", **d} for i, d in enumerate(DOCS)])
    frame.to_csv(tmp_path / "c.csv", index=False)
    frame.to_csv(tmp_path / "c.tsv", sep="\t", index=False)
    frame.to_parquet(tmp_path / "c.parquet")
    (tmp_path / "c.json").write_text(frame.to_json(orient="records"))
    want = [(f"d{i}", d["title"], d["text"]) for i, d in enumerate(DOCS)]
    for name in ("c.csv", "c.tsv", "c.parquet", "c.json"):
        assert [(d.id, d.title, d.text) for d in load_corpus(tmp_path / name)] == want, name
    beir = tmp_path / "beir.jsonl"
    beir.write_text("".join(json.dumps({"_id": f"b{i}", **d}) + "\n" for i, d in enumerate(DOCS)))
    assert [d.id for d in load_corpus(beir)] == ["b0", "b1", "b2", "b3"]
    pyserini = tmp_path / "pyserini.jsonl"
    pyserini.write_text(json.dumps({"id": "p0", "contents": "Paris is in France."}) + "\n")
    assert [d.text for d in load_corpus(pyserini)] == ["Paris is in France."]
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(DOCS[0]) + "\n" + json.dumps(DOCS[0]) + "\n")
    with caplog.at_level("INFO"):
        assert len(load_corpus(twice)) == 1
    assert "1 repeated document row(s) kept once" in caplog.text
    (tmp_path / "c.txt").write_text("Paris is in France.\n")
    with pytest.raises(DataError, match=r"c.txt: a corpus is rows with a 'text' field"):
        load_corpus(tmp_path / "c.txt")


def test_bm25_ranks_the_lexical_match_first(corpus):
    r = BM25Retriever(corpus)
    assert isinstance(r, Retriever)
    hits = r.retrieve([q(0, "Who wrote Romeo and Juliet?"), q(1, "capital of France")], k=3)
    assert hits[0][0].document.title == "Shakespeare"
    assert hits[1][0].document.title == "Paris"
    assert all(a.score >= b.score for a, b in zip(hits[0], hits[0][1:], strict=False))


def test_dense_ranks_by_meaning_and_caches(corpus, encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    r = DenseRetriever(corpus, encoder)
    # no word shared with the Football document: only the meaning connects them
    hits = r.retrieve([q(0, "Which game do soccer players play?")], k=4)[0]
    assert hits[0].document.title == "Football"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and -1 <= scores[-1] <= scores[0] <= 1
    assert len(list((tmp_path / "embeddings").glob("*.npz"))) == 1
    np.testing.assert_allclose(DenseRetriever(corpus, encoder).matrix, r.matrix)


def test_encoder_embeddings_are_unit_length(encoder):
    emb = encoder.encode(["a short one", "a somewhat longer sentence about volcanoes"])
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    toks = encoder.token_embeddings(["Who wrote Romeo?"])[0]
    assert toks.shape[0] == 3  # who, wrote, romeo: no [CLS]/[SEP], no "?"


def test_context_retriever_keeps_dataset_order():
    hits = ContextRetriever().retrieve([q(0, "a?", DOCS), q(1, "b?")], k=2)
    assert [h.document.title for h in hits[0]] == ["Paris", "Shakespeare"]
    assert hits[1] == []


def test_build_retriever_by_name(corpus):
    assert build_retriever("bm25", corpus).name == "bm25"
    assert build_retriever("contexts").name == "contexts"
    with pytest.raises(ValueError, match="unknown retriever"):
        build_retriever("splade", corpus)


def test_kept_embeddings_with_a_flipped_bit_are_computed_again(tmp_path, monkeypatch):
    """Kept embeddings were a bare .npy: a bit flipped in its numbers (a bad disk, a shared
    cache written over) was read as embeddings. Now the file's CRC is checked and they are
    computed again."""
    from retrieval_gate.retrieval.dense import cached_embeddings

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    calls = []

    def encode():
        calls.append(1)
        return np.full((2, 4), 0.5, dtype=np.float32)

    first = cached_embeddings("enc", ["a", "b"], encode)
    (kept,) = (tmp_path / "embeddings").iterdir()
    data = bytearray(kept.read_bytes())
    data[data.index(b"\x93NUMPY") + 130] ^= 0x40  # a byte of the numbers, past the header
    kept.write_bytes(bytes(data))
    again = cached_embeddings("enc", ["a", "b"], encode)
    assert len(calls) == 2 and np.array_equal(again, first)
    assert np.array_equal(cached_embeddings("enc", ["a", "b"], encode), first) and len(calls) == 2
