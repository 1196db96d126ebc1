"""`train`'s input checks that come before the model: a questions file edited under a run
being resumed, a dev split of one class under an AUROC or AP monitor, a label file's bad
answer log-probabilities, a file where the run folder goes. Each is refused before the model
loads (the module's loading is made to raise, so a check that came after it fails the test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import scratch
from retrieval_gate.errors import ConfigError, DataError
from retrieval_gate.training import load_config, train
from retrieval_gate.training import trainer as trainer_module
from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

QUESTIONS, LABELS = synthetic_questions()


class ModelLoaded(Exception):
    """Raised where the model would load: a check after it was too late."""


def model_loads(*args, **kwargs):
    raise ModelLoaded


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, request) -> Iterator[Path]:
    with scratch(tmp_path_factory, request, "train-inputs") as root:
        yield root


@pytest.fixture(scope="module")
def body(workdir) -> str:
    folder = workdir / "roberta"
    tiny_backbone("roberta", folder, [q.text for q in QUESTIONS])
    return str(folder)


@pytest.fixture
def no_model(monkeypatch):
    """The module (and so the body's weights) never loads."""
    monkeypatch.setattr(trainer_module, "RetrievalGateModule", model_loads)


def write_questions(path: Path, split=None, suffix: str = "") -> Path:
    """The synthetic questions as a questions file; `split(i)`: the split column's values."""
    with open(path, "w") as f:
        for i, q in enumerate(QUESTIONS):
            row = {"id": q.id, "question": q.text + suffix, "answers": list(q.answers)}
            if split is not None:
                row["split"] = split(i)
            f.write(json.dumps(row) + "\n")
    return path


def config(tmp_path: Path, body: str, questions: Path, *overrides: str):
    labels = write_label_file(tmp_path / "labels.jsonl", LABELS)
    cfg = tiny_config(labels, tmp_path / "ck", "encoder", body, pooling="cls")
    return cfg.override("run.name=r", f"data.questions={questions}", *overrides)


@pytest.mark.slow  # trains one tiny run (a few seconds)
def test_resume_refuses_a_questions_file_changed_since(tmp_path, body, monkeypatch):
    """The config hash held data.questions' path alone: a copy edited under the run (a
    `split` column added, texts reworded) resumed, its new split put questions the first
    epoch trained on into test, and metrics.json reported them as test figures."""
    qs = write_questions(tmp_path / "q.jsonl")
    cfg = config(tmp_path, body, qs)
    run = train(cfg)
    monkeypatch.setattr(trainer_module, "prepare", model_loads)  # nor the tokenizer
    longer = cfg.override("trainer.max_epochs=2")
    with pytest.raises(ModelLoaded):  # the same file resumes
        train(longer, resume=True)
    write_questions(qs, split=lambda i: ("train", "dev", "test")[i % 3], suffix=" now")
    with pytest.raises(ConfigError, match=rf"data\.questions: {qs} changed since the run in "
                       r".*train into another run\.name, or pass --overwrite"):  # fmt: skip
        train(longer, resume=True)
    # a run.json from before the checksum resumes as before
    recorded = json.loads((run / "run.json").read_text())
    assert isinstance(recorded.pop("questions_sha256"), str)
    (run / "run.json").write_text(json.dumps(recorded))
    with pytest.raises(ModelLoaded):
        train(longer, resume=True)


def dev_of_one_class(i: int) -> str:
    """Dev: questions 1, 11, 21, ... (all label 1); test: both kinds; the rest train."""
    return {1: "dev", 0: "test", 5: "test"}.get(i % 10, "train")


def test_a_dev_split_of_one_class_is_refused_under_an_auroc_monitor(tmp_path, body, no_model):
    """Early stopping and the kept epoch ran on a dev AUROC logged as 0.0: best.ckpt was the
    first epoch whatever came after, and only a note after training said so."""
    from retrieval_gate.commands.train import check_labels

    qs = write_questions(tmp_path / "q.jsonl", split=dev_of_one_class)
    fix = r"or --set early_stopping\.monitor=val/loss early_stopping\.mode=min"
    for monitor in ("val/auroc", "val/ap"):
        cfg = config(tmp_path, body, qs, f"early_stopping.monitor={monitor}")
        message = rf"dev split's 16 labelled questions all need retrieval.*{monitor}.*{fix}"
        with pytest.raises(ConfigError, match=message):
            check_labels(cfg)  # the command's check, before Lightning loads
        with pytest.raises(ConfigError, match=message):
            train(cfg)  # the Python API's, before the model loads
    assert not (tmp_path / "ck").exists()
    fine = config(tmp_path, body, qs, "early_stopping.monitor=val/loss",
                  "early_stopping.mode=min")  # fmt: skip
    check_labels(fine)
    with pytest.raises(ModelLoaded):
        train(fine)


CASCADE = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
           "data.max_length=24", "model.pooling=cls"]  # fmt: skip
