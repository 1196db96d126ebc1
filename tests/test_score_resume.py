"""`score --output` writes as it scores: a run stopped part-way leaves its lines in
`<output>.partial`, and `--resume` continues after them, only for the same model, input and
options, and ends with the output a run that never stopped writes."""

from __future__ import annotations

import json
import os

import pytest

import retrieval_gate.commands.score as score_verb
from retrieval_gate.cli import main


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(score_verb, "CHUNK", 3)  # 11 lines: four chunks


def _input(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("".join(f"Who wrote book number {i}?\n" for i in range(10)) + "\n")
    return path


def _score(export, path, out, *extra: str) -> int:
    return main(["score", "--model", str(export), "--input", str(path), "--output", str(out),
                 *extra])  # fmt: skip


def test_a_stopped_score_resumes_to_the_output_of_one_run(
    tiny_onnx_export, tmp_path, monkeypatch, capsys, small_chunks
):
    path = _input(tmp_path)
    whole = tmp_path / "whole.jsonl"
    assert _score(tiny_onnx_export, path, whole) == 0
    assert not (tmp_path / "whole.jsonl.partial").exists()
    out = tmp_path / "out.jsonl"
    scored = score_verb._scored
    calls = []

    def stops_on_the_third_chunk(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return scored(*args)

    monkeypatch.setattr(score_verb, "_scored", stops_on_the_third_chunk)
    assert _score(tiny_onnx_export, path, out) != 0
    partial = tmp_path / "out.jsonl.partial"
    assert not out.exists() and len(partial.read_text().splitlines()) == 6  # two chunks kept
    with partial.open("a") as f:
        f.write('{"line": 7, "id": "7", "sc')  # the stop came while a line was written
    monkeypatch.setattr(score_verb, "_scored", scored)
    capsys.readouterr()
    assert _score(tiny_onnx_export, path, out) == 2  # not silently started over
    assert "stopped after 6 lines and left them here: pass --resume" in capsys.readouterr().err
    assert _score(tiny_onnx_export, path, out, "--threshold", "0.3", "--resume") == 2
    assert "made with another threshold than this run's" in capsys.readouterr().err
    assert _score(tiny_onnx_export, path, out, "--resume") == 0
    assert out.read_text() == whole.read_text()  # the line cut short written again, whole
    assert not partial.exists() and not (tmp_path / "out.jsonl.partial.json").exists()
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["line"] == 11 and "error" in last  # the empty line, reported in its place
    assert _score(tiny_onnx_export, path, out) == 0  # its own finished file: replaced


def test_a_stretch_of_bad_lines_is_written_in_its_place(tiny_onnx_export, tmp_path, small_chunks):
    path = tmp_path / "q.txt"
    path.write_text("Who wrote Hamlet?\n\n\n\n\nWhere is Oslo?\n")  # a chunk of bad lines only
    out = tmp_path / "out.jsonl"
    assert _score(tiny_onnx_export, path, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [("score" in r, "error" in r) for r in rows] == [(True, False)] + [(False, True)] * 4 + [
        (True, False)
    ]


def test_resume_needs_an_output(tiny_onnx_export, tmp_path, capsys):
    code = main(["score", "--model", str(tiny_onnx_export), "--input", str(_input(tmp_path)),
                 "--resume"])  # fmt: skip
    assert code == 2 and "--resume continues an --output file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_output_dash_is_standard_output(tiny_onnx_export, tmp_path, capsys, monkeypatch, name):
    """/dev/stdout piped was "a symbolic link to /proc/.../pipe:[...], which does not exist"."""
    monkeypatch.chdir(tmp_path)
    assert _score(tiny_onnx_export, _input(tmp_path), name) == 0
    assert len(capsys.readouterr().out.splitlines()) == 11 and not (tmp_path / "-").exists()


def test_input_dash_says_to_save_the_questions_to_a_file(tiny_onnx_export, capsys):
    assert main(["score", "--model", str(tiny_onnx_export), "--input", "-"]) == 2
    assert "standard input is not read: save the questions to a file" in capsys.readouterr().err


def test_a_second_run_on_an_output_being_written_is_refused_not_told_to_resume(
    tiny_onnx_export, tmp_path, capsys
):
    from retrieval_gate.resumable_output import ResumableOutput

    path, out = _input(tmp_path), tmp_path / "out.jsonl"
    writing = ResumableOutput(out, {"model": "the first run"}, False, "--output")
    for extra in ([], ["--resume"]):  # it was "stopped after 0 lines ... pass --resume"
        assert _score(tiny_onnx_export, path, out, *extra) == 2
        said = capsys.readouterr().err
        assert f"another run (pid {os.getpid()}) is writing --output {out} now" in said
    assert (tmp_path / "out.jsonl.partial").read_text() == ""  # its lines left alone
    writing.release()  # the first run stopped: the usual advice to resume its lines
    assert _score(tiny_onnx_export, path, out) == 2
    assert "stopped after 0 lines" in capsys.readouterr().err


def test_an_input_rewritten_while_it_is_scored_is_said(
    tiny_onnx_export, tmp_path, monkeypatch, capsys, small_chunks
):
    """The input is read as a stream, twice (checked whole, then scored): a file that changes
    between is not scored as if it were one."""
    path = _input(tmp_path)
    scored = score_verb._scored

    def rewrites_the_input(*args):
        with path.open("a") as f:
            f.write("Who wrote one more book?\n")
        return scored(*args)

    monkeypatch.setattr(score_verb, "_scored", rewrites_the_input)
    out = tmp_path / "out.jsonl"
    assert _score(tiny_onnx_export, path, out) == 2
    assert "the input changed while it was scored" in capsys.readouterr().err
    assert not out.exists()  # the lines written stay in out.jsonl.partial, never the output


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv"])
def test_an_input_is_read_in_the_memory_of_a_line(tmp_path, suffix):
    """A file of millions of questions to score must not be held whole: 30,000 lines read
    through the reader allocate what a few of them do (read into a list, 100,000 took 45 MB:
    30,000 would take ~13 MB, against the 2 MB allowed)."""
    import tracemalloc

    from retrieval_gate.data.question_lines import iter_question_lines

    row = {".txt": "Who wrote book number {}?\n", ".csv": "{},Who wrote book number {}?\n",
           ".jsonl": '{{"id": "{}", "question": "Who wrote book number {}?"}}\n'}[suffix]  # fmt: skip
    path = tmp_path / f"q{suffix}"
    with path.open("w") as f:
        f.write("id,question\n" if suffix == ".csv" else "")
        f.writelines(row.format(i, i) for i in range(30_000))
    tracemalloc.start()
    try:
        n = sum(1 for rec in iter_question_lines(path) if "text" in rec)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 30_000 and peak < 2_000_000, peak
