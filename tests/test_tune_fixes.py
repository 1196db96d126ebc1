"""`tune` fixes: Ctrl-C in an hparams trial is "interrupted" (exit 130, as `train`), and the
study keeps its finished trials; `--generator` points a prompt gate at a local copy of the
labels' model folder (another model is refused); the report folder check names the files
this run writes, so a user's own `tune-notes.md` beside them is left alone."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import optuna
import pytest

from recorded_runs import QUESTIONS, labelled_run
from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set


def _tune(gate: str, labels: Path, out: Path, *extra: str) -> list[str]:
    return ["tune", "--gate", gate, "--labels", str(labels), "--questions", QUESTIONS,
            "--out", str(out), *extra]  # fmt: skip


# ------------------------------------------------------------------ Ctrl-C in hparams


@pytest.mark.slow  # two tiny training trials, then a resumed one
def test_ctrl_c_in_an_hparams_trial_exits_130_and_the_study_resumes(tmp_path, monkeypatch, capsys):
    """Lightning caught the KeyboardInterrupt, ignored SIGINT from then on and exited 1
    (Optuna let the SystemExit through: the trial stayed RUNNING); now it is "interrupted",
    exit 130, SIGINT's handler is put back, the finished trial is kept and a rerun resumes."""
    from retrieval_gate.tuning import hparams
    from tiny_backbones import tiny_body_sets

    labels = labelled_run(tmp_path)
    body = tiny_body_sets(tmp_path / "body", [q.text for q in question_set(QUESTIONS)])
    out = tmp_path / "tune"
    argv = _tune("learned", labels, out, "--objective", "hparams", "--trials", "2",
                 "--max-epochs", "1", "--set", *body, "data.batch_size=8", "data.max_length=16",
                 "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false")  # fmt: skip
    report = hparams.LightningPruning.on_validation_end

    def ctrl_c_in_trial_1(self, trainer, module):  # noqa: ANN001, ANN202
        report(self, trainer, module)
        if self.trial.number == 1 and not trainer.sanity_checking:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C during the second trial's fit

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with monkeypatch.context() as mp:
            mp.setattr(hparams.LightningPruning, "on_validation_end", ctrl_c_in_trial_1)
            assert main(argv) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not SIG_IGN
    finally:
        signal.signal(signal.SIGINT, handler)
    assert "retrieval-gate tune: interrupted" in capsys.readouterr().err
    storage = f"sqlite:///{out / 'studies.db'}"
    (name,) = optuna.get_all_study_names(storage)
    states = [t.state for t in optuna.load_study(study_name=name, storage=storage).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert main(argv) == 0  # resumed: one trial more, the finished one kept
    result = json.loads((out / "tune-hparams-closed-book.json").read_text())
    assert (result["trials_run_now"], result["n_complete"]) == (1, 2)


# ------------------------------------------------------------------ --generator


def _model_folder(folder: Path, weights: bytes) -> Path:
    """A folder `check_model_folder` takes: config.json and one weight file."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "pytorch_model.bin").write_bytes(weights)
    return folder


class _Engine:
    """Stands in for the engine a prompt gate asks: P(Yes) from the prompt's words."""

    def __init__(self, name_or_path: str, **options: object):
        from retrieval_gate.generation.model_folders import folder_checksum

        self.name, self.checksum = name_or_path, folder_checksum(Path(name_or_path))
        self.asked = 0

    def choice_probs(self, prompts: list[str], choices: list[str]) -> list[list[float]]:
        self.asked += len(prompts)
        return [[0.9, 0.1] if "capital" in p else [0.2, 0.8] for p in prompts]


@pytest.fixture
def folder_labels(tmp_path, no_generator):
    """Labels made by a local model folder: they record its name and weights checksum, not
    its path (no local copy is known), and the folder itself."""
    from retrieval_gate.generation.model_folders import folder_checksum

    model = _model_folder(tmp_path / "models" / "stub-llm", b"weights of the labels")
    return labelled_run(tmp_path, checksum=folder_checksum(model)), model


def test_a_prompt_gate_tunes_on_folder_labels_with_generator_pointing_at_the_copy(
    tmp_path, monkeypatch, folder_labels
):
    """Labels of a local model folder had no way to tune a prompt gate: tune asked only the
    labels' generator, which keeps the folder's name, not its path, and refused."""
    from retrieval_gate.generation import cache

    labels, model = folder_labels
    engines: list[_Engine] = []
    monkeypatch.setattr(cache, "lazy_generator", lambda **o: engines.append(_Engine(**o))
                        or engines[-1])  # fmt: skip
    out = tmp_path / "tune"
    argv = _tune("prompt-vanilla", labels, out, "--objective", "macro-f1")
    assert main([*argv, "--generator", str(model)]) == 0
    result = json.loads((out / "tune-prompt-vanilla-closed-book.json").read_text())
    assert result["generator"] == {"name": str(model), "chosen": "--generator"}
    assert [e.name for e in engines] == [str(model)] and engines[0].asked > 0


def test_a_generator_other_than_the_labels_is_refused_before_the_labels_are_read(
    tmp_path, monkeypatch, capsys, folder_labels
):
    from retrieval_gate.tuning import tune

    def unread(*args, **kwargs):
        raise AssertionError("the labels were read")

    monkeypatch.setattr(tune, "load_splits", unread)
    labels, _ = folder_labels
    other = _model_folder(tmp_path / "other", b"another model's weights")
    out = tmp_path / "tune"
    argv = _tune("prompt-vanilla", labels, out, "--objective", "macro-f1")
    for model, said in ((other, "holds weights"), ("org/some-llm", "is not a model folder")):
        assert main([*argv, "--generator", str(model)]) == 2
        err = capsys.readouterr().err
        assert f"--generator {model} is not the model that made the labels" in err
        assert said in err and "stub-llm" in err
    assert main([*argv, "--generator", str(tmp_path / "nowhere")]) == 2
    assert "no model folder here: pass --generator a folder" in capsys.readouterr().err
    assert main([*_tune("tfidf", labels, out), "--generator", str(other)]) == 2
    assert "--generator is asked by the" in capsys.readouterr().err
    assert not out.exists()


def test_without_generator_a_prompt_gate_on_folder_labels_is_told_the_flag(
    tmp_path, capsys, folder_labels
):
    labels, _ = folder_labels
    assert main(_tune("prompt-vanilla", labels, tmp_path / "tune")) == 2
    err = capsys.readouterr().err
    assert "the prompt-vanilla gate asks it for every question" in err
    assert "pass --generator MODEL (a local copy of it)" in err


# ------------------------------------------------------------------ the report folder check


def test_a_users_own_tune_files_beside_the_reports_are_left_alone(tmp_path, capsys):
    """Every `tune-*.md` / `tune-*.json` / `pareto-*.png` in --out was checked as if tune would
    write it: a user's notes there refused every run. Now only this run's files are."""
    labels = labelled_run(tmp_path)
    out = tmp_path / "tune"
    out.mkdir()
    mine = {"tune-notes.md": "my notes", "tune-plan.json": "{}", "pareto-sketch.png": "png"}
    for name, text in mine.items():
        (out / name).write_text(text)
    assert main([*_tune("tfidf", labels, out), "--objective", "macro-f1"]) == 0
    assert (out / "tune-tfidf-closed-book.md").is_file()
    assert {name: (out / name).read_text() for name in mine} == mine


@pytest.mark.parametrize(
    "objective, theirs",
    [("macro-f1", "tune-tfidf-closed-book.md"), ("macro-f1", "tune-tfidf-closed-book.json"),
     ("pareto", "pareto-tfidf-closed-book.png"), ("relations", "tune-popularity-relations-closed-book.md")],
)  # fmt: skip
def test_a_file_this_run_would_replace_is_still_refused(tmp_path, capsys, objective, theirs):
    from retrieval_gate.tuning.tune import writes

    labels = labelled_run(tmp_path)
    gate = "popularity" if objective == "relations" else "tfidf"
    assert theirs in writes(gate, labels, [objective])
    out = tmp_path / "tune"
    out.mkdir()
    (out / theirs).write_text("the user's")
    assert main([*_tune(gate, labels, out), "--objective", objective]) == 2
    err = capsys.readouterr().err
    assert f"{out / theirs}: already exists, and retrieval-gate did not write it" in err
    assert (out / theirs).read_text() == "the user's" and sorted(out.iterdir()) == [out / theirs]
