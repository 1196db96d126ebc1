"""The user's own answer log-probabilities, from `label --policy outcomes` to the gates that
read them. A label row whose `mean_logprob` is null beside an answer records none: the
confidence gate scored it 1.0 ("certainly wrong"), with no word, and `evaluate` listed it as a
twin of `always`. A questions file whose `token_logprobs` were not the label file's answers
was read over them by a two-stage gate, unsaid. A bad cell was refused under the project's
column name, not the one in the user's file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorded_runs import QUESTIONS, ROOT
from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set
from retrieval_gate.errors import DataError, MissingInputError
from retrieval_gate.gates.confidence import ConfidenceGate
from retrieval_gate.gates.registry import GateContext, RecordedGenerator, build_gate
from retrieval_gate.labels.logprobs import with_answer_logprobs
from retrieval_gate.questions import Question

OUTCOMES = ROOT / "examples" / "your-data" / "outcomes.jsonl"


def _outcomes(folder: Path, keep_logprobs=lambda i: True, **cells) -> Path:
    """The example outcomes, `token_logprobs` kept where `keep_logprobs(row index)`; `cells`:
    row index -> {column: value} set in that row."""
    rows = [json.loads(line) for line in OUTCOMES.read_text().splitlines()]
    for i, row in enumerate(rows):
        if not keep_logprobs(i):
            del row["token_logprobs"]
        row.update(cells.get(f"row{i}", {}))
    path = folder / "outcomes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _label(outcomes: Path, folder: Path, *extra: str) -> int:
    return main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 QUESTIONS, "--generator", "my-llm", "--labels-dir", str(folder / "labels"),
                 *extra])  # fmt: skip


# 1. answers imported without log-probabilities: not scored 1.0


def test_a_record_without_log_probabilities_is_not_scored_as_certainly_wrong():
    records = {"a": {"mean_logprob": -0.1, "idk": False},
               "b": {"mean_logprob": None, "idk": None, "prediction": None}}  # fmt: skip
    q = [Question(i, "x", (), "mine") for i in ("a", "b")]
    with pytest.raises(MissingInputError, match=r"1 record no mean_logprob / token_logprobs"):
        ConfidenceGate(records).scores(q)
    declined = {"b": {"mean_logprob": None, "idk": True, "prediction": ""}}  # no tokens: 1.0
    assert ConfidenceGate(declined).scores(q[1:]).tolist() == [1.0]


def test_the_gate_is_not_built_on_imported_answers_without_log_probabilities():
    records = {f"q{i}": {"mean_logprob": -0.2 if i % 3 else None, "idk": None} for i in range(6)}
    recorded = RecordedGenerator("my-llm", "recorded:my-llm", "its answers were imported",
                                 Path("labels/my-llm/closed-book.meta.json"))  # fmt: skip
    with pytest.raises(MissingInputError, match=r"2 of the 6 recorded closed-book answers") as e:
        build_gate("confidence", GateContext(closed_book=records, generator=recorded))
    assert "e.g. q0" in str(e.value) and "--generator MODEL" in str(e.value)


@pytest.mark.slow  # the first evaluate imports its plotting and bootstrap (5 s)
@pytest.mark.parametrize("kept", [lambda i: False, lambda i: i % 3 != 0], ids=["none", "some"])
def test_evaluate_skips_the_confidence_gate_naming_the_count(tmp_path, no_generator, kept):
    assert _label(_outcomes(tmp_path, kept), tmp_path) == 0
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    out = tmp_path / "report"
    assert main(["evaluate", "--labels", str(labels), "--questions", QUESTIONS, "--gates",
                 "confidence", "always", "--no-cost", "--resamples", "10", "--out",
                 str(out)]) == 0  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    gates = [g["name"] for p in results["policies"].values() for g in p["gates"]]
    assert gates == ["always"]
    (why,) = [v for k, v in results["skipped"].items() if k.startswith("confidence")]
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    lacking = sum(r["mean_logprob"] is None and not r["idk"] for r in rows)  # not declined
    assert 0 < lacking <= sum(not kept(i) for i in range(60))
    assert f"{lacking} of the 60 recorded closed-book answers record no log-prob" in why
    assert "skipped confidence" in (out / "report.md").read_text()


def test_tune_refuses_the_confidence_gate_on_answers_without_log_probabilities(
    tmp_path, no_generator, capsys
):
    assert _label(_outcomes(tmp_path, lambda i: False), tmp_path) == 0
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    assert main(["tune", "--gate", "confidence", "--labels", str(labels), "--questions",
                 QUESTIONS, "--objective", "macro-f1", "--out", str(tmp_path / "tune")]) == 2  # fmt: skip
    assert "of the 60 recorded closed-book answers record no" in capsys.readouterr().err


# 2. a questions file's log-probabilities beside the label file's


def _questions_with(folder: Path, lists: dict[str, list[float]]) -> Path:
    """examples/your-data/questions.csv with a token_logprobs column (JSON lists)."""
    import csv

    with open(QUESTIONS, newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["token_logprobs"] = json.dumps(lists.get(row["id"])) if row["id"] in lists else ""
    path = folder / "questions.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _recorded_lists() -> dict[str, list[float]]:
    return {(r := json.loads(line))["id"]: r["token_logprobs"]
            for line in OUTCOMES.read_text().splitlines()}  # fmt: skip


def test_a_questions_file_whose_log_probabilities_differ_from_the_labels_is_refused(tmp_path):
    assert _label(OUTCOMES, tmp_path) == 0
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    lists = _recorded_lists()
    ids = sorted(lists)
    shuffled = {i: lists[ids[(k + 1) % len(ids)]] for k, i in enumerate(ids)}  # another's
    qs = {q.id: q for q in question_set(str(_questions_with(tmp_path, shuffled)))}
    with pytest.raises(DataError) as e:
        with_answer_logprobs(qs, labels, "data.questions=q.csv")
    message = str(e.value)
    assert str(labels) in message and "data.questions=q.csv" in message
    assert "questions (the first: 'my-000')" in message
    assert "Drop that column from the questions file" in message and "re-label" in message


def test_a_questions_file_with_the_labels_own_log_probabilities_is_read(tmp_path):
    assert _label(OUTCOMES, tmp_path) == 0
    labels = tmp_path / "labels" / "my-llm" / "closed-book.jsonl"
    lists = _recorded_lists()
    finer = {i: [x - 0.00001 if x < 0 else x for x in v] for i, v in lists.items()}  # unrounded
    qs = {q.id: q for q in question_set(str(_questions_with(tmp_path, finer)))}
    read = with_answer_logprobs(qs, labels)
    assert read["my-000"].extra["token_logprobs"] == qs["my-000"].extra["token_logprobs"]


# 3. a bad cell named by the user's own column


@pytest.mark.parametrize(
    ("cell", "extra", "column"),
    [
        ({"logprobs": {"content": None, "refusal": None}}, (), "logprobs"),
        ({"answer_logprobs": [-0.1, 0.3]}, ("token_logprobs=answer_logprobs",), "answer_logprobs"),
        ({"answer_logprobs": 0.3}, ("mean_logprob=answer_logprobs",), "answer_logprobs"),
    ],
)
def test_a_bad_log_probability_cell_is_named_by_the_users_column(
    tmp_path, capsys, cell, extra, column
):
    outcomes = _outcomes(tmp_path, lambda i: False, row2=cell)
    flags = ("--outcome-field", *extra) if extra else ()
    assert _label(outcomes, tmp_path, *flags) == 2
    err = capsys.readouterr().err
    assert f"outcomes.jsonl, line 3: column {column!r}" in err
    assert "'token_logprobs'" not in err and "'mean_logprob'" not in err
