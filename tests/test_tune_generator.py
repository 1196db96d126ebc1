"""`tune` asks the labelling generator, the one the labels' provenance names, as `evaluate`
does. It built every gate with SmolLM2: on labels made through a server it converted
SmolLM2's GGUF (~40 s) to key the confidence gate's dev scores, and would have answered
unrecorded questions with it. A generator with no local copy here lends only its identity
and recorded answers; what would run it is refused before any engine starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorded_runs import QUESTIONS, REMOTE, ROOT, labelled_run
from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set
from retrieval_gate.models import SMOLLM2


def _tune(gate: str, labels: Path, out: Path, *extra: str) -> int:
    return main(["tune", "--gate", gate, "--labels", str(labels), "--questions", QUESTIONS,
                 "--objective", "macro-f1", "--out", str(out), *extra])  # fmt: skip


def test_server_labels_tune_the_confidence_gate_from_their_answers_alone(tmp_path, no_generator):
    labels = labelled_run(tmp_path)
    out = tmp_path / "tune"
    assert _tune("confidence", labels, out) == 0
    result = json.loads((out / "tune-confidence-closed-book.json").read_text())
    named_by = f"named by {labels.with_suffix('.meta.json')}"
    assert result["generator"] == {"name": "stub-llm", "chosen": named_by}
    assert result["thresholds"]["macro-f1"]["dev_figures"]["macro_f1"] == 1.0  # answers read
    md = (out / "tune-confidence-closed-book.md").read_text()
    assert "The generator the gate asked: `stub-llm`" in md


def test_prompt_gates_on_server_labels_are_refused_before_the_labels_are_read(
    tmp_path, no_generator, monkeypatch, capsys
):
    from retrieval_gate.tuning import tune

    def unread(*args, **kwargs):
        raise AssertionError("the labels were read")

    monkeypatch.setattr(tune, "load_splits", unread)
    out = tmp_path / "tune"
    assert _tune("prompt-vanilla", labelled_run(tmp_path), out) == 2
    err = capsys.readouterr().err
    assert "stub-llm" in err and REMOTE in err
    assert "the prompt-vanilla gate asks it for every question" in err
    assert "tune a gate that reads its recorded answers (confidence)" in err
    assert not out.exists()


@pytest.mark.parametrize("split", ["dev", "test"])
def test_questions_scored_without_a_recorded_answer_are_refused(
    tmp_path, no_generator, capsys, split
):
    labels = labelled_run(tmp_path, unanswered=split)
    ids = sorted(q.id for q in question_set(QUESTIONS) if q.split == split)
    first = ids[0]
    assert _tune("confidence", labels, tmp_path / "tune") == 2
    err = capsys.readouterr().err
    assert f"2 of the {len(ids)} {split} questions of other have no recorded" in err
    assert f"(e.g. {first})" in err and "label them with it" in err
    assert "pass --generator MODEL (a local copy of it)" in err  # the fix, as evaluate's


def test_the_probe_on_server_labels_needs_its_model_folder(
    tmp_path, no_generator, monkeypatch, capsys
):
    from retrieval_gate.gates import probe

    # its own flag check resolves the probe model (SmolLM2 by default) before any gate
    monkeypatch.setattr(probe, "check_probe_options", lambda *args: None)
    assert _tune("probe", labelled_run(tmp_path), tmp_path / "tune") == 2
    assert "--probe-model FOLDER" in capsys.readouterr().err  # not SmolLM2's hidden states


def test_imported_outcomes_tune_with_their_own_generator(tmp_path, no_generator):
    """`label --policy outcomes` records no weights: the import's generator, never SmolLM2."""
    outcomes = ROOT / "examples" / "your-data" / "outcomes.jsonl"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 QUESTIONS, "--generator", "my-llm", "--labels-dir",
                 str(tmp_path / "labels")]) == 0  # fmt: skip
    out = tmp_path / "tune"
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    assert _tune("confidence", labels, out) == 0
    result = json.loads((out / "tune-confidence-closed-book.json").read_text())
    assert result["generator"]["name"] == "my-llm"


def test_the_bundled_labels_tune_with_smollm2_as_before(tmp_path):
    """The bundled run's gates ask the SmolLM2 they always did: the same options, and so the
    same checksum and dev-score cache keys."""
    from retrieval_gate.gates.registry import LazyGenerator
    from retrieval_gate.labels.labelling_run import DEFAULT_RUN_DIR
    from retrieval_gate.tuning.tune import TuneConfig

    cfg = TuneConfig(gate="confidence", labels=DEFAULT_RUN_DIR / "closed-book.jsonl")
    generator = cfg.generator()[0]
    assert type(generator) is LazyGenerator
    assert generator.options == LazyGenerator().options == {"name_or_path": SMOLLM2}
    bare = TuneConfig(gate="confidence", labels=tmp_path / "bare.jsonl")  # no provenance
    assert bare.generator()[0].options == {"name_or_path": SMOLLM2}
