"""Decisions made elsewhere as a gate (`--gates recorded --recorded FILE`): read by question
id, reported beside the other gates on the same test questions, tuned like any gate; a file
that misses a question, or holds a bad row, is refused with what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from retrieval_gate.cli import main
from retrieval_gate.data.user_questions import question_set
from retrieval_gate.errors import DataError
from retrieval_gate.gates.recorded import RecordedGate
from retrieval_gate.labels.label_files import read_labels

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "your-data"
QUESTIONS = str(EXAMPLES / "questions.csv")


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(EXAMPLES / "outcomes.jsonl"),
                 "--questions", QUESTIONS, "--generator", "my-llm", "--labels-dir",
                 str(root / "labels")]) == 0  # fmt: skip
    return root / "labels" / "my-llm" / "closed-book.jsonl"


def test_the_example_outcomes_are_not_told_apart_by_their_length(labelled):
    """The example LLM's wrong answers were all one 9-token hedge: the answer's length (and
    a two-stage gate reading it) told wrong from right perfectly. They now name plausible
    wrong entities, some as surely as right ones: confidence helps, and is not the label."""
    labels = read_labels(labelled)
    rows = [json.loads(line) for line in (EXAMPLES / "outcomes.jsonl").open()]
    wrong = [labels[r["id"]] for r in rows]
    assert sum(wrong) == 30
    length = roc_auc_score(wrong, [len(r["token_logprobs"]) for r in rows])
    unsure = roc_auc_score(wrong, [-np.mean(r["token_logprobs"]) for r in rows])
    assert length < 0.8 and 0.6 < unsure < 0.85, (length, unsure)


def _evaluate(labels: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", "--labels", str(labels), "--questions", QUESTIONS, "--no-cost",
                 "--out", str(out), "--gates", "recorded", "always", *extra])  # fmt: skip


def _rows(out: Path) -> dict:
    report = json.loads((out / "results.json").read_text())
    return {g["name"]: g for g in report["policies"]["my-llm/closed-book"]["gates"]}


@pytest.mark.slow  # three evaluate runs and a tune: ~5 s on 2 cores
def test_recorded_scores_and_decisions_are_reported_beside_the_other_gates(labelled, tmp_path):
    labels = read_labels(labelled)
    qs = question_set(QUESTIONS)
    rng = np.random.default_rng(0)  # a peer that ranks well, not perfectly
    score = {q.id: float(np.clip(0.6 * labels[q.id] + 0.5 * rng.random(), 0, 1)) for q in qs}
    peer = tmp_path / "peer.jsonl"
    peer.write_text("".join(json.dumps({"id": i, "score": s}) + "\n" for i, s in score.items()))
    assert _evaluate(labelled, tmp_path / "a", "--recorded", str(peer)) == 0
    row = _rows(tmp_path / "a")["recorded:peer"]
    test = [q.id for q in qs if q.split == "test" and q.id in labels]
    expected = roc_auc_score([labels[i] for i in test], [score[i] for i in test])
    assert row["metrics"]["auroc"] == pytest.approx(expected)
    assert row["metrics"]["retrieval_rate"] == pytest.approx(
        np.mean([score[i] >= 0.5 for i in test])
    )
    # decisions alone (a CSV of true/false), and `tune` picks their threshold like any gate's
    decided = tmp_path / "decided.csv"
    decided.write_text("id,retrieve\n" + "".join(f"{i},{'yes' if s >= 0.5 else 'no'}\n"
                                                 for i, s in score.items()))  # fmt: skip
    assert _evaluate(labelled, tmp_path / "b", "--recorded", str(decided)) == 0
    row = _rows(tmp_path / "b")["recorded:decided"]
    assert row["metrics"]["retrieval_rate"] == pytest.approx(
        np.mean([score[i] >= 0.5 for i in test])
    )
    assert main(["tune", "--gate", "recorded", "--recorded", str(peer), "--questions", QUESTIONS,
                 "--labels", str(labelled), "--objective", "macro-f1", "--out",
                 str(tmp_path / "tune")]) == 0  # fmt: skip
    tuned = json.loads((tmp_path / "tune" / "tune-recorded-closed-book.json").read_text())
    assert tuned["gate"] == "recorded:peer" and "macro-f1" in tuned["thresholds"]
    # without --recorded: skipped with the reason, the other gates reported
    assert _evaluate(labelled, tmp_path / "c") == 0
    skipped = json.loads((tmp_path / "c" / "results.json").read_text())["skipped"]
    assert "--recorded" in skipped["recorded"]


@pytest.mark.parametrize(
    ("content", "message"),
    [('{"id": "my-000", "score": 1.5}\n', "line 1: score 1.5 is not a probability from 0 to 1"),
     ('{"qid": "my-000", "retrieve": true}\n', "line 1: the row has no 'id' (its columns: qid"),
     ('{"id": "my-000", "retrieve": "maybe"}\n', "line 1: retrieve 'maybe' is not true/false"),
     ('{"id": "my-000"}\n', "neither a 'score'"),
     ('{"id": "my-000", "score": true}\n', "line 1: score True is not a number (a decision goes in"),
     ('{"id": ["my-000"], "score": 0.2}\n', 'line 1: the id is ["my-000"]: name each row'),
     ('{"id": "my-000", "score": 0.2}\n{"id": "my-000", "score": 0.3}\n',
      "line 2: a second decision for question 'my-000' (first on line 1)")],
)  # fmt: skip
def test_a_bad_recorded_file_is_refused_before_any_gate_is_built(
    labelled, tmp_path, capsys, content, message
):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert _evaluate(labelled, tmp_path / "out", "--recorded", str(bad)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_question_without_a_recorded_decision_is_refused(labelled, tmp_path):
    few = tmp_path / "few.jsonl"
    few.write_text('{"id": "my-000", "score": 0.2}\n')
    with pytest.raises(DataError, match=r"2 of 3 questions have no recorded decision \(e.g. id "
                       r"'my-001'; the file's ids read like 'my-000'\)"):  # fmt: skip
        RecordedGate(few).scores([q for q in question_set(QUESTIONS)][:3])


def _no_tfidf(monkeypatch) -> None:
    """tfidf, listed before the recorded gate, must not be built (nor any engine started)."""
    from dataclasses import replace

    from retrieval_gate.gates.registry import GATES

    def built(*_):
        raise AssertionError("a gate was built before the recorded file was checked")

    monkeypatch.setitem(GATES, "tfidf", replace(GATES["tfidf"], build=built))


def test_a_test_question_without_a_recorded_decision_is_refused_before_any_gate_is_built(
    labelled, tmp_path, capsys, monkeypatch
):
    """The rows were checked only when the recorded gate came up: after the gates listed
    before it had been built and scored (the prompt gates' engine started, minutes gone)."""
    _no_tfidf(monkeypatch)
    ids = [q.id for q in question_set(QUESTIONS)]
    few, routed = tmp_path / "few.jsonl", tmp_path / "routed.csv"
    few.write_text('{"id": "my-000", "score": 0.2}\n')
    routed.write_text("id,strategy\n" + "".join(f"{i},web_search\n" for i in ids))
    for peer, message in [(few, "questions have no recorded decision (e.g. id 'my-0"),
                          (routed, "recorded strategy 'web_search' (question 'my-0")]:  # fmt: skip
        code = main(["evaluate", "--labels", str(labelled), "--questions", QUESTIONS,
                     "--no-cost", "--out", str(tmp_path / "out"), "--gates", "tfidf",
                     "recorded", "--recorded", str(peer)])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("strategy", "message"),
    [(lambda i: "no_retrieval" if i % 2 else "", "questions have no recorded strategy"),
     (lambda i: "A" if i % 2 else "B", "Adaptive-RAG's classifier writes A, B, C")],
    ids=["a-strategy-missing", "letters-for-names"],
)  # fmt: skip
def test_recorded_strategies_the_labels_cannot_route_are_refused_before_any_gate_is_built(
    tmp_path, capsys, monkeypatch, strategy, message
):
    from test_answer_gate_routing import _strategy_labels

    _no_tfidf(monkeypatch)
    labels = _strategy_labels(tmp_path / "l", False) / "strategies.jsonl"
    peer = tmp_path / "peer.csv"  # a score for every question, a strategy for some or unknown
    peer.write_text("id,score,strategy\n" + "".join(f"q{i},0.5,{strategy(i)}\n"
                                                    for i in range(30)))  # fmt: skip
    code = main(["evaluate", "--labels", str(labels), "--questions",
                 str(tmp_path / "l" / "outcomes.jsonl"), "--gates", "tfidf", "recorded",
                 "--recorded", str(peer), "--no-cost", "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_recorded_strategies_are_a_routing_policy_and_their_binary_view_retrieves(tmp_path):
    """A peer router's decisions (`strategy` per question) are scored as they are in the
    routing report, beside the fixed policies and the cascade."""
    from retrieval_gate.evaluation.answer_gate import AnswerGate
    from retrieval_gate.evaluation.routing_policies import routing_markdown, routing_report
    from test_answer_gate_routing import COSTS, _set

    test, dev = _set("test"), _set("dev")  # closed-book right for q0..q2, one retrieval always
    peer = tmp_path / "peer.csv"
    routes = ["no_retrieval", "one_retrieval", "no_retrieval", "no_retrieval", "multi_step",
              "one_retrieval"]  # fmt: skip
    peer.write_text("id,strategy\n" + "".join(f"{q.id},{s}\n" for q, s in
                                              zip((*test.questions, *dev.questions), routes * 2, strict=True)))  # fmt: skip
    gate = RecordedGate(peer, first_strategy="no_retrieval")
    assert gate.scores(test.questions).tolist() == [0, 1, 0, 0, 1, 1]
    answer = AnswerGate("two-stage", np.array([0.1, 0.1, 0.1, 0.9, 0.1, 0.1]), 0.5, 0)
    report = routing_report(test, dev, {"recorded:peer": gate}, tmp_path, "t", 50, COSTS,
                            answer=answer)  # fmt: skip
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    mine = rows["recorded:peer @ its recorded strategies"]
    # q3 kept closed-book and wrong: 5 of 6; costs 0 + 1 + 0 + 0 + 3 + 1
    assert (mine["accuracy"], mine["mean_cost"]) == pytest.approx((5 / 6, 5 / 6))
    assert mine["shares"] == pytest.approx({"no_retrieval": 0.5, "one_retrieval": 2 / 6,
                                            "multi_step": 1 / 6})  # fmt: skip
    cascade = rows["recorded:peer + answer gate @ its recorded strategies"]
    assert (cascade["accuracy"], cascade["escalated"]) == pytest.approx((1.0, 1 / 6))
    assert "recorded:peer @ its recorded strategies" in routing_markdown(report).split(
        "### Routing: accuracy")[0]  # in the saving table  # fmt: skip
    # the built-in names say which retrieve without labels; another name needs them
    assert RecordedGate(peer).scores(test.questions).tolist() == [0, 1, 0, 0, 1, 1]
    other = tmp_path / "other.csv"
    other.write_text("id,strategy\ntest0,web_search\n")
    with pytest.raises(DataError, match="'web_search' .*not a built-in one.*'retrieve'"):
        RecordedGate(other).scores(test.questions[:1])
    assert RecordedGate(other, first_strategy="web_search").scores(test.questions[:1]) == [0.0]
    with pytest.raises(DataError, match=r"'web_search' is not one of the labels' \(no_retrieval, "
                       r"one_retrieval, multi_step\)"):  # fmt: skip
        RecordedGate(other).strategy_choice(test.questions[:1], test.strategies)
    letters = tmp_path / "letters.csv"  # Adaptive-RAG's classifier: A, B, C
    letters.write_text("id,strategy\ntest0,A\n")
    for call in (lambda g: g.scores(test.questions[:1]),
                 lambda g: g.strategy_choice(test.questions[:1], test.strategies)):  # fmt: skip
        with pytest.raises(DataError, match="classifier writes A, B, C: rename them A -> "
                           "no_retrieval, B -> one_retrieval, C -> multi_step"):  # fmt: skip
            call(RecordedGate(letters))
    scored = tmp_path / "scored.csv"  # scores for all, strategies for one: not a router's file
    scored.write_text("id,score,strategy\ntest0,0.2,no_retrieval\ntest1,0.7,\n")
    with pytest.raises(DataError, match=r"1 of 2 questions have no recorded strategy"):
        RecordedGate(scored).strategy_choice(test.questions[:2], test.strategies)


def test_recorded_strategies_through_the_cli(tmp_path):
    from test_answer_gate_routing import _strategy_labels

    labels = _strategy_labels(tmp_path / "l", True) / "strategies.jsonl"
    peer = tmp_path / "peer.jsonl"  # the 30 questions q0..q29: closed-book right for odd ones
    peer.write_text("".join(json.dumps({"id": f"q{i}", "strategy": "no_retrieval" if i % 2
                                        else "one_retrieval"}) + "\n" for i in range(30)))  # fmt: skip
    out = tmp_path / "out"
    assert main(["evaluate", "--labels", str(labels), "--questions", str(tmp_path / "l" / "outcomes.jsonl"),
                 "--gates", "recorded", "--recorded", str(peer), "--no-cost", "--resamples", "50",
                 "--out", str(out)]) == 0  # fmt: skip
    report = json.loads((out / "results.json").read_text())["policies"]["mine/strategies"]
    rows = {r["policy"]: r["overall"] for r in report["routing"]["policies"]}
    peer_row = rows["recorded @ its recorded strategies"]
    assert peer_row["accuracy"] == 1.0 and peer_row["mean_cost"] == pytest.approx(
        rows["oracle (cheapest strategy that answers)"]["mean_cost"]
    )  # the oracle's routes
    gate = {g["name"]: g for g in report["gates"]}["recorded:peer"]
    assert gate["metrics"]["auroc"] == 1.0  # its binary view: retrieves where one is needed


def test_a_row_with_both_a_score_and_a_decision_is_said(tmp_path, caplog):
    """The `retrieve` decision beside a `score` went unread without a word (the score was
    thresholded at 0.5, the peer's own threshold unknown)."""
    path = tmp_path / "peer.csv"
    path.write_text("id,score,retrieve\na,0.9,false\nb,0.1,\nc,,true\n")
    gate = RecordedGate(path)
    assert gate.recorded == {"a": 0.9, "b": 0.1, "c": 1.0}
    assert "1 rows give both a score and a retrieve decision (the first: line 2)" in caplog.text
