"""Recorded outcomes become label files (`label --policy outcomes`), and questions without
gold answers get a clear way out."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.labels.label_files import LabelFile
from user_files import QUESTIONS, write_jsonl


def _label(tmp_path: Path, outcomes: Path, *extra: str) -> int:
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    return main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--generator", "my-llm", "--labels-dir", str(tmp_path / "labels"),
                 *extra])  # fmt: skip


def _sample(doc_id: int, doc: dict, answer: str) -> dict:
    """One row of lm-evaluation-harness 0.4 `--log_samples` output (the layout `lm_eval`
    wrote here for examples/lm-eval/closed_book_qa.yaml)."""
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": doc["answers"][0],
        "arguments": {"gen_args_0": {"arg_0": f"Question: {doc['question']}\nAnswer:",
                                     "arg_1": {"until": ["\n"], "max_gen_toks": 24}}},
        "resps": [[answer]],
        "filtered_resps": [answer],
        "filter": "none",
        "metrics": ["exact_match"],
        "doc_hash": "0" * 64,
        "prompt_hash": "1" * 64,
        "target_hash": "2" * 64,
        "exact_match": 0.0,
    }  # fmt: skip


def test_lm_eval_samples_are_judged_against_gold(tmp_path):
    answers = ["It was William Shakespeare.", "Lyon", "I don't know"]
    samples = [_sample(i, d, a) for i, (d, a) in enumerate(zip(QUESTIONS, answers, strict=True))]
    assert _label(tmp_path, write_jsonl(tmp_path / "samples_qa_2026.jsonl", samples)) == 0
    out = LabelFile(tmp_path / "labels" / "my-llm" / "closed-book.jsonl")
    assert out.labels() == {"m1": 0, "m2": 1, "m3": 1}
    assert out.rows["m3"]["idk"] and out.rows["m1"]["match"]
    assert out.meta["outcomes_format"] == "lm-eval-samples" and out.meta["source"] == "outcomes"
    assert not (tmp_path / "labels" / "my-llm" / "rag-gain.jsonl").exists()


def test_generic_correctness_by_text_with_retrieval_gives_rag_gain(tmp_path, caplog):
    path = tmp_path / "outcomes.csv"
    path.write_text(
        "question,correct,rag_prediction\n"
        "who wrote hamlet,yes,Shakespeare wrote it (William Shakespeare)\n"
        "What is the capital of France?,0,Paris\n"
        "A question nobody asked?,1,\n"
    )
    assert _label(tmp_path, path) == 0
    run = tmp_path / "labels" / "my-llm"
    assert LabelFile(run / "closed-book.jsonl").labels() == {"m1": 0, "m2": 1}
    gain = LabelFile(run / "rag-gain.jsonl")
    assert gain.rows["m2"]["effect"] == "helps" and gain.labels() == {"m1": 0, "m2": 1}
    assert gain.meta["unmatched_rows"] == 1
    # the row left out is said, not only counted in the summary
    assert "1 of 3 outcome rows match no question" in caplog.text
    assert "line 4, 'A question nobody asked?'" in caplog.text
    # the evaluation reads these files as a labelling run's outcomes
    from retrieval_gate.labels.labelling_run import LabellingRun

    outcomes = LabellingRun(run).outcomes()
    assert outcomes.closed == {"m1": True, "m2": False} and outcomes.rag["m2"] is True


@pytest.mark.parametrize("kind", ["a folder", "a device, pipe or socket", "a link to nothing"])
def test_a_run_whose_answer_file_is_no_file_is_refused_not_read_as_no_answers(tmp_path, kind):
    """A folder (or a FIFO, or a dead link) named rag-gain.jsonl read as a run without
    with-retrieval answers: every gate and objective needing them went quiet."""
    import os

    from retrieval_gate.errors import InputError
    from retrieval_gate.labels.labelling_run import LabellingRun, run_dir_for

    def put(bad: Path) -> None:
        bad.parent.mkdir(exist_ok=True)
        {"a folder": bad.mkdir, "a device, pipe or socket": lambda: os.mkfifo(bad),
         "a link to nothing": lambda: bad.symlink_to(tmp_path / "gone.jsonl")}[kind]()  # fmt: skip

    run = tmp_path / "run"
    put(run / "rag-gain.jsonl")
    (run / "closed-book.jsonl").write_text('{"id": "q1", "label": 0, "match": true}\n')
    assert LabellingRun(run).records() == {"q1": {"id": "q1", "label": 0, "match": True}}
    message = f"rag-gain.jsonl: is {kind}, where a labelling run keeps its recorded answers"
    for read in (LabellingRun(run).outcomes, LabellingRun(run).checksums):
        with pytest.raises(InputError, match=message):
            read()
    put(tmp_path / "labels" / "closed-book.jsonl")  # beside the label file: its run, or not?
    with pytest.raises(InputError, match=f"closed-book.jsonl: is {kind}, where"):
        run_dir_for(tmp_path / "labels" / "mine.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("id,correct\nx9,1\n", "none of the 1 outcome rows matches a question"),
        # rows with their questions' text and no --questions: the file can be its own questions
        (
            "question,correct\nWho is x9?,1\n",
            "their questions' text: if they are your own "
            "questions, pass this file as the questions too (--questions ",
        ),
        ("id,score\nm1,0.3\n", "no correctness (correct / is_correct"),
        ("id,correct\nm1,maybe\n", "correctness 'maybe' is not true/false"),
        (
            "id,correct\nm1,1\nm1,0\n",
            "a second outcome for question 'm1' (first on line 2): keep one row per question",
        ),
        # an empty cell said "no correctness column" of a file that has one
        ("id,correct\nm1,1\nm2,\n", "line 3: the row's 'correct' cell is empty (or NaN)"),
        # two columns of one field that differ: the second was dropped unseen
        (
            "id,correct,is_correct\nm1,yes,1\nm2,1,0\n",
            "line 3: columns 'correct' and 'is_correct' both give the correct and differ "
            "('1' vs '0'): name the one to read with --outcome-field correct=COLUMN",
        ),
        (
            "id,correct,prediction,response\nm1,0,Lyon,lyon.\nm2,0,Ottawa,Toronto\n",
            "line 3: columns 'prediction' and 'response' both give the prediction and differ",
        ),
        (
            "id,prediction,closed_prediction\nm1,Paris,London\n",
            "columns 'prediction' and 'closed_prediction' both give the prediction",
        ),
        # a shuffled id column: the row's outcome went to the id's question
        (
            "id,question,correct\nm1,What is the capital of France?,1\n",
            "line 2: the row's id is question 'm1' ('Who wrote Hamlet?'), and its question "
            "text is question 'm2''s",
        ),
    ],
)
def test_bad_outcomes_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert _label(tmp_path, path) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "labels" / "my-llm" / "closed-book.jsonl").exists()


def test_a_row_whose_text_is_not_its_ids_question_is_matched_by_id_and_said(tmp_path, caplog):
    """A text around the question (a prompt template) is no other question's: the id decides,
    and the rows are counted in a warning (a text that is another question's is refused:
    `test_bad_outcomes_files`)."""
    rows = [{"id": "m1", "question": "Question: Who wrote Hamlet?\nAnswer:", "correct": 1},
            {"id": "m2", "question": "what is the capital of france", "correct": 0}]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows)) == 0
    assert LabelFile(tmp_path / "labels" / "my-llm" / "closed-book.jsonl").labels() == {
        "m1": 0, "m2": 1}  # fmt: skip
    assert "1 outcome rows give a question text that is not their id's question's (the " \
        "first: line 1, id 'm1'); matched by id" in caplog.text  # fmt: skip


def test_two_outcomes_for_one_id_less_question_name_the_id_columns(tmp_path, capsys):
    """Two outcome rows of one text, the questions without ids (PopQA has two "What genre is
    In Deep?"): the refusal said only "keep one row per question", though they may be two
    questions that only ids keep apart; a question with an id gets no such hint."""
    qs = write_jsonl(tmp_path / "qs.jsonl", [{"question": "What genre is In Deep?"}])
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("question,correct\nWhat genre is In Deep?,1\nWhat genre is In Deep?,0\n")
    args = ["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--generator", "x",
            "--labels-dir", str(tmp_path / "labels"), "--questions"]  # fmt: skip
    assert main([*args, str(qs)]) == 2
    err = capsys.readouterr().err
    assert "a second outcome for question 'q-" in err and "(first on line 2)" in err
    assert "give both files an id column: --field id=COLUMN and --outcome-field id=COLUMN" in err
    with_id = write_jsonl(
        tmp_path / "id.jsonl", [{"id": "g1", "question": "What genre is In Deep?"}]
    )
    assert main([*args, str(with_id)]) == 2
    err = capsys.readouterr().err
    assert "a second outcome for question 'g1'" in err and "id column" not in err


def test_an_outcome_by_text_never_goes_to_another_question_that_reads_alike(tmp_path, capsys):
    """Two questions alike once case, punctuation and articles are set aside: a row naming one
    by its text went to whichever came last (here m2's outcome was filed under m3)."""
    qs = write_jsonl(tmp_path / "qs.jsonl", [
        {"id": "m2", "question": "Who is the president?", "answers": ["x"]},
        {"id": "m3", "question": "Who is a president?", "answers": ["y"]},
    ])  # fmt: skip
    argv = ["label", "--policy", "outcomes", "--questions", str(qs), "--generator", "my-llm",
            "--labels-dir", str(tmp_path / "labels"), "--outcomes"]  # fmt: skip
    exact = write_jsonl(tmp_path / "exact.jsonl", [{"question": "Who is the president?",
                                                    "correct": True}])  # fmt: skip
    assert main([*argv, str(exact)]) == 0
    assert LabelFile(tmp_path / "labels" / "my-llm" / "closed-book.jsonl").labels() == {"m2": 0}
    loose = write_jsonl(tmp_path / "loose.jsonl", [{"question": "who is THE president",
                                                    "correct": True}])  # fmt: skip
    assert main([*argv, str(loose)]) == 2
    assert (
        "line 1: question 'who is THE president' matches two questions" in capsys.readouterr().err
    )
    # two questions of the very same text (ids a and b): the row went to b, a left unlabelled
    same = write_jsonl(tmp_path / "same.jsonl", [
        {"id": "a", "question": "Who wrote Hamlet?", "answers": ["x"]},
        {"id": "b", "question": "Who wrote Hamlet?", "answers": ["x"]},
    ])  # fmt: skip
    argv[argv.index(str(qs))] = str(same)
    hamlet = write_jsonl(tmp_path / "hamlet.jsonl", [{"question": "Who wrote Hamlet?",
                                                     "correct": False}])  # fmt: skip
    assert main([*argv, str(hamlet)]) == 2
    err = capsys.readouterr().err
    assert "line 1: question 'Who wrote Hamlet?' matches two questions; give the row" in err
    empty_id = tmp_path / "empty.csv"  # said "neither an 'id' nor a 'question' column (its
    empty_id.write_text("id,correct\n,0\n")  # columns: correct, id)"
    assert main([*argv, str(empty_id)]) == 2
    assert "outcome row's id and question cells are empty" in capsys.readouterr().err


def test_a_recorded_correctness_decides_and_its_answer_text_is_kept(tmp_path, caplog):
    """Both `correct` and `prediction` given: the answer text was dropped without a word (the
    rows said prediction null); the recorded correctness still decides, as documented."""
    rows = [{"id": "m1", "correct": True, "prediction": "Marlowe"},
            {"id": "m2", "correct": False, "prediction": "Paris"},
            {"id": "m3", "correct": False, "prediction": ""}]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows)) == 0
    out = LabelFile(tmp_path / "labels" / "my-llm" / "closed-book.jsonl")
    assert {i: (r["prediction"], r["label"]) for i, r in out.rows.items()} == {
        "m1": ("Marlowe", 0), "m2": ("Paris", 1), "m3": (None, 1)}  # fmt: skip
    assert "_judged_otherwise" not in out.rows["m1"]
    # Marlowe judged wrong where recorded right, Paris right where recorded wrong: said
    assert "2 rows record a correctness the judge reads otherwise from their prediction (the " \
        "first: 'm1'" in caplog.text  # fmt: skip
    strategy = [{"id": q["id"], "no_retrieval_correct": i == 0, "no_retrieval_prediction": "x",
                 "one_retrieval_correct": True} for i, q in enumerate(QUESTIONS)]  # fmt: skip
    assert _label(tmp_path, write_jsonl(tmp_path / "s.jsonl", strategy), "--strategies",
                  "no_retrieval", "one_retrieval") == 0  # fmt: skip
    rows = LabelFile(tmp_path / "labels" / "my-llm" / "strategies.jsonl").rows
    assert rows["m1"]["prediction"] == {"no_retrieval": "x"} and rows["m2"]["label"] == 1
    # one_retrieval right on every question: a router learns nothing of it, said
    assert "strategy one_retrieval is right on all 3 questions" in caplog.text
    assert "strategy no_retrieval is" not in caplog.text


