"""Outcomes files as users' own tools name their columns: `--outcome-field FIELD=COLUMN` reads
a field from another column (one answer, or several strategies), an OpenAI-style `logprobs`
column is the answer's log-probabilities, columns no field reads are said, and a file that
names no id or outcome is refused with its columns and the flag that fixes it. A strategies
file's answer log-probabilities reach strategies.jsonl and, for the first strategy, the
closed-book labels a two-stage gate trains on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from release_layout import write_release
from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.labels.label_files import LabelFile
from user_files import QUESTIONS, write_jsonl


def _label(tmp_path: Path, outcomes: Path, *extra: str) -> int:
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    return main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--generator", "my-llm", "--labels-dir", str(tmp_path / "labels"),
                 *extra])  # fmt: skip


def _rows(tmp_path: Path, name: str = "closed-book.jsonl") -> dict:
    return LabelFile(tmp_path / "labels" / "my-llm" / name).rows


MINE = [  # a harness's own names: none is one the project reads by default
    {"qid": "m1", "model_answer": "William Shakespeare", "conf": [-0.1, -0.2], "ok": 1},
    {"qid": "m2", "model_answer": "Lyon", "conf": [-2.0], "ok": 0},
    {"qid": "m3", "model_answer": "no idea", "conf": None, "ok": 0},
]


def test_outcome_fields_read_a_harness_own_columns(tmp_path, caplog):
    path = write_jsonl(tmp_path / "mine.jsonl", MINE)
    caplog.set_level(logging.INFO)
    code = _label(tmp_path, path, "--outcome-field", "id=qid", "prediction=model_answer",
                  "token_logprobs=conf")  # fmt: skip
    assert code == 0
    rows = _rows(tmp_path)
    # judged from the mapped answers: m1 right, m2 and m3 wrong
    assert [rows[i]["label"] for i in ("m1", "m2", "m3")] == [0, 1, 1]
    assert rows["m1"]["prediction"] == "William Shakespeare"
    assert rows["m2"]["token_logprobs"] == [-2.0] and "token_logprobs" not in rows["m3"]
    assert "columns not read as outcomes: ok" in caplog.text  # said, not silently dropped


def test_a_mapped_correctness_column_wins_over_the_default_one(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{**r, "correct": 1} for r in MINE])
    assert _label(tmp_path, path, "--outcome-field", "id=qid", "correct=ok") == 0
    assert [_rows(tmp_path)[i]["label"] for i in ("m1", "m2", "m3")] == [0, 1, 1]


def test_columns_named_in_another_case_are_read_as_their_fields(tmp_path, caplog):
    """A spreadsheet's `ID`, `Prediction`, `Token_Logprobs` were "columns not read", then
    "neither an 'id' nor a 'question' column"; a flag still wins over a column so found."""
    rows = [{"ID": r["qid"], "Prediction": r["model_answer"], "Token_Logprobs": r["conf"],
             "ok": r["ok"]} for r in MINE]  # fmt: skip
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    caplog.set_level(logging.INFO)
    assert _label(tmp_path, path) == 0
    got = _rows(tmp_path)
    assert [got[i]["label"] for i in ("m1", "m2", "m3")] == [0, 1, 1]
    assert got["m1"]["prediction"] == "William Shakespeare" and got["m2"]["token_logprobs"] == [-2]
    assert "columns not read as outcomes: ok" in caplog.text
    rows = [{**r, "ok": 1 - r["ok"]} for r in rows]  # judged by hand: the flag's column wins
    assert _label(tmp_path, write_jsonl(path, rows), "--outcome-field", "correct=ok") == 0
    assert [_rows(tmp_path)[i]["label"] for i in ("m1", "m2", "m3")] == [1, 0, 0]


def test_an_openai_logprobs_column_is_the_answers_log_probabilities(tmp_path):
    rows = [{"id": "m1", "correct": True, "logprobs": {"content": [
        {"token": "William", "logprob": -0.5}, {"token": " Shakespeare", "logprob": 0.0}]}}]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows)) == 0
    assert _rows(tmp_path)["m1"]["token_logprobs"] == [-0.5, 0.0]


def _both(m1: list[float]) -> list[dict]:
    """A harness's own `token_logprobs` beside the raw OpenAI reply's `logprobs`."""
    reply = {"content": [{"token": "William", "logprob": -0.5}, {"token": "!", "logprob": 0.0}]}
    return [{"id": "m1", "correct": True, "token_logprobs": m1, "logprobs": reply}]


def test_two_log_probability_columns_that_differ_are_refused(tmp_path, capsys):
    """`token_logprobs` and `logprobs` that differ: the first was read, the other dropped
    unseen; alike (to 1e-6) they are one answer's, and the flag picks one."""
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", _both([-9.0, -9.0]))) == 2
    assert ("o.jsonl, line 1: columns 'token_logprobs' and 'logprobs' both give the answer's "
            "token log-probabilities and differ ([-9.0, -9.0] vs [-0.5, 0.0]): keep one column, "
            "or name the one to read with --outcome-field token_logprobs=COLUMN"
            in capsys.readouterr().err)  # fmt: skip
    assert not (tmp_path / "labels" / "my-llm" / "closed-book.jsonl").exists()
    path = write_jsonl(tmp_path / "o.jsonl", _both([-9.0, -9.0]))
    assert _label(tmp_path, path, "--outcome-field", "token_logprobs=logprobs") == 0
    assert _rows(tmp_path)["m1"]["token_logprobs"] == [-0.5, 0.0]
    assert _label(tmp_path, write_jsonl(path, _both([-0.5000001, 0.0]))) == 0  # alike


