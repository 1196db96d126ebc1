"""Bad input and reruns that must never go silently wrong (issue 16): flags checked before any
model or engine loads, outputs never over inputs, names that stay inside their folder, ONNX
metadata parsed with clear errors. Each case gives exit code 2 and a message, no traceback."""

from __future__ import annotations

import os
import random
from contextlib import closing

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from retrieval_gate.cli import main
from retrieval_gate.data.question_lines import read_question_lines
from retrieval_gate.errors import InputError
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.gates.onnx_format import FORMAT, REQUIRED


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# ------------------------------------------------------------------ score


@pytest.mark.parametrize("value", ["nan", "5", "-0.1", "inf"])
def test_score_threshold_must_be_finite_in_unit_interval(tmp_path, capsys, value):
    q = tmp_path / "q.txt"
    q.write_text("Who wrote Hamlet?\n")
    code, err = _run(["score", "--model", str(tmp_path / "none"), "--input", str(q),
                      "--threshold", value], capsys)  # fmt: skip
    assert code == 2 and "--threshold must be a number in [0, 1]" in err


def test_score_output_may_not_be_the_input(tmp_path, capsys):
    q = tmp_path / "q.txt"
    q.write_text("Who wrote Hamlet?\n")
    code, err = _run(["score", "--model", str(tmp_path), "--input", str(q), "--output",
                      str(tmp_path / "." / "q.txt")], capsys)  # fmt: skip
    assert code == 2 and "is also an input" in err
    assert q.read_text() == "Who wrote Hamlet?\n"


def test_score_with_no_scorable_line_is_an_error(tmp_path, capsys):
    q = tmp_path / "q.jsonl"
    q.write_bytes(b'{"id": "a"}\n\n\xff\n')
    code, err = _run(["score", "--model", str(tmp_path), "--input", str(q)], capsys)
    assert code == 2 and "no line could be scored" in err and "line 1" in err


def test_score_reads_csv_headers_and_keeps_ids(tmp_path):
    csv_file = tmp_path / "q.csv"
    csv_file.write_text('id,question\nx1,"Who wrote Hamlet, the play?"\nx2,\nx3,\u200b \x07\n'
                        "x4,Who wr\x00ote it?\n")  # fmt: skip
    rows = read_question_lines(csv_file)
    assert rows == [
        {"line": 2, "id": "x1", "text": "Who wrote Hamlet, the play?"},
        {"line": 3, "id": "x2", "error": "empty question"},
        {"line": 4, "id": "x3", "error": "empty question"},  # no visible character: was scored
        # Python's csv reads a NUL as text: the question was scored with it
        {
            "line": 5,
            "id": "x4",
            "error": "holds a NUL byte (binary data, or UTF-16 text); save it as UTF-8",
        },  # fmt: skip
    ]
    cells = tmp_path / "cells.csv"  # a quoted cell over two lines: the next row is on line 4
    cells.write_text('question\n"Who wrote\nHamlet?"\n""\nWhat is DNA?\n')
    assert [(r["line"], r["id"], "error" in r) for r in read_question_lines(cells)] == [
        (2, "2", False), (4, "4", True), (5, "5", False)]  # fmt: skip
    txt = tmp_path / "q.txt"
    txt.write_text("question\nWho wrote Hamlet?\n")
    assert [r["text"] for r in read_question_lines(txt)] == ["Who wrote Hamlet?"]
    bad_header = tmp_path / "b.csv"
    bad_header.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no 'question' or 'text' column"):
        read_question_lines(bad_header)
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"id": "own-7", "question": ""}\n{"id": "own-8", "q": "x"}\n'
                     '{"id": "own-9", "question": "\\u0000\\u00ad"}\n')  # fmt: skip
    assert [r["id"] for r in read_question_lines(jsonl)] == ["own-7", "own-8", "own-9"]
    assert read_question_lines(jsonl)[2]["error"] == "empty question"


def test_score_reads_a_json_file_as_objects_not_as_lines_of_text(tmp_path):
    """`score --input q.json` scored the text `[{"question": "Who wrote Hamlet?"},` itself."""
    array = tmp_path / "q.json"
    array.write_text('[{"id": "a", "question": "Who wrote Hamlet?"},\n {"question": ""}]')
    assert read_question_lines(array) == [
        {"line": 1, "id": "a", "text": "Who wrote Hamlet?"},
        {"line": 2, "id": "2", "error": "empty question"},
    ]
    one_line = tmp_path / "one-line.json"  # every item on line 1: each its own id, not "1"
    one_line.write_text('[{"question": "Who wrote Hamlet?"}, {"question": "Capital of Peru?"}]')
    assert [(r["line"], r["id"]) for r in read_question_lines(one_line)] == [(1, "1"), (1, "2")]
    lines = tmp_path / "lines.json"
    lines.write_text('{"id": "b", "question": "Capital of France?"}\n')
    assert read_question_lines(lines) == [{"line": 1, "id": "b", "text": "Capital of France?"}]
    (tmp_path / "one.json").write_text('{\n  "question": "Who wrote Hamlet?"\n}\n')
    with pytest.raises(InputError, match=r"one\.json: this \.json file is one JSON object"):
        read_question_lines(tmp_path / "one.json")  # not four bad lines
    (tmp_path / "cut.json").write_text('[{"question": "Who wrote')
    with pytest.raises(InputError, match=r"cut\.json, line 1: malformed JSON"):
        read_question_lines(tmp_path / "cut.json")