def test_ids_that_miss_by_their_spelling_and_questions_left_out_are_said(tmp_path, caplog):
    """ "7" for a question "007" (a spreadsheet's number) was left out with no hint, and the
    questions given no outcome were never counted (train then used fewer, unsaid)."""
    caplog.set_level("INFO", logger="retrieval_gate")
    qs = tmp_path / "q.csv"
    qs.write_text("id,question,answers\n007,Who wrote Hamlet?,x\n10,Capital of Spain?,y\n"
                  "3,Which river?,z\n")  # fmt: skip
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("id,correct,\n7,1,\n10.0,0,\n3,T,\n")  # T: true; a blank column
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--generator", "g", "--labels-dir",
                 str(tmp_path / "l")]) == 0  # fmt: skip
    assert LabelFile(tmp_path / "l" / "g" / "closed-book.jsonl").labels() == {"3": 0}
    assert "(a question's id is '007': ids match as written)" in caplog.text
    assert "2 of 3 questions have no outcome row (the first: '007')" in caplog.text
    assert "columns not read as outcomes:  " not in caplog.text  # a blank header: no name


def test_a_users_file_in_the_labels_folder_is_refused_naming_the_folders_flag(tmp_path, capsys):
    """The refusal asked for another --out, which an import of several strategies refuses."""
    run = tmp_path / "labels" / "my-llm"
    run.mkdir(parents=True)
    (run / "closed-book.jsonl").write_text('{"id": "m1", "label": 1}\n')  # no sidecar: theirs
    rows = [{"id": "m1", "no_retrieval_correct": 1, "one_retrieval_correct": 1}]
    path = write_jsonl(tmp_path / "o.jsonl", rows)
    assert _label(tmp_path, path, "--strategies", "no_retrieval", "one_retrieval") == 2
    assert "refusing to change it: pass another --labels-dir / --generator name or move the " \
        "file" in capsys.readouterr().err  # fmt: skip
    assert (run / "closed-book.jsonl").read_text() == '{"id": "m1", "label": 1}\n'


