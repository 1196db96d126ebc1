"""`rag --out`: which saved modes a rerun keeps (only those of the same inputs, by content), whose
progress file it continues (only its own), and the names of its files.

No engine starts: the comparison runs with test_rag's `CountingTestGenerator`, passed in or
put where `rag` would start one (`_fake_engine`)."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.errors import InputError
from retrieval_gate.labels.label_files import LabelFile
from retrieval_gate.questions import Question
from retrieval_gate.rag.experiment import Pipeline, Sample, check_progress_file, run_comparison
from retrieval_gate.rag.modes import ModeOptions
from test_rag import CountingTestGenerator

NO_ENGINE = ["--generator-url", "http://127.0.0.1:9/v1"]  # never asked: `_fake_engine`


def _pool() -> list[Question]:
    """Questions of two kinds, split by hand: people are rare (s_pop) and famous (o_pop), cities
    the other way round, so a popularity gate fitted on their labels tells them apart."""
    kinds = [("Who founded company {}?", "person", 10), ("What is land {}'s capital?", "city", 900)]
    return [Question(id=f"{kind}{i}", text=text.format(i), answers=(f"{kind}{i}",),
                     source="mine", split="test" if i < 2 else "dev" if i < 5 else "train",
                     s_pop=pop, o_pop=910 - pop,
                     contexts=({"title": "", "text": f"the answer is {kind}{i}"},))
            for text, kind, pop in kinds for i in range(8)]  # fmt: skip


def _labels(path, retrieve_for: str):
    LabelFile(path).append([{"id": q.id, "label": int(q.id.startswith(retrieve_for))}
                            for q in _pool()])  # fmt: skip
    return path


def _fitted(tmp_path, labels, progress, feature=None) -> tuple[dict, CountingTestGenerator]:
    gen = CountingTestGenerator()
    options = ModeOptions(labels=labels, run_dir=tmp_path, questions=_pool(), feature=feature)
    report = run_comparison(["popularity"], Sample(limit=None), Pipeline("contexts", k=1),
                            options, generator=gen, progress_file=progress)  # fmt: skip
    return report, gen


def _retrieved(report: dict) -> list[str]:
    return sorted(a["id"] for a in report["modes"]["popularity"]["answers"] if a["retrieve"])


def test_a_saved_mode_is_kept_only_for_the_same_labels_and_options_by_content(tmp_path):
    """The key held the gate's name: a gate fitted on other labels (`--labels flipped.jsonl`, or
    the same file edited) or another `--feature` kept the first one's decisions (`tfidf` and
    `popularity` have no checksum)."""
    progress, labels = tmp_path / "r.modes.jsonl", tmp_path / "labels.jsonl"
    first, _ = _fitted(tmp_path, _labels(labels, "person"), progress)
    again, gen = _fitted(tmp_path, labels, progress)
    assert "kept from an earlier run: popularity" in again["note"] and not gen.calls
    assert _retrieved(first) == ["person0", "person1"]  # the rare ones
    other, gen = _fitted(tmp_path, labels, progress, feature="o_pop")
    assert "kept" not in other["note"] and gen.calls and _retrieved(other) != _retrieved(first)
    labels.unlink()  # the same name, the other labels
    flipped, gen = _fitted(tmp_path, _labels(labels, "city"), progress)
    assert "kept" not in flipped["note"] and gen.calls and _retrieved(flipped) != _retrieved(first)


def test_a_saved_mode_is_kept_only_for_the_same_corpus_by_content(tmp_path):
    """`--corpus c4.jsonl` (or c3.jsonl edited) kept the answers retrieved from c3."""
    progress, corpus = tmp_path / "r.modes.jsonl", tmp_path / "corpus.jsonl"

    def run(text: str) -> tuple[dict, CountingTestGenerator]:
        corpus.write_text(json.dumps({"id": "d1", "title": "", "text": text}) + "\n")
        gen = CountingTestGenerator()
        report = run_comparison(["always"], Sample(limit=None), Pipeline("bm25", str(corpus), 1),
                                ModeOptions(questions=_pool()[:2]), generator=gen,
                                progress_file=progress)  # fmt: skip
        return report, gen

    run("the founder of company zero is Ada")
    again, gen = run("the founder of company zero is Ada")
    assert "kept from an earlier run: always" in again["note"] and not gen.calls
    other, gen = run("the founder of company zero is Grace")
    assert "kept" not in other["note"] and gen.calls
    assert [a["answer"] for a in other["modes"]["always"]["answers"]] == ["Grace"] * 2


def test_a_file_of_the_users_at_the_progress_name_is_refused_not_cut(tmp_path):
    """A file without a newline at its end read as a half-written saved row, and the next save
    cut it away: the user's notes were replaced by `rag`'s row."""
    progress = tmp_path / "foreign.modes.jsonl"
    progress.write_text("my precious notes, not JSON")
    with pytest.raises(InputError, match="not its progress file") as said:
        check_progress_file(progress)
    assert str(said.value).startswith(str(progress)) and "pass another --out" in str(said.value)
    with pytest.raises(InputError, match="not its progress file"):
        run_comparison(["never"], Sample(limit=None), Pipeline("contexts", k=1),
                       ModeOptions(questions=_pool()[:2]), generator=CountingTestGenerator(),
                       progress_file=progress)  # fmt: skip
    assert progress.read_text() == "my precious notes, not JSON"


@pytest.fixture
def _fake_engine(monkeypatch, tmp_path):
    """`rag` through the CLI with the counting generator for an engine, the generation cache
    on as a user has it (the suite turns it off), run in `tmp_path` on a one-line corpus (the
    datasets' own takes seconds to index)."""
    monkeypatch.setattr("retrieval_gate.rag.experiment.open_generator",
                        lambda **kw: CountingTestGenerator())  # fmt: skip
    monkeypatch.setenv("RETRIEVAL_GATE_NO_CACHE", "0")
    monkeypatch.chdir(tmp_path)
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Who is Ada {i}?",
                                             "answers": ["x"], "split": "test"}) + "\n"
                                 for i in range(2)))  # fmt: skip
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "", "text": "Ada is Ada Lovelace"}) + "\n")
    return ["rag", "--questions", str(questions), "--limit", "all", "--corpus", str(corpus),
            "-k", "1", *NO_ENGINE]  # fmt: skip


