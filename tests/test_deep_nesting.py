"""Input nested deeper than Python's recursive parsers go (`[[[[...` a few thousand levels in a
JSON row, a CSV cell, a YAML config), and a CSV cell past the csv module's 128 KiB: each was an
internal error (a `RecursionError` is not a `ValueError`; `csv.Error` escaped one reader). So
was an integer of more digits than Python converts (4,300), in JSON or YAML, and a YAML date
that is no date: their plain `ValueError`s escaped every reader."""

from __future__ import annotations

import csv
import json
import os

import pytest
import yaml

from retrieval_gate import strict_rows
from retrieval_gate.cli import main
from retrieval_gate.data.answer_confidence import parse_token_logprobs
from retrieval_gate.data.list_cells import list_cell
from retrieval_gate.data.question_lines import read_question_lines
from retrieval_gate.data.user_questions import read_questions
from retrieval_gate.errors import ConfigError, DataError, InputError
from retrieval_gate.fileio import read_json
from retrieval_gate.generation.model_folders import check_model_folder
from retrieval_gate.labels.label_files import read_labels
from retrieval_gate.strict_rows import (
    DECODER,
    NumberTooLongError,
    RepeatedKeyError,
    TooDeepError,
    loads,
    parse_json,
)
from retrieval_gate.training.backbones import saved_config
from retrieval_gate.training.config import apply_overrides, load_config
from retrieval_gate.yaml_files import load_yaml

DEEP = "[" * 100_000 + "]" * 100_000
LONG = "9" * 5_000  # past sys.get_int_max_str_digits()


def test_loads_and_the_array_decoder_say_too_deep_as_malformed_json():
    for text in (DEEP, '{"a": ' * 100_000, DEEP.encode()):
        with pytest.raises(TooDeepError, match="nested too deeply") as e:
            loads(text)
        assert isinstance(e.value, json.JSONDecodeError)  # what every row reader catches
    with pytest.raises(TooDeepError):
        DECODER.raw_decode("[1, " + DEEP, 4)
    assert loads('{"a": [[1]]}') == {"a": [[1]]}


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_question_files_name_the_line_of_a_deep_row(tmp_path, suffix):
    path = tmp_path / f"q{suffix}"
    rows = ['{"question": "Who wrote Hamlet?"}', '{"question": ' + DEEP + "}"]
    path.write_text("\n".join(rows) + "\n" if suffix == ".jsonl" else f"[{rows[0]},\n{rows[1]}]")
    with pytest.raises(DataError, match=r"line 2: malformed JSON \(nested too deeply"):
        read_questions(str(path))
    if suffix == ".json":  # one array: its first bad item stops the file
        with pytest.raises(DataError, match=r"line 2: malformed JSON \(nested too deeply"):
            read_question_lines(path)
    else:  # `score --input` reports a bad line and scores the rest
        good, bad = read_question_lines(path)
        assert good["text"] == "Who wrote Hamlet?" and "nested too deeply" in bad["error"]