def test_outcomes_never_replace_a_labelling_runs_file(tmp_path, capsys):
    run = tmp_path / "labels" / "my-llm"
    run.mkdir(parents=True)
    (run / "closed-book.jsonl").write_text('{"id": "m1", "label": 1}\n')
    (run / "closed-book.meta.json").write_text('{"policy": "closed-book"}')
    path = write_jsonl(tmp_path / "o.jsonl", [{"id": "m1", "correct": True}])
    assert _label(tmp_path, path) == 2
    assert "not made from outcomes is already there" in capsys.readouterr().err
    assert (run / "closed-book.jsonl").read_text() == '{"id": "m1", "label": 1}\n'


def test_a_reimport_removes_the_files_of_the_earlier_import_it_does_not_make(
    tmp_path, caplog, capsys
):
    """A second import into the folder that records no answers with retrieval rewrote
    closed-book.jsonl and left the first import's rag-gain.jsonl (and strategies.jsonl)
    beside it, whose closed-book correctness `tune` and `evaluate` then read in place of the
    new one, without a word. They are removed, and said; one a labelling run made is
    refused, nothing written."""
    from retrieval_gate.labels.labelling_run import LabellingRun

    folder = tmp_path / "labels" / "my-llm"
    both = [{"id": q["id"], "no_retrieval_correct": 1, "one_retrieval_correct": 1}
            for q in QUESTIONS]  # fmt: skip
    strategies = ("--strategies", "no_retrieval", "one_retrieval")
    assert _label(tmp_path, write_jsonl(tmp_path / "both.jsonl", both), *strategies) == 0
    assert {"rag-gain.jsonl", "strategies.jsonl"} <= {p.name for p in folder.iterdir()}
    closed = write_jsonl(tmp_path / "closed.jsonl", [{"id": q["id"], "correct": 0}
                                                     for q in QUESTIONS])  # fmt: skip
    assert _label(tmp_path, closed) == 0
    assert sorted(p.name for p in folder.glob("*.json*") if not p.name.startswith(".")) == [
        "closed-book.jsonl", "closed-book.meta.json"]  # fmt: skip
    assert LabellingRun(folder).outcomes().closed == dict.fromkeys(["m1", "m2", "m3"], False)
    assert f"removed {folder / 'rag-gain.jsonl'} (from the earlier import of" in caplog.text
    (folder / "rag-gain.jsonl").write_text('{"id": "m1", "label": 1}\n')  # a labelling run's
    (folder / "rag-gain.meta.json").write_text('{"policy": "rag-gain"}')
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    assert _label(tmp_path, closed) == 2
    assert "rag-gain.jsonl: was not made by an outcomes import" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files