@pytest.mark.parametrize(
    ("rows", "flags", "message"),
    [
        (MINE, [], "outcome row has neither an 'id' nor a 'question' column (its columns: conf, "
         "model_answer, ok, qid); name yours with --outcome-field id=COLUMN"),
        ([{"id": "m1", "model_answer": "x"}], [], "no correctness (correct / is_correct / "
         "closed_correct) and no prediction (prediction / closed_prediction / response / "
         "answer_given) column (its columns: id, model_answer); name yours with --outcome-field "
         "correct=COLUMN or --outcome-field prediction=COLUMN"),
        (MINE, ["--outcome-field", "id=question_id"],
         "--outcome-field id=question_id: no column 'question_id'; columns: conf, model_answer, "
         "ok, qid"),
        (MINE, ["--outcome-field", "prediction"], "--outcome-field 'prediction': expected "
         "FIELD=COLUMN"),
        (MINE, ["--outcome-field", "answer=model_answer"], "FIELD one of id, question, correct"),
        (MINE, ["--outcome-field", "id=qid", "id=ok"], "two columns for id: qid and ok"),
        ([{"id": 7, "correct": 1}], [], "outcome ids read like 7, question ids like 'm1'"),
        ([{"doc": {"query": "Who?"}, "filtered_resps": ["x"]}], [], "lm-eval sample's 'doc' has "
         "neither an 'id' nor a 'question' key (its keys: query): run the task over a question"),
    ],
)  # fmt: skip
def test_columns_that_name_no_outcome_are_refused_with_the_fix(tmp_path, capsys, rows, flags,
                                                                message):  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows), *flags) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "labels").exists()


def _strategies(tmp_path: Path, header: str, *lines: str, flags: tuple[str, ...] = ()) -> int:
    path = tmp_path / "outcomes.csv"
    path.write_text("\n".join([header, *lines]) + "\n")
    return _label(tmp_path, path, "--strategies", "none", "one", *flags)


