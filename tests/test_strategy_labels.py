"""Outcomes of N strategies become strategy labels (`label --policy outcomes` with a release
folder or `--strategies`): the strategies.jsonl schema, the no-answer treatments, and bad input
named before anything is written. `label --policy strategies` writes the same file from your
generator's outcomes under the RAG loop's strategies: resumable, a dying server handled."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from release_layout import write_release
from retrieval_gate.cli import main
from retrieval_gate.data.paths import resolve_data_dir
from retrieval_gate.errors import DataError
from retrieval_gate.labels.label_files import LabelFile, read_labels
from retrieval_gate.labels.strategy_labels import read_strategy_labels

S3 = ["no_retrieval", "one_retrieval", "multi_step"]


def _label(*args: str) -> int:
    return main(["label", "--policy", "outcomes", *args])


def test_release_folder_gives_three_label_files(tmp_path):
    root = write_release(tmp_path / "rel")
    assert _label("--outcomes", str(root), "--labels-dir", str(tmp_path / "labels")) == 0
    run = tmp_path / "labels" / "my_llm_7b"
    labels = read_strategy_labels(run / "strategies.jsonl")
    assert labels.strategies == tuple(S3)
    rows = {labels.rows[i]["id"].rsplit("-", 1)[-1]: labels.rows[i] for i in labels.rows}
    one = rows["single_nq_dev_1"]  # closed-book right, retrieval hurts
    assert (
        one["label"] == 0 and one["cheapest"] == "no_retrieval" and one["target"] == one["cheapest"]
    )
    assert one["correct"] == {"no_retrieval": True, "one_retrieval": False, "multi_step": False}
    assert "prediction" not in one and "cost" not in one  # recorded, not judged here
    assert rows["single_nq_dev_2"]["cheapest"] == "one_retrieval"
    # answered by no strategy: Adaptive-RAG's prior, single-hop -> one, multi-hop -> multi
    assert rows["single_nq_dev_3"]["cheapest"] is None
    assert (rows["single_nq_dev_3"]["target"], rows["single_nq_dev_3"]["target_from"]) == (
        "one_retrieval",
        "prior",
    )
    assert rows["2hop__3_4"]["target"] == "multi_step"
    assert labels.meta["outcomes_format"] == "adaptive-rag-release"
    assert (
        labels.meta["release_split"] == "dev_500"
        and labels.meta["unanswered"]["treatment"] == "prior"
    )
    ids = sorted(labels.rows)
    assert labels.correct(ids).shape == (5, 3)
    assert np.allclose(labels.costs(ids, [0, 1, 3.35])[:, 2], 3.35)
    # the binary views beside it: closed-book = first strategy, rag-gain = first vs second
    assert read_labels(run / "closed-book.jsonl") == {i: labels.rows[i]["label"] for i in ids}
    gain = LabelFile(run / "rag-gain.jsonl")
    assert {r["effect"] for r in gain.rows.values()} == {"hurts", "helps", "neither"}
    assert LabelFile(run / "strategies.jsonl").labels() == read_labels(run / "closed-book.jsonl")


@pytest.mark.parametrize(
    ("treatment", "nq3", "musique"),
    [("exclude", (None, "excluded"), None), ("no_retrieval", ("no_retrieval", "fixed"), "no_retrieval"),
     ("prior:musique=one_retrieval", ("one_retrieval", "prior"), "one_retrieval")],
)  # fmt: skip
def test_unanswered_treatments(tmp_path, treatment, nq3, musique):
    root = write_release(tmp_path / "rel")
    out = tmp_path / "labels"
    assert _label("--outcomes", str(root), "--labels-dir", str(out), "--unanswered", treatment) == 0
    labels = read_strategy_labels(out / "my_llm_7b" / "strategies.jsonl")
    row = labels.rows["adaptive-rag-nq-single_nq_dev_3"]
    assert (row["target"], row["target_from"]) == nq3
    assert labels.rows["adaptive-rag-musique-2hop__3_4"]["target"] == musique
    assert labels.rows["adaptive-rag-musique-2hop__1_2"]["target"] == "multi_step"  # answered
    assert labels.targets(["adaptive-rag-nq-single_nq_dev_3"])[0] == (
        -1 if nq3[0] is None else S3.index(nq3[0])
    )


def test_the_bundle_labels_give_the_issue_figures(tmp_path):
    bundle = resolve_data_dir(download=False) / "adaptive-rag-llama8b"
    assert _label("--outcomes", str(bundle), "--labels-dir", str(tmp_path)) == 0
    labels = read_strategy_labels(tmp_path / "llama_8b_it" / "strategies.jsonl")
    ids = sorted(labels.rows)
    ok = labels.correct(ids)
    assert np.round(ok.mean(0), 3).tolist() == [0.287, 0.32, 0.354]
    cheapest = [labels.rows[i]["cheapest"] for i in ids]
    oracle = np.mean([c is not None for c in cheapest])
    cost = np.mean(
        [{None: 0, "no_retrieval": 0, "one_retrieval": 1, "multi_step": 3.35}[c] for c in cheapest]
    )
    assert (round(oracle, 3), round(cost, 2)) == (0.452, 0.28)


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


QS = [
    {
        "id": "a",
        "question": "Who wrote Hamlet?",
        "answers": ["William Shakespeare"],
        "source": "lit",
    },
    {"id": "b", "question": "Who painted the Zorblat?", "answers": ["Quen Vik"], "source": "art"},
    {"id": "c", "question": "Where is Oslo?", "answers": ["Norway"], "source": "geo"},
]


def _generic(tmp_path: Path, content: str, *extra: str) -> int:
    qs = tmp_path / "qs.jsonl"
    qs.write_text("".join(json.dumps(r) + "\n" for r in QS))
    return _label("--outcomes", str(_csv(tmp_path / "outcomes.csv", content)), "--questions", str(qs),
                  "--generator", "my-llm", "--labels-dir", str(tmp_path / "labels"), *extra)  # fmt: skip


def test_a_strategies_import_counts_the_rows_no_question_matched(tmp_path, capsys):
    """The closed-book and rag-gain sidecars and the printed summary said 3 outcome rows, 0
    unmatched, where 2 more rows matched no question (strategies.meta.json said 2)."""
    content = "id,cheap_correct,dear_correct\na,1,1\nb,0,1\nc,0,0\nzz1,1,1\nzz2,0,1\n"
    assert _generic(tmp_path, content, "--strategies", "cheap", "dear") == 0
    out = capsys.readouterr().out
    assert '"outcome_rows": 5' in out and '"unmatched": 2' in out, out
    folder = tmp_path / "labels" / "my-llm"
    for name in ("closed-book", "rag-gain", "strategies"):
        meta = json.loads((folder / f"{name}.meta.json").read_text())
        assert meta["unmatched_rows"] == 2, name


def test_generic_file_with_strategies_costs_and_judged_answers(tmp_path):
    content = (
        "id,cheap_correct,mid_prediction,dear_correct,cheap_cost,mid_cost,dear_cost\n"
        "a,1,Shakespeare,yes,0,1,2.5\n"
        "b,0,It was Quen Vik,1,0,1,4\n"
        "c,no,Sweden,0,0,1,3\n"
    )
    code = _generic(tmp_path, content, "--strategies", "cheap,mid", "dear", "--unanswered", "dear")
    assert code == 0
    labels = read_strategy_labels(tmp_path / "labels" / "my-llm" / "strategies.jsonl")
    assert labels.strategies == ("cheap", "mid", "dear")
    a, b, c = (labels.rows[i] for i in "abc")
    assert a["correct"] == {"cheap": True, "mid": False, "dear": True}  # judged: no full name
    assert a["prediction"] == {"mid": "Shakespeare"} and a["cheapest"] == "cheap"
    assert b["cheapest"] == "mid" and b["label"] == 1
    assert (c["cheapest"], c["target"], c["target_from"]) == (None, "dear", "fixed")
    assert labels.costs(["b"], [0, 1, 3]).tolist() == [[0.0, 1.0, 4.0]]
    assert labels.meta["criterion"] == "loose-no-guess" and labels.meta["outcomes_sha256"]
    # a hand edit of one field: the report's accuracy (read from `label`) and its oracle (from
    # `correct`) disagreed; now the row is refused naming the field
    path = tmp_path / "labels" / "my-llm" / "strategies.jsonl"
    text = path.read_text()
    for field, edited in [
        ("correct", text.replace('"correct": {"cheap": false, "dear": false, "mid": false}',
                                 '"correct": {"cheap": true, "dear": false, "mid": false}')),
        ("label", text.replace('"label": 1', '"label": 0', 1)),
    ]:  # fmt: skip
        assert edited != text, field
        path.write_text(edited)
        with pytest.raises(DataError, match="was edited by hand; re-import the outcomes"):
            read_strategy_labels(path)
    path.write_text(text)


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ("id,cheap_correct,mid_correct\na,1,0\n", ["--strategies", "cheap", "dear"],
         "does not match the columns: no dear_correct/dear_prediction column; columns for "
         "strategies not listed: mid"),
        ("id,cheap_correct,mid_correct\na,1,2\n", ["--strategies", "cheap", "mid"],
         "line 2: mid_correct '2' is not true/false, 1/0 or yes/no"),
        ("id,cheap_correct,mid_correct,cheap_cost,mid_cost\na,1,0,0,-1\n",
         ["--strategies", "cheap", "mid"], "mid_cost -1.0 is negative"),
        # infinity passed, and a router's mean cost overflowed
        ("id,cheap_correct,mid_correct,cheap_cost,mid_cost\na,1,0,0,inf\n",
         ["--strategies", "cheap", "mid"], "mid_cost inf is negative, not finite or past 1e+12"),
        ("id,cheap_correct,mid_correct,mid_cost\na,1,0,2\n", ["--strategies", "cheap", "mid"],
         "some strategy costs but not cheap_cost: give every strategy its cost in this row (0 "
         "for a free one)"),
        ("id,cheap_correct,mid_correct\na,1,\n", ["--strategies", "cheap", "mid"],
         "no mid_correct and no mid_prediction value for 'a'"),
        ("id,cheap_correct\na,1\n", ["--strategies", "cheap"], "name two or more distinct"),
        # imported, trained and exported, its router ran nowhere: no strategies file names it
        ("id,no ret_correct,one ret_correct\na,1,0\n", ["--strategies", "no ret", "one ret"],
         "--strategies: 'no ret' is not a plain name: use letters, digits"),
        # the other way round: closed-book.jsonl held the multi-step answers, and "never
        # retrieve" was priced 3.35; or the cost columns said the first was the dearer one
        ("id,multi_step_correct,no_retrieval_correct\na,1,0\n",
         ["--strategies", "multi_step", "no_retrieval"],
         "--strategies: multi_step is given before no_retrieval, but costs more (3.35 > 0, "
         "built-in costs): list them in cost order, the cheapest first"),
        ("id,x_correct,y_correct,x_cost,y_cost\na,1,1,5,0\nb,0,1,5,0\n",
         ["--strategies", "x", "y"], "x is given before y, but costs more (5 > 0, their mean "
         "cost columns in outcomes.csv)"),
        ("id,cheap_correct,mid_correct\na,1,0\n", ["--strategies", "cheap", "mid", "--unanswered",
         "sometimes"], "--unanswered 'sometimes': expected prior"),
    ],
)  # fmt: skip
def test_bad_strategy_outcomes(tmp_path, capsys, content, flags, message):
    assert _generic(tmp_path, content, *flags) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "labels").exists()  # nothing written


def test_several_files_refuse_out_and_questions(tmp_path, capsys):
    root = write_release(tmp_path / "rel")
    assert _label("--outcomes", str(root), "--out", str(tmp_path / "x.jsonl")) == 2
    assert "write three files" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    qs = tmp_path / "qs.jsonl"
    qs.write_text(json.dumps(QS[0]) + "\n")
    code = _label("--outcomes", str(root), "--questions", str(qs), "--labels-dir", str(tmp_path))
    assert code == 2 and "carries its own questions" in capsys.readouterr().err
    code = _label(
        "--outcomes", str(root), "--strategies", "no", "one", "--labels-dir", str(tmp_path)
    )
    assert code == 2 and "a release folder has the strategies" in capsys.readouterr().err
    assert main(["label", "--policy", "closed-book", "--strategies", "a", "b"]) == 2
    assert "go with --policy outcomes" in capsys.readouterr().err


# ------------------------------------------------------------------ label --policy strategies


class _FakeServer:
    """An OpenAI-compatible chat server in a thread, standing in for `vllm serve`: it answers
    a multi-step prompt's first step with a sentence and every other prompt with "So the
    answer is: Paris". `die_after`: after that many completions it drops every connection
    (a dead server) until `revive()`. Records the question of every completion it served."""

    def __init__(self, die_after: int | None = None):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # /v1/models
                self._send({"data": [{"id": "fake-llm"}]})

            def do_POST(self):  # /v1/chat/completions
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"]
                with server.lock:
                    server.count += 1
                    dead = server.die_after is not None and server.count > server.die_after
                if dead:
                    self.close_connection = True  # no response at all: the client sees a drop
                    return
                question = prompt.split("\nQ: ")[-1].split("\nA:")[0].split("Question: ")[-1]
                server.served.append(question.split("\n")[0])
                first_step = "\nQ: " in prompt and prompt.endswith("\nA:")
                text = "Paris is in France." if first_step else "So the answer is: Paris"
                self._send({"choices": [{"message": {"content": text}}],
                            "usage": {"prompt_tokens": len(prompt.split()),
                                      "completion_tokens": len(text.split())}})  # fmt: skip

            def _send(self, payload):
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.die_after, self.count, self.served = die_after, 0, []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def revive(self):
        self.die_after, self.served = None, []

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_strategies_a_dying_server_fails_its_questions_and_a_rerun_redoes_only_those(
    tmp_path, capsys, monkeypatch
):
    import retrieval_gate.generation.remote as remote

    monkeypatch.setattr(remote, "RETRY_PAUSE", 0.01)  # the client's retries, without waiting
    questions = tmp_path / "q.jsonl"
    texts = ["What is the capital of France?", "Which city is on the Seine?",
             "Where is the Louvre?", "Which city hosted the 1900 Olympics?"]  # fmt: skip
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": t, "answers": ["Paris"]})
                                 + "\n" for i, t in enumerate(texts)))  # fmt: skip
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": "Paris", "text": t}) + "\n"
                              for i, t in enumerate(["Paris is the capital of France.",
                                                     "The Seine flows through Paris."])))  # fmt: skip
    # chunk 1 (2 questions x 3 strategies) takes 6 completions and 2 second steps: the 8th
    # completion finds the server dead, as does everything of chunk 2
    server = _FakeServer(die_after=7)
    args = ["label", "--policy", "strategies", "--questions", str(questions), "--generator-url",
            server.url, "--retriever", "bm25", "--corpus", str(corpus), "--k", "1",
            "--labels-dir", str(tmp_path / "labels"), "--chunk-size", "2", "--max-steps", "2",
            "--unanswered", "exclude"]  # fmt: skip
    try:
        assert main(args) == 3
        err = capsys.readouterr().err
        assert "3 of 4 questions were not labelled because the generator failed" in err
        path = tmp_path / "labels" / "fake-llm" / "strategies.jsonl"
        (kept,) = [json.loads(line) for line in path.read_text().splitlines()]
        server.revive()
        assert main(args) == 0
    finally:
        server.close()
    assert kept["id"] not in {q.split("\n")[0] for q in server.served}
    assert sorted(set(server.served)) == sorted(t for i, t in enumerate(texts)
                                               if f"q{i}" != kept["id"])  # only the missing  # fmt: skip
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == ["q0", "q1", "q2", "q3"]  # none lost, none twice
    labels = read_strategy_labels(path)
    assert labels.strategies == tuple(S3) and labels.meta["source"] == "generator"
    for row in rows:
        assert row["correct"] == dict.fromkeys(S3, True) and row["cheapest"] == "no_retrieval"
        assert row["cost"] == {"no_retrieval": 0.0, "one_retrieval": 1.0, "multi_step": 2.0}
        assert row["llm_calls"] == {"no_retrieval": 1, "one_retrieval": 1, "multi_step": 2}
    assert labels.meta["multi_step"] == {"max_steps": 2, "max_docs": 1, "step_k": 1}


def test_strategies_resume_takes_the_corpus_by_its_checksum_not_its_path(
    tmp_path, capsys, monkeypatch
):
    """The same corpus named by a relative path, then an absolute one (or a byte-identical
    copy) resumes, as rag-gain's does; a corpus with other documents is refused."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": t, "answers": ["Paris"]})
                                 + "\n" for i, t in enumerate(["Capital of France?",
                                                               "City on the Seine?"])))  # fmt: skip
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d0", "title": "Paris", "text": "Paris is in France."})
                      + "\n")  # fmt: skip
    copy = tmp_path / "copy" / "docs.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(corpus.read_bytes())
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "d0", "title": "Lyon", "text": "Lyon is in France."})
                     + "\n")  # fmt: skip
    server = _FakeServer()
    path = tmp_path / "labels" / "fake-llm" / "strategies.jsonl"

    def run(corpus_arg: str) -> int:
        return main(["label", "--policy", "strategies", "--questions", str(questions),
                     "--generator-url", server.url, "--retriever", "bm25", "--corpus",
                     corpus_arg, "--k", "1", "--max-steps", "2", "--labels-dir",
                     str(tmp_path / "labels")])  # fmt: skip

    def interrupted() -> None:  # as if killed after the first row
        path.write_text(path.read_text().splitlines(keepends=True)[0])

    try:
        monkeypatch.chdir(tmp_path)
        assert run("corpus.jsonl") == 0
        for again in (str(corpus), str(copy)):
            interrupted()
            assert run(again) == 0, capsys.readouterr().err
            assert sorted(json.loads(line)["id"] for line in path.read_text().splitlines()) == [
                "q0", "q1"]  # fmt: skip
        assert read_strategy_labels(path).meta["corpus"] == str(copy)  # the path, recorded
        interrupted()
        assert run(str(other)) == 2
        assert "this label file was made with corpus_sha256=" in capsys.readouterr().err
    finally:
        server.close()


