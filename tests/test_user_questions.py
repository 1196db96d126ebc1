"""Question files of your own: formats, field mapping, ids, splits and bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from retrieval_gate.data.bad_rows import BadRows
from retrieval_gate.data.jsonl_files import read_jsonl
from retrieval_gate.data.question_lines import read_question_lines
from retrieval_gate.data.user_questions import parse_fields, read_questions, text_id
from retrieval_gate.errors import DataError


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ROWS = [
    {"id": "a1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"], "pop": 900},
    {"id": "a2", "question": "Capital of France?", "answer": "Paris", "pop": 5000},
    {"question": "Who founded Zorblat Inc?", "answers": [], "pop": None, "relation": "founder"},
]


def test_jsonl_csv_parquet_and_save_to_disk_read_alike(tmp_path):
    import pandas as pd
    from datasets import Dataset

    rows = [
        {"id": f"q{i}", "question": f"Question number {i}?", "answers": [f"a{i}"], "pop": i}
        for i in range(20)
    ]
    _jsonl(tmp_path / "q.jsonl", rows)
    frame = pd.DataFrame(rows)
    frame.to_parquet(tmp_path / "q.parquet")
    frame.assign(answers=frame.answers.map(json.dumps)).to_csv(tmp_path / "q.csv", index=False)
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "q_disk"))
    (tmp_path / "q.json").write_text(json.dumps(rows, indent=2))  # an array of objects
    frame.assign(answers=frame.answers.map(json.dumps)).to_csv(tmp_path / "q.tsv", sep="\t",
                                                               index=False)  # fmt: skip
    (tmp_path / "q.ndjson").write_bytes((tmp_path / "q.jsonl").read_bytes())
    read = {
        name: read_questions(str(tmp_path / name))
        for name in ("q.jsonl", "q.ndjson", "q.json", "q.csv", "q.tsv", "q.parquet", "q_disk")
    }
    ref = [(q.id, q.text, q.answers, q.split) for q in read["q.jsonl"]]
    for name, qs in read.items():
        assert [(q.id, q.text, q.answers, q.split) for q in qs] == ref, name
    assert read["q.parquet"][3].extra["pop"] == 3
    assert read["q.csv"][3].extra["pop"] == "3"  # CSV cells are text; features parse them


def test_answers_as_pandas_writes_a_list_column_are_the_list(tmp_path):
    """`DataFrame.to_csv` writes `['William Shakespeare', 'Shakespeare']`: refused as not JSON."""
    import pandas as pd

    answers = [["William Shakespeare", "Shakespeare"], ["O'Brien"]]
    pd.DataFrame({"question": ["Who wrote Hamlet?", "Who?"], "answers": answers}).to_csv(
        tmp_path / "q.csv", index=False
    )
    assert [list(q.answers) for q in read_questions(str(tmp_path / "q.csv"))] == answers


def test_split_names_other_tools_write_read_as_ours(tmp_path):
    """A Hugging Face style `validation` split, or `TRAIN` in capitals, was refused."""
    rows = [{"question": f"Q{i}?", "split": s}
            for i, s in enumerate(["TRAIN", " Validation ", "val", "valid", "Test", "dev"])]  # fmt: skip
    qs = read_questions(str(_jsonl(tmp_path / "s.jsonl", rows)))
    assert [q.split for q in qs] == ["train", "dev", "dev", "dev", "test", "dev"]


def test_a_text_file_is_one_question_a_line_as_score_reads_it(tmp_path):
    """`.txt` (the docs' examples/your-data/new.txt, `tune --calibrate-on`): the same
    questions, ids and splits as the JSONL of the same texts; a header line skipped."""
    texts = ["Who wrote Hamlet?", "Capital of France?", "Who founded Zorblat Inc?"]
    (tmp_path / "q.txt").write_text("question\n" + "\n".join(texts) + "\n\n", encoding="utf-8")
    _jsonl(tmp_path / "q.jsonl", [{"question": t} for t in texts])
    read = read_questions(str(tmp_path / "q.txt"))
    ref = read_questions(str(tmp_path / "q.jsonl"))
    assert [(q.id, q.text, q.split) for q in read] == [(q.id, q.text, q.split) for q in ref]
    (tmp_path / "gap.txt").write_text("Who wrote Hamlet?\n\nCapital of France?\n")
    with pytest.raises(DataError, match=r"gap.txt.*line 2.*empty line"):
        read_questions(str(tmp_path / "gap.txt"))


def test_defaults_extra_stable_ids_and_answer_shapes(tmp_path):
    qs = read_questions(str(_jsonl(tmp_path / "mine.jsonl", ROWS)))
    assert [q.answers for q in qs] == [("Shakespeare",), ("Paris",), ()]
    assert qs[2].id == text_id("Who founded Zorblat Inc?") and qs[2].relation == "founder"
    assert qs[0].source == "mine" and qs[0].extra == {"pop": 900}
    assert {q.split for q in qs} <= {"train", "dev", "test"}
    assert read_questions(str(tmp_path / "mine.jsonl")) == qs  # same file, same ids and split


def test_field_override_and_unknown_mapping(tmp_path):
    path = _jsonl(tmp_path / "t.jsonl", [{"title": "Who is X?", "gold": "x", "id": 7}])
    (q,) = read_questions(str(path), parse_fields(["question=title", "answer=gold"]))
    assert (q.id, q.text, q.answers) == ("7", "Who is X?", ("x",))
    with pytest.raises(DataError, match="--field 'colour=title'"):
        parse_fields(["colour=title"])
    with pytest.raises(DataError, match="--field question=heading: no column 'heading'"):
        read_questions(str(path), parse_fields(["question=heading"]))


def test_headers_in_another_case_are_read_when_one_column_alone_matches(tmp_path):
    """Spreadsheets capitalise headers: `--questions` said "no question column" where `score
    --input` read the same file. The exact name wins; two columns matching alike, neither."""
    path = tmp_path / "q.csv"
    path.write_text("ID,Question,Answer,Views\n7,Who is X?,x,12\n")
    (q,) = read_questions(str(path))
    assert (q.id, q.text, q.answers, q.extra) == ("7", "Who is X?", ("x",), {"Views": "12"})
    path.write_text("Question,question,Answers,ANSWERS\nWho is X?,Who is Y?,x,y\n")
    (q,) = read_questions(str(path))
    assert (q.text, q.answers, q.extra) == ("Who is Y?", (), {"Question": "Who is X?",
                                            "Answers": "x", "ANSWERS": "y"})  # fmt: skip
    rows = tmp_path / "q.jsonl"  # score --input's JSON rows, as its CSV header was read
    rows.write_text('{"ID": "a", "Question": "Who is X?"}\n{"Id": "b", "TEXT": "Who is Y?"}\n')
    assert read_question_lines(rows) == [{"line": 1, "id": "a", "text": "Who is X?"},
                                         {"line": 2, "id": "b", "text": "Who is Y?"}]  # fmt: skip


def test_split_column_kept_and_seeded_split_groups_entities(tmp_path):
    rows = [
        {"id": f"e{i}-{j}", "question": f"Fact {j} about entity {i}?", "entity": f"E{i}",
         "relation": f"r{i % 3}"}
        for i in range(60) for j in range(3)
    ]  # fmt: skip
    qs = read_questions(str(_jsonl(tmp_path / "e.jsonl", rows)))
    by_entity: dict[str, set] = {}
    for q in qs:
        by_entity.setdefault(q.entity, set()).add(q.split)
    assert all(len(s) == 1 for s in by_entity.values())  # one entity, one split
    assert {q.split for q in qs} == {"train", "dev", "test"}
    assert [q.split for q in read_questions(str(tmp_path / "e.jsonl"), seed=1)] != [
        q.split for q in qs
    ]
    fixed = _jsonl(tmp_path / "s.jsonl", [{"question": "Q?", "split": "test"}])
    assert read_questions(str(fixed))[0].split == "test"


def test_duplicates(tmp_path, caplog):
    caplog.set_level("INFO", logger="retrieval_gate")
    same = _jsonl(tmp_path / "d.jsonl", [{"question": "Same?"}, {"question": "Same?"}])
    assert len(read_questions(str(same))) == 1
    assert "1 repeated question row(s)" in caplog.text
    # one text, other answers (PopQA's two people of one name): said with the lines, not
    # counted as a repeat, and the fix named where the ids came from the text
    caplog.clear()
    other = _jsonl(tmp_path / "o.jsonl", [{"question": "Who is Jo?", "answers": ["a"]},
                                          {"question": "Who is Jo?", "answers": ["b"]}])  # fmt: skip
    assert [q.answers for q in read_questions(str(other))] == [("a",)]
    assert (
        "1 row(s) repeat an earlier row's question with other answers or values (e.g. line 2 "
        "repeats line 1"
        in caplog.text
        and "give each row an id (--field id=COLUMN)" in caplog.text
    )
    assert "repeated question row(s) kept once" not in caplog.text
    # one text, two answers' token_logprobs: the second was dropped as a repeat, at INFO
    caplog.clear()
    rows = [{"question": "Who is Jo?", "token_logprobs": [lp]} for lp in (-0.1, -4.0, -0.1)]
    answers = _jsonl(tmp_path / "a.jsonl", rows)
    assert len(read_questions(str(answers))) == 1
    assert "1 row(s) repeat an earlier row's question with other answers or values" in caplog.text
    assert "1 repeated question row(s) kept once" in caplog.text  # the third: as the first
    clash = _jsonl(tmp_path / "c.jsonl", [{"id": 1, "question": "A?"}, {"id": 1, "question": "B?"}])
    with pytest.raises(
        DataError,
        match=r"id '1' names two different questions \('A\?' on line 1, 'B\?' on line 2\)",
    ):
        read_questions(str(clash))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("none.jsonl", '{"title": "x"}\n', "no question column"),
        ("empty.csv", "", "has no rows"),
        (
            "latin1.csv",
            "question\nCaf\xe9?\n".encode("latin-1"),
            r"line 2: not valid UTF-8 .*iconv -f CP1252 -t UTF-8 .*latin1.csv > .*latin1.utf8.csv",
        ),
        # Excel's "Unicode Text": the encoding named, not only "byte 0"
        (
            "u16.csv",
            "question\nWho?\n".encode("utf-16"),
            r"line 1: not valid UTF-8 \(byte 0\): the file is UTF-16 .*iconv -f UTF-16 -t UTF-8",
        ),
        ("u16.jsonl", '{"question": "Who?"}\n'.encode("utf-16"), "the file is UTF-16"),
        # an SQLite file's header holds a NUL as UTF-16 does: named for what it is
        ("db.csv", b"SQLite format 3\x00\x10\x00\x01\x01\nWho?\n", "db.csv: not text: this is"),
        ("u16.json", '[{"question": "Who?"}]'.encode("utf-16"), "the file is UTF-16"),
        # UTF-16 without its byte-order mark decodes as UTF-8, every other byte NUL: it was
        # read as questions "W\x00h\x00o\x00" (.txt), a header of one-letter columns (.csv)
        (
            "bare16.txt",
            "Who?\nWhere?\n".encode("utf-16-le"),
            r"line 1: holds a NUL byte \(byte 1\): this is UTF-16 text saved without its "
            r"byte-order mark.*iconv -f UTF-16LE -t UTF-8 .*bare16.txt > .*bare16.utf8.txt",
        ),
        ("bare16.csv", "question\nWho?\n".encode("utf-16-be"), "line 1: .*iconv -f UTF-16BE"),
        ("bare16.jsonl", '{"question": "Who?"}\n'.encode("utf-16-le"), "line 1: .*UTF-16LE"),
        ("bare16.json", '[{"question": "Who?"}]'.encode("utf-16-le"), "line 1: .*UTF-16LE"),
        ("nul.txt", b"Who?\nWh\x00ere?\n", r"line 2: holds a NUL byte \(byte 7\), which no text"),
        ("mixed.jsonl", '{"question": "a?"}\nquestion,answers\n', "line 2: malformed JSON"),
        ("list.jsonl", "[1, 2]\n", "line 1: expected a JSON object"),
        ("json.csv", '{"question": "a?"}\n', "looks like JSON, not CSV"),
        ("cells.csv", "question,answers\nWho?,a,b\n", "line 2: row has 3 cells"),
        ("q.xml", "<q>Who?</q>\n", "unknown file format '.xml'"),
        (
            "q.jsonl.gz",
            b"\x1f\x8b\x08\x00",
            r"decompress it first \(gunzip q.jsonl.gz\) and pass q.jsonl",
        ),
        (
            "semi.csv",
            "id;question\n1;Who?\n",
            "line 1: the header is one cell 'id;question'.*"
            "semicolons, not commas; save it with commas",
        ),
        (
            "tabs.csv",
            "id\tquestion\n1\tWho?\n",
            "separates its cells with tabs.*name the file .tsv",
        ),
        ("commas.tsv", "id,question\n1,Who?\n", "with commas, not tabs; name the file .csv"),
        (
            "rows.txt",
            '{"question": "Who?"}\n',
            "line 1: this line is a JSON object.*name the file .jsonl",
        ),
        (
            "header.txt",
            "id\tquestion\n1\tWho?\n",
            "line 1: .*separated by tabs.*name the file .tsv",
        ),
        ("item.json", '[{"question": "a?"},\n 3]', "line 2: expected a JSON object as each item"),
        ("strings.json", '["a?", "b?"]', "got 'a.': give each row as .*go in a .txt file"),
        ("comma.json", '[{"question": "a?"}\n {"question": "b?"}]', "line 2: expected ',' or ']'"),
        ("cut.json", '[{"question": "a?"},\n{"question": "b', "line 2: malformed JSON"),
        ("tail.json", '[{"question": "a?"}]\n[]', "line 1: text after the array's closing"),
        ("twice.json", '[\n{"question": "a?",\n "id": 1, "id": 2}]', "line 2: key 'id' is given"),
        (
            "lines.json",
            '{"question": "a?"}\n{"title": "b?"}\n',
            "line 2: empty or missing question",
        ),
        ("one.json", '{\n "question": "a?"\n}\n', "is one JSON object, not rows"),
        # only a control character or zero-width marks: no text, yet read as a question
        (
            "nul.jsonl",
            '{"question": "a?"}\n{"question": " \\u0000 "}\n',
            "line 2: empty or missing question",
        ),  # fmt: skip
        ("zw.txt", "a?\n\u200b\u2060\nb?\n", "line 2: empty line"),
        ("wrapped.json", '{"data": [\n{"question": "a?"}]}', "its 'data' holds a list of objects"),
        (
            "badsplit.jsonl",
            '{"question": "a?", "split": "holdout"}\n',
            "split 'holdout' is not one",
        ),
        ("badpop.jsonl", '{"question": "a?", "s_pop": "many"}\n', "'s_pop' must be a number"),
        # ids that are no text nor number were read as Python's "True", "[1, 2]", "nan", "inf"
        ("boolid.jsonl", '{"question": "a?", "id": true}', "line 1: the id is true:"),
        ("listid.jsonl", '{"id": [1, 2], "question": "a?"}\n', "line 1: the id is \\[1, 2\\]:"),
        ("nanid.jsonl", '{"id": NaN, "question": "a?"}\n', "line 1: the id is NaN:"),
        ("infid.jsonl", '{"id": 1e400, "question": "a?"}\n', "line 1: the id is Infinity:"),
        ("badlist.csv", "question,answers\nWho?,[a b]\n", "starts with '\\[' but is not a list"),
        (
            "twice.jsonl",
            '{"question": "a?", "split": "dev", "split": "test"}\n',
            "line 1: key 'split' is given twice",
        ),
        (
            "twice.csv",
            "question,answers,answers\nWho?,a,b\n",
            "line 1: the header names column 'answers' twice",
        ),
    ],
)
def test_bad_files_name_the_file_and_row(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError, match=message) as err:
        read_questions(str(path))
    assert str(path) in str(err.value)


def test_jsonl_lines_of_bare_utf16_are_refused_each_with_its_byte_order(tmp_path):
    """A label file read line by line: each UTF-16 line's NUL named, the byte order told by
    where the line starts in the file (line 2 starts with line 1's newline's NUL)."""
    path = tmp_path / "labels.jsonl"
    path.write_bytes('{"id": "a"}\n{"id": "b"}\n'.encode("utf-16-le"))
    seen: list[str] = []

    class Every(BadRows):
        def report(self, error: DataError) -> None:
            seen.append(str(error))

    assert list(read_jsonl(path, Every())) == []
    assert "line 1: holds a NUL byte (byte 1): this is UTF-16" in seen[0]
    assert "line 2: holds a NUL byte (byte 23): this is UTF-16" in seen[1]
    assert all("iconv -f UTF-16LE" in s for s in seen), seen


def test_missing_file_and_unloadable_hf_spec(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="file not found"):
        read_questions(str(tmp_path / "nope.jsonl"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the variables are read when `datasets` is imported (an earlier test may have done so):
    # without these it retries the Hub for 23 s before failing
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="could not load Hugging Face dataset 'no-such/set'"):
        read_questions("hf:no-such/set@test")


def test_cells_of_other_tools_shapes_read_as_their_answers_or_are_refused(tmp_path):
    """Hugging Face's answer objects (SQuAD's {"text": [...]}, TriviaQA's {"value", "aliases"})
    are their answers, and a data frame's NaN count is unknown; an object no shape names, a
    question that is no text or an infinite count is refused by line, where the object's repr
    was a gold answer no prediction contains and infinity was 'a bug'."""
    import pandas as pd

    rows = [{"question": "Capital of France?", "answers": {"text": ["Paris"], "answer_start": [0]}},
            {"question": "Who wrote Emma?", "answers": {"value": "Jane Austen",
                                                        "aliases": ["Austen", "Jane Austen"]}}]  # fmt: skip
    paris, emma = read_questions(str(_jsonl(tmp_path / "hf.jsonl", rows)))
    assert paris.answers == ("Paris",) and emma.answers == ("Jane Austen", "Austen")
    frame = pd.DataFrame({"question": ["A?", "B?"], "s_pop": [12.0, float("nan")]})
    frame.to_parquet(tmp_path / "q.parquet")
    assert [q.s_pop for q in read_questions(str(tmp_path / "q.parquet"))] == [12, None]
    for row, message in (
        (
            {"question": "a?", "answers": {"x": 1}},
            r"line 1: answers cell holds \{'x': 1\}, not text",
        ),
        ({"question": "a?", "answers": [["a"]]}, r"answers cell holds \['a'\], not text"),
        ({"question": 5}, r"line 1: the question \(question\) is 5, not text"),
        ({"question": "a?", "s_pop": float("inf")}, "'s_pop' must be a finite number, got inf"),
    ):
        with pytest.raises(DataError, match=message):
            read_questions(str(_jsonl(tmp_path / "bad.jsonl", [row])))


def test_rows_ended_by_a_lone_carriage_return_read_as_rows(tmp_path):
    """Excel for Mac's "CSV (Macintosh)" ends rows with CR alone: the CSV reader took them, the
    JSONL reader read the whole file as one line ('malformed JSON (Extra data)')."""
    rows = ['{"question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}',
            '{"question": "What is two?", "answers": ["2"]}']  # fmt: skip
    csv = "question,answers\rWho wrote Hamlet?,Shakespeare\rWhat is two?,2\r"
    for name, text in (("q.jsonl", "\r".join(rows) + "\r"), ("q.csv", csv)):
        path = tmp_path / name
        path.write_bytes(text.encode())
        assert [q.text for q in read_questions(str(path))] == ["Who wrote Hamlet?", "What is two?"]
    (tmp_path / "bad.jsonl").write_bytes(("\r".join([rows[0], "{oops", rows[1]])).encode())
    with pytest.raises(DataError, match=r"bad.jsonl, line 2: malformed JSON"):
        read_questions(str(tmp_path / "bad.jsonl"))


def test_a_lone_answer_holding_a_separator_is_warned_about(tmp_path, caplog):
    """ "Shakespeare | William Shakespeare" in one cell is judged whole: no prediction holds it,
    and the question's label says "wrong" without a word."""
    path = tmp_path / "q.csv"
    path.write_text('id,question,answers\na,Who wrote Hamlet?,Shakespeare | William Shakespeare\n'
                    'b,Who is X?,"[""x; y""]"\nc,Capital of France?,"[""Paris"", ""Paris; FR""]"\n')  # fmt: skip
    caplog.set_level(logging.WARNING)
    assert [q.answers for q in read_questions(str(path))][0] == (
        "Shakespeare | William Shakespeare",
    )
    assert (
        "2 question(s) have one gold answer holding '|' or ';' (line 2: 'Shakespeare |"
        in caplog.text
    )


BIG = "1" + "0" * 400  # an integer JSON reads exactly, past the float range (1e400 is inf)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        # an integer past the float range: an OverflowError (exit 1) where 1e400 was refused
        ("bigpop.jsonl", f'{{"question": "a?", "s_pop": {BIG}}}\n',
         r"line 1: column 's_pop' must be a finite number, got 1000.*\(401 characters\)"),
        ("bigtok.jsonl", f'{{"question": "a?", "token_logprobs": [-{BIG}]}}\n',
         r"line 1: column 'token_logprobs', token 1: is -inf \(an integer past the float"),
        ("bigmean.jsonl", f'{{"question": "a?", "mean_logprob": -{BIG}}}\n',
         r"line 1: column 'mean_logprob': is -inf \(an integer past the float range\)"),
        # a quote left open read the rows after it into one cell: one question, or one answer
        ("open.csv", 'id,question,answers\n1,"Who wrote Hamlet?,x\n2,What?,y\n3,Why?,z\n',
         "line 2: a quoted cell opened on this line is never closed"),
        ("open2.csv", 'id,question,answers\n1,Who?,x\n2,What?,"y\n3,Why?,z\n',
         "line 3: a quoted cell opened on this line is never closed"),
        # closed by a later quote, it went on past it: the rows between in one cell
        ("open3.csv", 'id,question,answers\n1,"Who?,x\n2,"What?",y\n',
         r"line 2: a quoted cell opened on this line ends with a '\"' followed by 'W' \(line 3\)"),
        ("open.tsv", 'id\tquestion\n1\t"Who?\n2\tWhat?\n', "line 2: a quoted cell opened on"),
        # a row short of a cell was padded: its question read as the id, its answer as the question
        ("short.csv", "id,question,answers\nWho wrote Hamlet?,Shakespeare\n2,What?,y\n",
         r"line 2: row has 2 cells but the header has 3: a cell left out moves"),
        # two files joined with cat: the second header read as the question "question"
        ("cat.csv", "id,question\n1,Who?\nid,question\n2,What?\n",
         r"line 3: this row repeats the header: a second header \(files joined with cat\?\)"),
        ("catbom.csv", "id,question\n1,Who?\n\ufeffid,question\n2,What?\n",
         "line 3: this row repeats the header"),
        # a list, object or true/false in a text column was read as its Python spelling
        ("rel.jsonl", '{"question": "a?", "relation": ["a", "b"]}\n',
         r"line 1: column 'relation' holds \[\"a\", \"b\"\], not text"),
        ("src.jsonl", '{"question": "a?"}\n{"question": "b?", "source": {"x": 1}}\n',
         r"line 2: column 'source' holds \{\"x\": 1\}, not text"),
        ("ent.jsonl", '{"question": "a?", "entity": true}\n', "line 1: column 'entity' holds true"),
        ("date.jsonl", '{"question": "a?", "date": [2020]}\n', "line 1: column 'date' holds"),
        ("infans.jsonl", '{"question": "a?", "answers": [1e400]}\n',
         "line 1: answers cell holds inf, not an answer"),
        # a one-line {"data": [...]}: "no question column (columns: data)", without the fix
        ("wrapped1.json", '{"data": [{"question": "a?"}]}', "its 'data' holds a list of objects"),
    ],
)  # fmt: skip
def test_more_bad_files_name_the_file_and_row(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message) as err:
        read_questions(str(path))
    assert str(path) in str(err.value)


