"""`score`'s guards around answers and resumes: a two-stage gate given `--input` whose rows
carry their answers' log-probabilities is refused whatever the file's format and whichever row
has them; a `--resume` on a `--questions` folder whose rows changed is refused; a router
cascade resumed part-way through a batch writes what a run never stopped writes; and a JSONL
row asking "Text" is a question, not a header."""

from __future__ import annotations

import json
import shutil

import pytest

import retrieval_gate.commands.score as score_verb
from retrieval_gate.cli import main
from retrieval_gate.data.question_lines import iter_question_lines, read_question_lines


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """(two-stage gate export, router export, answered.jsonl): trained through the CLI on 160
    users' questions and outcomes, with a tiny body (a few seconds)."""
    from test_answer_gate_routing import _user_outcomes
    from tiny_backbones import tiny_body_sets

    root = tmp_path_factory.mktemp("score-guards")
    questions, outcomes = _user_outcomes(root, n=160)
    labels = root / "labels" / "my-llm"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(questions), "--strategies", "no_retrieval", "one_retrieval", "--generator",
                 "my-llm", "--labels-dir", str(root / "labels")]) == 0  # fmt: skip
    body = tiny_body_sets(root / "body", [json.loads(line)["question"] for line in open(questions)])
    built = []
    for config, label_file in (("cascade-closed-book", "closed-book.jsonl"),
                               ("router-adaptive-rag-llama8b", "strategies.jsonl")):  # fmt: skip
        assert main(["train", "--config", config, "--set", *body, f"data.questions={questions}",
                     f"data.label_file={labels / label_file}", "data.datasets=null",
                     f"run.output_dir={root / 'runs'}"]) == 0  # fmt: skip
        assert main(["export", "--run", str(root / "runs" / config), "--out-dir",
                     str(root / "export"), "--variants", "fp32", "--questions",
                     str(questions)]) == 0  # fmt: skip
        built.append(root / "export" / config)
    lps = {json.loads(line)["id"]: json.loads(line)["no_retrieval_token_logprobs"]
           for line in open(outcomes)}  # fmt: skip
    answered = root / "answered.jsonl"
    with open(answered, "w") as f:
        for line in open(questions):
            q = json.loads(line)
            f.write(json.dumps({**q, "token_logprobs": lps[q["id"]]}) + "\n")
    return built[0], built[1], answered