def test_score_reads_tsv_and_ndjson_by_their_cells_never_a_line_as_a_question(tmp_path):
    """`score --input q.tsv` scored the header `id<TAB>question` and each `q1<TAB>Who ...?`
    line as questions; `.ndjson` rows and a `.txt` of JSON rows likewise; a ';' CSV said only
    that its header lacked a question column."""
    (tmp_path / "q.tsv").write_text("id\tquestion\nq1\tWho wrote Hamlet?\n")
    assert read_question_lines(tmp_path / "q.tsv") == [
        {"line": 2, "id": "q1", "text": "Who wrote Hamlet?"}
    ]
    (tmp_path / "q.ndjson").write_text('{"id": "q2", "question": "Capital of France?"}\n')
    assert read_question_lines(tmp_path / "q.ndjson") == [
        {"line": 1, "id": "q2", "text": "Capital of France?"}
    ]
    for name, text, message in [
        ("rows.txt", '{"question": "Who?"}\n', "JSON object.*name the file .jsonl"),
        ("cells.txt", "id\tquestion\nq1\tWho?\n", "separated by tabs.*name the file .tsv"),
        ("cells", "id,question\nq1,Who?\n", "separated by commas.*name the file .csv"),
        ("semi.csv", "id;question\nq1;Who?\n", "semicolons, not commas; save it with commas"),
    ]:
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError, match=f"{name}, line 1: .*{message}"):
            read_question_lines(tmp_path / name)
    (tmp_path / "plain.txt").write_text("Who wrote Hamlet, the play?\nquestion: text?\n")
    assert len(read_question_lines(tmp_path / "plain.txt")) == 2  # prose with commas is fine


def test_score_output_folder_that_cannot_exist_is_a_message(tmp_path, capsys):
    from retrieval_gate.fileio import write_text

    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=r"cannot create its folder \(.*/file is a file, not"):
        write_text(tmp_path / "file" / "deeper" / "out.jsonl", "x")


# ------------------------------------------------------------------ names


def test_export_name_and_run_name_are_plain(tmp_path, capsys):
    code, err = _run(["export", "--run", str(tmp_path), "--name", "../x",
                      "--out-dir", str(tmp_path / "export")], capsys)  # fmt: skip
    assert code == 2 and "plain folder name" in err and not (tmp_path / "x").exists()
    code, err = _run(["train", "--config", "configs/experiments/minilm-closed-book.yaml",
                      "--set", "run.name=../../x"], capsys)  # fmt: skip
    assert code == 2 and "run.name" in err


def test_export_refuses_a_folder_that_is_not_an_export(tmp_path):
    from retrieval_gate.export.onnx_export import export_gate

    target = tmp_path / "theirs"
    target.mkdir()
    (target / "model.fp16.onnx").write_text("someone else's")
    with pytest.raises(InputError, match="not an export"):
        export_gate(tmp_path / "no-run", target)
    assert (target / "model.fp16.onnx").read_text() == "someone else's"


# ------------------------------------------------------------------ ONNX metadata


def _onnx_with(path, **overrides) -> None:
    meta = {k: "x" for k in REQUIRED} | {"format": FORMAT, "classes": '["no", "yes"]',
            "threshold": "0.5", "max_length": "16", "pad_token_id": "0"} | overrides  # fmt: skip
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, meta)
    onnx.save(model, path)
    # the folder's metadata beside it, as every export has (artifacts.open_artifact reads it)
    (path.parent / "gate_metadata.json").write_text('{"task": "binary"}')


@pytest.mark.parametrize(
    "key, value",
    [("threshold", "abc"), ("threshold", "2"), ("max_length", "1.5"), ("classes", "[")],
)
def test_onnx_metadata_values_are_parsed_with_clear_errors(tmp_path, key, value):
    _onnx_with(tmp_path / "model.onnx", **{key: value})
    with pytest.raises(InputError, match=f"ONNX metadata {key}="):
        OnnxGate(tmp_path)


def test_evaluate_refuses_label_values_outside_the_classes(tmp_path, capsys):
    for value in ('"yes"', "2", "true", "0.5"):
        labels = tmp_path / "l.jsonl"
        content = f'{{"id": "popqa-1", "label": {value}}}\n'
        labels.write_text(content)
        code, err = _run(["evaluate", "--labels", str(labels), "--gates", "always",
                          "--out", str(tmp_path / "out")], capsys)  # fmt: skip
        assert code == 2 and "label" in err and "line 1" in err, (value, err)
        assert labels.read_text() == content  # the label file is untouched


def test_a_pipe_or_folder_given_as_a_file_is_named_so(tmp_path, capsys):
    # a FIFO read as a file would wait for a writer for ever; it was "file not found"
    fifo = tmp_path / "labels.jsonl"
    os.mkfifo(fifo)
    runs = {
        "evaluate": (["evaluate", "--labels", str(fifo), "--gates", "always", "--no-cost",
                      "--out", str(tmp_path / "ev")], "label file is a device, pipe or socket"),
        "train": (["train", "--config", "minilm-closed-book", "--set",
                   f"data.label_file={fifo}", f"run.output_dir={tmp_path}"],
                  "label file is a device, pipe or socket"),
        "score": (["score", "--model", str(tmp_path), "--questions", str(fifo)],
                  "is a device, pipe or socket (standard input?), not a file: save the "
                  "questions to one"),
        # /dev/stdin piped: "input file is not a regular file", not why nor what to do
        "input": (["score", "--model", str(tmp_path), "--input", str(fifo)],
                  "a pipe or device (standard input?) is not read: save the questions to a "
                  "file"),
        "input folder": (["score", "--model", str(tmp_path), "--input", str(tmp_path)],
                         "input file is a folder, not a file"),
        "folder": (["evaluate", "--labels", str(tmp_path), "--gates", "always", "--no-cost",
                    "--out", str(tmp_path / "ev")], "label file is a folder, not a regular file"),
    }  # fmt: skip
    for name, (argv, says) in runs.items():
        code, err = _run(argv, capsys)
        assert code == 2 and says in err, (name, err)


