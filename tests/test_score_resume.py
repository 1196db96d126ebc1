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
    _stopped_after_two_chunks(monkeypatch, lambda: _score(tiny_onnx_export, path, out))
    partial = tmp_path / "out.jsonl.partial"
    assert not out.exists() and len(partial.read_text().splitlines()) == 6  # two chunks kept
    with partial.open("a") as f:
        f.write('{"line": 7, "id": "7", "sc')  # the stop came while a line was written
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


def _stopped_after_two_chunks(monkeypatch, run) -> None:
    """`run` (a score of 11 lines, 3 a chunk) stopped on its third chunk: six lines left in its
    output's partial file."""
    scored = score_verb._scored
    calls = []

    def stops_on_the_third_chunk(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return scored(*args)

    with monkeypatch.context() as m:
        m.setattr(score_verb, "_scored", stops_on_the_third_chunk)
        assert run() != 0


def _line_lost(lines, whole):
    return lines[:1] + lines[2:]  # the sixth line written twice after it, and the second lost


def _line_replaced(lines, whole):
    return lines[:2] + ["garbage not json\n"] + lines[3:]  # kept in the output


def _lines_swapped(lines, whole):
    return [lines[1], lines[0], *lines[2:]]  # every line valid, two out of place


def _lines_added(lines, whole):
    return lines * 4  # a 28-line output for 11 records


def _line_past_the_end(lines, whole):
    return whole + [whole[-1]]  # every record's line there, and one more


@pytest.mark.parametrize(
    ("edit", "line", "said"),
    [
        (_line_lost, 2, "this line is not the one written for record 2 of the input (line 2, id "
                        "'2', no error)"),
        (_line_replaced, 3, "this line is not a JSON object"),
        (_lines_swapped, 1, "this line is not the one written for record 1 of the input"),
        (_lines_added, 7, "this line is not the one written for record 7 of the input"),
        (_line_past_the_end, 12, "this line is past the input's last record"),
    ],
)  # fmt: skip
def test_a_partial_file_whose_lines_are_not_the_runs_is_not_resumed(
    tiny_onnx_export, tmp_path, monkeypatch, capsys, small_chunks, edit, line, said
):
    """--resume skipped as many records as the partial file had lines, whatever they held: a
    line lost, edited or added ended in a wrong output, with exit 0."""
    path = _input(tmp_path)
    whole = tmp_path / "whole.jsonl"
    assert _score(tiny_onnx_export, path, whole) == 0
    out = tmp_path / "out.jsonl"
    _stopped_after_two_chunks(monkeypatch, lambda: _score(tiny_onnx_export, path, out))
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text().splitlines(keepends=True)
    assert len(kept) == 6
    partial.write_text("".join(edit(kept, whole.read_text().splitlines(keepends=True))))
    changed = partial.read_bytes()
    capsys.readouterr()
    assert _score(tiny_onnx_export, path, out, "--resume") == 2
    err = capsys.readouterr().err
    assert f"{partial}, line {line}: {said}" in err
    assert "remove out.jsonl.partial and out.jsonl.partial.json to start over" in err
    assert not out.exists() and partial.read_bytes() == changed  # refused, nothing touched
    partial.write_text("".join(kept))  # the lines as the run left them: resumed as before
    assert _score(tiny_onnx_export, path, out, "--resume") == 0
    assert out.read_text() == whole.read_text()


def test_a_questions_output_resumes_with_its_lines_checked(
    tiny_onnx_export, tmp_path, monkeypatch, capsys, small_chunks
):
    """--questions records carry no line number: their lines are checked by id alone."""
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Who wrote book {i}?"})
                            + "\n" for i in range(11)))  # fmt: skip
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"

    def score(target, *extra):
        return main(["score", "--model", str(tiny_onnx_export), "--questions", str(path),
                     "--output", str(target), *extra])  # fmt: skip

    assert score(whole) == 0
    _stopped_after_two_chunks(monkeypatch, lambda: score(out))
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text()
    partial.write_text(kept.replace('"q4"', '"q9"'))
    capsys.readouterr()
    assert score(out, "--resume") == 2
    assert (f"{partial}, line 5: this line is not the one written for record 5 of the input "
            "(id 'q4', no line or error)") in capsys.readouterr().err  # fmt: skip
    partial.write_text(kept)
    assert score(out, "--resume") == 0
    assert out.read_text() == whole.read_text()


@pytest.mark.parametrize(
    ("name", "theirs", "ours"),
    [  # ours: a run stopped after its output was in place, before its sidecar was removed
        ("out.jsonl.partial.json", '{"my": "notes",\n "keep": 1}\n',
         json.dumps({"model": "an old one", "input": "x"}, sort_keys=True) + "\n"),
        (".out.jsonl.lock", "my notes\n", "12345"),  # ours: the pid of a run that ended
    ],
)  # fmt: skip
def test_a_users_file_at_a_name_kept_beside_the_output_is_refused_not_overwritten(
    tiny_onnx_export, tmp_path, capsys, name, theirs, ours
):
    """`<output>.partial.json` was overwritten, then removed, and `.<output>.lock` overwritten
    with a pid, whatever they held."""
    path, out, kept = _input(tmp_path), tmp_path / "out.jsonl", tmp_path / name
    kept.write_text(theirs)
    assert _score(tiny_onnx_export, path, out) == 2
    err = capsys.readouterr().err
    assert f"{kept}: retrieval-gate keeps" in err and "this file is not one it wrote" in err
    assert kept.read_text() == theirs and not out.exists()
    assert not (tmp_path / "out.jsonl.partial").exists()
    kept.write_text(ours)  # one of retrieval-gate's own, left behind: taken over as before
    assert _score(tiny_onnx_export, path, out) == 0
    assert len(out.read_text().splitlines()) == 11


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
    writing = ResumableOutput(out, {"model": "the first run"}, False, "--output", records=list)
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
