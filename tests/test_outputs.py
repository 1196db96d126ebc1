"""A verb replaces only the report files it wrote (outputs.py): a file of the user's, or one of
ours they edited, is refused and left as it was; other files in the folder are left alone."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import InputError
from retrieval_gate.outputs import LEDGER, refuse_foreign, refuse_foreign_in, write_owned

LABELS = str(
    Path(__file__).resolve().parents[1] / "data/labels/smollm2-135m-instruct/closed-book.jsonl"
)


def test_it_rewrites_its_own_file_and_refuses_the_users(tmp_path):
    ours = write_owned(tmp_path / "r" / "report.md", "first\n")  # its folder made too
    write_owned(ours, "second\n")  # its own, unchanged since: replaced
    assert ours.read_text() == "second\n"
    (tmp_path / "r" / "notes.md").write_text("mine\n")
    with pytest.raises(InputError, match=r"notes.md: already exists.*pass another --out"):
        write_owned(tmp_path / "r" / "notes.md", "ours\n")
    assert (tmp_path / "r" / "notes.md").read_text() == "mine\n"
    ours.write_text("second, with my remarks\n")  # edited by the user: theirs now
    with pytest.raises(InputError, match="changed since"):
        write_owned(ours, "third\n")
    assert ours.read_text() == "second, with my remarks\n"


def test_a_link_to_a_file_of_the_users_is_refused(tmp_path):
    (tmp_path / "mine.jsonl").write_text("mine\n")
    (tmp_path / "out.jsonl").symlink_to(tmp_path / "mine.jsonl")
    with pytest.raises(InputError, match="out.jsonl"):
        write_owned(tmp_path / "out.jsonl", "scores\n", "--output")
    assert (tmp_path / "mine.jsonl").read_text() == "mine\n"


def test_a_damaged_ledger_vouches_for_nothing(tmp_path):
    ours = write_owned(tmp_path / "results.json", "{}")
    (tmp_path / LEDGER).write_text('{"results.json": "')  # cut short
    with pytest.raises(InputError, match="results.json"):
        refuse_foreign([ours], "--out")
    (tmp_path / LEDGER).write_text(json.dumps(["results.json"]))  # not a mapping
    with pytest.raises(InputError, match="results.json"):
        refuse_foreign([ours], "--out")


def test_the_start_check_reads_only_the_names_a_verb_writes(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    # notes.txt: a name the verb never writes, so none of its business
    refuse_foreign_in(tmp_path, ("report.md", "*-roc-pr.png"), "--out")
    refuse_foreign_in(tmp_path / "missing", ("report.md",), "--out")  # nothing there yet
    (tmp_path / "labels-roc-pr.png").write_bytes(b"mine")
    with pytest.raises(InputError, match="labels-roc-pr.png"):
        refuse_foreign_in(tmp_path, ("report.md", "*-roc-pr.png"), "--out")


def test_writers_at_once_in_one_folder_keep_every_record(tmp_path):
    names = [f"f{i}.json" for i in range(24)]
    threads = [threading.Thread(target=write_owned, args=(tmp_path / n, n)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(json.loads((tmp_path / LEDGER).read_text())) == sorted(names)
    for n in names:  # each one is still its own to replace
        write_owned(tmp_path / n, "again")


def _tune(out: Path, *more: str) -> int:
    return main(["tune", "--gate", "tfidf", "--labels", LABELS, "--objective", "macro-f1",
                 *more, "--out", str(out)])  # fmt: skip


@pytest.mark.slow  # two tune runs: about 5 s on the 2-core VM in a slow hour
def test_tune_reruns_into_its_report_folder_and_keeps_its_studies_there(tmp_path, monkeypatch):
    from retrieval_gate.data.paths import ENV_VAR, resolve_data_dir

    monkeypatch.setenv(ENV_VAR, str(resolve_data_dir(download=False).resolve()))
    monkeypatch.chdir(tmp_path)  # the default --storage once was reports/tune/ under here
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("mine\n")
    assert _tune(out, "pareto", "--trials", "3") == 0
    assert _tune(out, "pareto", "--trials", "3") == 0  # its own reports: replaced
    assert (out / "studies.db").is_file() and not (tmp_path / "reports").exists()
    report = next(out.glob("tune-tfidf-*.md"))
    report.write_text(report.read_text() + "my remarks\n")
    assert _tune(out) == 2  # an edited report is the user's: refused when the command starts
    assert report.read_text().endswith("my remarks\n")
    assert (out / "notes.md").read_text() == "mine\n"


@pytest.mark.slow  # the verb runs whole after the refusal: 5-8 s each on 2 cores
@pytest.mark.parametrize("verb", ["evaluate", "transfer"])
def test_a_second_run_on_a_report_folder_being_written_is_refused(tmp_path, capsys, verb):
    # their files are written whole one by one: two runs at once left one run's report beside
    # the other's figures
    import os

    from retrieval_gate.fileio import one_writer

    out = tmp_path / "reports"
    argv = [verb, "--labels", LABELS, "--gates", "tfidf", "--out", str(out),
            *(["--no-cost", "--limit", "50"] if verb == "evaluate" else [])]  # fmt: skip
    with one_writer(out, "x"):  # the first run writes
        assert main(argv) == 2
    said = capsys.readouterr().err
    assert f"another {verb} run (pid {os.getpid()}) is writing --out {out} now" in said
    assert not out.exists()  # nothing of the second run's
    assert main(argv) == 0  # the first one done: the folder is free again
