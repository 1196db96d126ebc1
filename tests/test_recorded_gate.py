"""Decisions made elsewhere as a gate (`--gates recorded --recorded FILE`): read by question
id, reported beside the other gates on the same test questions, tuned like any gate; a file
that misses a question, or holds a bad row, is refused with what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set
from retrieval_gate.errors import DataError
from retrieval_gate.gates.recorded import RecordedGate
from retrieval_gate.labels.label_files import read_labels

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "your-data"
QUESTIONS = str(EXAMPLES / "questions.csv")


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(EXAMPLES / "outcomes.jsonl"),
                 "--questions", QUESTIONS, "--generator", "my-llm", "--labels-dir",
                 str(root / "labels")]) == 0  # fmt: skip
    return root / "labels" / "my-llm" / "closed-book.jsonl"


def _evaluate(labels: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", "--labels", str(labels), "--questions", QUESTIONS, "--no-cost",
                 "--out", str(out), "--gates", "recorded", "always", *extra])  # fmt: skip


def _rows(out: Path) -> dict:
    report = json.loads((out / "results.json").read_text())
    return {g["name"]: g for g in report["policies"]["my-llm/closed-book"]["gates"]}


def test_recorded_scores_and_decisions_are_reported_beside_the_other_gates(labelled, tmp_path):
    labels = read_labels(labelled)
    qs = question_set(QUESTIONS)
    rng = np.random.default_rng(0)  # a peer that ranks well, not perfectly
    score = {q.id: float(np.clip(0.6 * labels[q.id] + 0.5 * rng.random(), 0, 1)) for q in qs}
    peer = tmp_path / "peer.jsonl"
    peer.write_text("".join(json.dumps({"id": i, "score": s}) + "\n" for i, s in score.items()))
    assert _evaluate(labelled, tmp_path / "a", "--recorded", str(peer)) == 0
    row = _rows(tmp_path / "a")["recorded:peer"]
    test = [q.id for q in qs if q.split == "test" and q.id in labels]
    expected = roc_auc_score([labels[i] for i in test], [score[i] for i in test])
    assert row["metrics"]["auroc"] == pytest.approx(expected)
    assert row["metrics"]["retrieval_rate"] == pytest.approx(
        np.mean([score[i] >= 0.5 for i in test])
    )
    # decisions alone (a CSV of true/false), and `tune` picks their threshold like any gate's
    decided = tmp_path / "decided.csv"
    decided.write_text("id,retrieve\n" + "".join(f"{i},{'yes' if s >= 0.5 else 'no'}\n"
                                                 for i, s in score.items()))  # fmt: skip
    assert _evaluate(labelled, tmp_path / "b", "--recorded", str(decided)) == 0
    row = _rows(tmp_path / "b")["recorded:decided"]
    assert row["metrics"]["retrieval_rate"] == pytest.approx(
        np.mean([score[i] >= 0.5 for i in test])
    )
    assert main(["tune", "--gate", "recorded", "--recorded", str(peer), "--questions", QUESTIONS,
                 "--labels", str(labelled), "--objective", "macro-f1", "--out",
                 str(tmp_path / "tune")]) == 0  # fmt: skip
    tuned = json.loads((tmp_path / "tune" / "tune-recorded-closed-book.json").read_text())
    assert tuned["gate"] == "recorded:peer" and "macro-f1" in tuned["thresholds"]
    # without --recorded: skipped with the reason, the other gates reported
    assert _evaluate(labelled, tmp_path / "c") == 0
    skipped = json.loads((tmp_path / "c" / "results.json").read_text())["skipped"]
    assert "--recorded" in skipped["recorded"]


@pytest.mark.parametrize(
    ("content", "message"),
    [('{"id": "my-000", "score": 1.5}\n', "line 1: score 1.5 is not a probability from 0 to 1"),
     ('{"qid": "my-000", "retrieve": true}\n', "line 1: the row has no 'id' (its columns: qid"),
     ('{"id": "my-000", "retrieve": "maybe"}\n', "line 1: retrieve 'maybe' is not true/false"),
     ('{"id": "my-000"}\n', "neither a 'score'"),
     ('{"id": "my-000", "score": true}\n', "line 1: score True is not a number (a decision goes in"),
     ('{"id": "my-000", "score": 0.2}\n{"id": "my-000", "score": 0.3}\n',
      "line 2: a second decision for question 'my-000' (first on line 1)")],
)  # fmt: skip
def test_a_bad_recorded_file_is_refused_before_any_gate_is_built(
    labelled, tmp_path, capsys, content, message
):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert _evaluate(labelled, tmp_path / "out", "--recorded", str(bad)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_question_without_a_recorded_decision_is_refused(labelled, tmp_path):
    few = tmp_path / "few.jsonl"
    few.write_text('{"id": "my-000", "score": 0.2}\n')
    with pytest.raises(DataError, match=r"2 of 3 questions have no recorded decision \(e.g. id "
                       r"'my-001'; the file's ids read like 'my-000'\)"):  # fmt: skip
        RecordedGate(few).scores([q for q in question_set(QUESTIONS)][:3])