@pytest.mark.parametrize("strategies", [False, True], ids=["outcomes", "strategies"])
def test_a_reimport_never_overwrites_an_imported_file_edited_since(tmp_path, capsys, strategies):
    """A label file corrected by hand was rewritten from the outcomes by the next import,
    without a word; unchanged (or from before the folder's ledger) it is replaced as before."""
    if strategies:
        rows = [{"id": q["id"], "no_retrieval_correct": i % 2, "one_retrieval_correct": 1}
                for i, q in enumerate(QUESTIONS)]  # fmt: skip
        extra, edited = ("--strategies", "no_retrieval", "one_retrieval"), "strategies.jsonl"
    else:
        rows = [{"id": q["id"], "correct": i % 2} for i, q in enumerate(QUESTIONS)]
        extra, edited = (), "closed-book.jsonl"
    outcomes = write_jsonl(tmp_path / "o.jsonl", rows)
    assert _label(tmp_path, outcomes, *extra) == 0
    assert _label(tmp_path, outcomes, *extra) == 0  # unchanged: replaced
    folder = tmp_path / "labels" / "my-llm"
    (folder / ".retrieval-gate-files.json").unlink()  # as an import before the ledger left it
    assert _label(tmp_path, outcomes, *extra) == 0
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    (folder / edited).write_text((folder / edited).read_text() + '{"id": "x", "label": 1}\n')
    files[edited] = (folder / edited).read_bytes()
    capsys.readouterr()
    assert _label(tmp_path, outcomes, *extra) == 2
    assert f"{edited}: already exists, and retrieval-gate did not write it (or it was changed " \
        "since)" in capsys.readouterr().err  # fmt: skip
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files  # nothing written