def test_a_labelling_runs_folder_given_as_the_label_file_names_its_files(tmp_path, capsys):
    """It said only "label file is a folder, not a regular file: pass the file's path"."""
    run = tmp_path / "labels" / "my-llm"
    run.mkdir(parents=True)
    for name in ("rag-gain.jsonl", "closed-book.jsonl"):
        (run / name).write_text("")
    argv = ["evaluate", "--labels", str(run), "--gates", "always", "--no-cost", "--out",
            str(tmp_path / "ev")]  # fmt: skip
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert f"pass the file's path, e.g. {run / 'closed-book.jsonl'} (it holds closed-book.jsonl, " \
        "rag-gain.jsonl)" in err  # fmt: skip


# ------------------------------------------------------------------ the probe's last five


def test_demo_unknown_stage_is_one_line_exit_2(tmp_path, capsys):
    code, err = _run(["demo", "--out", str(tmp_path / "demo"), "--stage", "bogus"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown stage 'bogus' (--stage)" in err and "train" in err
    assert not (tmp_path / "demo").exists()  # refused before anything is written


def test_export_out_dir_that_is_a_file(tmp_path, capsys):
    a_file = tmp_path / "exports"
    a_file.write_text("mine")
    for out_dir in (a_file, a_file / "sub"):
        code, err = _run(["export", "--run", str(tmp_path / "run"), "--out-dir", str(out_dir)],
                         capsys)  # fmt: skip
        assert code == 2 and "--out-dir must be a folder" in err, err
    assert a_file.read_text() == "mine"


def test_score_jsonl_with_an_escaped_lone_surrogate(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "bad", "question": "Who is \\ud800 Feilden?"}\n'
                 '{"id": "ok", "question": "Who wrote Hamlet?"}\n')  # fmt: skip
    bad, ok = read_question_lines(q)
    assert bad["id"] == "bad" and "lone surrogate at character 7" in bad["error"]
    assert ok == {"line": 2, "id": "ok", "text": "Who wrote Hamlet?"}


def test_score_input_with_an_id_that_is_no_text_or_number_is_a_bad_line(tmp_path):
    """A list or true/false id was echoed as "[1]" or "True", an id nobody wrote."""
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": [1], "question": "Who?"}\n{"id": true, "question": "Who?"}\n'
                 '{"id": 7, "question": "Who wrote Hamlet?"}\n')  # fmt: skip
    listed, flag, ok = read_question_lines(q)
    assert "text" not in listed and listed["error"].startswith("the id is [1]: name each row's")
    assert flag["error"].startswith("the id is true: ")
    assert ok == {"line": 3, "id": "7", "text": "Who wrote Hamlet?"}


def test_score_input_with_a_lone_surrogate_in_the_id_is_a_bad_line(tmp_path):
    """The id is echoed in every output row: printing it was an internal error."""
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "a\\ud800", "question": "Who wrote Hamlet?"}\n')
    (bad,) = read_question_lines(q)
    assert bad == {"line": 1, "id": "1", "error": "the id is not valid Unicode (a lone "
                   "surrogate); write it as UTF-8"}  # fmt: skip


def test_files_with_a_lone_surrogate_are_refused_naming_file_line_and_field(tmp_path, capsys):
    """A question file (`--questions`) and an outcomes file ended in internal errors: a hash of
    the text, the label file's rewrite."""
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "a", "question": "Who wrote Hamlet?", "answers": ["x"]}\n'
                 '{"id": "b", "question": "Who is \\udc80?", "answers": ["y"]}\n')  # fmt: skip
    code, err = _run(["score", "--model", str(tmp_path), "--questions", str(q)], capsys)
    assert code == 2 and "q.jsonl, line 2: malformed JSON (a lone surrogate '\\udc80' in " \
        "'question': not Unicode text, write it as UTF-8, column 33)" in err, err  # fmt: skip
    out = tmp_path / "outcomes.jsonl"
    out.write_text('{"id": "a", "prediction": "x"}\n{"id": "b", "prediction": "\\ud800"}\n')
    ok = tmp_path / "ok.csv"
    ok.write_text("id,question,answers\na,Who wrote Hamlet?,x\nb,Who is he?,y\n")
    code, err = _run(["label", "--policy", "outcomes", "--outcomes", str(out), "--questions",
                      str(ok), "--labels-dir", str(tmp_path / "labels")], capsys)  # fmt: skip
    assert code == 2 and "outcomes.jsonl, line 2" in err and "'prediction'" in err, err
    assert not (tmp_path / "labels").exists()


@pytest.mark.parametrize("argv", [
    ["tune", "--gate", "length", "--labels", "l.jsonl", "--out", "t\udcff"],
    ["train", "--config", "minilm-closed-book", "--set", "run.name=a\udcff"],
    ["label", "--policy", "outcomes", "--outcomes", "o.jsonl", "--generator=my\udcffllm"],
])  # fmt: skip
def test_an_argument_that_is_no_utf8_text_is_refused_naming_its_flag(argv, capsys):
    """Python keeps an argument's non-UTF-8 bytes as lone surrogates: `tune --out` ended in an
    internal error, `label --generator` wrote a provenance file later read as damaged."""
    code, err = _run(argv, capsys)
    flag = next(a.partition("=")[0] for a in reversed(argv) if a.startswith("-"))
    assert code == 2 and f"error: {flag}: " in err and "is not UTF-8 text (byte 0xff" in err, err


def test_question_files_with_a_byte_order_mark_read_as_without(tmp_path):
    """Windows editors and PowerShell start UTF-8 files with a BOM: a `question` header after
    it is still a header, and a JSONL first row still a row."""
    txt, jsonl = tmp_path / "q.txt", tmp_path / "q.jsonl"
    txt.write_bytes(b"\xef\xbb\xbfquestion\r\nWho wrote Hamlet?\r\n")
    jsonl.write_bytes(b'\xef\xbb\xbf{"id": "a", "question": "Who wrote Hamlet?"}\n')
    assert read_question_lines(txt) == [{"line": 2, "id": "2", "text": "Who wrote Hamlet?"}]
    assert read_question_lines(jsonl) == [{"line": 1, "id": "a", "text": "Who wrote Hamlet?"}]
    from retrieval_gate.data.user_questions import read_questions

    assert [q.text for q in read_questions(str(jsonl))] == ["Who wrote Hamlet?"]


