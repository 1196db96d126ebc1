"""The demo's orchestration: stage reuse, the report and the printed headline."""

import json

import pytest

from retrieval_gate.demo import STAGES, first_table, headline, run_demo, write_report


def test_first_table():
    md = "# T\n\ntext\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n"
    assert first_table(md) == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert first_table("no table") == ""


def test_unknown_stage_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown stage 'nope'.*train"):
        run_demo(tmp_path, only="nope")


def test_finished_stages_are_reused_and_reported(tmp_path, capsys):
    for stage in STAGES:
        done = {"argv": stage.argv(tmp_path), "seconds": 1.5}
        (tmp_path / f"{stage.name}.done.json").write_text(json.dumps(done))
    (tmp_path / "evaluate").mkdir()
    (tmp_path / "evaluate" / "report.md").write_text(
        "# Gates\n\n| gate | auroc |\n|---|---|\n| tfidf | 0.8 |\n"
    )
    assert run_demo(tmp_path) == 0  # every stage reused: nothing runs
    out = capsys.readouterr().out
    assert out.count("(reused, 2 s)") == len(STAGES)
    assert "| tfidf | 0.8 |" in out
    report = write_report(tmp_path).read_text()
    assert "## Evaluation" in report and "### Gates" in report  # stage headings nested
    assert report.count("| 1.5 |") == len(STAGES)
    assert "tfidf" in headline(tmp_path)