def test_strategy_log_probabilities_reach_both_label_files(tmp_path):
    code = _strategies(
        tmp_path,
        "id,none_correct,one_correct,none_token_logprobs,one_token_logprobs",
        'm1,1,1,"[-0.1, -0.3]","[-0.05]"',
        'm2,0,1,"[-2.0]",',
        "m3,0,0,,",
    )
    assert code == 0
    strategies = _rows(tmp_path, "strategies.jsonl")
    assert strategies["m1"]["token_logprobs"] == {"none": [-0.1, -0.3], "one": [-0.05]}
    assert strategies["m2"]["token_logprobs"] == {"none": [-2.0], "one": None}
    assert "token_logprobs" not in strategies["m3"]
    closed = _rows(tmp_path)  # the first strategy's answer: what a two-stage gate reads
    assert closed["m1"]["token_logprobs"] == [-0.1, -0.3] and closed["m1"]["label"] == 0
    assert closed["m2"]["mean_logprob"] == -2.0 and closed["m3"]["mean_logprob"] is None


def test_a_strategies_file_names_whose_answer_its_log_probabilities_are(tmp_path, capsys):
    header = "id,none_correct,one_correct,token_logprobs"
    assert _strategies(tmp_path, header, 'm1,1,1,"[-0.1]"') == 2
    assert ("column 'token_logprobs': in outcomes of several strategies, name the strategy whose "
            "answer it is: none_token_logprobs (e.g. --outcome-field "
            "none_token_logprobs=token_logprobs)") in capsys.readouterr().err  # fmt: skip
    assert not (tmp_path / "labels").exists()
    fix = ("--outcome-field", "none_token_logprobs=token_logprobs", "none_correct=hit")
    header = "id,hit,one_correct,token_logprobs"
    assert _strategies(tmp_path, header, 'm1,1,1,"[-0.1]"', flags=fix) == 0
    assert _rows(tmp_path)["m1"]["token_logprobs"] == [-0.1]


def test_a_release_folder_takes_no_outcome_fields(tmp_path, capsys):
    root = write_release(tmp_path / "rel")
    code = main(["label", "--policy", "outcomes", "--outcomes", str(root), "--labels-dir",
                 str(tmp_path / "labels"), "--outcome-field", "id=qid"])  # fmt: skip
    assert code == 2
    assert "a release folder's files have their own, fixed ones" in capsys.readouterr().err
    assert not (tmp_path / "labels").exists()


def test_a_question_file_reads_answer_log_probabilities_under_other_names(tmp_path):
    """`score --questions` and training read a question's answer confidence from its extras:
    an OpenAI-style `logprobs` column, or any column named with --field, lands there; an empty
    cell stays "no answer" (the key present), so a label file's values never fill it in."""
    from retrieval_gate.data.user_questions import read_questions

    path = tmp_path / "new.csv"
    path.write_text(
        'question,logprobs,conf\nWho wrote Hamlet?,"[-0.5, 0.0]",-1\nWhere is Oslo?,,\n'
    )
    hamlet, oslo = read_questions(str(path))
    assert hamlet.extra["token_logprobs"] == [-0.5, 0.0] and "logprobs" not in hamlet.extra
    assert "token_logprobs" in oslo.extra and oslo.extra["token_logprobs"] is None
    hamlet, _ = read_questions(str(path), {"mean_logprob": "conf"})
    assert hamlet.extra["mean_logprob"] == -1.0 and "conf" not in hamlet.extra
    with pytest.raises(DataError, match="line 2: column 'conf': -1 is not a list"):
        read_questions(str(path), {"token_logprobs": "conf"})  # checked as the field, named as
        # the file names it