@pytest.mark.parametrize("head, says", [
    (b"PAR1\x15\x04", "a Parquet file: pass it as --questions"),
    (b"\x1f\x8b\x08\x00", "gzip-compressed"),
    (b"PK\x03\x04", "a zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),  # its NUL-free lines were scored, exit 0
    ("Who wrote Hamlet?\n".encode("utf-16"), "are NUL, so it is binary data or UTF-16 text"),
    (b"\x00\x01\x02\x03\n" * 50, "50 of its first 268 bytes are NUL"),
])  # fmt: skip
def test_score_refuses_a_binary_file_instead_of_scoring_its_bytes(tmp_path, capsys, head, says):
    q = tmp_path / "q.txt"
    q.write_bytes(head + b"Who wrote Hamlet?\n")
    code, err = _run(["score", "--model", str(tmp_path), "--input", str(q)], capsys)
    assert code == 2 and "q.txt: not lines of text" in err and says in err


def test_score_a_row_naming_its_question_twice_is_a_bad_line(tmp_path):
    jsonl, csv = tmp_path / "q.jsonl", tmp_path / "q.csv"
    jsonl.write_text('{"id": "a", "question": "Who?", "question": "Why?"}\n'
                     '{"id": "b", "question": "Who wrote Hamlet?"}\n')  # fmt: skip
    bad, ok = read_question_lines(jsonl)
    assert "key 'question' is given twice" in bad["error"] and ok["id"] == "b"
    csv.write_text("question,notes,Question\nWho?,x,Why?\n")
    with pytest.raises(InputError, match="q.csv, line 1: CSV header names column 'question'"):
        read_question_lines(csv)
    csv.write_text("question,notes,notes,,\nWho?,x,y,,\n")  # only the columns it reads count
    assert [r["text"] for r in read_question_lines(csv)] == ["Who?"]


def test_score_a_line_with_a_nul_byte_is_a_bad_line(tmp_path):
    q = tmp_path / "q.txt"
    q.write_bytes(b"Who\x00 wrote Hamlet?\nWho wrote Macbeth?\n")
    bad, ok = read_question_lines(q)
    assert "NUL byte" in bad["error"] and ok["text"] == "Who wrote Macbeth?"


def test_a_corpus_not_in_utf8_is_refused_naming_the_line_and_a_bom_is_read(tmp_path):
    from retrieval_gate.errors import DataError
    from retrieval_gate.retrieval.corpus import read_corpus

    c = tmp_path / "c.jsonl"
    c.write_bytes(b'{"text": "Hamlet is a play"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"c.jsonl, line 2: not valid UTF-8"):
        read_corpus(c)
    c.write_bytes(b'\xef\xbb\xbf{"id": "d1", "text": "Hamlet is a play"}\n')
    assert [d.id for d in read_corpus(c)] == ["d1"]


def test_score_only_lone_surrogates_is_exit_2(tmp_path, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text('{"question": "\\udfff"}\n')
    code, err = _run(["score", "--model", str(tmp_path), "--input", str(q)], capsys)
    assert code == 2 and "lone surrogate" in err


def test_encoder_batches_cap_padded_tokens_on_a_cpu_not_on_a_gpu():
    """Length-ordered batches of at most `batch_size` rows and MAX_BATCH_TOKENS padded tokens
    (a lone longer row still gets its batch); without the cap (a GPU), full batches."""
    from retrieval_gate.gates.encoder import MAX_BATCH_TOKENS, EncoderGate

    class Lengths(EncoderGate):
        name, threshold, batch_size, pad_id, side_features = "t", 0.5, 64, 0, None
        encode = run_batch = None
        device = "CPUExecutionProvider"

    lengths = [10] * 100 + [35] * 30 + [900]
    random.Random(0).shuffle(lengths)
    gate = Lengths()
    batches = gate.batches(lengths)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    widths = [[lengths[i] for i in b] for b in batches]
    assert all(w == sorted(w) for w in widths) and widths[-1] == [900]
    assert all(
        len(w) <= 64 and (len(w) == 1 or len(w) * max(w) <= MAX_BATCH_TOKENS) for w in widths
    )
    assert [len(w) for w in widths[:3]] == [51, 49, 14]  # 51 x 10 <= 512, 14 x 35 <= 512
    for gpu in ("CUDAExecutionProvider", "cuda:0"):  # ONNX Runtime's and torch's names
        gate.device = gpu
        assert gate.max_batch_tokens is None
        assert [len(b) for b in gate.batches(lengths)] == [64, 64, 3]


def test_encoder_gates_refuse_lone_surrogates_with_an_input_error():
    from retrieval_gate.gates.encoder import check_texts

    with pytest.raises(InputError, match="question 1 is not valid Unicode"):
        check_texts(["fine?", "bad \udc80"])


@pytest.fixture
def no_engine(monkeypatch):
    """Fails the test if serve gets as far as starting the generator."""

    def started(**_):
        raise AssertionError("the engine started before the flags were checked")

    monkeypatch.setattr("retrieval_gate.rag.backends.open_generator", started)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gate", "onnx", "--onnx", "{tmp}/missing"], "no such export folder"),
        (["--gate", "onnx", "--onnx", "{tmp}", "--variant", "int8"], "no int8 model"),
        (["--gate", "learned", "--learned-run", "{tmp}/missing"], "not a training run folder"),
        (["--gate", "always", "--corpus", "{tmp}/missing.jsonl"], "corpus file not found"),
        (["--gate", "always", "-k", "0"], "-k must be at least 1"),
        (["--gate", "tfidf", "--labels", "{tmp}/none.jsonl"], "no label file"),
    ],
)
def test_serve_refuses_bad_paths_before_the_engine_starts(tmp_path, capsys, no_engine, flags,
                                                          message):  # fmt: skip
    argv = ["serve", *(f.format(tmp=tmp_path) for f in flags)]
    code, err = _run(argv, capsys)
    assert code == 2 and message in err, err


def test_label_and_score_refuse_an_output_that_is_a_pipe_or_device(tmp_path, capsys):
    """`label --out /dev/full` (as root) replaced the device with a label file and wrote
    /dev/full.meta.json beside it: a FIFO stands in for a device here."""
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, err = _run(["label", "--policy", "popularity", "--dataset", "popqa", "--limit", "2",
                      "--out", str(fifo)], capsys)  # fmt: skip
    assert code == 2 and "is not a regular file" in err, err
    q = tmp_path / "q.txt"
    q.write_text("Who wrote Hamlet?\n")
    code, err = _run(["score", "--model", str(tmp_path), "--input", str(q), "--output",
                      str(fifo)], capsys)  # fmt: skip
    assert code == 2 and "is not a regular file" in err, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "q.txt"]