@pytest.mark.parametrize("strategies", [False, True], ids=["outcomes", "strategies"])
def test_imported_labels_are_refused_over_questions_edited_under_their_ids(tmp_path, strategies):
    """Outcomes are the LLM's answers to the questions as they read when imported: training on
    them over a questions file edited since under the same ids is refused, as it is for a
    labelling run's rows (imports used to stamp no `question_sha`, so the edited question
    took the old one's label)."""
    from retrieval_gate.training.config import DataConfig
    from retrieval_gate.training.sources import labelled_questions

    if strategies:
        rows = [{"id": q["id"], "no_retrieval_correct": i % 2, "one_retrieval_correct": 1}
                for i, q in enumerate(QUESTIONS)]  # fmt: skip
        extra, files = ("--strategies", "no_retrieval", "one_retrieval"), {
            "strategies.jsonl": "strategies", "closed-book.jsonl": "binary",
            "rag-gain.jsonl": "binary"}  # fmt: skip
    else:
        rows = [{"id": q["id"], "correct": i % 2} for i, q in enumerate(QUESTIONS)]
        extra, files = (), {"closed-book.jsonl": "binary"}
    assert _label(tmp_path, write_jsonl(tmp_path / "o.jsonl", rows), *extra) == 0
    folder, qs = tmp_path / "labels" / "my-llm", tmp_path / "qs.jsonl"
    configs = [DataConfig(label_file=str(folder / name), task=task, questions=str(qs))
               for name, task in files.items()]  # fmt: skip
    for cfg in configs:
        labelled_questions(cfg)  # the questions they were made for
    write_jsonl(qs, [{"id": q["id"], "question": q["question"]} for q in QUESTIONS])
    for cfg in configs:
        labelled_questions(cfg)  # the same texts without their gold answers: these too
    write_jsonl(qs, [QUESTIONS[0], {**QUESTIONS[1], "question": "What is the capital of Peru?"},
                     QUESTIONS[2]])  # fmt: skip
    for cfg in configs:
        with pytest.raises(DataError, match=r"1 row here was labelled for other questions .*'m2'"):
            labelled_questions(cfg)