def test_strategies_refuse_a_users_failed_questions_file_before_the_generator(tmp_path, capsys):
    """The strategies loop lists failed questions in `strategies.failed.jsonl` beside its
    label file: a user's file of that name is refused by name before the corpus is read and
    the generator built (it was checked only when the loop began: a local engine had started
    for nothing; here the damaged corpus was said instead)."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q0", "question": "Capital of France?",
                                     "answers": ["Paris"]}) + "\n")  # fmt: skip
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "d0", "text": \n')  # read after the refusal, if ever
    mine = tmp_path / "labels" / "fake-llm" / "strategies.failed.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text("my notes\n")
    server = _FakeServer()
    try:
        code = main(["label", "--policy", "strategies", "--questions", str(questions),
                     "--generator-url", server.url, "--retriever", "bm25", "--corpus",
                     str(corpus), "--labels-dir", str(tmp_path / "labels")])  # fmt: skip
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 2 and server.count == 0
    assert "strategies.failed.jsonl" in err and "corpus" not in err, err
    assert mine.read_text() == "my notes\n"


def test_strategies_label_real_vllm_resume_and_refusals(vllm_generator, tmp_path):
    from retrieval_gate.labelling.loop_labelling import StrategyLabelling, label_strategies
    from retrieval_gate.rag.multistep import MultiStepConfig
    from retrieval_gate.rag.sample import select_questions
    from retrieval_gate.retrieval import ContextRetriever

    qs = select_questions(["retrievalqa"], "test", limit=3, seed=5, with_contexts=True)
    out = tmp_path / "smollm2" / "strategies.jsonl"

    def request(**kw):
        base = dict(questions=qs, out=out, generator=vllm_generator.name, retriever="contexts",
                    k=1, max_new_tokens=8, multi_step=MultiStepConfig(max_steps=2),
                    unanswered="no_retrieval", chunk_size=2)  # fmt: skip
        return StrategyLabelling(**{**base, **kw})

    result = label_strategies(request(), vllm_generator, ContextRetriever())
    assert result["rows"] == 3 and result["failed"] == 0
    labels = read_strategy_labels(out)
    assert labels.meta["generator_checksum"] == vllm_generator.checksum
    assert labels.meta["prompt_ids"]["multi_step"] == "ircot-multi-step-v2"
    for row in labels.rows.values():
        assert set(row["prediction"]) == set(S3) and 1 <= row["llm_calls"]["multi_step"] <= 2
        truth = [row["correct"][s] for s in S3]
        assert row["cheapest"] == (S3[truth.index(True)] if any(truth) else None)
        assert row["label"] == int(not row["correct"]["no_retrieval"])

    def no_engine():
        raise AssertionError("a finished file must not start an engine")

    again = label_strategies(request(), no_engine, ContextRetriever())
    assert again["questions"] == 0 and again["rows"] == 3
    for changed in (dict(strategies=S3[:2]), dict(retriever="bm25"), dict(k=2),
                    dict(multi_step=MultiStepConfig(max_steps=3)), dict(generator="other-llm")):  # fmt: skip
        with pytest.raises(DataError, match="resuming would mix rows"):
            label_strategies(request(**changed), no_engine, ContextRetriever())
    edited = [dataclasses.replace(qs[0], text=qs[0].text + " (edited)"), *qs[1:]]
    with pytest.raises(DataError, match="1 question labelled here now read otherwise"):
        label_strategies(request(questions=edited), no_engine, ContextRetriever())


def test_a_release_of_several_llms_names_the_flag_and_reads_the_llm_as_users_spell_it(
    tmp_path, capsys
):
    root = write_release(tmp_path / "rel", llm="flan_t5_xl")
    write_release(root, llm="gpt3")
    assert _label("--outcomes", str(root), "--labels-dir", str(tmp_path / "labels")) == 2
    assert "2 LLMs here (flan_t5_xl, gpt3); name one with --generator NAME" in (
        capsys.readouterr().err
    )
    flags = ("--outcomes", str(root), "--labels-dir", str(tmp_path / "labels"))
    assert _label(*flags, "--generator", "Flan-T5-XL") == 0  # the folders' flan_t5_xl
    assert (tmp_path / "labels" / "flan_t5_xl" / "strategies.jsonl").is_file()
    assert _label(*flags, "--generator", "flan-t5") == 2
    assert "no LLM 'flan-t5' here; available: flan_t5_xl, gpt3" in capsys.readouterr().err
    write_release(root, split="test_500", llm="gpt3")
    (root / "predictions" / "dev_500").rename(root / "predictions" / "dev_100")
    assert _label(*flags, "--generator", "gpt3") == 2
    assert "2 splits here (dev_100, test_500); name one by passing its folder, " in (
        capsys.readouterr().err
    )


def test_a_router_reads_the_questions_of_the_release_its_labels_come_from(tmp_path, monkeypatch):
    """Labels of another release (another LLM's, another split's: other question ids), as its
    folder or imported from it: training read the bundled release's questions and stopped with
    "none of the label ids is a known question id: set $RETRIEVAL_GATE_ADAPTIVE_RAG"."""
    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.training.config import DataConfig
    from retrieval_gate.training.sources import config_questions, labelled_questions

    monkeypatch.delenv("RETRIEVAL_GATE_ADAPTIVE_RAG", raising=False)
    root = write_release(tmp_path / "rel", split="test", llm="qwen_2_5_72b")
    assert _label("--outcomes", str(root), "--labels-dir", str(tmp_path / "labels")) == 0
    label_file = tmp_path / "labels" / "qwen_2_5_72b" / "strategies.jsonl"
    ids = set(read_strategy_labels(label_file).rows)
    for source in (label_file, root):
        data = DataConfig(label_file=str(source), task="strategies", datasets=("adaptive-rag",))
        questions = config_questions(data)
        assert {q.id for q in questions} == ids and all(q.split for q in questions)
        _, rows, _ = labelled_questions(data)
        assert sum(len(r) for r in rows.values()) == len(ids)
        # evaluate and tune split them alike
        evalsets = load_splits(source)
        assert {q.id: q.split for q in questions} == {
            q.id: s for s in ("train", "dev", "test") for q in getattr(evalsets, s).questions
        }
    # a gate on every bundled dataset (data.datasets unset) reads them as before
    bundled = config_questions(DataConfig(label_file=str(label_file)))
    assert len(bundled) > len(ids) and not {q.id for q in bundled} & ids
    # $RETRIEVAL_GATE_ADAPTIVE_RAG naming another release than the labels' is refused, naming
    # both (train split its questions where evaluate split the labels' release)
    monkeypatch.setenv(
        "RETRIEVAL_GATE_ADAPTIVE_RAG", str(resolve_data_dir() / "adaptive-rag-llama8b")
    )
    data = DataConfig(label_file=str(label_file), task="strategies", datasets=("adaptive-rag",))
    with pytest.raises(DataError, match=r"\$RETRIEVAL_GATE_ADAPTIVE_RAG names the Adaptive-RAG "
                                        r"release .* but these labels come from"):  # fmt: skip
        labelled_questions(data)
    # the release changed since the import: its rows may be other questions now
    monkeypatch.delenv("RETRIEVAL_GATE_ADAPTIVE_RAG")
    gold = next(root.glob("predictions/test/nor_qa_*_nq____*/ground_truth__*.json"))
    gold.write_text(gold.read_text().replace("Shakespeare", "Marlowe"))
    with pytest.raises(DataError, match="changed since these labels were imported"):
        config_questions(data)


def test_an_import_into_a_folder_another_import_writes_is_refused_and_writes_nothing(
    tmp_path, capsys
):
    # each writes its three files whole one by one: two at once could leave one import's
    # closed-book.jsonl beside the other's strategies.jsonl
    import os

    from retrieval_gate.labels.outcomes import import_lock

    content = "id,cheap_correct,dear_correct\na,1,1\nb,0,1\nc,0,0\n"
    folder = tmp_path / "labels" / "my-llm"
    with import_lock(folder):  # the other import writes
        assert _generic(tmp_path, content, "--strategies", "cheap", "dear") == 2
    said = capsys.readouterr().err
    assert f"another outcomes import (pid {os.getpid()}) is writing these labels now" in said
    assert not folder.exists()  # nothing of this one's
    assert _generic(tmp_path, content, "--strategies", "cheap", "dear") == 0  # free again
    assert {p.name for p in folder.iterdir()} >= {"closed-book.jsonl", "strategies.jsonl"}


@pytest.mark.slow  # evaluate twice and tune: about 6 s
def test_baseline_routers_fit_on_your_own_strategy_names(tmp_path, capsys):
    """router-tfidf / router-prior refused strategies named s0 s1 s2: "has no default cost:
    give each strategy's cost (model.costs / --costs ...)", a flag no verb has, though
    --strategies FILE priced them (and the labels carried per-question costs)."""
    import random

    examples = Path(__file__).resolve().parents[1] / "examples" / "your-data"
    questions = str(examples / "questions.csv")
    ids = [line.split(",")[0] for line in (examples / "questions.csv").read_text().splitlines()[1:]]
    rng = random.Random(0)
    rows = ["id,s0_correct,s1_correct,s2_correct,s0_cost,s1_cost,s2_cost"]
    rows += [f"{i},{rng.random() < 0.4},{rng.random() < 0.6},{rng.random() < 0.7},0.05,1.0,3.4"
             for i in ids]  # fmt: skip
    outcomes = _csv(tmp_path / "st.csv", "\n".join(rows) + "\n")
    assert _label("--outcomes", str(outcomes), "--questions", questions, "--strategies", "s0",
                  "s1", "s2", "--generator", "b", "--labels-dir", str(tmp_path / "L")) == 0  # fmt: skip
    spec = tmp_path / "basic.yaml"
    spec.write_text("strategies:\n  - {name: s0, cost: 0.0}\n  - {name: s1, cost: 1.0, retriever: default}\n"
                    "  - {name: s2, cost: 3.0, retriever: default, steps: multi}\n")  # fmt: skip
    labels = str(tmp_path / "L" / "b" / "strategies.jsonl")
    for extra in ([], ["--strategies", str(spec)]):
        capsys.readouterr()
        assert main(["evaluate", "--labels", labels, "--questions", questions, "--gates",
                     "router-tfidf", "router-prior", "--no-cost", "--out",
                     str(tmp_path / f"rep{len(extra)}"), *extra]) == 0, capsys.readouterr().err  # fmt: skip
        report = json.loads((tmp_path / f"rep{len(extra)}" / "results.json").read_text())
        costs = next(iter(report["policies"].values()))["routing"]["costs"]
        assert costs == ([0.0, 1.0, 3.0] if extra else pytest.approx([0.05, 1.0, 3.4])), costs
    assert main(["tune", "--gate", "router-prior", "--labels", labels, "--questions", questions,
                 "--strategies", str(spec), "--objective", "budget-accuracy", "--budget", "1",
                 "--out", str(tmp_path / "tune")]) == 0, capsys.readouterr().err  # fmt: skip