def test_train_output_dir_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    """It was a traceback (NotADirectoryError) after the data had been prepared."""
    mine = tmp_path / "afile"
    mine.write_text("mine")
    code, err = _run(["train", "--config", "cascade-closed-book", "--set",
                      f"run.output_dir={mine}"], capsys)  # fmt: skip
    assert code == 2 and f"run.output_dir: {mine} is a file, so the run folder" in err, err
    assert mine.read_text() == "mine"


@pytest.mark.parametrize("kind, content, message", [
    ("sqlite", b"not a database", "is not a usable study database (file is not a database)"),
    ("journal", b"garbage{\n", "is not an Optuna journal"),
    ("journal", b"[" * 50_000 + b"\n", "is not an Optuna journal"),  # was a RecursionError
])  # fmt: skip
def test_tune_refuses_a_storage_file_of_another_kind_and_leaves_it(tmp_path, capsys, kind,
                                                                  content, message):  # fmt: skip
    """Both were tracebacks; Optuna had appended its first record to the journal."""
    path = tmp_path / "studies.db"
    path.write_bytes(content)
    storage = str(path) if kind == "sqlite" else f"journal:{path}"
    labels = "data/labels/smollm2-135m-instruct/closed-book.jsonl"
    code, err = _run(["tune", "--gate", "tfidf", "--labels", labels, "--objective", "pareto",
                      "--trials", "2", "--storage", storage, "--out", str(tmp_path / "out")],
                     capsys)  # fmt: skip
    assert code == 2 and message in err, err
    assert path.read_bytes() == content


@pytest.mark.parametrize("as_url", [False, True])
def test_tune_leaves_a_sqlite_database_of_another_program_as_it_is(tmp_path, capsys, as_url):
    """Optuna added its tables to it, beside the user's own."""
    import sqlite3

    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE customers (name TEXT)")
        db.commit()
    before = path.read_bytes()
    storage = f"sqlite:///{path}" if as_url else str(path)
    labels = "data/labels/smollm2-135m-instruct/closed-book.jsonl"
    code, err = _run(["tune", "--gate", "tfidf", "--labels", labels, "--objective", "pareto",
                      "--trials", "2", "--storage", storage, "--out", str(tmp_path / "out")],
                     capsys)  # fmt: skip
    assert code == 2 and "is a SQLite database of something else (tables customers)" in err, err
    assert path.read_bytes() == before and not (tmp_path / "out").exists()


def test_tune_refuses_a_study_database_with_a_damaged_page(tmp_path, capsys):
    """Its tables read, but Optuna's first commit failed on the damaged page: a traceback."""
    import sqlite3

    path = tmp_path / "studies.db"
    with closing(sqlite3.connect(path)) as db:
        for table in ("studies", "version_info"):
            db.execute(f"CREATE TABLE {table} (x TEXT)")
        db.execute("CREATE TABLE trials (x TEXT)")
        db.execute("CREATE INDEX by_x ON trials (x)")
        db.executemany("INSERT INTO trials VALUES (?)", [(f"trial {i:05d}",) for i in range(3000)])
        db.commit()
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 3 + 16] = b"\xff" * 16  # a page's header: what a bad sector leaves
    path.write_bytes(bytes(data))
    labels = "data/labels/smollm2-135m-instruct/closed-book.jsonl"
    code, err = _run(["tune", "--gate", "tfidf", "--labels", labels, "--objective", "pareto",
                      "--trials", "2", "--storage", str(path), "--out", str(tmp_path / "out")],
                     capsys)  # fmt: skip
    assert code == 2 and "is not a usable study database" in err and "left as it is" in err, err
    assert path.read_bytes() == bytes(data)


def test_a_dataset_file_that_is_a_folder_is_named(tmp_path, capsys):
    """It was an IsADirectoryError traceback."""
    (tmp_path / "freshqa" / "FreshQA_v04082024.jsonl").mkdir(parents=True)
    code, err = _run(["data", "summary", "--data-dir", str(tmp_path), "--datasets", "freshqa"],
                     capsys)  # fmt: skip
    assert code == 2 and "FreshQA_v04082024.jsonl: cannot read it as a JSONL file" in err, err