def test_no_gold_answers_points_to_outcomes(tmp_path, capsys):
    qs = write_jsonl(tmp_path / "nogold.jsonl", [{"question": "Is it raining in Oslo?"}])
    code = main(["label", "--policy", "closed-book", "--questions", str(qs), "--labels-dir",
                 str(tmp_path / "labels")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "no gold answers" in err and "--policy outcomes --outcomes FILE" in err
    prediction = write_jsonl(tmp_path / "p.jsonl", [{"question": "Is it raining in Oslo?",
                                                "prediction": "yes"}])  # fmt: skip
    code = main(["label", "--policy", "outcomes", "--outcomes", str(prediction), "--questions",
                 str(qs), "--labels-dir", str(tmp_path / "labels")])  # fmt: skip
    assert code == 2 and "record correctness in a 'correct' column" in capsys.readouterr().err


def test_generator_url_dead_server_and_no_gold_checked_first(tmp_path, capsys):
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    code = main(["label", "--policy", "closed-book", "--questions", str(qs), "--generator-url",
                 dead, "--labels-dir", str(tmp_path / "labels")])  # fmt: skip
    assert code == 3 and "could not list models at http://127.0.0.1:9/v1" in capsys.readouterr().err
    nogold = write_jsonl(tmp_path / "nogold.jsonl", [{"question": "Is it raining in Oslo?"}])
    code = main(["label", "--policy", "closed-book", "--questions", str(nogold),
                 "--generator-url", dead, "--labels-dir", str(tmp_path / "labels")])  # fmt: skip
    assert code == 2 and "--policy outcomes" in capsys.readouterr().err


def test_remote_generator_retries_then_names_the_server(monkeypatch):
    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation import remote

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.0)
    gen = remote.RemoteGenerator("http://127.0.0.1:9/v1", model="m")
    calls = []
    real_post = gen._client.post
    gen._client.post = lambda *a, **k: calls.append(1) or real_post(*a, **k)
    with pytest.raises(BackendError, match=r"cannot reach .*127.0.0.1:9.*after 4 attempts"):
        gen.generate(["hi"])
    assert len(calls) == 4


def test_remote_generator_refuses_a_server_that_takes_the_connection_and_never_answers(
    monkeypatch,
):
    """rag and serve sat silent for the client's 300 s timeout before their first line."""
    import socket

    from retrieval_gate.errors import BackendError
    from retrieval_gate.generation import remote

    monkeypatch.setattr(remote, "LIST_TIMEOUT", 0.3)
    with socket.socket() as mute:  # accepts (the backlog) and never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        url = f"http://127.0.0.1:{mute.getsockname()[1]}/v1"
        for model in (None, "m"):  # a named model needs no list, but a live server
            with pytest.raises(BackendError, match=r"took the connection but did not list its "
                               r"models within 0\.3 s"):  # fmt: skip
                remote.RemoteGenerator(url, model=model)


def test_popularity_gate_on_any_numeric_column():
    import numpy as np

    from retrieval_gate.errors import InputError
    from retrieval_gate.gates.popularity import fit_popularity
    from retrieval_gate.questions import Question

    def q(i: int, hits) -> Question:
        return Question(id=f"q{i}", text=f"question {i}?", answers=("a",), source="mine",
                        relation="r", extra={"hits": hits})  # fmt: skip

    qs = [q(i, str(i * 10)) for i in range(20)]  # CSV cells arrive as text
    y = np.array([int(i < 8) for i in range(20)])  # few index hits -> needs retrieval
    nan = np.full(20, np.nan)
    gate = fit_popularity(qs, y, nan, nan, feature="hits")
    assert (gate.scores(qs) >= 0.5).tolist() == [bool(v) for v in y]
    assert gate.scores([q(99, None)])[0] == gate.fallback_score  # missing value: fallback
    with pytest.raises(
        InputError,
        match="question 'q7': feature column 'hits' \\(--feature / data.features\\) holds 'many'",
    ):
        gate.scores([q(7, "many")])
    with pytest.raises(ValueError, match="no fitting question has a value for 'views'"):
        fit_popularity(qs, y, nan, nan, feature="views")


def test_outcomes_without_a_generator_name_say_where_they_went(tmp_path, capsys):
    """Outcomes without --generator still import (as the docs' older commands did), filed
    under the default generator's name, and the command says so and how to name the LLM."""
    outcomes = write_jsonl(tmp_path / "o.jsonl", [{"id": q["id"], "prediction": "x",
                                                   "correct": i % 2} for i, q in
                                                  enumerate(QUESTIONS)])  # fmt: skip
    qs = write_jsonl(tmp_path / "qs.jsonl", QUESTIONS)
    argv = ["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions", str(qs),
            "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    folder = tmp_path / "labels" / "smollm2-135m-instruct"
    assert (
        f"no --generator: these outcomes are filed as smollm2-135m-instruct's, in {folder}" in err
    )
    assert (folder / "closed-book.jsonl").is_file()
    assert main([*argv, "--generator", "my-llm"]) == 0
    assert "no --generator" not in capsys.readouterr().err


def test_a_label_file_named_in_another_case_is_pointed_at(tmp_path, capsys):
    """`label --generator My-LLM` writes labels/my-llm: the path as typed was "not found; run
    `retrieval-gate label` first", just after running it."""
    from retrieval_gate.labels.label_files import not_found
    from retrieval_gate.training.tasks import StrategyTask

    outcomes = tmp_path / "o.csv"
    outcomes.write_text("id,correct\nm1,1\nm2,0\n")
    assert _label(tmp_path, outcomes) == 0
    typed = tmp_path / "labels" / "My-LLM" / "closed-book.jsonl"
    out = tmp_path / "report"  # not the working folder's reports/
    assert main(["evaluate", "--labels", str(typed), "--gates", "always", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {tmp_path / 'labels' / 'my-llm' / 'closed-book.jsonl'}?" in err
    assert "run `retrieval-gate label`" in not_found(tmp_path / "labels" / "other" / "x.jsonl")
    assert "run `retrieval-gate label`" in not_found(tmp_path / "labels" / "my-llm")  # a folder
    with pytest.raises(DataError, match="strategy label file not found; .*--strategies"):
        StrategyTask("correct", ("a", "b")).check_source(
            str(tmp_path / "labels" / "my-llm" / "strategies.jsonl")
        )


def test_a_column_whose_few_values_equal_label_ids_is_not_named_as_the_ids():
    """4 of 40 view counts equal to label ids: the hint named `views`, and following it gave 4
    questions other questions' labels."""
    from retrieval_gate.labels.evalset import ids_hint
    from retrieval_gate.questions import Question

    qs = [Question(id=f"q-{i}", text=f"Q{i}?", answers=("x",), source="s",
                   extra={"views": i * 10, "qid": f"m{i}"}) for i in range(40)]  # fmt: skip
    labels = {str(i): 1 for i in range(40)}  # 0, 10, 20, 30 are view counts too
    assert "column 'views'" not in ids_hint(qs, labels)
    assert "is this the questions file" in ids_hint(qs, labels)
    assert "column 'qid'" in ids_hint(qs, {f"m{i}": 1 for i in range(10)})  # labels of a part


def test_labels_of_a_file_whose_id_column_is_named_otherwise_name_that_column(tmp_path, capsys):
    """Labels made with --field id=qid, then evaluated (or trained) without it: the questions
    get ids made from their text, and the error said only "no label id is a question id"."""
    rows = [{"qid": f"m{i}", "question": f"Who wrote book {i}?", "answers": ["x"]}
            for i in range(40)]  # fmt: skip
    qs = write_jsonl(tmp_path / "qs.jsonl", rows)
    outcomes = write_jsonl(
        tmp_path / "o.jsonl", [{"id": f"m{i}", "correct": i % 2} for i in range(40)]
    )
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(qs), "--field", "id=qid", "--generator", "x", "--labels-dir",
                 str(tmp_path / "labels")]) == 0  # fmt: skip
    labels = str(tmp_path / "labels" / "x" / "closed-book.jsonl")
    capsys.readouterr()
    assert main(["evaluate", "--labels", labels, "--questions", str(qs), "--gates", "always",
                 "--no-cost", "--out", str(tmp_path / "rep")]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "label ids read like 'm0', question ids like 'q-" in err
    assert "the labels' ids are in column 'qid': pass --field id=qid" in err
    assert main(["train", "--config", "minilm-stacked-closed-book", "--set",
                 f"data.questions={qs}", f"data.label_file={labels}"]) == 2  # fmt: skip
    assert 'pass --set "data.fields={id: qid}"' in capsys.readouterr().err


def test_an_lm_eval_sample_of_several_answers_is_refused(tmp_path, capsys):
    """`repeats: 2` without a filter saves two answers a sample: the first was judged and the
    other dropped, without a word (a generic file's cell of several answers was refused)."""
    samples = [_sample(i, d, "William Shakespeare") for i, d in enumerate(QUESTIONS)]
    samples[1]["filtered_resps"] = [["Paris", "Lyon"]]
    assert _label(tmp_path, write_jsonl(tmp_path / "samples_qa_2026.jsonl", samples)) == 2
    assert "line 2: lm-eval sample holds 2 answers in 'filtered_resps' (repeats > 1)" in (
        capsys.readouterr().err
    )


def test_report_reads_the_labels_dir_generator_and_questions_given(tmp_path, capsys):
    """`label --report --labels-dir labels --generator g --questions q` printed the bundled
    SmolLM2 labels' empty tables (or NaN rows, and the outcomes' closed-book.jsonl twice)."""
    outcomes = write_jsonl(tmp_path / "o.jsonl", [{"id": "m1", "correct": True},
                                                  {"id": "m2", "correct": False}])  # fmt: skip
    assert _label(tmp_path, outcomes) == 0
    qs = str(tmp_path / "qs.jsonl")
    report = ["label", "--report", "--labels-dir", str(tmp_path / "labels")]
    capsys.readouterr()
    assert main([*report, "--generator", "my-llm", "--questions", qs]) == 0
    out = capsys.readouterr().out
    assert out.count("| closed-book |") == 1 and "| outcomes |" not in out and "nan" not in out
    assert main([*report, "--generator", "my-llm"]) == 2
    assert "none of the labelled ids is a question of the bundled datasets: pass --questions" \
        in capsys.readouterr().err  # fmt: skip
    assert main([*report, "--generator", "other", "--questions", qs]) == 2
    assert "no label file of generator 'other' here" in capsys.readouterr().err


def test_recorded_answers_of_other_questions_under_the_same_ids_are_left_out(tmp_path, caplog):
    """Hand-written labels (no run beside them) over the user's questions that reuse bundled
    ids: the committed SmolLM2 run's answers to the bundled questions made their adaptive
    accuracy; a run whose rows are stamped for another text the same."""
    import json

    import numpy as np

    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.labels.label_files import question_sha
    from retrieval_gate.labels.labelling_run import DEFAULT_RUN_DIR
    from retrieval_gate.questions import Question

    ids = ["popqa-4382392", "popqa-1223902"]  # answered in the committed run
    labels = write_jsonl(tmp_path / "mine.jsonl", [{"id": i, "label": 1} for i in ids])
    qs = [Question(id=i, text=f"My own question {n}?", answers=("x",), source="mine",
                   split="test") for n, i in enumerate(ids)]  # fmt: skip
    sp = load_splits(labels, DEFAULT_RUN_DIR, qs)
    assert np.isnan(sp.test.closed_correct).all() and np.isnan(sp.test.rag_correct).all()
    assert "2 of the 2 recorded answers" in caplog.text and "--run-dir" in caplog.text
    run = tmp_path / "run"
    run.mkdir()
    other = Question(id=ids[0], text="Another text?", answers=("x",), source="mine")
    (run / "closed-book.jsonl").write_text(
        json.dumps({"id": ids[0], "label": 1, "match": True, "question_sha": question_sha(other)})
        + "\n"
    )
    sp = load_splits(labels, run, qs)
    assert np.isnan(sp.test.closed_correct).all()
    same = json.dumps(
        {"id": ids[0], "label": 1, "match": True, "question_sha": question_sha(qs[0])}
    )
    (run / "closed-book.jsonl").write_text(same + "\n")
    assert load_splits(labels, run, qs).test.closed_correct[0] == 1.0  # its own: kept


def test_test_questions_whose_labels_are_all_null_are_named_as_such(tmp_path):
    """It said the questions were too few for the split, with 10 test rows in the file."""
    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.questions import Question

    qs = [Question(id=f"q{i}", text=f"Q{i}?", answers=("x",), source="s",
                   split="test" if i < 10 else "train") for i in range(30)]  # fmt: skip
    rows = [{"id": f"q{i}", "label": None if i < 10 else i % 2} for i in range(30)]
    labels = write_jsonl(tmp_path / "l.jsonl", rows)
    with pytest.raises(DataError, match="none of the 10 test questions has a label"):
        load_splits(labels, None, qs)


def test_a_recorded_score_or_answer_log_probability_past_the_float_range_is_refused(
    tmp_path, capsys
):
    """JSON reads 10**400 exactly; float() of it raised OverflowError: exit 1, a traceback."""
    from retrieval_gate.gates.recorded import RecordedGate

    big = "1" + "0" * 400
    recorded = tmp_path / "rec.jsonl"
    recorded.write_text(f'{{"id": "m1", "score": {big}}}\n')
    with pytest.raises(DataError, match=r"rec.jsonl, line 1: score 1000.* is not a probability"):
        RecordedGate(recorded)
    outcomes = tmp_path / "out.jsonl"
    outcomes.write_text(f'{{"id": "m1", "prediction": "x", "token_logprobs": [-{big}]}}\n')
    assert _label(tmp_path, outcomes) == 2
    assert "out.jsonl, line 1: column 'token_logprobs', token 1: is -inf" in capsys.readouterr().err


def test_nan_and_float_gold_answers_judge_as_no_answer_and_their_numbers(tmp_path, capsys):
    """`"answers": NaN` was the gold answer "nan", which "a banana" holds; a data frame's int
    column with a missing value is floats, and "1999.0" was in no prediction ("It was 1999.")."""
    import pandas as pd

    from retrieval_gate.labels.label_files import read_labels

    pd.DataFrame({"id": ["y", "n", "c"], "question": ["Year?", "Which?", "How many?"],
                  "answers": [1999, None, 42]}).to_parquet(tmp_path / "q.parquet")  # fmt: skip
    outcomes = write_jsonl(tmp_path / "out.jsonl", [{"id": "y", "prediction": "It was 1999."},
                                                    {"id": "c", "prediction": "42"}])  # fmt: skip
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(tmp_path / "q.parquet"), "--generator", "my-llm", "--labels-dir",
                 str(tmp_path / "labels")]) == 0  # fmt: skip
    labels = read_labels(tmp_path / "labels" / "my-llm" / "closed-book.jsonl")
    assert labels == {"y": 0, "c": 0}  # answered right: no retrieval needed
    (tmp_path / "nan.jsonl").write_text('{"id": "1", "question": "Who?", "answers": NaN}\n')
    banana = write_jsonl(tmp_path / "b.jsonl", [{"id": "1", "prediction": "a banana"}])
    assert main(["label", "--policy", "outcomes", "--outcomes", str(banana), "--questions",
                 str(tmp_path / "nan.jsonl"), "--generator", "my-llm", "--labels-dir",
                 str(tmp_path / "labels2")]) == 2  # fmt: skip
    assert "question '1' has no gold answers" in capsys.readouterr().err


def test_a_refused_evaluate_leaves_no_report_folder(tmp_path, monkeypatch, capsys):
    """A --labels file that is not there was refused while the labels were read, after the
    report folder's lock was taken: reports/.evaluate.lock stayed in the working folder."""
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--labels", "nosuch.jsonl", "--gates", "always"]) == 2
    assert "nosuch.jsonl: label file not found" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
