"""The cascade on recorded answers. In evaluate's routing report (`evaluate --answer-gate
DIR`): each policy of a router or binary gate followed by a two-stage gate reading the recorded
closed-book answers (escalations pay for both answers and count in a budget), and the answer
gate alone at its threshold, at budgets (its threshold set on dev) and as a line. Question by
question: `score --answer-gate DIR`. The flag is refused, naming it, where it cannot apply,
before any gate is built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import ConfigError, DataError
from retrieval_gate.evaluation.answer_gate import AnswerGate, check_answer_labels, next_strategy
from retrieval_gate.evaluation.routing_policies import routing_markdown, routing_report
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.pricing import Calibration
from retrieval_gate.questions import Question
from test_llm_calls_axis import ScoreGate, TableRouter

NAMES = ("no_retrieval", "one_retrieval", "multi_step")
COSTS = (0.0, 1.0, 3.0)


def _set(split: str, n: int = 6) -> EvalSet:
    # the closed-book answer is right for q0..q2 only; one retrieval answers every question
    correct = np.array([[i < 3, 1, 1] for i in range(n)], float)
    qs = tuple(Question(f"{split}{i}", f"question {i}?", ("x",), "s", split=split)
               for i in range(n))  # fmt: skip
    return EvalSet(qs, 1 - correct[:, 0], correct[:, 0], correct[:, 1], NAMES, correct, None)


def test_escalations_are_the_kept_questions_at_the_threshold_highest_first_within_the_budget():
    answer = AnswerGate("a", np.array([0.9, 0.2, 0.7, 0.6, 0.95, 0.1]), 0.5, 0)
    choice = np.array([0, 0, 0, 0, 1, 2])  # q4 and q5 were not kept closed-book
    assert next_strategy(COSTS) == 1 and next_strategy((0.0, 2.0, 1.0)) == 2
    assert answer.escalated(choice, COSTS, None).tolist() == [1, 0, 1, 1, 0, 0]
    # budget 1.5 on 6 questions: 9 to spend, the policy spends 1 + 3; one retrieval each, so
    # five could go, but only three are at the threshold
    assert answer.escalated(choice, COSTS, 1.5).sum() == 3
    # budget 1: 6 - 4 = 2 left: the two surest-wrong of the kept questions (0.9 and 0.7)
    assert answer.escalated(choice, COSTS, 1.0).tolist() == [1, 0, 1, 0, 0, 0]
    assert not answer.escalated(choice, COSTS, 0.5).any()  # nothing left


def test_the_routing_report_scores_each_policy_s_cascade(tmp_path):
    test, dev = _set("test"), _set("dev")
    # the gate keeps q0..q4 closed-book (score below 0.5) and retrieves for q5
    gate = ScoreGate([0.1, 0.1, 0.1, 0.1, 0.1, 0.9])
    # the answer gate reads the answers: q3 and q4 look wrong (they are), q0 looks unsure
    answer = AnswerGate("two-stage", np.array([0.6, 0.1, 0.2, 0.8, 0.9, 0.3]), 0.5, 1)
    report = routing_report(test, dev, {"g": gate}, tmp_path, "t", 50, COSTS, answer=answer)
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    alone, cascade = rows["g @ threshold 0.5"], rows["g + answer gate @ threshold 0.5"]
    assert alone["accuracy"] == pytest.approx(4 / 6) and alone["mean_cost"] == pytest.approx(1 / 6)
    # q0, q3, q4 escalated to one retrieval: all six right, four retrievals, nine LLM calls
    assert cascade["accuracy"] == pytest.approx(1.0)
    assert cascade["mean_cost"] == pytest.approx(4 / 6)
    assert cascade["mean_llm_calls"] == pytest.approx(9 / 6)
    assert cascade["escalated"] == pytest.approx(3 / 6)
    assert cascade["shares"] == pytest.approx({"no_retrieval": 2 / 6, "one_retrieval": 4 / 6,
                                               "multi_step": 0.0})  # fmt: skip
    auroc = report["auroc_no_retrieval_wrong"]["two-stage (answer gate, on the recorded answers)"]
    assert auroc["auroc"] == pytest.approx(8 / 9)  # q5 (wrong, 0.3) below q0 (right, 0.6)
    text = routing_markdown(report)
    assert "% escalated" in text and "two-stage" in text and "threshold 0.5" in text
    assert "1 of the 6 test questions have no recorded answer" in text
    # without an answer gate: no cascade rows, no column
    plain = routing_report(test, dev, {"g": gate}, tmp_path, "t", 50, COSTS)
    assert not any("answer gate" in r["policy"] for r in plain["policies"])
    assert "% escalated" not in routing_markdown(plain)


def test_a_router_s_cascade_at_a_budget_spends_only_what_is_left(tmp_path):
    test, dev = _set("test"), _set("dev")
    P = {q.id: np.array([0.9 if int(q.id[-1]) < 4 else 0.1, 0.95, 0.96])
         for q in (*test.questions, *dev.questions)}  # fmt: skip
    cal = Calibration.fit(NAMES, COSTS, np.array([P[q.id] for q in dev.questions]), dev.correct)
    answer = AnswerGate("two-stage", np.array([0.1, 0.1, 0.1, 0.9, 0.1, 0.1]), 0.5, 0)
    report = routing_report(test, dev, {"r": TableRouter(P, cal)}, tmp_path, "t", 20, COSTS,
                            answer=answer)  # fmt: skip
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    for name, stats in rows.items():
        if "+ answer gate @ budget" in name:
            budget = float(name.rsplit(" ", 1)[1])
            assert stats["mean_cost"] <= budget + 1e-9, name
    assert any("+ answer gate @ default" in n for n in rows)
    assert not any("+ answer gate @ matches" in n for n in rows)


def _strategy_labels(root: Path, logprobs: bool) -> Path:
    """A strategy label file as `label --policy outcomes` writes it (with its sidecar)."""
    root.mkdir()
    out, rows = root / "labels", root / "outcomes.jsonl"
    with open(rows, "w") as f:
        for i in range(30):
            row = {"id": f"q{i}", "question": f"what is thing {i}?", "no_retrieval_correct": i % 2,
                   "one_retrieval_correct": 1}  # fmt: skip
            if logprobs:
                row["no_retrieval_token_logprobs"] = [-0.1 * (i % 3)]
            f.write(json.dumps(row) + "\n")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(rows), "--questions",
                 str(rows), "--strategies", "no_retrieval", "one_retrieval", "--generator",
                 "mine", "--labels-dir", str(out)]) == 0  # fmt: skip
    return out / "mine"


def test_the_answer_gate_flag_is_refused_where_it_cannot_apply(tmp_path, capsys):
    def refused(labels: Path, gate: Path, *match: str) -> None:
        capsys.readouterr()
        code = main(["evaluate", "--labels", str(labels), "--gates", "tfidf", "--answer-gate",
                     str(gate), "--no-cost", "--out", str(tmp_path / "out")])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and all(m in err for m in match), err
        assert not (tmp_path / "out").exists()  # refused before anything ran

    with_lp, without = (
        _strategy_labels(tmp_path / "a", True),
        _strategy_labels(tmp_path / "b", False),
    )
    refused(with_lp / "strategies.jsonl", tmp_path / "nowhere", "no such folder", "--answer-gate")
    refused(
        with_lp / "closed-book.jsonl",
        tmp_path / "nowhere",
        "--answer-gate",
        "closed-book.jsonl holds no strategy labels",
        "label --policy outcomes",
    )
    refused(
        without / "strategies.jsonl",
        tmp_path / "nowhere",
        "--answer-gate",
        "no_retrieval_token_logprobs",
    )
    # score --answer-gate: answers come from a --questions column; the folder is checked first
    lines = tmp_path / "q.txt"
    lines.write_text("Who wrote Hamlet?\n")
    for args, said in (
        (["--input", str(lines)], "which a line of --input cannot carry: pass --questions FILE"),
        (["--questions", str(tmp_path / "a" / "outcomes.jsonl")], "no such folder"),
    ):  # fmt: skip
        capsys.readouterr()
        code = main(["score", "--model", str(tmp_path / "no-model"), *args, "--answer-gate",
                     str(tmp_path / "nowhere")])  # fmt: skip
        assert code == 2 and said in capsys.readouterr().err

    with pytest.raises(ConfigError, match="closed-book.jsonl holds no strategy labels"):
        check_answer_labels([with_lp / "closed-book.jsonl"])
    with pytest.raises(DataError, match="no_retrieval_token_logprobs"):
        check_answer_labels([without / "strategies.jsonl"])
    with pytest.raises(DataError, match="recorded log-probabilities"):
        check_answer_labels(["adaptive-rag"])  # the release records no answer's confidence
    check_answer_labels([with_lp / "strategies.jsonl"])  # recorded: accepted


def _user_outcomes(root: Path, n: int = 480, seed: int = 0) -> tuple[Path, Path]:
    """A user's questions and two strategies' outcomes: the closed-book answer is right for
    about half (its log-probabilities tell which, noisily; the text does not), one retrieval
    for 85%."""
    rng = np.random.default_rng(seed)
    questions, outcomes = root / "questions.jsonl", root / "outcomes.jsonl"
    with open(questions, "w") as q, open(outcomes, "w") as o:
        for i in range(n):
            known = bool(rng.random() < 0.5)
            sure = rng.normal(-0.3 if known else -1.4, 0.5)
            lps = [round(float(min(0.0, rng.normal(sure, 0.4))), 4)
                   for _ in range(int(rng.integers(1, 8)))]  # fmt: skip
            q.write(json.dumps({"id": f"u{i}", "question": f"Who made thing number {i}?",
                                "answers": ["x"], "source": "ab"[i % 2]}) + "\n")  # fmt: skip
            o.write(json.dumps({"id": f"u{i}", "no_retrieval_correct": known,
                                "one_retrieval_correct": bool(rng.random() < 0.85),
                                "no_retrieval_token_logprobs": lps}) + "\n")  # fmt: skip
    return questions, outcomes


@pytest.mark.slow  # a stacked training run and an ONNX export, through the CLI
def test_a_cascade_on_recorded_answers_through_the_cli(tmp_path, capsys, minilm_gate_dirs):
    from tiny_backbones import tiny_body_sets

    questions, outcomes = _user_outcomes(tmp_path)
    labels = tmp_path / "labels"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(questions), "--strategies", "no_retrieval", "one_retrieval",
                 "--generator", "my-llm", "--labels-dir", str(labels)]) == 0  # fmt: skip
    # a tiny body for MiniLM: the wording tells nothing here
    texts = [json.loads(line)["question"] for line in open(questions)]
    assert main(["train", "--config", "cascade-closed-book", "--set",
                 *tiny_body_sets(tmp_path / "body", texts),
                 f"data.questions={questions}", f"data.label_file={labels / 'my-llm' / 'closed-book.jsonl'}",
                 f"run.output_dir={tmp_path / 'runs'}"]) == 0  # fmt: skip
    assert main(["export", "--run", str(tmp_path / "runs" / "cascade-closed-book"), "--out-dir",
                 str(tmp_path / "export"), "--variants", "fp32", "--questions", str(questions)]) == 0  # fmt: skip
    report = tmp_path / "eval"
    assert main(["evaluate", "--labels", str(labels / "my-llm" / "strategies.jsonl"),
                 "--questions", str(questions), "--gates", "router-tfidf", "--answer-gate",
                 str(tmp_path / "export" / "cascade-closed-book"), "--no-cost", "--resamples",
                 "200", "--out", str(report)]) == 0  # fmt: skip
    routing = json.loads((report / "results.json").read_text())["policies"]["my-llm/strategies"][
        "routing"]  # fmt: skip
    rows = {r["policy"]: r["overall"] for r in routing["policies"]}
    router, cascade = (
        rows["router-tfidf @ budget 0.5"],
        rows["router-tfidf + answer gate @ budget 0.5"],
    )
    never = rows["never (always no_retrieval)"]
    assert routing["answer_gate"]["without_answer"] == 0
    # the text tells nothing: at budget 0.5 the router keeps about half the questions
    # closed-book; the answer gate escalates the ones whose answers look unsure, within the
    # budget, and they pay a second LLM call
    assert 0 < cascade["escalated"] <= router["shares"]["no_retrieval"]
    assert cascade["accuracy"] > router["accuracy"] and cascade["mean_cost"] <= 0.5 + 1e-9
    assert cascade["mean_llm_calls"] == pytest.approx(1 + cascade["escalated"])
    alone = next(v for k, v in rows.items() if k.startswith("answer gate alone"))
    assert alone["accuracy"] > never["accuracy"] + 0.2 and alone["mean_cost"] < 0.7
    au = routing["auroc_no_retrieval_wrong"]
    answer = next(v for k, v in au.items() if "(answer gate" in k)
    assert answer["auroc"] > 0.8 > au["router-tfidf"]["auroc"]
    assert never["accuracy"] < 0.6
    text = (report / "report.md").read_text()
    assert "router-tfidf + answer gate @ default" in text and "% escalated" in text
    # `score --answer-gate`: the same cascade on answers already made, question by question;
    # the first gate here is another export (a binary MiniLM gate)
    two_stage = tmp_path / "export" / "cascade-closed-book"
    outcomes_by_id = {json.loads(line)["id"]: json.loads(line) for line in open(outcomes)}
    answered = tmp_path / "answered.jsonl"
    with open(answered, "w") as f:
        for line in open(questions):
            q = json.loads(line)
            q["token_logprobs"] = outcomes_by_id[q["id"]]["no_retrieval_token_logprobs"]
            f.write(json.dumps(q) + "\n")
    capsys.readouterr()
    first = ["score", "--model", str(minilm_gate_dirs[1]), "--questions", str(answered)]
    assert main(first) == 0  # its threshold: the median score, so that it keeps half
    said = capsys.readouterr()
    median = float(np.median([json.loads(line)["score"] for line in said.out.splitlines()]))
    # the answers' log-probabilities, given to a gate that reads the text alone: said
    assert "came with their answer's token_logprobs, which this gate does not read" in said.err
    assert "--answer-gate DIR" in said.err
    assert main([*first, "--threshold", f"{median:.6f}", "--answer-gate", str(two_stage)]) == 0
    cascade_rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["score", "--model", str(two_stage), "--questions", str(answered)]) == 0
    alone = {r["id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    threshold = json.loads((two_stage / "gate_metadata.json").read_text())["threshold"]
    kept = [r for r in cascade_rows if "answer_score" in r]
    assert kept and len(kept) < len(cascade_rows)  # the first gate retrieved for some
    for r in cascade_rows:
        if "answer_score" not in r:
            assert r["retrieve"] and not r["escalated"]
            continue
        assert r["answer_score"] == pytest.approx(alone[r["id"]]["score"], abs=1e-5)
        assert r["escalated"] == (r["answer_score"] >= threshold) == r["retrieve"]
    assert any(r["escalated"] for r in kept) and not all(r["escalated"] for r in kept)


def test_the_answer_gate_alone_is_a_line_from_never_to_every_question_escalated():
    test = _set("test")
    answer = AnswerGate("two-stage", np.array([0.6, 0.1, 0.2, 0.8, 0.9, 0.3]), 0.5, 0)
    paid = test.costs_paid(COSTS)
    line = answer.threshold_line(test.correct, paid, np.array([1.0, 1.0, 3.0]))
    assert line[0] == pytest.approx((0.0, 1.0, 0.5))  # nothing escalated: never
    assert line[-1] == pytest.approx((1.0, 2.0, 1.0))  # all: one retrieval after each answer
    # escalating q3, q4 and q0 (at or above 0.6): all right but q5's closed-book answer
    assert any(p == pytest.approx((0.5, 1.5, 5 / 6)) for p in line)


def test_at_a_budget_the_answer_gate_alone_takes_the_threshold_most_accurate_on_dev(tmp_path):
    test, dev = _set("test"), _set("dev")  # closed-book right for q0..q2, one retrieval always
    paid, right = dev.costs_paid(COSTS), dev.correct
    answer = AnswerGate("two-stage", np.array([0.6, 0.1, 0.2, 0.8, 0.9, 0.3]), 0.5, 0,
                        dev_scores=np.array([0.1, 0.2, 0.3, 0.9, 0.8, 0.7]))  # fmt: skip
    assert answer.threshold_for(0.5, paid, right) == 0.7  # the three wrong ones: all right
    assert answer.threshold_for(1.0, paid, right) == 0.7  # more costs more, gets no more
    assert answer.threshold_for(0.4, paid, right) == 0.8  # two of them
    assert answer.threshold_for(0.0, paid, right) == np.inf  # none
    tied = AnswerGate(
        "t", answer.scores, 0.5, 0, dev_scores=np.array([0.1, 0.2, 0.3, 0.9, 0.9, 0.7])
    )
    assert tied.threshold_for(1 / 6, paid, right) == np.inf  # the tied two go together or not
    assert AnswerGate("t", answer.scores, 0.5, 0).threshold_for(1.0, paid, right) is None
    report = routing_report(test, dev, {}, tmp_path, "t", 20, COSTS, answer=answer)
    rows = {r["policy"]: r["overall"] for r in report["policies"]}
    # on test, 0.7 escalates q3 and q4 (q0's 0.6 stays): q5 is kept and wrong
    at_half = rows["answer gate alone @ budget 0.5 (threshold 0.7, set on dev)"]
    assert (at_half["accuracy"], at_half["mean_cost"]) == pytest.approx((5 / 6, 2 / 6))
    assert "answer gate alone @ budget 1 (threshold 0.7, set on dev)" in rows
    assert not any(n.startswith("answer gate alone @ budget 2") for n in rows)  # beyond 0 + 1


def test_evaluate_without_answer_gate_says_the_recorded_answers_can_be_read(tmp_path, caplog):
    from retrieval_gate.commands.evaluate import _say_cascade

    labels = tmp_path / "strategies.jsonl"
    (tmp_path / "strategies.meta.json").write_text(json.dumps({"strategies": list(NAMES[:2])}))
    for logprobs, says in (([-0.2, -1.0], True), (None, False)):
        row = {"id": "a", "label": 0, "correct": {"no_retrieval": True, "one_retrieval": True},
               "cheapest": "no_retrieval", "target": "no_retrieval", "target_from": "cheapest",
               "token_logprobs": {"no_retrieval": logprobs, "one_retrieval": None}}  # fmt: skip
        labels.write_text(json.dumps(row) + "\n")
        caplog.clear()
        with caplog.at_level("INFO"):
            _say_cascade([labels])
        assert ("--answer-gate DIR" in caplog.text) == says