@pytest.mark.parametrize("argv", [
    ["evaluate", "--labels", "x.jsonl", "--gates", "tfidf", "always", "tfidf"],
    ["evaluate", "--labels", "x.jsonl", "x.jsonl"],
    ["export", "--run", "x", "--variants", "fp32", "fp32"],
    ["transfer", "--labels", "a.jsonl", "--gates", "tfidf", "tfidf"],
    ["tune", "--gate", "tfidf", "--labels", "x", "--objective", "pareto", "pareto"],
])  # fmt: skip
def test_a_list_flag_naming_a_value_twice_is_refused(argv, capsys):
    """`evaluate --gates tfidf tfidf` ran the gate twice into one report (rag --modes
    already refused it)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "given more than once; name each once" in capsys.readouterr().err


def test_label_outcomes_out_writes_the_file_named(tmp_path, capsys):
    """`--out labels.jsonl` is that file (it wrote closed-book.jsonl beside it); outcomes that
    make two files need --labels-dir, and say so before writing anything."""
    import json

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"m{i}", "question": f"Q{i}?"}) + "\n"
                                 for i in range(4)))  # fmt: skip
    closed = tmp_path / "closed.csv"
    closed.write_text("id,correct\nm0,true\nm1,false\nm2,true\nm3,false\n")
    out = tmp_path / "labels.jsonl"
    base = ["label", "--policy", "outcomes", "--questions", str(questions), "--generator", "mine"]
    code, _ = _run([*base, "--outcomes", str(closed), "--out", str(out)], capsys)
    assert code == 0 and sorted(p.name for p in tmp_path.iterdir()) == [
        ".retrieval-gate-files.json",  # the ledger: a hand-edited labels.jsonl stays the user's
        "closed.csv", "labels.jsonl", "labels.meta.json", "q.jsonl"]  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in rows] == [0, 1, 0, 1]
    both = tmp_path / "both.csv"
    both.write_text("id,correct,rag_correct\nm0,true,true\nm1,false,true\n")
    two = tmp_path / "two.jsonl"
    code, err = _run([*base, "--outcomes", str(both), "--out", str(two)], capsys)
    assert code == 2 and "--labels-dir" in err and "rag-gain.jsonl" in err
    assert not two.exists()
    code, _ = _run([*base, "--outcomes", str(both), "--labels-dir", str(tmp_path / "d")], capsys)
    assert code == 0 and {p.name for p in (tmp_path / "d" / "mine").glob("*.jsonl")} == {
        "closed-book.jsonl", "rag-gain.jsonl"}  # fmt: skip


@pytest.mark.parametrize("target", ["folder", "user file", "user's notes", "user's .meta.json"])
@pytest.mark.parametrize("policy", ["popularity", "outcomes"])
def test_label_out_refused_leaves_nothing_beside_it(tmp_path, capsys, target, policy):
    """`label --out` naming a folder or a file that is not a label file is refused before the
    writer lock is taken: no `.<name>.lock` is left in the user's folder (the probe's DAMAGE).
    So is a new label file whose `.meta.json` name holds the user's own JSON (replaced). A
    user's file is named as not a label file (lines of text were "malformed JSON")."""
    user = tmp_path / "user"
    user.mkdir()
    names = {"folder": "out", "user file": "settings.env", "user's notes": "notes.txt",
             "user's .meta.json": "mine.jsonl"}  # fmt: skip
    out = user / names[target]
    kept = {"user's .meta.json": user / "mine.meta.json"}.get(target, out)
    content = "my notes\nline two\n" if target == "user's notes" else '{"KEY": 1}\n'
    if target == "folder":
        out.mkdir()
    else:
        kept.write_text(content)
    before = sorted(p.name for p in user.iterdir())
    argv = ["label", "--policy", policy, "--out", str(out)]
    if policy == "outcomes":
        (tmp_path / "q.csv").write_text("id,question\nm1,Who wrote Hamlet?\n")
        (tmp_path / "o.csv").write_text("id,correct\nm1,true\n")
        argv += ["--outcomes", str(tmp_path / "o.csv"), "--questions", str(tmp_path / "q.csv"),
                 "--generator", "mine"]  # fmt: skip
    code, err = _run(argv, capsys)
    assert code == 2 and str(out) in err, err
    if target.startswith("user's n") or target == "user file":
        assert "exists and is not a retrieval-gate label file" in err, err
    assert sorted(p.name for p in user.iterdir()) == before
    assert target == "folder" or kept.read_text() == content


def test_label_generator_folder_that_does_not_exist_is_refused_at_once(tmp_path, capsys):
    """--generator naming a missing folder: refused before the lock or any engine (the engine
    took 9 s to say so), and nothing written beside --out."""
    out = tmp_path / "labels" / "x.jsonl"
    code, err = _run(["label", "--policy", "closed-book", "--generator", str(tmp_path / "nosuch"),
                      "--limit", "2", "--out", str(out)], capsys)  # fmt: skip
    assert code == 2 and "no model folder here" in err and str(tmp_path / "nosuch") in err, err
    assert not out.parent.exists()


def _model_folder(folder, damage: str):
    """A small model folder (a config and one safetensors file), damaged as asked."""
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    config = {
        "model_type": "llama",
        "vocab_size": 8,
        "hidden_size": 4,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "intermediate_size": 8,
    }
    texts = {
        "no-config": "",
        "garbage-config": "garbage{",
        "list-config": "[1]",
        "unknown-type": '{"model_type": "nosuch"}',
        "invalid-config": '{"model_type": "llama", "hidden_size": 4}',  # not a multiple of 32
    }
    (folder / "config.json").write_text(texts.get(damage, json.dumps(config)))
    if damage == "no-config":
        (folder / "config.json").unlink()
    if damage != "no-weights":
        save_file({"w": torch.ones(64, 64)}, str(folder / "model.safetensors"))
    weights = folder / "model.safetensors"
    if damage == "cut-weights":
        weights.write_bytes(weights.read_bytes()[:5000])
    if damage == "garbage-weights":
        weights.write_bytes(b"\xff" * 5000)
    return folder


@pytest.mark.parametrize("damage, said", [
    ("no-config", "not a model folder (no config.json)"),
    ("garbage-config", "config.json is not readable JSON"),
    ("list-config", "config.json is not a JSON object"),
    ("no-weights", "no weight files (*.safetensors"),
    ("cut-weights", "model.safetensors: cut short or damaged: 5,000 bytes where its header"),
    ("garbage-weights", "model.safetensors: not a readable safetensors file"),
    ("unknown-type", "not a model transformers knows"),
    ("invalid-config", "not a model transformers knows (Class validation error"),
    ("no-tokenizer", "the folder lacks its tokenizer files (tokenizer.json"),
])  # fmt: skip
def test_a_damaged_generator_folder_is_refused_before_the_engine(tmp_path, capsys, no_engine,
                                                                  damage, said):  # fmt: skip
    """--generator FOLDER without config.json, with a garbled one, without tokenizer files, or
    with its weights cut short: 'internal error (a bug)' with transformers' traceback, or vLLM
    failing seconds into its start; now one line naming the file, before any engine."""
    folder = _model_folder(tmp_path / "model", damage)
    code, err = _run(["label", "--policy", "closed-book", "--generator", str(folder), "--limit",
                      "2", "--labels-dir", str(tmp_path / "labels")], capsys)  # fmt: skip
    assert code == 2 and said in err and str(folder) in err, err