def _rows(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.slow  # two training runs and exports through the CLI (module fixture)
def test_answers_in_any_row_of_any_input_format_are_refused_not_left_unread(
    exports, tmp_path, capsys
):
    """A .json array, and a .jsonl whose first row has no token_logprobs, were scored on the
    text alone, with a note that --input gave no answers (only the first JSONL row and a CSV
    header were looked at)."""
    two_stage, _, answered = exports
    rows = _rows(answered)[:5]
    array = tmp_path / "ans.json"
    array.write_text(json.dumps(rows))
    later = tmp_path / "later.jsonl"
    later.write_text("".join(json.dumps({k: v for k, v in r.items() if i or k != "token_logprobs"})
                             + "\n" for i, r in enumerate(rows)))  # fmt: skip
    one_per_line = tmp_path / "later.json"
    shutil.copy(later, one_per_line)
    for path in (array, later, one_per_line, answered):
        capsys.readouterr()
        assert main(["score", "--model", str(two_stage), "--input", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert "its 'token_logprobs' column would go unread" in err, err
        assert f"pass the file as --questions {path}" in err
        assert "--input gives no answers" not in err
    plain = tmp_path / "plain.jsonl"  # no answers anywhere: scored, and said so
    plain.write_text("".join(json.dumps({"id": r["id"], "question": r["question"]}) + "\n"
                             for r in rows))  # fmt: skip
    assert main(["score", "--model", str(two_stage), "--input", str(plain)]) == 0
    assert "--input gives no answers" in capsys.readouterr().err


def _stopped_after(monkeypatch, chunks: int, run) -> None:
    """`run` stopped (KeyboardInterrupt) on chunk `chunks + 1`: `chunks` chunks written."""
    scored = score_verb._scored
    calls = []

    def stops(*args):
        calls.append(1)
        if len(calls) > chunks:
            raise KeyboardInterrupt
        return scored(*args)

    with monkeypatch.context() as m:
        m.setattr(score_verb, "_scored", stops)
        assert run() != 0


@pytest.mark.slow  # two training runs and exports through the CLI (module fixture)
def test_a_changed_questions_folder_is_not_resumed(exports, tmp_path, monkeypatch, capsys):
    """A `datasets` folder was keyed by its name: its rows changed (new answers under the same
    ids) and the resume mixed two versions of it, without a word."""
    import datasets

    two_stage, _, answered = exports
    monkeypatch.setattr(score_verb, "CHUNK", 8)
    rows = _rows(answered)[:40]
    folder = tmp_path / "ds"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    out, whole = tmp_path / "out.jsonl", tmp_path / "whole.jsonl"

    def score(output, *extra):
        return main(["score", "--model", str(two_stage), "--questions", str(folder),
                     "--output", str(output), *extra])  # fmt: skip

    assert score(whole) == 0
    _stopped_after(monkeypatch, 2, lambda: score(out))
    assert len((tmp_path / "out.jsonl.partial").read_text().splitlines()) == 16
    shutil.rmtree(folder)
    changed = [{**r, "token_logprobs": [-2.5, *r["token_logprobs"]]} for r in rows]
    datasets.Dataset.from_list(changed).save_to_disk(str(folder))
    capsys.readouterr()
    assert score(out, "--resume") == 2
    assert "these lines were made with another input than this run's" in capsys.readouterr().err
    shutil.rmtree(folder)  # the rows the lines were made from: resumed
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    assert score(out, "--resume") == 0
    assert out.read_text() == whole.read_text()


@pytest.mark.slow  # two training runs and exports through the CLI (module fixture)
def test_a_router_cascade_resumed_mid_batch_writes_what_one_run_writes(
    exports, tmp_path, monkeypatch
):
    """The budget caps each batch's escalations, and a resume started its batches where the
    stopped run's lines ended: a stop inside a batch's write changed which questions were
    escalated."""
    two_stage, router, answered = exports
    monkeypatch.setattr(score_verb, "CHUNK", 32)
    out, whole = tmp_path / "out.jsonl", tmp_path / "whole.jsonl"

    def score(output, *extra):
        return main(["score", "--model", str(router), "--questions", str(answered),
                     "--answer-gate", str(two_stage), "--budget", "0.5", "--output",
                     str(output), *extra])  # fmt: skip

    assert score(whole) == 0
    assert any(r["escalated"] for r in _rows(whole))
    _stopped_after(monkeypatch, 2, lambda: score(out))
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_text().splitlines(keepends=True)
    assert len(kept) == 64
    # stopped while the second batch was written: 44 of its lines whole, the next cut short
    partial.write_text("".join(kept[:44]) + kept[44][:20])
    assert score(out, "--resume") == 0
    assert out.read_text() == whole.read_text()


def test_a_jsonl_row_asking_text_is_a_question_not_a_header(tmp_path):
    """Line 1 of a JSONL file whose question is "Text" was dropped as a header line, without
    an error record (JSONL has no header; a .txt file's first line `question` still is one)."""
    jsonl = tmp_path / "hdr.jsonl"
    jsonl.write_text('{"id":"q1","question":"Text"}\n{"id":"q2","question":"Who wrote Hamlet?"}\n')
    assert [(r["id"], r["text"]) for r in read_question_lines(jsonl)] == [
        ("q1", "Text"), ("q2", "Who wrote Hamlet?")]  # fmt: skip
    txt = tmp_path / "hdr.txt"
    txt.write_text("Question\nWho wrote Hamlet?\n")
    assert [r["text"] for r in read_question_lines(txt)] == ["Who wrote Hamlet?"]


def test_every_row_s_columns_are_gathered(tmp_path):
    """What `score` checks an --input file's answer columns against: each row's keys, not the
    first's (a CSV's header)."""
    rows = [{"id": "a", "question": "Who?"}, {"id": "b", "question": "What?", "Token_Logprobs": []}]
    for name, text in (("q.json", json.dumps(rows)),
                       ("q.jsonl", "".join(json.dumps(r) + "\n" for r in rows)),
                       ("q.csv", "id,question,token_logprobs\na,Who?,[-0.1]\n")):  # fmt: skip
        path = tmp_path / name
        path.write_text(text)
        seen: set[str] = set()
        assert len(list(iter_question_lines(path, seen))) == 2 - name.endswith(".csv")
        assert {c.lower() for c in seen} == {"id", "question", "token_logprobs"}, name