def test_a_question_file_with_two_log_probability_columns_that_differ_is_refused(tmp_path):
    """`score --questions` read `token_logprobs` and dropped a `logprobs` that differs unseen;
    alike (to 1e-6) they are one answer's, and --field picks one."""
    from retrieval_gate.data.user_questions import read_questions

    path = tmp_path / "new.csv"
    path.write_text('question,token_logprobs,logprobs\nWho wrote Hamlet?,"[-0.5, 0.0]",'
                    '"[-0.4999995, 0.0]"\nWhere is Oslo?,[-0.1],[-7.0]\n')  # fmt: skip
    with pytest.raises(DataError) as refused:
        read_questions(str(path))
    assert ("new.csv, line 3: columns 'token_logprobs' and 'logprobs' both give the answer's "
            "token log-probabilities and differ ([-0.1] vs [-7.0]): keep one column, or name "
            "the one to read with --field token_logprobs=COLUMN" in str(refused.value))  # fmt: skip
    hamlet, oslo = read_questions(str(path), {"token_logprobs": "logprobs"})
    assert hamlet.extra["token_logprobs"] == [-0.4999995, 0.0]
    assert oslo.extra["token_logprobs"] == [-7.0] and "logprobs" not in oslo.extra


def test_a_prediction_cell_is_one_answers_text(tmp_path, capsys):
    """A chat message, a chat completion's choice (once refused as "not one answer's text") or
    a list of one answer, saved as is, is that answer; several answers in one cell are
    refused, where their repr was judged and any of them right made the row right."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "Lyon"},
              "finish_reason": "stop"}  # fmt: skip
    rows = [{"id": "m1", "prediction": {"role": "assistant", "content": "William Shakespeare"}},
            {"id": "m2", "prediction": [choice]}, {"id": "m3", "prediction": 1999}]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows)) == 0
    got = _rows(tmp_path)
    assert got["m1"]["prediction"] == "William Shakespeare" and got["m1"]["label"] == 0
    assert got["m2"]["prediction"] == "Lyon" and got["m3"]["prediction"] == "1999"
    several = [{"id": "m2", "prediction": ["Lyon", "Paris"]}]
    (tmp_path / "b").mkdir()
    assert _label(tmp_path / "b", write_jsonl(tmp_path / "several.jsonl", several)) == 2
    assert ("line 1: column 'prediction' holds \"['Lyon', 'Paris']\", not one answer's text"
            in capsys.readouterr().err)  # fmt: skip


def test_a_list_saved_into_a_csv_cell_is_read_as_that_list(tmp_path, capsys):
    """pandas writes a list column into a CSV as its repr, `['Lyon', 'Paris']`: that text was
    judged, and any one of the answers right made the row right; one answer's list is it."""
    (tmp_path / "one").mkdir()
    one = tmp_path / "one.csv"
    one.write_text('id,prediction\nm1,"[\'William Shakespeare\']"\nm2,"[""Lyon""]"\n'
                   "m3,[citation needed]\n")  # fmt: skip
    assert _label(tmp_path / "one", one) == 0
    got = _rows(tmp_path / "one")
    assert got["m1"]["prediction"] == "William Shakespeare" and got["m1"]["label"] == 0
    assert got["m2"]["prediction"] == "Lyon" and got["m3"]["prediction"] == "[citation needed]"
    several = tmp_path / "several.csv"
    several.write_text("id,prediction\nm2,\"['Lyon', 'Paris']\"\n")
    assert _label(tmp_path, several) == 2
    assert "line 2: column 'prediction' holds \"['Lyon', 'Paris']\"" in capsys.readouterr().err


def test_an_outcome_id_that_is_no_text_nor_number_matches_no_question_id():
    """An outcome row's `"id": true` matched the question whose id is the text "True" (its
    Python spelling); such an id now names no question, and the row is matched by its text
    or not at all."""
    from retrieval_gate.labels.outcomes import match_rows
    from retrieval_gate.questions import Question

    questions = [Question(id="True", text="Who wrote Hamlet?", answers=("Shakespeare",),
                          source="mine"),
                 Question(id="7", text="What is the capital of France?", answers=("Paris",),
                          source="mine")]  # fmt: skip
    rows = [(1, {"id": True, "question": "What is the capital of France?", "correct": 1})]
    matched, _ = match_rows("o.jsonl", rows, questions, "jsonl")
    assert list(matched) == ["7"]  # by its text; the id named the Hamlet question
