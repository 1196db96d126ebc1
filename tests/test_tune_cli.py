"""`tune` as a newcomer runs it on the example files: `--run-dir` taken from the label file's
folder, no study file for the exact 1-D objectives (and nothing claimed about one), `--trials`
said to be unused there. The tf-idf gate keeps it to a second."""

from __future__ import annotations

import json
import os
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


@pytest.mark.slow  # tunes popularity twice: about 9 s
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
    assert main([*argv[:-1], str(tmp_path / "out2")]) == 3  # a SQLite file is no server: its folder
    assert "check that its folder exists and may be written" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()


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


LABELS = "data/labels/smollm2-135m-instruct/closed-book.jsonl"


def _tune(tmp_path: Path, *flags: str) -> list[str]:
    return ["tune", "--gate", "popularity", "--labels", LABELS, "--out", str(tmp_path / "out"),
            *flags]  # fmt: skip


@pytest.mark.parametrize(
    ("storage", "message"),
    [("{tmp}/afile/x.db", "its folder cannot be made"),
     ("journal:/dev/null", "device, pipe or socket, not a journal"),
     ("/dev/null", "device, pipe or socket, not a SQLite file"),
     ("Journl:{tmp}/x.journal", "'Journl' is no storage kind")],
)  # fmt: skip
def test_a_storage_that_cannot_be_a_study_file_is_refused(tmp_path, capsys, storage, message):
    """A file where its folder goes, a device (fsync failed after the gate scored dev: exit
    1) or a FIFO (hung), a misspelt kind (made a SQLite file named 'Journl:...')."""
    (tmp_path / "afile").write_text("mine")
    fifo = tmp_path / "fifo.journal"
    os.mkfifo(fifo)
    for spec in (storage.format(tmp=tmp_path), f"journal:{fifo}"):
        assert main(_tune(tmp_path, "--objective", "pareto", "--storage", spec)) == 2, spec
        err = capsys.readouterr().err
        assert "Traceback" not in err and (message in err or "pipe or socket" in err), err
    assert not (tmp_path / "out").exists() and (tmp_path / "afile").read_text() == "mine"
    assert not list(Path.cwd().glob("Journl*"))


def test_journal_in_capitals_is_a_journal(tmp_path):
    from retrieval_gate.tuning.storage import storage_url

    assert storage_url(f"JOURNAL:{tmp_path}/x.journal") == f"journal:{tmp_path}/x.journal"


def test_a_database_password_is_hidden_in_reports_and_messages():
    """The report kept the command line word for word; a password with '/', '#' or '?'
    (which SQLAlchemy reads as the password) was shown whole."""
    from retrieval_gate.tuning.storage import shown, shown_arg

    for url in ("postgresql://rg:se/cret@127.0.0.1:5/db", "postgresql://rg:s#e?c@h/db",
                "postgresql://rg:secret@h/db"):  # fmt: skip
        for said in (shown(url), shown_arg(url), shown_arg(f"--storage={url}")):
            assert "***" in said and "se/cret" not in said and "secret" not in said, said
            assert "s#e?c" not in said and said.endswith("/db"), said
    assert shown_arg("--objective") == "--objective" and shown("a/b.db") == "a/b.db"


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--objective", "relations", "--feature", "o_pop"], "reads no --feature"),
     (["--objective", "pareto", "--target", "0.5"], "--target is read by")],
)  # fmt: skip
def test_flags_no_study_reads_are_refused(tmp_path, capsys, flags, message):
    """The relations study thresholds s_pop alone; the Pareto front reads no target."""
    assert main(_tune(tmp_path, *flags)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_refused_run_makes_no_folder(tmp_path, capsys):
    """--workers 2 with SQLite was refused after the storage's folder had been made."""
    out = tmp_path / "o12" / "sub"
    argv = _tune(tmp_path, "--objective", "pareto", "--workers", "2", "--storage",
                 str(out / "s.db"))  # fmt: skip
    assert main(argv) == 2 and "SQLite serves one process" in capsys.readouterr().err
    assert not (tmp_path / "o12").exists()


def test_a_users_file_named_like_the_dev_score_cache_is_kept(tmp_path, capsys):
    """tune replaced it with its .npz and exited 0."""
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "popularity-closed-book.dev-scores.npz"
    mine.write_text("my precious notes")
    assert main(_tune(tmp_path, "--objective", "macro-f1")) == 2
    assert mine.read_text() == "my precious notes" and str(mine) in capsys.readouterr().err