GOOD = [-0.758, -0.421]


def cascade(tmp_path: Path, cell, **row) -> tuple:
    """A two-stage gate's config on a label file whose third row (id q2) has `cell` as its
    token_logprobs (`row`: more of its fields)."""
    labels = tmp_path / "lp.jsonl"
    with open(labels, "w") as f:
        for qid, y in LABELS.items():
            line = {"id": qid, "label": y, "prediction": "x", "token_logprobs": GOOD}
            if qid == "q2":
                line.update(token_logprobs=cell, **row)
            f.write(json.dumps(line) + "\n")
    qs = write_questions(tmp_path / "q.jsonl")
    cfg = load_config("cascade-closed-book", [*CASCADE, f"data.questions={qs}",
                      f"data.label_file={labels}", f"run.output_dir={tmp_path / 'ck'}",
                      "model.name=no-model-is-read"])  # fmt: skip
    return cfg, labels


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ([0.5, -1], r"token 1: is 0\.5, above 0"),
        ([[-0.5], [-1]], r"token 1: \[-0\.5\] is not a number"),
        (float("nan"), r"nan is not a list of log-probabilities"),
        ([float("nan")], r"token 1: is nan"),
        ([], r"is an empty list, but the row has an answer.*or leave the cell null"),
        ({"no_retrieval": [-0.5]}, r"a \{strategy: list\} mapping is read only in a router's"),
    ],
)
def test_bad_answer_logprobs_of_a_label_file_are_refused_with_their_row_before_the_model(
    tmp_path, cell, message, no_model
):
    """The frozen body ran over every question first, then a bad cell was refused without
    its line or id; an empty list beside an answer and a {strategy: list} cell read as "no
    answer" without a word."""
    from retrieval_gate.commands.train import check_labels

    cfg, labels = cascade(tmp_path, cell)
    where = rf"{labels}, line 3: id 'q2': column 'token_logprobs'"
    with pytest.raises(DataError, match=rf"{where}.*{message}"):
        check_labels(cfg)
    with pytest.raises(DataError, match=rf"{where}.*{message}"):
        train(cfg)  # the Python API: refused before its model loads (`no_model`)


def test_answer_logprobs_a_label_file_may_hold_are_read_as_before(tmp_path, no_model):
    """An empty list beside an answer recorded empty is no answer; an OpenAI-compatible
    `logprobs` object is its list (it was dropped, read as no answer)."""
    from retrieval_gate.commands.train import check_labels
    from retrieval_gate.labels.logprobs import answer_logprobs

    cfg, labels = cascade(tmp_path, [], prediction=None)
    check_labels(cfg)
    assert "q2" not in answer_logprobs(labels) and "q3" in answer_logprobs(labels)
    cfg, labels = cascade(tmp_path, {"content": [{"token": "x", "logprob": -0.25}]})
    check_labels(cfg)
    assert answer_logprobs(labels)["q2"].token_logprobs == (-0.25,)


def test_a_file_where_the_run_folder_goes_asks_for_another_run_name(tmp_path):
    """A file in the run folder's own place was put as one above it: "pass another
    run.output_dir", where the run's name is what clashes."""
    from retrieval_gate.training.trainer import check_run_dir

    labels = write_label_file(tmp_path / "labels.jsonl", LABELS)
    cfg = tiny_config(labels, tmp_path / "ck", "encoder", "no-model-is-read")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "notes").write_text("mine")
    with pytest.raises(ConfigError, match=r"run\.name: .*ck/notes is a file, where the run "
                       r"folder would go; pass another run\.name"):  # fmt: skip
        check_run_dir(tmp_path / "ck" / "notes", cfg)
    under = r"run\.output_dir: .*ck/notes is a file, so the run folder .*notes/x cannot go under"
    with pytest.raises(ConfigError, match=rf"{under} it; pass another run\.output_dir"):
        check_run_dir(tmp_path / "ck" / "notes" / "x", cfg)
