"""Outcomes of N strategies become strategy labels (`label --policy outcomes` with a release
folder or `--strategies`): the strategies.jsonl schema, the no-answer treatments, and bad input
named before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from release_layout import write_release
from retrieval_gate.cli import main
from retrieval_gate.data.paths import resolve_data_dir
from retrieval_gate.labels.files import LabelFile, read_labels
from retrieval_gate.labels.strategies import read_strategy_labels

S3 = ["no_retrieval", "one_retrieval", "multi_step"]


def _label(*args: str) -> int:
    return main(["label", "--policy", "outcomes", *args])


def test_release_folder_gives_three_label_files(tmp_path):
    root = write_release(tmp_path / "rel")
    assert _label("--outcomes", str(root), "--labels-dir", str(tmp_path / "labels")) == 0
    run = tmp_path / "labels" / "my_llm_7b"
    labels = read_strategy_labels(run / "strategies.jsonl")
    assert labels.strategies == tuple(S3)
    rows = {labels.rows[i]["id"].rsplit("-", 1)[-1]: labels.rows[i] for i in labels.rows}
    one = rows["single_nq_dev_1"]  # closed-book right, retrieval hurts
    assert (
        one["label"] == 0 and one["cheapest"] == "no_retrieval" and one["target"] == one["cheapest"]
    )
    assert one["correct"] == {"no_retrieval": True, "one_retrieval": False, "multi_step": False}
    assert "prediction" not in one and "cost" not in one  # recorded, not judged here
    assert rows["single_nq_dev_2"]["cheapest"] == "one_retrieval"
    # answered by no strategy: Adaptive-RAG's prior, single-hop -> one, multi-hop -> multi
    assert rows["single_nq_dev_3"]["cheapest"] is None
    assert (rows["single_nq_dev_3"]["target"], rows["single_nq_dev_3"]["target_from"]) == (
        "one_retrieval",
        "prior",
    )
    assert rows["2hop__3_4"]["target"] == "multi_step"
    assert labels.meta["outcomes_format"] == "adaptive-rag-release"
    assert (
        labels.meta["release_split"] == "dev_500"
        and labels.meta["unanswered"]["treatment"] == "prior"
    )
    ids = sorted(labels.rows)
    assert labels.correct(ids).shape == (5, 3)
    assert np.allclose(labels.costs(ids, [0, 1, 3.35])[:, 2], 3.35)
    # the binary views beside it: closed-book = first strategy, rag-gain = first vs second
    assert read_labels(run / "closed-book.jsonl") == {i: labels.rows[i]["label"] for i in ids}
    gain = LabelFile(run / "rag-gain.jsonl")
    assert {r["effect"] for r in gain.rows.values()} == {"hurts", "helps", "neither"}
    assert LabelFile(run / "strategies.jsonl").labels() == read_labels(run / "closed-book.jsonl")


@pytest.mark.parametrize(
    ("treatment", "nq3", "musique"),
    [("exclude", (None, "excluded"), None), ("no_retrieval", ("no_retrieval", "fixed"), "no_retrieval"),
     ("prior:musique=one_retrieval", ("one_retrieval", "prior"), "one_retrieval")],
)  # fmt: skip
def test_unanswered_treatments(tmp_path, treatment, nq3, musique):
    root = write_release(tmp_path / "rel")
    out = tmp_path / "labels"
    assert _label("--outcomes", str(root), "--labels-dir", str(out), "--unanswered", treatment) == 0
    labels = read_strategy_labels(out / "my_llm_7b" / "strategies.jsonl")
    row = labels.rows["adaptive-rag-nq-single_nq_dev_3"]
    assert (row["target"], row["target_from"]) == nq3
    assert labels.rows["adaptive-rag-musique-2hop__3_4"]["target"] == musique
    assert labels.rows["adaptive-rag-musique-2hop__1_2"]["target"] == "multi_step"  # answered
    assert labels.targets(["adaptive-rag-nq-single_nq_dev_3"])[0] == (
        -1 if nq3[0] is None else S3.index(nq3[0])
    )


def test_the_bundle_labels_give_the_issue_figures(tmp_path):
    bundle = resolve_data_dir(download=False) / "adaptive-rag-llama8b"
    assert _label("--outcomes", str(bundle), "--labels-dir", str(tmp_path)) == 0
    labels = read_strategy_labels(tmp_path / "llama_8b_it" / "strategies.jsonl")
    ids = sorted(labels.rows)
    ok = labels.correct(ids)
    assert np.round(ok.mean(0), 3).tolist() == [0.287, 0.32, 0.354]
    cheapest = [labels.rows[i]["cheapest"] for i in ids]
    oracle = np.mean([c is not None for c in cheapest])
    cost = np.mean(
        [{None: 0, "no_retrieval": 0, "one_retrieval": 1, "multi_step": 3.35}[c] for c in cheapest]
    )
    assert (round(oracle, 3), round(cost, 2)) == (0.452, 0.28)


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


QS = [
    {
        "id": "a",
        "question": "Who wrote Hamlet?",
        "answers": ["William Shakespeare"],
        "source": "lit",
    },
    {"id": "b", "question": "Who painted the Zorblat?", "answers": ["Quen Vik"], "source": "art"},
    {"id": "c", "question": "Where is Oslo?", "answers": ["Norway"], "source": "geo"},
]


def _generic(tmp_path: Path, content: str, *extra: str) -> int:
    qs = tmp_path / "qs.jsonl"
    qs.write_text("".join(json.dumps(r) + "\n" for r in QS))
    return _label("--outcomes", str(_csv(tmp_path / "outcomes.csv", content)), "--questions", str(qs),
                  "--generator", "my-llm", "--labels-dir", str(tmp_path / "labels"), *extra)  # fmt: skip


def test_generic_file_with_strategies_costs_and_judged_answers(tmp_path):
    content = (
        "id,cheap_correct,mid_prediction,dear_correct,cheap_cost,mid_cost,dear_cost\n"
        "a,1,Shakespeare,yes,0,1,2.5\n"
        "b,0,It was Quen Vik,1,0,1,4\n"
        "c,no,Sweden,0,0,1,3\n"
    )
    code = _generic(tmp_path, content, "--strategies", "cheap,mid", "dear", "--unanswered", "dear")
    assert code == 0
    labels = read_strategy_labels(tmp_path / "labels" / "my-llm" / "strategies.jsonl")
    assert labels.strategies == ("cheap", "mid", "dear")
    a, b, c = (labels.rows[i] for i in "abc")
    assert a["correct"] == {"cheap": True, "mid": False, "dear": True}  # judged: no full name
    assert a["prediction"] == {"mid": "Shakespeare"} and a["cheapest"] == "cheap"
    assert b["cheapest"] == "mid" and b["label"] == 1
    assert (c["cheapest"], c["target"], c["target_from"]) == (None, "dear", "fixed")
    assert labels.costs(["b"], [0, 1, 3]).tolist() == [[0.0, 1.0, 4.0]]
    assert labels.meta["criterion"] == "loose-no-guess" and labels.meta["outcomes_sha256"]


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("id,cheap_correct,mid_correct\na,1,0\n", ["--strategies", "cheap", "dear"],
         "does not match the columns: no dear_correct/dear_prediction column; columns for "
         "strategies not listed: mid"),
        ("id,cheap_correct,mid_correct\na,1,2\n", ["--strategies", "cheap", "mid"],
         "line 2: mid_correct '2' is not true/false, 1/0 or yes/no"),
        ("id,cheap_correct,mid_correct,cheap_cost,mid_cost\na,1,0,0,-1\n",
         ["--strategies", "cheap", "mid"], "mid_cost -1.0 is negative"),
        ("id,cheap_correct,mid_correct\na,1,\n", ["--strategies", "cheap", "mid"],
         "no mid_correct and no mid_prediction value for 'a'"),
        ("id,cheap_correct,mid_correct\nc,0,0\n", ["--strategies", "cheap", "mid"],
         "its source 'geo' has no prior strategy: pass --unanswered prior:geo=STRATEGY"),
        ("id,cheap_correct\na,1\n", ["--strategies", "cheap"], "name two or more distinct"),
        ("id,cheap_correct,mid_correct\na,1,0\n", ["--strategies", "cheap", "mid", "--unanswered",
         "sometimes"], "--unanswered 'sometimes': expected prior"),
    ],
)  # fmt: skip
def test_bad_strategy_outcomes(tmp_path, capsys, content, flags, message):
    assert _generic(tmp_path, content, *flags) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "labels").exists()  # nothing written


def test_several_files_refuse_out_and_questions(tmp_path, capsys):
    root = write_release(tmp_path / "rel")
    assert _label("--outcomes", str(root), "--out", str(tmp_path / "x.jsonl")) == 2
    assert "write three files" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    qs = tmp_path / "qs.jsonl"
    qs.write_text(json.dumps(QS[0]) + "\n")
    code = _label("--outcomes", str(root), "--questions", str(qs), "--labels-dir", str(tmp_path))
    assert code == 2 and "carries its own questions" in capsys.readouterr().err
    code = _label(
        "--outcomes", str(root), "--strategies", "no", "one", "--labels-dir", str(tmp_path)
    )
    assert code == 2 and "a release folder has the strategies" in capsys.readouterr().err
    assert main(["label", "--policy", "closed-book", "--strategies", "a", "b"]) == 2
    assert "go with --policy outcomes" in capsys.readouterr().err