def test_an_integer_id_past_the_float_range_is_its_digits(tmp_path):
    """JSON reads 10**400 exactly: as an id it is its digits (it crashed in float())."""
    path = tmp_path / "q.jsonl"
    path.write_text(f'{{"id": {BIG}, "question": "a?"}}\n')
    assert read_questions(str(path))[0].id == BIG


def test_quoted_cells_over_lines_read_and_rows_say_the_line_they_start_on(tmp_path):
    """A quoted cell may hold line breaks and quotes; the strict reading that refuses a quote
    left open reads it, and a bad row is named by the line it starts on (it said line 4)."""
    path = tmp_path / "q.csv"
    path.write_text('id,question,answers\n1,"Who wrote\nthe ""play""\nHamlet?",x\n'
                    '2,"What, then?",y\n3,Why?,z\n')  # fmt: skip
    qs = read_questions(str(path))
    assert [q.text for q in qs] == ['Who wrote\nthe "play"\nHamlet?', "What, then?", "Why?"]
    assert [r["line"] for r in read_question_lines(path)] == [2, 5, 6]
    bad = tmp_path / "bad.csv"
    bad.write_text('id,question,split\n1,"Who wrote\nthe play\nHamlet?",bogus\n2,What?,test\n')
    with pytest.raises(DataError, match="bad.csv, line 2: split 'bogus'"):
        read_questions(str(bad))


