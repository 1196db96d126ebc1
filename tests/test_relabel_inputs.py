"""`label --relabel`: the flags it reads (every other one refused, naming it, before anything
runs) and the writer lock it takes on the label file it rewrites, as `label` does.

No engine starts and no model loads: the label files are written here, in the shape `label`
writes them (rows keeping their measures, and the provenance beside them)."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import InputError
from retrieval_gate.labels.label_files import LabelFile
from retrieval_gate.labels.lock import single_writer
from retrieval_gate.labels.policies import relabel


def _measures(em: bool) -> dict:
    return {"match": True, "em": em, "f1": 1.0 if em else 0.5, "guess": False}


ROWS = {  # each policy's rows keep their own closed-book measures: no other file is read
    "closed-book": [{"id": "q1", "label": 0, **_measures(False)}],
    "rag-gain": [{"id": "q1", "label": 0, "rag_match": True, "rag_em": True, "rag_f1": 1.0,
                  "closed": _measures(False)}],
    "rrcp": [{"id": "q1", "label": 1, "label3": 1, "ans": False, "complex": False,
              "closed": _measures(False)}],
}  # fmt: skip


def _label_file(tmp_path, policy: str = "closed-book"):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS[policy]))
    meta = {"policy": policy, "generator": "relabel-llm", "criterion": "loose-no-guess"}
    (tmp_path / "mine.meta.json").write_text(json.dumps(meta))
    return path


def _files(tmp_path) -> dict:
    return {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


@pytest.fixture
def no_engine(monkeypatch):
    """`--throughput` would build the generator: a test that reaches it fails at once."""

    def started(*_, **__):
        raise AssertionError("engine started")

    monkeypatch.setattr("retrieval_gate.generation.build_generator", started)
    monkeypatch.setattr("retrieval_gate.rag.backends.open_generator", started)


@pytest.mark.parametrize(
    "policy, flags",
    [
        ("closed-book", ["--chunk-size", "8"]),
        ("closed-book", ["--backend", "vllm"]),
        ("closed-book", ["--report"]),
        ("closed-book", ["--throughput", "2"]),
        ("closed-book", ["--data-dir", "{tmp}"]),
        ("closed-book", ["--no-cache"]),
        ("rag-gain", ["--k", "3"]),
        ("rag-gain", ["--retriever", "contexts"]),
        ("rrcp", ["--t-ans", "0.5"]),
        ("rrcp", ["--evaluator", "llm"]),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else v,
)
def test_a_flag_relabel_never_reads_is_refused_naming_it(
    policy, flags, tmp_path, capsys, no_engine
):
    """They were accepted (exit 0) and ignored: `--chunk-size 8 --relabel` rewrote the file as
    without it, and `--report --relabel` printed the report, relabelling nothing."""
    path = _label_file(tmp_path, policy)
    before = _files(tmp_path)
    flags = [f.format(tmp=tmp_path) for f in flags]
    code = main(["label", "--policy", policy, "--relabel", "--criterion", "em",
                 "--out", str(path), *flags])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{flags[0]} is not read by --relabel" in err and f"drop {flags[0]}" in err, err
    assert "engine started" not in err and _files(tmp_path) == before


def test_relabel_without_a_policy_is_refused(tmp_path, capsys, no_engine):
    """`--relabel --report` printed the report; `--relabel` alone asked for --policy only after
    looking for the model folder."""
    assert main(["label", "--relabel", "--report", "--labels-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--relabel recomputes the labels of --policy's file: pass --policy closed-book" in err


def test_the_flags_relabel_reads_still_run(tmp_path, capsys):
    path = _label_file(tmp_path, "rag-gain")
    # --backend auto: its default, as if not given
    argv = ["label", "--policy", "rag-gain", "--relabel", "--criterion", "em", "--out",
            str(path), "--neither-label", "1", "--generator", "relabel-llm",
            "--backend", "auto"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["labels_changed"] == 1  # em: RAG helps
    assert LabelFile(path).meta["neither_label"] == 1


def test_relabel_is_refused_while_another_run_writes_the_file(tmp_path, capsys):
    """--relabel took no writer lock: a `label` run appending to the file meanwhile lost its
    rows to the rewrite. Refused now, the file untouched, naming it and what to do."""
    path = _label_file(tmp_path)
    before = _files(tmp_path)
    with single_writer(path):  # another labelling run, writing now
        code = main(["label", "--policy", "closed-book", "--relabel", "--criterion", "em",
                     "--out", str(path)])  # fmt: skip
        with pytest.raises(InputError, match="is writing this label file now"):
            relabel("closed-book", "em", out=path)  # the API takes it too
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: another labelling run (pid " in err, err
    assert "--relabel rewrites it whole: wait for that run to finish, then relabel" in err
    assert {p: b for p, b in _files(tmp_path).items() if p.name != ".mine.jsonl.lock"} == before
    assert relabel("closed-book", "em", out=path)["labels_changed"] == 1  # the lock let go


def test_a_label_run_is_refused_while_relabel_rewrites_the_file(tmp_path, monkeypatch):
    """The lock is held across the rewrite: a labelling run starting then is refused."""
    path = _label_file(tmp_path)
    rewrite, refused = LabelFile.rewrite, []

    def rewrite_while_another_run_starts(self, rows):
        with pytest.raises(InputError, match="another labelling run") as e:
            with single_writer(path):
                pass
        refused.append(e.value)
        return rewrite(self, rows)

    monkeypatch.setattr(LabelFile, "rewrite", rewrite_while_another_run_starts)
    assert relabel("closed-book", "em", out=path)["labels_changed"] == 1
    assert len(refused) == 1
