"""Which Adaptive-RAG release a router's labels are read against: train (training/sources.py)
and evaluate/tune (labels/evalset.py) resolve it alike (`labels_release`). Tiny releases in
tmp_path; a stand-in bundle in a data folder of their own, holding the same question ids, so
that a fall-back onto the bundle trains without a word (as it did on the real one)."""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest

from release_layout import write_release
from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.labels.evalset import label_file_names, load_splits
from retrieval_gate.training.config import DataConfig
from retrieval_gate.training.sources import config_questions, labelled_questions

LLM = "qwen_7b_it"
ENV = "RETRIEVAL_GATE_ADAPTIVE_RAG"


def _questions(n: int) -> dict:
    """`n` questions per dataset in release_layout's form, their outcomes varied (each
    strategy right on some, wrong on others)."""
    out: dict[str, list] = {"nq": [], "musique": []}
    for i in range(n):
        for dataset, qid in (("nq", f"single_nq_dev_{i}"), ("musique", f"2hop__{i}_{i + 1}")):
            right = {"nor": i % 3 == 0, "oner": i % 3 == 1 or i % 5 == 0, "ircot": i % 2 == 0}
            gold = f"answer {i}"
            outs = {k: (gold if ok else "no idea", int(ok)) for k, ok in right.items()}
            out[dataset].append((qid, f"which zorblat of {dataset} came {i}th", [gold], outs))
    return out


@pytest.fixture
def bundle(tmp_path, monkeypatch) -> Path:
    """A data folder whose `adaptive-rag-llama8b` bundle holds 30 questions a dataset, the
    variable unset."""
    data = tmp_path / "data"
    write_release(data / "adaptive-rag-llama8b", llm="llama8b", questions=_questions(30))
    monkeypatch.setenv("RETRIEVAL_GATE_DATA", str(data))
    monkeypatch.delenv(ENV, raising=False)
    return data / "adaptive-rag-llama8b"


def _imported(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A release of 20 questions a dataset (ids of the bundle's) and its imported labels."""
    root = write_release(tmp_path / name, llm=LLM, questions=_questions(20))
    labels = tmp_path / f"labels-{name}"
    argv = ["label", "--policy", "outcomes", "--outcomes", str(root), "--labels-dir", str(labels)]
    assert main(argv) == 0
    return root, labels / LLM / "strategies.jsonl"


def _router(label_file: Path | str) -> DataConfig:
    return DataConfig(label_file=str(label_file), task="strategies", datasets=("adaptive-rag",))


def _splits(label_file: Path | str) -> dict[str, str]:
    s = load_splits(label_file)
    return {q.id: p for p in ("train", "dev", "test") for q in getattr(s, p).questions}


class _Loaded(Exception):
    """Raised where the model code would load: the labels were accepted."""


def _no_model(monkeypatch) -> None:
    """train's first step past the label checks (`training.launch`) raises `_Loaded`."""

    def loaded(name: str):
        if name.startswith("__"):  # the import machinery's own questions
            raise AttributeError(name)
        raise _Loaded(name)

    launch = types.ModuleType("retrieval_gate.training.launch")
    launch.__getattr__ = loaded  # type: ignore[attr-defined]  # any name taken from it
    monkeypatch.setitem(sys.modules, "retrieval_gate.training.launch", launch)


def test_train_refuses_labels_whose_release_was_moved_before_any_model_loads(
    tmp_path, bundle, monkeypatch, capsys
):
    """The release a label file was imported from, moved: train read "no release" and split
    the bundled one (cut down to the labelled ids), exit 0; evaluate refused it."""
    root, label_file = _imported(tmp_path, "relY")
    root.rename(tmp_path / "relY_moved")
    _no_model(monkeypatch)
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--config", "router-adaptive-rag-llama8b",
            "--set", f"data.label_file={label_file}", "run.name=qwenY"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"imported from the Adaptive-RAG release {root}/predictions/dev_500" in err
    assert "which is no longer there" in err and "--outcomes FOLDER" in err
    # evaluate and tune refuse it with the same words
    with pytest.raises(DataError, match="relY/predictions/dev_500 .* no longer there"):
        load_splits(label_file)
    with pytest.raises(DataError, match="no longer there"):
        config_questions(_router(label_file))


def test_the_variable_naming_another_release_is_refused_by_train_and_evaluate(
    tmp_path, bundle, monkeypatch
):
    """$RETRIEVAL_GATE_ADAPTIVE_RAG at the bundle, labels imported from relA: train split the
    bundle's questions, evaluate relA's (a test question of one was a dev question of the
    other)."""
    root, label_file = _imported(tmp_path, "relA")
    unset = _splits(label_file)
    monkeypatch.setenv(ENV, str(bundle))
    for source in (label_file, root):  # the import, and the folder itself as the labels
        for read in (lambda s: labelled_questions(_router(s)), load_splits):
            with pytest.raises(DataError) as e:
                read(source)
            assert f"${ENV} names the Adaptive-RAG release {bundle}, but these labels come " \
                   f"from the release {root}/predictions/dev_500" in str(e.value)  # fmt: skip
            assert f"unset ${ENV}, or label from the release it names" in str(e.value)
    # beside other datasets too: the variable's release would be read there
    both = DataConfig(label_file=str(label_file), task="strategies",
                      datasets=("adaptive-rag", "nq"))  # fmt: skip
    with pytest.raises(DataError, match="names the Adaptive-RAG release"):
        config_questions(both)
    # the labels' own release, however named (its root, its split folder, a copy): one split
    copy = tmp_path / "relA-copy"
    shutil.copytree(root, copy)
    for same in (root, root / "predictions" / "dev_500", copy):
        monkeypatch.setenv(ENV, str(same))
        trained = {q.id: q.split for q in config_questions(_router(label_file))}
        assert trained == unset == _splits(label_file)


def test_the_variable_names_the_release_of_labels_that_name_none(tmp_path, bundle, monkeypatch):
    """`adaptive-rag` (no recorded release): the variable's release, for train and evaluate
    alike, split alike."""
    root = write_release(tmp_path / "relE", llm=LLM, questions=_questions(25))
    monkeypatch.setenv(ENV, str(root))
    _, rows, _ = labelled_questions(_router("adaptive-rag"))
    trained = {qid: split for split, part in rows.items() for qid, *_ in part}
    assert len(trained) == 50 and trained == _splits("adaptive-rag")


def test_a_release_folder_is_named_by_its_llm_as_its_import_is(tmp_path, bundle):
    """`evaluate --labels relA` titled its section `relA`, naming no LLM; its import is
    `qwen_7b_it/strategies`."""
    root, label_file = _imported(tmp_path, "relA")
    assert list(label_file_names([root])) == [f"{LLM}/strategies"]
    assert list(label_file_names([label_file])) == [f"{LLM}/strategies"]
    # both in one report: still one name each
    assert len(label_file_names([root, label_file])) == 2
    # a folder that is no release keeps its own name (load_splits says why)
    (tmp_path / "plain").mkdir()
    assert list(label_file_names([tmp_path / "plain"])) == ["plain"]