def test_the_cli_refuses_a_progress_file_of_the_users(_fake_engine, tmp_path, capsys):
    from retrieval_gate.cli import main

    (tmp_path / "foreign.modes.jsonl").write_text("my precious notes, not JSON")
    assert main([*_fake_engine, "--modes", "always", "--out", "foreign"]) == 2
    said = capsys.readouterr().err
    assert "foreign.modes.jsonl" in said and "move it away, or pass another --out" in said
    assert (tmp_path / "foreign.modes.jsonl").read_text() == "my precious notes, not JSON"
    assert not (tmp_path / "foreign.md").exists()


def test_no_cache_runs_every_mode_again_instead_of_replaying_saved_costs(_fake_engine, capsys):
    """`--no-cache` promises costs measured now; a resumed run kept the saved modes (`prompts
    cached` and all) instead."""
    from retrieval_gate.cli import main

    argv = [*_fake_engine, "--modes", "always", "--out", "r"]
    assert main(argv) == 0 and main(argv) == 0
    assert "modes kept from an earlier run: always" in capsys.readouterr().out
    assert main([*argv, "--no-cache"]) == 0
    assert "kept" not in capsys.readouterr().out


def test_an_out_name_with_a_dot_keeps_it(_fake_engine, tmp_path, capsys):
    """`--out run3.v2` wrote run3.md and run3.json and resumed run3.modes.jsonl, another
    --out's; only a .md or .json suffix is --out's own."""
    from retrieval_gate.cli import main

    argv = [*_fake_engine, "--modes", "always"]
    assert main([*argv, "--out", "run3"]) == 0
    assert main([*argv, "--out", "run3.v2"]) == 0
    assert "kept" not in capsys.readouterr().out.split("wrote run3.md")[1]
    assert main([*argv, "--out", "run4.md"]) == 0
    assert sorted(p.name for p in tmp_path.glob("run*")) == [
        "run3.json", "run3.md", "run3.modes.jsonl", "run3.v2.json", "run3.v2.md",
        "run3.v2.modes.jsonl", "run4.json", "run4.md", "run4.modes.jsonl"]  # fmt: skip


@pytest.mark.parametrize("out", [".", "..", "/", "folder"])
def test_an_out_without_a_file_name_is_refused_before_anything_loads(
    out, tmp_path, monkeypatch, capsys
):
    """`--out .` (or `/`) was a ValueError traceback; `--out ..` would have written `...md`."""
    from retrieval_gate.cli import main

    ran: list = []
    monkeypatch.setattr("retrieval_gate.commands.rag._compare", lambda *a: ran.append(a) or 0)
    (tmp_path / "sub" / "folder").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "sub")
    assert main(["rag", "--modes", "never", "always", "--limit", "1", "--out", out,
                 *NO_ENGINE]) == 2  # fmt: skip
    said = capsys.readouterr().err
    assert f"--out {out} names a folder" in said and "pass a file name" in said and not ran