def test_only_cells_of_unnamed_columns_may_be_left_out(tmp_path):
    """A header's trailing separator names no column: rows may leave that cell out."""
    path = tmp_path / "q.csv"
    path.write_text("id,question,answers,\n1,Who?,x\n2,What?,y,\n")
    assert [(q.id, q.answers) for q in read_questions(str(path))] == [("1", ("x",)), ("2", ("y",))]


def test_score_input_refuses_a_quote_left_open_and_says_rows_of_other_cells(tmp_path):
    """`score --input` read the same files: a quote left open took the rest into one question;
    a short row scored its answer as the question, a second header the word "question"."""
    from retrieval_gate.errors import InputError

    path = tmp_path / "open.csv"
    path.write_text('id,question\n1,"Who?\n2,What?\n')
    with pytest.raises(InputError, match="open.csv, line 2: a quoted cell opened on this line"):
        read_question_lines(path)
    path = tmp_path / "rows.csv"
    path.write_text("id,question\n1,Who?\nWhat?\nid,question\n4,Why?,x\n5,When?\n")
    records = read_question_lines(path)
    assert [r.get("text") for r in records] == ["Who?", None, None, None, "When?"]
    assert records[1]["error"].startswith("row has 1 cells but the header has 2: a cell left")
    assert records[2]["error"].startswith("this row repeats the header: a second header")
    assert (
        records[3]["error"] == "row has 3 cells but the header has 2; quote cells that hold commas"
    )