def test_cells_and_label_rows_nested_too_deeply(tmp_path):
    assert list_cell(DEEP) is None
    with pytest.raises(DataError, match="not a JSON list of log-probabilities"):
        parse_token_logprobs(DEEP, "f.csv", 3)
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "q1", "label": 1}\n{"id": "q2", "label": ' + DEEP + "}\n")
    with pytest.raises(DataError, match="line 2"):
        read_labels(labels)
    meta = tmp_path / "x.json"
    meta.write_text(DEEP)
    with pytest.raises(DataError, match="nested too deeply"):
        read_json(meta)


def test_a_deep_yaml_config_or_set_value_is_a_config_error(tmp_path):
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        load_yaml("a: " + DEEP)
    config = tmp_path / "deep.yaml"
    config.write_text("model:\n  name: " + DEEP + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(config)
    with pytest.raises(ConfigError, match=r"\.\.\. \(100,011 characters\)'.*nested too deeply"):
        apply_overrides({}, ["model.name=" + "[" * 100_000])


def test_a_csv_cell_past_128_kib_reads_and_one_past_the_limit_names_its_line(tmp_path, monkeypatch):
    long_answer = "x" * 300_000
    path = tmp_path / "q.csv"
    path.write_text(
        f'question,answers,context\nWho wrote Hamlet?,"[""Shakespeare""]",{long_answer}\n'
    )
    (question,) = read_questions(str(path))
    assert question.extra["context"] == long_answer
    (record,) = read_question_lines(path)
    assert record["text"] == "Who wrote Hamlet?"
    monkeypatch.setattr(strict_rows, "CSV_CELL_LIMIT", 1_000)  # what 1 GiB would take to write
    try:
        with pytest.raises(
            DataError, match=r"q.csv, line 2: not a readable CSV file \(field larger"
        ):
            read_questions(str(path))
    finally:
        csv.field_size_limit(2**30)


def test_the_cli_says_which_file_not_internal_error(tmp_path, capsys):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Who wrote Hamlet?"}\n{"question": ' + DEEP + "}\n")
    os.environ.setdefault("RETRIEVAL_GATE_DATA", "../shared/datasets")
    assert main(["data", "summary", "--questions", str(path)]) == 2
    err = capsys.readouterr().err
    assert "q.jsonl, line 2: malformed JSON (nested too deeply" in err and "internal" not in err


def test_a_model_config_nested_too_deeply_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "x": ' + DEEP + "}")
    with pytest.raises(DataError, match="backbone config unreadable"):
        saved_config(tmp_path)  # a run's backbone/ folder
    with pytest.raises(InputError, match="config.json is not readable JSON"):
        check_model_folder(str(tmp_path), "pass a model folder")  # --generator, model.name


def test_an_integer_too_long_is_malformed_json_and_other_errors_keep_their_kind():
    for read in (loads, parse_json):
        with pytest.raises(NumberTooLongError, match="an integer of more than 4,300 digits") as e:
            read('{"id": "q1", "label": ' + LONG + "}")
        assert isinstance(e.value, json.JSONDecodeError)
    with pytest.raises(NumberTooLongError):
        DECODER.raw_decode("[1, " + LONG + "]", 0)
    with pytest.raises(RepeatedKeyError):  # a ValueError too, not taken for a long number
        loads('{"a": 1, "a": 2}')
    assert loads('{"a": ' + "9" * 4_000 + "}")["a"] == int("9" * 4_000)


def test_long_integers_in_rows_and_files_are_named_with_their_line(tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "q1", "label": 1}\n{"id": "q2", "label": ' + LONG + "}\n")
    with pytest.raises(DataError, match=r"line 2: malformed JSON \(an integer of more than"):
        read_labels(labels)
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "Who?"}\n{"question": "What?", "s_pop": ' + LONG + "}\n")
    with pytest.raises(DataError, match=r"line 2: malformed JSON \(an integer of more than"):
        read_questions(str(questions))
    table = tmp_path / "q.csv"  # a cell is text: float() reads it, the message clips it
    table.write_text(f"question,s_pop\nWho?,{LONG}\n")
    with pytest.raises(
        DataError, match=r"must be a finite number, got '999.*\(5,002 characters\)$"
    ):
        read_questions(str(table))
    meta = tmp_path / "x.json"
    meta.write_text('{"n": ' + LONG + "}")
    with pytest.raises(DataError, match="an integer of more than"):
        read_json(meta)


def test_a_label_file_that_is_not_json_lines_says_what_one_holds(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\nq1,1\n")
    with pytest.raises(DataError, match=r"line 1: malformed JSON .*one JSON object per line, such"):
        read_labels(labels)


@pytest.mark.parametrize(
    ("value", "reason"),
    [(LONG, "cannot be read \\(Exceeds the limit"), ("2001-13-45", "month must be in 1..12")],
)
def test_a_yaml_value_python_cannot_convert_is_a_config_error_with_its_line(
    tmp_path, value, reason
):
    with pytest.raises(yaml.YAMLError, match=reason):
        load_yaml(f"a: 1\nb: {value}")
    config = tmp_path / "c.yaml"
    config.write_text(f"trainer:\n  max_epochs: {value}\n")
    with pytest.raises(ConfigError, match=f"(?s){reason}.*line 2"):
        load_config(config)
    with pytest.raises(ConfigError, match="--set 'trainer.max_epochs="):
        apply_overrides({}, [f"trainer.max_epochs={value}"])
    assert load_yaml("d: 2001-12-14\nn: 0x1f")["n"] == 31  # the valid ones still convert


def test_a_long_refused_value_is_shown_clipped(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own refusal
        main(["evaluate", "--labels", "x.jsonl", "--limit", LONG])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid int value: '9999" in err and "... (5,000 characters)'" in err
    assert len(err.splitlines()[-1]) < 300
