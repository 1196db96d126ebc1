"""Question files of your own read as written: padded CSV headers, pandas' float answers,
repeats that disagree, partly given splits, .txt line ends and count columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_gate.data.user_questions import read_questions
from retrieval_gate.errors import DataError


def _write(path: Path, text: str) -> str:
    path.write_bytes(text.encode("utf-8"))
    return str(path)


def test_csv_header_cells_are_read_stripped(tmp_path):
    spec = _write(
        tmp_path / "sp.csv",
        "id , question,answers ,split\n1,Who wrote Hamlet?,Shakespeare,train\n"
        "2,Capital of France?,Paris,test\n",
    )
    qs = read_questions(spec)
    assert [(q.id, q.answers, q.split) for q in qs] == [
        ("1", ("Shakespeare",), "train"),
        ("2", ("Paris",), "test"),
    ]
    assert all(q.extra == {} for q in qs)
    tsv = _write(
        tmp_path / "sp.tsv", "id \tquestion\tanswers \n7\tWho wrote Hamlet?\tShakespeare\n"
    )
    assert [(q.id, q.answers) for q in read_questions(tsv)] == [("7", ("Shakespeare",))]


def test_csv_header_repeated_after_stripping_is_refused(tmp_path):
    spec = _write(tmp_path / "rep.csv", "id,question,id \n1,Q one?,2\n")
    with pytest.raises(DataError, match="names column 'id' twice"):
        read_questions(spec)


def test_csv_whole_float_answers_read_as_parquet_reads_them(tmp_path):
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"id": ["a", "b", "c"], "question": ["Year X?", "Year Y?", "Year Z?"],
                          "answers": [1999, np.nan, -2001]})  # fmt: skip
    frame.to_csv(tmp_path / "f.csv", index=False)
    frame.to_parquet(tmp_path / "f.parquet")
    from_csv = [q.answers for q in read_questions(str(tmp_path / "f.csv"))]
    assert from_csv == [q.answers for q in read_questions(str(tmp_path / "f.parquet"))]
    assert from_csv == [("1999",), (), ("-2001",)]


def test_csv_answers_beside_other_text_are_kept_as_written(tmp_path):
    spec = _write(tmp_path / "v.csv", "id,question,answers\n1,Version A?,2.0\n2,Version B?,2.1\n")
    assert [q.answers for q in read_questions(spec)] == [("2.0",), ("2.1",)]


@pytest.mark.parametrize(
    ("second", "field"),
    [
        ("Shakespeare,train,author,Hamlet,10", "split"),
        ("Shakespeare,test,author,Hamlet,99999", "s_pop"),
        ("Shakespeare,test,writer,Hamlet,10", "relation"),
        ("Shakespeare,test,author,Macbeth,10", "entity"),
    ],
)
def test_repeat_with_another_split_or_feature_is_warned(tmp_path, caplog, second, field):
    caplog.set_level("INFO", logger="retrieval_gate")
    spec = _write(
        tmp_path / "dup.csv",
        "id,question,answers,split,relation,entity,s_pop\n"
        "1,Who wrote Hamlet?,Shakespeare,test,author,Hamlet,10\n"
        f"1,Who wrote Hamlet?,{second}\n",
    )
    qs = read_questions(spec)
    assert [(q.split, q.s_pop) for q in qs] == [("test", 10)]  # the first row is kept
    assert "line 3 repeats line 2" in caplog.text
    assert f"with another {field}" in caplog.text
    assert "repeated question row(s) kept once" not in caplog.text


def test_rows_without_a_split_take_their_entity_split(tmp_path):
    rows = []
    for i in range(10):
        rows.append({"id": f"a{i}", "question": f"Who wrote book {i}?", "entity": f"Author{i}",
                     "split": "test"})  # fmt: skip
        rows.append({"id": f"b{i}", "question": f"When was Author{i} born?",
                     "entity": f"Author{i}", "split": None})  # fmt: skip
    for i in range(6):  # groups with no split at all are still drawn
        rows.append({"id": f"c{i}", "question": f"Other question {i}?", "entity": f"E{i}"})
    rows.append({"id": "t", "question": "Who wrote book 3 ?", "split": None})  # no entity
    rows.append({"id": "u", "question": "who wrote BOOK 3?", "split": "dev"})
    spec = tmp_path / "part.jsonl"
    spec.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    split = {q.id: q.split for q in read_questions(str(spec))}
    assert all(split[f"b{i}"] == "test" for i in range(10))
    assert split["t"] == "dev"  # its normalised text's split
    assert all(split[f"c{i}"] in ("train", "dev", "test") for i in range(6))


def test_txt_lines_end_only_at_newlines(tmp_path):
    path = tmp_path / "ls.txt"
    path.write_bytes(
        "Who wrote\u2028Hamlet?\nWhat is the capital\x85of France?\r\nWhich form\x0cfeed?\r"
        "Group\x1dsep?\nLast\x0bone?\n".encode()
    )
    qs = read_questions(str(path))
    assert len(qs) == 5
    assert qs[0].text == "Who wrote\u2028Hamlet?"


@pytest.mark.parametrize(
    ("cell", "shown"),
    [("true", "True"), ("false", "False"), ('"2.9"', "'2.9'"), ("2.5", "2.5")],
)
def test_pop_refuses_booleans_and_fractions(tmp_path, cell, shown):
    spec = _write(
        tmp_path / "spop.jsonl",
        '{"id":"a","question":"Q a?","s_pop":3}\n'
        f'{{"id":"b","question":"Q b?","o_pop":{cell}}}\n',
    )
    with pytest.raises(DataError, match=f"column 'o_pop'.*{shown}") as e:
        read_questions(spec)
    assert "spop.jsonl, line 2" in str(e.value)


def test_pop_refuses_csv_fraction_and_parquet_bool_but_reads_whole_floats(tmp_path):
    import pandas as pd

    spec = _write(tmp_path / "p.csv", "id,question,s_pop\n1,Q one?,12\n2,Q two?,2.9\n")
    with pytest.raises(DataError, match="whole number"):
        read_questions(spec)
    pd.DataFrame({"question": ["Q one?"], "s_pop": [True]}).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(DataError, match="not a count"):
        read_questions(str(tmp_path / "b.parquet"))
    frame = pd.DataFrame({"question": ["Q one?", "Q two?"], "s_pop": [12.0, float("nan")]})
    frame.to_parquet(tmp_path / "f.parquet")
    assert [q.s_pop for q in read_questions(str(tmp_path / "f.parquet"))] == [12, None]