def test_nan_and_float_answers_are_no_answer_and_their_numbers(tmp_path):
    """NaN was the gold answer "nan" ("a banana" held it); a data frame's int column with a
    missing value is stored as floats, and "1999.0" was in no prediction."""
    import pandas as pd

    path = tmp_path / "q.jsonl"
    path.write_text('{"id": "1", "question": "a?", "answers": NaN}\n'
                    '{"id": "2", "question": "b?", "answers": [NaN, 1.5, 2.0, "x"]}\n')  # fmt: skip
    assert [q.answers for q in read_questions(str(path))] == [(), ("1.5", "2", "x")]
    frame = pd.DataFrame({"id": ["1", "2", "3"], "question": ["Year?", "Which?", "How many?"],
                          "answers": [1999, None, 42]})  # fmt: skip
    assert frame.answers.dtype == "float64"
    frame.to_parquet(tmp_path / "q.parquet")
    assert [q.answers for q in read_questions(str(tmp_path / "q.parquet"))] == [
        ("1999",),
        (),
        ("42",),
    ]


def test_text_columns_of_parquet_lists_are_refused_and_nan_is_empty(tmp_path):
    import pandas as pd

    pd.DataFrame({"question": ["a?", "b?"], "entity": [["x", "y"], ["x"]]}).to_parquet(
        tmp_path / "e.parquet"
    )
    with pytest.raises(DataError, match=r"e.parquet, line 1: column 'entity' holds \[\"x\""):
        read_questions(str(tmp_path / "e.parquet"))
    pd.DataFrame({"question": ["a?", "b?"], "relation": ["r", float("nan")]}).to_parquet(
        tmp_path / "r.parquet"
    )
    assert [q.relation for q in read_questions(str(tmp_path / "r.parquet"))] == ["r", None]


