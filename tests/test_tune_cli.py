"""`tune` as a newcomer runs it on the example files: `--run-dir` taken from the label file's
folder, no study file for the exact 1-D objectives (and nothing claimed about one), `--trials`
said to be unused there. The tf-idf gate keeps it to a second."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_gate.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "your-data"


@pytest.mark.slow  # optuna, scikit-learn and the question file: about 8 s on a loaded machine
def test_tune_infers_the_run_dir_and_writes_only_its_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    questions = str(EXAMPLES / "questions.csv")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(EXAMPLES / "outcomes.jsonl"),
                 "--questions", questions, "--generator", "my-llm", "--labels-dir", "labels"]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["tune", "--gate", "tfidf", "--questions", questions, "--labels",
            "labels/my-llm/closed-book.jsonl", "--objective", "adaptive-accuracy", "macro-f1",
            "--trials", "7"]  # fmt: skip
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "--trials is not used" in err and "exact" in err
    assert "studies" not in out and "wrote reports/tune/tune-tfidf-closed-book.md" in out
    assert not Path("reports/tune/studies.db").exists()  # no study: no database file
    result = json.loads(Path("reports/tune/tune-tfidf-closed-book.json").read_text())
    # adaptive accuracy needs the recorded answers: found in labels/my-llm, not the SmolLM2 run
    assert any(k.startswith("adaptive-accuracy") for k in result["thresholds"]), result["skipped"]


def test_tune_without_recorded_answers_names_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    questions = str(EXAMPLES / "questions.csv")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(EXAMPLES / "outcomes.jsonl"),
                 "--questions", questions, "--generator", "my-llm", "--labels-dir", "labels"]) == 0  # fmt: skip
    Path("elsewhere").mkdir()  # the label file alone, away from its labelling run
    for name in ("closed-book.jsonl", "closed-book.meta.json"):
        Path("elsewhere", name.replace("closed-book", "mine")).write_bytes(
            Path("labels/my-llm", name).read_bytes()
        )
    capsys.readouterr()
    assert main(["tune", "--gate", "tfidf", "--questions", questions, "--labels", "elsewhere/mine.jsonl",
                 "--objective", "adaptive-accuracy"]) == 0  # fmt: skip
    result = json.loads(Path("reports/tune/tune-tfidf-mine.json").read_text())
    assert "pass --run-dir" in " ".join(result["skipped"].values())


def test_a_named_storage_is_checked_even_for_exact_objectives(tmp_path, capsys):
    """--storage the user names is checked before any work, also when only exact 1-D
    objectives run (a folder was silently accepted: the probe's ACCEPTED)."""
    folder = tmp_path / "db-dir"
    folder.mkdir()
    argv = ["tune", "--gate", "popularity", "--labels",
            "data/labels/smollm2-135m-instruct/closed-book.jsonl", "--objective", "macro-f1",
            "--storage", str(folder), "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    assert str(folder) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