@pytest.mark.parametrize("damage, said", [
    ("no-config", "not a model folder (no config.json): set model.name to a folder"),
    ("garbage-config", "config.json is not readable JSON"),
    ("cut-weights", "model.safetensors: cut short or damaged"),
    ("invalid-config", "not a model transformers knows (Class validation error"),
    ("no-tokenizer", "its tokenizer reads every word as unknown"),
])  # fmt: skip
def test_train_on_a_damaged_backbone_folder_says_which_file(tmp_path, capsys, damage, said):
    """model.name=FOLDER damaged: 'internal error (a bug)' with transformers' or safetensors'
    traceback; and a folder without tokenizer files trained a gate on a tokenizer that reads
    every word as unknown (AUROC 0.507, exit 0). Now each is refused naming the file."""
    from retrieval_gate.models import minilm_path

    folder = tmp_path / "backbone"
    if damage == "no-tokenizer":
        folder.mkdir()
        for name in ("config.json", "model.safetensors"):
            (folder / name).write_bytes((minilm_path() / name).read_bytes())
    else:
        _model_folder(folder, damage)
    code, err = _run(["train", "--config", "minilm-closed-book", "--set", f"model.name={folder}",
                      f"run.output_dir={tmp_path / 'ck'}", "run.name=g"], capsys)  # fmt: skip
    assert code == 2 and said in err and str(folder) in err, err
    assert not (tmp_path / "ck" / "g" / "gate.pt").exists()


def test_evaluate_with_no_gate_it_can_build_says_why(tmp_path, capsys):
    """`evaluate --gates learned` without --learned-run: every gate skipped, so exit 2 naming
    the missing flag (it drew an empty report and crashed: ZeroDivisionError)."""
    code, err = _run(["evaluate", "--gates", "learned", "--labels",
                      "data/labels/smollm2-135m-instruct/closed-book.jsonl",
                      "--out", str(tmp_path / "ev")], capsys)  # fmt: skip
    assert code == 2 and "no gate could be evaluated" in err and "--learned-run" in err, err


LABELS = "data/labels/smollm2-135m-instruct/closed-book.jsonl"
TUNE = ["tune", "--gate", "tfidf", "--labels", LABELS]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["rag", "--modes", "never", "--threshold", "never=nan"], "must be a number in [0, 1]"),
        (["rag", "--modes", "never", "--threshold", "never=1.5"], "must be a number in [0, 1]"),
        (["export", "--run", "nosuch", "--parity-limit", "-5"], "--parity-limit must be 0"),
        # numpy's legacy seeding under Optuna's samplers raised: "internal error (a bug)"
        ([*TUNE, "--seed", "-5"], "--seed -5: expected a whole number from 0 to 4294967295"),
        ([*TUNE, "--seed", str(2**32)], "expected a whole number from 0 to 4294967295"),
        # ran 10^20 trials (a progress bar of a million hours)
        ([*TUNE, "--trials", str(10**20)], "--trials must be from 1 to 100,000"),
    ],
)
def test_numbers_out_of_range_exit_2_before_any_work(argv, message, tmp_path, capsys):
    """The probe's last tracebacks and an engine started for a NaN threshold: one line, exit 2."""
    out = {"export": ["--out-dir", str(tmp_path)], "tune": ["--out", str(tmp_path / "t")]}
    code, err = _run([*argv, *out.get(argv[0], [])], capsys)
    assert code == 2 and message in err, err
    assert not (tmp_path / "t").exists()


def test_transfer_finds_its_default_learned_config_from_any_folder(tmp_path, monkeypatch):
    """The default was the relative path configs/backbones/minilm.yaml: `transfer --learned`
    outside the checkout failed on it."""
    from retrieval_gate.cli import build_parser
    from retrieval_gate.training.config import CHECKOUT_CONFIGS, find_config

    monkeypatch.chdir(tmp_path)
    args = build_parser(["transfer"]).parse_args(["transfer", "--labels", "x.jsonl"])
    assert find_config(args.learned_config) == CHECKOUT_CONFIGS / "backbones" / "minilm.yaml"
    # tune --objective hparams had the same relative default (configs/backbones/minilm-lora.yaml)
    args = build_parser(["tune"]).parse_args(["tune", "--gate", "learned", "--labels", "x.jsonl"])
    assert find_config(args.config) == CHECKOUT_CONFIGS / "backbones" / "minilm-lora.yaml"


