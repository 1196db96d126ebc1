"""The figures `evaluate` and `transfer` report: several label files, each scored with its own
labelling run's answers (not the first file's); the --cost-questions rule as help and docs say
it; no "95% CI" from too few resamples; the Mallen-protocol section on --feature's column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your-data" / "questions.csv"
GATES = ["always", "never", "popularity", "--feature", "views"]


@pytest.fixture(scope="module")
def labels(tmp_path_factory) -> Path:
    """Two generators' labels of the same 60 questions, every outcome of B the inverse of A's."""
    root = tmp_path_factory.mktemp("two-llms")
    with EXAMPLE.open(newline="") as f:  # the example's questions, from two sources: transfer
        rows = [r | {"source": "ab"[i % 2]} for i, r in enumerate(csv.DictReader(f))]
    with (root / "questions.csv").open("w", newline="") as f:
        (w := csv.DictWriter(f, list(rows[0]))).writeheader()
        w.writerows(rows)
    for gen, flip in (("llm-a", False), ("llm-b", True)):
        rows = [{"id": f"my-{i:03d}", "correct": (i % 3 == 0) != flip,
                 "rag_correct": (i % 2 == 0) != flip} for i in range(60)]  # fmt: skip
        path = root / f"{gen}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert main(["label", "--policy", "outcomes", "--outcomes", str(path), "--questions",
                     str(root / "questions.csv"), "--generator", gen, "--labels-dir", str(root)]) == 0  # fmt: skip
    return root


def _evaluate(out: Path, files: list[Path], *extra: str) -> dict:
    questions = str(files[0].parents[1] / "questions.csv")
    assert main(["evaluate", "--labels", *map(str, files), "--questions", questions, "--gates",
                 *GATES, "--no-cost", "--out", str(out), *extra]) == 0  # fmt: skip
    return json.loads((out / "results.json").read_text())


def _figures(policy: dict) -> dict:
    return {g["name"]: (g["metrics"], g["ci95"]) for g in policy["gates"]}


def test_each_label_file_is_scored_with_its_own_labelling_run(labels, tmp_path):
    a, b = labels / "llm-a" / "closed-book.jsonl", labels / "llm-b" / "closed-book.jsonl"
    both = _evaluate(tmp_path / "both", [a, b], "--resamples", "40")
    alone = {name: _evaluate(tmp_path / name.replace("/", "-"), [path], "--resamples", "40")
             for path, name in ((a, "llm-a/closed-book"), (b, "llm-b/closed-book"))}  # fmt: skip
    for name, one in alone.items():
        assert _figures(both["policies"][name]) == _figures(one["policies"][name]), name
    for name, one in alone.items():  # the Mallen protocol too: on each file's own answers
        assert both["mallen_protocol"][name] == one["mallen_protocol"][name]
    gates = {g["name"]: g["metrics"] for g in both["policies"]["llm-b/closed-book"]["gates"]}
    # B's answers are A's inverted: always retrieving is right exactly where A's is wrong
    assert gates["always"]["adaptive_accuracy"] == pytest.approx(
        1 - {g["name"]: g["metrics"] for g in both["policies"]["llm-a/closed-book"]["gates"]}[
            "always"]["adaptive_accuracy"])  # fmt: skip


def test_transfer_scores_each_label_file_with_its_own_labelling_run(labels, tmp_path):
    a, b = labels / "llm-a" / "rag-gain.jsonl", labels / "llm-b" / "closed-book.jsonl"

    def cells(out: Path, files: list[Path]) -> list[dict]:
        questions = str(labels / "questions.csv")
        assert main(["transfer", "--labels", *map(str, files), "--questions", questions,
                     "--gates", "popularity", "--feature", "views", "--out", str(out)]) == 0  # fmt: skip
        found = json.loads((out / "transfer.json").read_text())
        rows = found["cells"] if isinstance(found, dict) else found
        return [c for c in rows if c["policy"] == "closed-book"]

    assert cells(tmp_path / "both", [a, b]) == cells(tmp_path / "alone", [b])


def test_cost_questions_help_and_docs_say_what_is_timed():
    from retrieval_gate.evaluation.gate_comparison import timed_questions

    assert [timed_questions(n, True) for n in (1, 2, 10, 30, 90)] == [1, 2, 5, 10, 30]
    assert timed_questions(30, False) == 30  # a gate that asks no generator: all of them
    sub = build_parser(["evaluate"])._subparsers._group_actions[0].choices["evaluate"]
    helps = {a.dest: " ".join((a.help or "").split()) for a in sub._actions}
    said = "times a third of them, at least 5 and at most N"
    assert said in helps["cost_questions"]
    assert said in " ".join((ROOT / "docs" / "cli.md").read_text().split())


def test_too_few_resamples_give_no_interval():
    from retrieval_gate.evaluation.bootstrap import bootstrap_ci, min_resamples

    x = np.arange(30.0)
    mean = lambda i: float(x[i].mean())  # noqa: E731
    assert min_resamples() == 40 and bootstrap_ci(mean, 30, 1) is None
    assert bootstrap_ci(mean, 30, 39) is None
    lo, hi = bootstrap_ci(mean, 30, 40)
    assert lo < x.mean() < hi


def test_one_resample_reports_no_ci_and_says_why(labels, tmp_path, caplog):
    out = tmp_path / "one"
    results = _evaluate(out, [labels / "llm-a" / "rag-gain.jsonl"], "--resamples", "1")
    for gate in results["policies"]["llm-a/rag-gain"]["gates"]:
        assert all(ci is None for ci in gate["ci95"].values()), gate["name"]
    report = (out / "report.md").read_text()
    assert "No 95% CIs: 1 bootstrap resamples (--resamples) are fewer than the 40" in report
    assert "--resamples 1: a 95% percentile interval needs at least 40" in caplog.text


def test_mallen_protocol_reads_the_feature_the_popularity_gate_reads(labels, tmp_path):
    out = tmp_path / "views"
    results = _evaluate(out, [labels / "llm-a" / "closed-book.jsonl"], "--resamples", "40")
    report = (out / "report.md").read_text()
    section = report[report.index("## Popularity gate: Mallen") :]
    assert "n/a" not in section and "Thresholds on `views` fitted" in section
    assert "(--feature views)" in section
    assert "llm-a/closed-book, per-relation thresholds: adaptive accuracy" in section
    protocol = results["mallen_protocol"]["llm-a/closed-book"]
    with EXAMPLE.open(newline="") as f:
        viewed = sum(bool(r["views"]) for r in csv.DictReader(f))  # every answered one counts
    assert protocol["global"]["n_questions"] == viewed > 50
    assert "n/a" not in protocol["per-relation"]
