"""What a newcomer sees for a path that is not there yet: the command that makes it."""

from __future__ import annotations

from retrieval_gate.cli import main


def test_score_on_a_missing_export_says_how_to_make_one(tmp_path, capsys):
    questions = tmp_path / "q.txt"
    questions.write_text("Who wrote Hamlet?\n")
    missing = tmp_path / "export" / "minilm-closed-book"
    assert main(["score", "--model", str(missing), "--input", str(questions)]) == 2
    err = capsys.readouterr().err
    assert "no export folder here" in err and "retrieval-gate export --run" in err
    assert "runs/demo/export/minilm-gate" in err and "no fp32 model" not in err