@pytest.mark.parametrize("damaged", ["garbage", "", '{"policy": "clos'])
def test_train_names_a_damaged_label_provenance_file(tmp_path, capsys, damaged):
    """A label file's .meta.json cut short or overwritten: named, with the command that remakes
    it, where `train` stopped with a JSONDecodeError (exit 1, 'a bug')."""
    from user_files import QUESTIONS, write_jsonl

    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    outcomes = write_jsonl(tmp_path / "o.jsonl", [{"id": q["id"], "correct": i % 2}
                                                  for i, q in enumerate(QUESTIONS)])  # fmt: skip
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--generator", "g", "--labels-dir", str(tmp_path / "l")]) == 0  # fmt: skip
    (tmp_path / "l" / "g" / "closed-book.meta.json").write_text(damaged)
    capsys.readouterr()
    code = main(["train", "--config", "minilm-stacked-closed-book", "--set", f"data.questions={qs}",
                 f"data.label_file={tmp_path / 'l' / 'g' / 'closed-book.jsonl'}",
                 f"run.output_dir={tmp_path / 'runs'}"])  # fmt: skip
    assert code == 2
    assert "closed-book.meta.json: provenance file is not valid JSON (damaged: re-run the " \
           "`label` command" in capsys.readouterr().err  # fmt: skip
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # reads the generator's tokenizer and config (no engine)
def test_label_refuses_a_question_too_long_for_the_window_before_the_engine(tmp_path, capsys,
                                                                            monkeypatch):  # fmt: skip
    """A 5,000-word question failed vLLM's whole batch after the engine had started: a
    traceback, "internal error (a bug)", and a lock file left in a new labels folder."""
    from retrieval_gate import generation

    def started(*args, **kwargs):
        raise AssertionError("engine started")

    monkeypatch.setattr(generation, "build_generator", started)
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"id": "a", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]}\n'
                         f'{{"id": "b", "question": "{"why " * 5000}?", "answers": ["x"]}}\n')  # fmt: skip
    code, err = _run(["label", "--policy", "closed-book", "--questions", str(questions),
                      "--labels-dir", str(tmp_path / "labels")], capsys)  # fmt: skip
    assert code == 2 and "1 of 2 questions do not fit smollm2-135m-instruct's context" in err, err
    assert "question 'b' makes a 5" in err and "engine started" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl"]


def test_a_label_file_in_a_folder_it_cannot_write_is_refused_before_the_generator(
    tmp_path, capsys, monkeypatch
):
    """`label --policy closed-book --out` into a read-only folder read the generator's config
    first (importing transformers: 14-20 s on 2 cores, past the probe's 20 s in a slow hour)
    and was refused at its lock file; the folder is now tried first, leaving nothing there.
    Root writes anywhere, so the folder's refusal is the OS error a user would get."""
    import tempfile

    from retrieval_gate.labels import policies

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    def built(req):
        raise AssertionError("the generator was read before the folder was tried")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(policies, "_build", built)
    out = tmp_path / "ro" / "closed-book.jsonl"
    code, err = _run(["label", "--policy", "closed-book", "--dataset", "freshqa", "--limit", "2",
                      "--out", str(out)], capsys)  # fmt: skip
    assert code == 2 and f"{out}: cannot write in its folder (Permission denied)" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_full_or_read_only_disk_is_said_with_the_path_not_called_a_bug(monkeypatch, capsys):
    """A system error of the user's disk escaped as a traceback and "internal error (a bug)"."""
    import errno

    from retrieval_gate import cli
    from retrieval_gate.errors import os_error

    said = os_error(OSError(errno.ENOSPC, "No space left on device", "/data/out.jsonl"))
    assert str(said) == "/data/out.jsonl: no space left on the device: free some, or write " \
        "elsewhere"  # fmt: skip
    assert os_error(OSError(errno.ENOENT, "No such file", "/x")) is None  # that one is a bug

    def full(args):
        raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/report.md")

    monkeypatch.setattr(cli, "_run_counted", full)
    assert cli.main(["cache", "info"]) == 2
    err = capsys.readouterr().err
    assert "/mnt/ro/report.md: the file system is read-only: write elsewhere" in err
    assert "internal error" not in err


@pytest.mark.slow  # a subprocess
def test_output_piped_into_head_stops_quietly(tmp_path):
    """`retrieval-gate score ... | head -2`: the closed pipe was a traceback and "internal error
    (a bug)"; now a quiet stop with the shell's SIGPIPE status (141), as Unix tools do."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "retrieval_gate.cli", "data", "summary"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    p.stdout.close()  # the reader is gone before the first line is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "internal error" not in err and "Broken" not in err, err


@pytest.mark.slow  # a subprocess
def test_a_closed_standard_output_is_said_not_an_internal_error():
    """`retrieval-gate ... >&-`: Python sets sys.stdout to None, and the first result printed
    was an AttributeError, 'internal error (a bug)'. Printing verbs now stop with exit 2 and
    the fix; with stderr closed too (`2>&-`) they stop with exit 2 and nothing written."""
    import os
    import subprocess
    import sys

    def run(*args: str, close: tuple[int, ...]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "retrieval_gate.cli", *args],
                              stderr=None if 2 in close else subprocess.PIPE,
                              preexec_fn=lambda: [os.close(fd) for fd in close],
                              timeout=120)  # fmt: skip

    questions = "examples/your-data/questions.csv"
    r = run("data", "summary", "--questions", questions, close=(1,))
    err = r.stderr.decode()
    assert r.returncode == 2 and "internal error" not in err, err
    assert "standard output is closed (>&-): redirect it to a file" in err
    assert run("data", "summary", "--questions", questions, close=(1, 2)).returncode == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[{"id": "a", "correct": true}]\n', "line 1: expected a JSON object on this line, got "
         "an array: this looks like one JSON array, not JSON Lines (one object a line); name the "
         "file o.json to read it as an array"),
        ('[\n {"id": "a", "correct": true}\n]\n', "line 1: malformed JSON (Expecting value, "
         "column 1): this looks like one JSON array"),
        ('"{\\"id\\": \\"a\\"}"\n', "got a JSON string holding one (the row was encoded twice"),
        ('{"id": "a", "correct": true}\n7\n', "line 2: expected a JSON object on this line, got "
         "a number"),
        ("null\n", "got null"),
    ],
)  # fmt: skip
def test_a_jsonl_line_that_is_no_object_names_the_likely_cause(tmp_path, text, says):
    """A `.jsonl` holding one JSON array, or rows encoded twice, said only "expected a JSON
    object on this line" (or "malformed JSON" for a pretty-printed array)."""
    from retrieval_gate.data.user_questions import read_rows

    path = tmp_path / "o.jsonl"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        list(read_rows(str(path)))
    assert says in str(e.value), str(e.value)