def test_a_parquet_column_named_twice_is_named(tmp_path):
    """Arrow's own error printed the whole schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = [pa.array(["1"]), pa.array(["a?"]), pa.array(["x"]), pa.array(["y"])]
    pq.write_table(pa.Table.from_arrays(cols, names=["id", "question", "answers", "answers"]),
                   tmp_path / "d.parquet")  # fmt: skip
    with pytest.raises(DataError) as err:
        read_questions(str(tmp_path / "d.parquet"))
    assert (
        str(err.value)
        == f"{tmp_path / 'd.parquet'}: the file names column 'answers' twice; rename one"
    )


def test_a_dataset_dict_is_read_split_by_split(tmp_path):
    """Splits whose columns differ in type (an int id and a text one, a list of answers and a
    lone one) could not be joined into one table, nor could a split that has an `hf_split`."""
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list([{"id": 1, "question": "a?", "answers": ["x"]}]),
                 "test": Dataset.from_list([{"id": "t2", "question": "b?", "answers": "y"}])}
                ).save_to_disk(str(tmp_path / "dd"))  # fmt: skip
    qs = read_questions(str(tmp_path / "dd"))
    assert [(q.id, q.answers, q.extra["hf_split"]) for q in qs] == [
        ("1", ("x",), "train"), ("t2", ("y",), "test")
    ]  # fmt: skip
    saved = Dataset.from_list([{"question": "a?", "hf_split": "train"}])  # read and saved again
    DatasetDict({"train": saved}).save_to_disk(str(tmp_path / "again"))
    assert read_questions(str(tmp_path / "again"))[0].extra == {"hf_split": "train"}
    other = Dataset.from_list([{"question": "a?", "hf_split": "z"}])
    DatasetDict({"train": other}).save_to_disk(str(tmp_path / "own"))
    with pytest.raises(DataError, match="own: split 'train' has its own 'hf_split' column"):
        read_questions(str(tmp_path / "own"))


def test_empty_split_and_source_cells_filled_in_are_said(tmp_path, caplog):
    """Rows with an empty `split` beside rows with one got a drawn split, and an empty `source`
    the file's name, without a word."""
    rows = [{"question": f"Question {i}?", "split": "test" if i % 2 else None,
             "source": "news" if i < 3 else ""} for i in range(6)]  # fmt: skip
    caplog.set_level(logging.WARNING)
    read_questions(str(_jsonl(tmp_path / "mine.jsonl", rows)))
    assert "mine.jsonl: 3 of 6 rows have an empty 'split' cell (the first: line 1) and get " \
           "the split their entity's (else text's) rows have, else a drawn one" \
           in caplog.text  # fmt: skip
    assert "3 of 6 rows have an empty 'source' cell (the first: line 4) and get source 'mine'" \
           in caplog.text  # fmt: skip
    caplog.clear()
    read_questions(str(_jsonl(tmp_path / "plain.jsonl", [{"question": "a?"}])))
    assert "empty" not in caplog.text  # no such columns: filled in, as documented
