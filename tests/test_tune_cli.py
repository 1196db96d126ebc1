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
    assert main([*argv, "--seed", "3"]) == 0  # the seed of no sampler: said too
    assert "--trials, --seed are not used" in capsys.readouterr().err
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
    argv = ["tune", "--gate", "tfidf", "--questions", questions, "--labels", "elsewhere/mine.jsonl",
            "--objective", "adaptive-accuracy"]  # fmt: skip
    # nothing else asked: refused before the gate scores dev (it wrote a report that tuned
    # nothing and exited 0), with where the answers come from
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "pass --run-dir" in err and "no answer with retrieval" in err and "nothing tuned" in err
    assert not Path("reports/tune/tune-tfidf-mine.json").exists()
    # beside an objective that needs labels only: skipped with the reason, the other tuned
    assert main([*argv, "macro-f1"]) == 0
    result = json.loads(Path("reports/tune/tune-tfidf-mine.json").read_text())
    assert "pass --run-dir" in " ".join(result["skipped"].values())
    assert any(k.startswith("macro-f1") for k in result["thresholds"])


@pytest.mark.parametrize("as_url", [False, True])
def test_a_named_storage_is_checked_even_for_exact_objectives(tmp_path, capsys, as_url):
    """--storage the user names is checked before any work, also when only exact 1-D
    objectives run (a folder was silently accepted: the probe's ACCEPTED; as a sqlite:/// URL
    it was "check that the server runs")."""
    folder = tmp_path / "db-dir"
    folder.mkdir()
    argv = ["tune", "--gate", "popularity", "--labels",
            "data/labels/smollm2-135m-instruct/closed-book.jsonl", "--objective", "macro-f1",
            "--storage", f"sqlite:///{folder}" if as_url else str(folder),
            "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "is a folder; name a SQLite file in it" in err, err
    argv[argv.index("--storage") + 1] = f"sqlite:///{tmp_path}/no-such-folder/studies.db"
    assert main(argv) == 3  # a SQLite file is no server: the fix is its folder
    assert "check that its folder exists and may be written" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("objectives", "save", "refused"),
    [(["adaptive-accuracy", "pareto"], None, True), (["macro-f1", "min-retrieval"], None, False),
     (["macro-f1", "min-retrieval"], "min-retrieval", True),
     (["macro-f1", "min-retrieval"], "macro-f1", False)],
)  # fmt: skip
def test_objectives_without_recorded_answers_are_refused_before_the_gate(objectives, save, refused):
    """Dev questions with no answer with retrieval: every objective asked needs one, or the
    threshold to save does -> refused before the gate is built; else the others run."""
    import numpy as np

    from retrieval_gate.errors import MissingInputError
    from retrieval_gate.labels.evalset import EvalSet
    from retrieval_gate.questions import Question
    from retrieval_gate.tuning.tune import TuneConfig, _refuse_untunable

    qs = tuple(Question(id=f"q{i}", text=f"q{i}?", answers=("x",), source="s") for i in range(4))
    y = np.array([0.0, 1, 0, 1])
    dev = EvalSet(qs, y, 1 - y, np.full(4, np.nan))  # closed-book answers, none with retrieval
    cfg = TuneConfig(gate="learned", labels=Path("l.jsonl"), save_objective=save)
    if not refused:
        _refuse_untunable(cfg, dev, objectives)
        return
    with pytest.raises(MissingInputError, match="no answer with retrieval.*nothing tuned"):
        _refuse_untunable(cfg, dev, objectives)
