"""Bad input and reruns that must never go silently wrong (issue 16): flags checked before any
model or engine loads, outputs never over inputs, names that stay inside their folder, ONNX
metadata parsed with clear errors. Each case gives exit code 2 and a message, no traceback."""

from __future__ import annotations

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
    csv_file.write_text('id,question\nx1,"Who wrote Hamlet, the play?"\nx2,\n')
    rows = read_question_lines(csv_file)
    assert rows == [
        {"line": 2, "id": "x1", "text": "Who wrote Hamlet, the play?"},
        {"line": 3, "id": "x2", "error": "empty question"},
    ]
    txt = tmp_path / "q.txt"
    txt.write_text("question\nWho wrote Hamlet?\n")
    assert [r["text"] for r in read_question_lines(txt)] == ["Who wrote Hamlet?"]
    bad_header = tmp_path / "b.csv"
    bad_header.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="no 'question' or 'text' column"):
        read_question_lines(bad_header)
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"id": "own-7", "question": ""}\n{"id": "own-8", "q": "x"}\n')
    assert [r["id"] for r in read_question_lines(jsonl)] == ["own-7", "own-8"]


def test_score_output_folder_that_cannot_exist_is_a_message(tmp_path, capsys):
    from retrieval_gate.fileio import write_text

    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="cannot create its folder"):
        write_text(tmp_path / "file" / "out.jsonl", "x")


# ------------------------------------------------------------------ names


def test_export_name_and_run_name_are_plain(tmp_path, capsys):
    code, err = _run(["export", "--run", str(tmp_path), "--name", "../x",
                      "--out-dir", str(tmp_path / "export")], capsys)  # fmt: skip
    assert code == 2 and "plain folder name" in err and not (tmp_path / "x").exists()
    code, err = _run(["train", "--config", "configs/experiments/minilm-closed-book.yaml",
                      "--set", "run.name=../../x"], capsys)  # fmt: skip
    assert code == 2 and "run.name" in err


def test_export_refuses_a_folder_that_is_not_an_export(tmp_path):
    from retrieval_gate.export.onnx import export_gate

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
