"""The Adaptive-RAG release layout as data: the bundled Llama-3.1-8B outcomes, any split and LLM
name wherever the folder is, and bad release folders named in the error."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from release_layout import QUESTIONS, folder_of, write_release
from retrieval_gate.data import dataset_names, load_dataset
from retrieval_gate.data.adaptive_rag import (
    ENV_VAR,
    STRATEGIES,
    find_release,
    is_release,
    load_release,
)
from retrieval_gate.errors import DataError

# PROVENANCE.md: correct counts no/one/multi per set, 500 questions each.
BUNDLE_CORRECT = {
    "nq": (156, 162, 171),
    "squad": (72, 120, 117),
    "trivia": (316, 300, 304),
    "hotpotqa": (138, 181, 208),
    "2wikimultihopqa": (133, 140, 181),
    "musique": (45, 56, 80),
}


def test_the_bundle_matches_its_provenance():
    records = load_release()
    assert Counter(r.question.source for r in records) == dict.fromkeys(BUNDLE_CORRECT, 500)
    for source, counts in BUNDLE_CORRECT.items():
        rs = [r for r in records if r.question.source == source]
        assert tuple(sum(r.outcomes[s].correct for r in rs) for s in STRATEGIES) == counts
    assert len({r.question.id for r in records}) == 3000
    first = next(r for r in records if r.question.extra["release_id"] == "single_nq_dev_2389")
    assert first.question.text == "who sings i wont let the sun go down on me"
    assert first.question.answers == ("Elton John",) and first.question.hops == "one-hop"
    assert first.outcomes["no_retrieval"].prediction == "Elton John"
    assert first.outcomes["no_retrieval"].correct
    # no trailing blanks kept from the chains file's question line
    assert all(r.question.text == r.question.text.strip() for r in records)


def test_registered_by_name_but_not_a_default_dataset():
    assert "adaptive-rag" in dataset_names(optional=True)
    assert "adaptive-rag" not in dataset_names()  # load_all() and its canonical split unchanged
    questions = load_dataset("adaptive-rag")
    assert len(questions) == 3000 and {q.source for q in questions} == set(BUNDLE_CORRECT)


def test_any_split_any_llm_any_folder_level(tmp_path, monkeypatch):
    root = write_release(tmp_path / "rel", split="test", llm="qwen_2_5_72b")
    for where in (root, root / "predictions", root / "predictions" / "test"):
        assert is_release(where)
        records = load_release(where)
        assert len(records) == 5 and {r.question.extra["llm"] for r in records} == {"qwen_2_5_72b"}
    assert not is_release(tmp_path)
    by_id = {r.question.extra["release_id"]: r for r in load_release(root)}
    multi = by_id["2hop__1_2"]
    assert multi.question.text == "Who founded the company that made the first zorblat?"
    assert multi.question.source == "musique" and multi.question.hops == "multi-hop"
    assert [multi.outcomes[s].correct for s in STRATEGIES] == [False, False, True]
    assert by_id["single_nq_dev_2"].outcomes["one_retrieval"].prediction == "1999"
    # the environment variable points the registered dataset at the user's copy
    monkeypatch.setenv(ENV_VAR, str(root))
    assert {q.id for q in load_dataset("adaptive-rag")} == {
        f"adaptive-rag-{d}-{row[0]}" for d, rows in QUESTIONS.items() for row in rows
    }


def test_a_release_read_again_is_kept_until_one_of_its_files_changes(tmp_path, monkeypatch):
    """A router's training read the release twice and `transfer --learned` 26 times: a second
    read of unchanged files parses nothing; a rewritten file (the same size), an added one or
    another folder is read afresh."""
    from retrieval_gate.data import adaptive_rag

    reads = []
    real = adaptive_rag._read_dataset
    monkeypatch.setattr(adaptive_rag, "_read_dataset", lambda r, d: reads.append(d) or real(r, d))
    root = write_release(tmp_path / "rel")
    first = load_release(root)
    assert load_release(root) == first and sorted(reads) == ["musique", "nq"]
    preds = next(folder_of(root, "oner", "nq").glob("prediction__*[0-9]_subsampled.json"))
    preds.write_text(preds.read_text().replace('"1999"', '"2000"'))
    by_id = {r.question.extra["release_id"]: r for r in load_release(root)}
    assert by_id["single_nq_dev_2"].outcomes["one_retrieval"].prediction == "2000"
    assert sorted(reads) == ["musique", "nq", "nq"]
    (folder_of(root, "nor", "musique") / "notes.txt").write_text("x")
    load_release(root)
    assert sorted(reads) == ["musique", "musique", "nq", "nq"]
    load_release(write_release(tmp_path / "copy"))
    assert len(reads) == 6


def test_several_splits_or_llms_must_be_named(tmp_path):
    root = write_release(tmp_path / "rel", split="test")
    write_release(root, split="train_1000")
    (root / "predictions" / "notes").mkdir()  # a folder beside the splits is no split
    with pytest.raises(DataError, match="2 splits here .*test, train_1000.*name one"):
        find_release(root)
    assert find_release(root, split="train_1000").split == "train_1000"
    write_release(root, split="dev_500")  # the classifier's split is the default
    assert find_release(root).split == "dev_500"
    write_release(root, split="dev_500", llm="other_llm", questions={"nq": QUESTIONS["nq"]})
    with pytest.raises(DataError, match="2 LLMs here .*my_llm_7b, other_llm"):
        find_release(root)
    with pytest.raises(DataError, match="no LLM 'gpt' here"):
        find_release(root, llm="gpt")
    assert find_release(root, llm="other_llm").datasets == ("nq",)


def test_a_missing_strategy_names_the_folder(tmp_path):
    root = write_release(tmp_path / "rel", skip=("oner", "musique"))
    with pytest.raises(DataError) as e:
        load_release(root)
    msg = str(e.value)
    assert "strategy 'one_retrieval' is missing for dataset 'musique'" in msg
    assert "oner_qa_my_llm_7b_musique____*" in msg and "dev_500" in msg


def test_an_id_in_one_strategy_only(tmp_path):
    root = write_release(tmp_path / "rel")
    path = next(folder_of(root, "ircot", "nq").glob("prediction__*.json"))
    preds = json.loads(path.read_text())
    preds["single_nq_dev_99"] = "extra"
    path.write_text(json.dumps(preds))
    with pytest.raises(DataError) as e:
        load_release(root)
    assert str(path) in str(e.value)
    assert "id 'single_nq_dev_99' is in this file but not in nor_qa_my_llm_7b_nq" in str(e.value)


def test_correctness_other_than_the_tag_or_0_1(tmp_path):
    root = write_release(tmp_path / "rel")
    path = next(folder_of(root, "oner", "nq").glob("zero_single_multi_*.json"))
    path.write_text(json.dumps({"single_nq_dev_2": 0.5}))
    with pytest.raises(DataError, match="id 'single_nq_dev_2': correctness 0.5 is neither 0/1"):
        load_release(root)
    path.write_text(json.dumps({"single_nq_dev_2": 1, "single_nq_dev_1": 0}))
    by_id = {r.question.extra["release_id"]: r for r in load_release(root)}
    assert by_id["single_nq_dev_2"].outcomes["one_retrieval"].correct
    assert not by_id["single_nq_dev_1"].outcomes["one_retrieval"].correct
    path.write_text(json.dumps({"single_nq_dev_7": ["single"]}))
    with pytest.raises(DataError, match="'single_nq_dev_7' is counted correct but has no pred"):
        load_release(root)


@pytest.mark.parametrize("kind", ["chains", "json"])
def test_a_release_file_not_utf8_is_refused_naming_it(tmp_path, kind):
    root = write_release(tmp_path / "rel")
    pattern = "prediction__*_chains.txt" if kind == "chains" else "ground_truth__*.json"
    path = next(folder_of(root, "nor", "nq").glob(pattern))
    data = path.read_bytes()
    path.write_bytes(data[:5] + b"\xe9" + data[5:])  # Latin-1 text: was an internal error
    with pytest.raises(DataError, match=re.escape(f"{path}: not valid UTF-8 (byte 5)")):
        load_release(root)


def test_not_a_release_folder(tmp_path):
    (tmp_path / "empty" / "predictions" / "dev_500").mkdir(parents=True)
    (tmp_path / "other" / "cache").mkdir(parents=True)  # folders, none of them a split
    for where in ("empty", "empty/predictions", "empty/predictions/dev_500", "other"):
        with pytest.raises(DataError, match="no Adaptive-RAG release here: expected " + re.escape(
                "[predictions/]<split>/<nor|oner|ircot>_qa_<llm>_<dataset>____*")):  # fmt: skip
            load_release(tmp_path / where)
    with pytest.raises(DataError, match="no Adaptive-RAG release folder here"):
        load_release(tmp_path / "nowhere")


def test_a_missing_release_folder_from_the_environment_is_said_to_come_from_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"no Adaptive-RAG release folder here \(from "
                       r"\$RETRIEVAL_GATE_ADAPTIVE_RAG\)"):  # fmt: skip
        load_dataset("adaptive-rag")
