"""`evaluate` without --generator asks the labelling generator, the one the labels' provenance
names. It asked SmolLM2 for every label file: on labels made through a server it converted
SmolLM2's GGUF (~40 s) to key the confidence gate's score cache, timed SmolLM2 as the user's
LLM and would have answered unrecorded questions with it. A generator with no local copy here
now lends only its identity; what would run it is refused before any engine starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recorded_runs import QUESTIONS, REMOTE, ROOT, labelled_run
from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set
from retrieval_gate.errors import MissingInputError
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.models import SMOLLM2


def _evaluate(labels: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", "--labels", str(labels), "--questions", QUESTIONS, "--out",
                 str(out), "--resamples", "10", *extra])  # fmt: skip


def test_server_labels_score_the_confidence_gate_from_their_answers_alone(tmp_path, no_generator):
    labels = labelled_run(tmp_path)
    out = tmp_path / "report"
    assert _evaluate(labels, out, "--gates", "confidence", "--no-cost") == 0
    results = json.loads((out / "results.json").read_text())
    named_by = f"named by {labels.with_suffix('.meta.json')}"
    assert results["generator"] == {"name": "stub-llm", "chosen": named_by}
    gates = {g["name"]: g for g in results["policies"]["stub-llm/closed-book"]["gates"]}
    assert gates["confidence"]["metrics"]["auroc"] == 1.0  # the recorded answers, read
    assert "The generator those gates ask: `stub-llm`" in (out / "report.md").read_text()
    assert len(list((out / "scores").glob("confidence-*.json"))) == 1


def test_timing_a_server_labelled_generator_is_refused_before_anything_runs(
    tmp_path, no_generator, capsys
):
    labels = labelled_run(tmp_path)
    out = tmp_path / "report"
    assert _evaluate(labels, out, "--gates", "confidence", "--cost-questions", "6") == 2
    err = capsys.readouterr().err
    assert "stub-llm" in err and REMOTE in err and "timing the confidence gate's cost" in err
    assert "--generator MODEL (a local copy of it), or --no-cost" in err
    assert not out.exists()


def test_prompt_gates_on_server_labels_are_refused(tmp_path, no_generator, capsys):
    labels = labelled_run(tmp_path)
    argv = ["--gates", "prompt-vanilla", "tfidf", "--no-cost"]
    assert _evaluate(labels, tmp_path / "report", *argv) == 2
    err = capsys.readouterr().err
    assert "the prompt-vanilla gate asks it for every question" in err
    assert "--generator MODEL" in err


def test_test_questions_without_a_recorded_answer_are_refused(tmp_path, no_generator, capsys):
    labels = labelled_run(tmp_path, unanswered="test")
    first = sorted(q.id for q in question_set(QUESTIONS) if q.split == "test")[0]
    assert _evaluate(labels, tmp_path / "report", "--gates", "confidence", "--no-cost") == 2
    err = capsys.readouterr().err
    assert "2 of the 12 test questions of stub-llm/other have no recorded" in err
    assert f"(e.g. {first})" in err and "label them" in err and "--generator MODEL" in err


def test_imported_outcomes_name_their_generator(tmp_path, no_generator):
    """`label --policy outcomes` records no weights: the import's generator, never SmolLM2."""
    outcomes = ROOT / "examples" / "your-data" / "outcomes.jsonl"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 QUESTIONS, "--generator", "my-llm", "--labels-dir",
                 str(tmp_path / "labels")]) == 0  # fmt: skip
    out = tmp_path / "report"
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    assert _evaluate(labels, out, "--gates", "confidence", "--no-cost") == 0
    assert json.loads((out / "results.json").read_text())["generator"]["name"] == "my-llm"


def test_generator_flag_still_chooses_a_local_copy(tmp_path, no_generator):
    labels = labelled_run(tmp_path)
    out = tmp_path / "report"
    argv = ["--gates", "confidence", "--no-cost", "--generator", "org/stub-llm-copy"]
    assert _evaluate(labels, out, *argv) == 0  # a Hub name: its checksum is its name
    generator = json.loads((out / "results.json").read_text())["generator"]
    assert generator == {"name": "org/stub-llm-copy", "chosen": "--generator"}


def test_the_bundled_labels_and_local_generators_resolve_as_before(tmp_path):
    from retrieval_gate.gates.registry import (
        LazyGenerator,
        RecordedGenerator,
        labelling_generator,
    )
    from retrieval_gate.labels.labelling_run import DEFAULT_RUN_DIR

    bundled, named_by = labelling_generator(DEFAULT_RUN_DIR / "closed-book.jsonl", DEFAULT_RUN_DIR)
    assert type(bundled) is LazyGenerator and bundled.options == {"name_or_path": SMOLLM2}
    assert named_by.startswith("named by ")
    bare = tmp_path / "bare.jsonl"  # no provenance here or in its run: SmolLM2, as before
    assert labelling_generator(bare, tmp_path)[0].options == {"name_or_path": SMOLLM2}
    hub = labelled_run(tmp_path / "hub", checksum="stub-llm")  # a Hub name a local engine ran
    assert type(labelling_generator(hub, hub.parent)[0]) is LazyGenerator
    folder = labelled_run(tmp_path / "folder", checksum="ab" * 32)  # a folder's name, not path
    recorded = labelling_generator(folder, folder.parent)[0]
    assert isinstance(recorded, RecordedGenerator) and recorded.weights_known
    assert recorded.checksum == "ab" * 32


def test_the_probe_on_server_labels_needs_its_model_folder(tmp_path, no_generator):
    from retrieval_gate.gates.registry import (
        GateContext,
        GateOptions,
        build_gate,
        labelling_generator,
    )

    labels = labelled_run(tmp_path)
    generator = labelling_generator(labels, labels.parent)[0]
    qs = question_set(QUESTIONS)[:10]
    split = EvalSet(tuple(qs), np.arange(10) % 2, np.full(10, np.nan), np.full(10, np.nan))
    with pytest.raises(MissingInputError, match="--probe-model FOLDER"):
        build_gate("probe", GateContext(split, split, generator=generator), GateOptions())
