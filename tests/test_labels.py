"""Label policies on small inputs: scoring criteria, sampling, resumable chunked runs, RRCP
arithmetic by hand, every policy end to end (generator policies on the real vLLM engine)."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest

from retrieval_gate.cli import main
from retrieval_gate.data import load_dataset
from retrieval_gate.errors import DataError
from retrieval_gate.labels.closed_book import closed_book_rows, label_closed_book
from retrieval_gate.labels.label_figures import report
from retrieval_gate.labels.label_files import LabelFile, read_meta
from retrieval_gate.labels.policies import LabelRequest, label, label_path, relabel
from retrieval_gate.labels.policy_loop import run_chunked
from retrieval_gate.labels.rag_gain import effect, gain_label
from retrieval_gate.labels.retrievalqa_style import style_row
from retrieval_gate.labels.rrcp import (
    completeness,
    normalised_entropy,
    overlap_score,
    rrcp_decision,
    rrcp_label3,
)
from retrieval_gate.labels.scoring import correct, frequent_answers, judge
from retrieval_gate.labels.selection import sample_by_relation
from retrieval_gate.labels.simple import popularity_rows, retrievalqa_rows
from retrieval_gate.questions import Question, is_idk
from retrieval_gate.retrieval import ContextRetriever


def q(i, text="Q?", answers=("Paris",), source="popqa", relation=None, **kw):
    return Question(f"q{i}", text, tuple(answers), source, relation=relation, **kw)


# ------------------------------------------------------------------ scoring and criteria


def test_judge_and_criteria():
    sport = [q(i, answers=("football",), relation="sport") for i in range(8)]
    sport += [q(8, answers=("curling",), relation="sport")]
    freq = frequent_answers(sport)
    assert freq[("popqa", "sport")] == {"football"}  # curling: 1 of 9 < FREQUENT_MIN
    r = judge("He plays football.", sport[0], freq)
    assert r["match"] and not r["em"] and r["guess"] and 0 < r["f1"] < 1
    assert correct(r, "loose") and not correct(r, "loose-no-guess") and not correct(r, "em")
    r = judge("curling", sport[8], freq)
    assert r["em"] and not r["guess"] and correct(r, "loose-no-guess") and r["f1"] == 1.0
    assert is_idk("I don't know.") and is_idk("") and not is_idk("Paris")
    with pytest.raises(ValueError, match="criterion"):
        correct(r, "bleu")


@pytest.mark.parametrize("answer", ["I don\u2019t know.", "I\u2019m sorry, I can't help.",
                                    "Unknown.", "The author is unknown."])  # fmt: skip
def test_declines_with_typographic_apostrophes_or_unknown_are_idk(answer):
    assert is_idk(answer)  # instruct models often write U+2019


@pytest.mark.parametrize("answer", ["Unknown Pleasures", "The Unknown Soldier"])
def test_unknown_inside_a_real_answer_is_no_decline(answer):
    assert not is_idk(answer)


def test_sample_by_relation_is_even_seeded_and_exact():
    qs = [q(f"{r}{i}", relation=r) for r, n in (("a", 50), ("b", 5), ("c", 50)) for i in range(n)]
    s = sample_by_relation(qs, 40, seed=1)
    rel = [x.relation for x in s]
    assert len(s) == 40 and rel.count("b") == 5 and {rel.count("a"), rel.count("c")} <= {17, 18}
    assert [x.id for x in s] == [x.id for x in sample_by_relation(qs, 40, seed=1)]
    assert [x.id for x in s] != [x.id for x in sample_by_relation(qs, 40, seed=2)]


# ------------------------------------------------------------------ resumable runs


def test_interrupted_run_resumes_without_losing_or_redoing(tmp_path):
    qs = [q(i) for i in range(10)]
    seen: list[str] = []

    def compute(chunk):
        if len(seen) >= 6:
            raise KeyboardInterrupt  # the run dies while the third chunk is in flight
        seen.extend(x.id for x in chunk)
        return [{"id": x.id, "label": 1} for x in chunk]

    out = LabelFile(tmp_path / "l.jsonl")
    out.write_meta({"policy": "closed-book"})  # labellers write provenance before any row
    with pytest.raises(KeyboardInterrupt):
        run_chunked(qs, out, compute, chunk_size=3)
    # a half-written line, as a kill in the middle of a write leaves it
    with open(out.path, "a") as f:
        f.write('{"id": "q6", "lab')
    resumed = LabelFile(out.path)
    assert sorted(resumed.done_ids()) == [f"q{i}" for i in range(6)]
    seen.clear()
    stats = run_chunked(qs, resumed, lambda c: [{"id": x.id, "label": 0} for x in c], 3)
    assert stats["questions"] == 4
    assert LabelFile(out.path).labels() == {f"q{i}": int(i < 6) for i in range(10)}


def test_a_resume_over_questions_that_changed_under_their_ids_is_refused(tmp_path):
    """Rows are keyed by id: a questions file edited under the same ids (or another numbering
    its rows 1, 2, ...) was "resumed", its changed questions keeping the old ones' labels."""
    from retrieval_gate.labels.label_files import question_sha

    first = [q(1, "What is the capital of France?"), q(2, "Who wrote Hamlet?")]
    out = LabelFile(tmp_path / "cb.jsonl")
    out.write_meta({"policy": "closed-book"})
    out.resume_over(first)
    out.append([{"id": "q1", "label": 0}, {"id": "q2", "label": 1}])
    rows = LabelFile(out.path).rows
    assert rows["q1"]["question_sha"] == question_sha(first[0]) != question_sha(first[1])
    LabelFile(out.path).resume_over([*first, q(3)])  # the same questions, and one more: fine
    edited = [first[0], q(2, "Who wrote Macbeth?")]
    req = LabelRequest("closed-book", ["popqa"], questions=edited, out=out.path)
    with pytest.raises(DataError, match=r"1 question labelled here now read otherwise .*'q2'"):
        label(req, generator=object())  # refused before any generator is asked
    moved = [first[0], q(2, "Who wrote Hamlet?", answers=("Shakespeare",))]  # its gold answers
    with pytest.raises(DataError, match="its text or gold answers changed"):
        LabelFile(out.path).resume_over(moved)
    (tmp_path / "old.jsonl").write_text('{"id": "q2", "label": 1}\n')  # rows made before
    LabelFile(tmp_path / "old.jsonl").resume_over(edited)  # the hash: nothing to check


def test_labels_made_for_other_questions_under_the_same_ids_are_refused(tmp_path):
    """train, evaluate and tune join label rows to questions by id: rows a labelling run made
    for an earlier version of a questions file were read as the edited questions' labels."""
    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.training.config import DataConfig
    from retrieval_gate.training.sources import labelled_questions

    made = [q(i, f"Question number {i}?", split=("train", "dev", "test")[i % 3])
            for i in range(12)]  # fmt: skip
    out = LabelFile(tmp_path / "cb.jsonl")
    out.write_meta({"policy": "closed-book"})
    out.resume_over(made)
    out.append([{"id": x.id, "label": i % 2} for i, x in enumerate(made)])
    assert len(load_splits(out.path, None, made).test.questions) == 4  # the same questions
    edited = [*made[:5], dataclasses.replace(made[5], text="Another question?"), *made[6:]]
    with pytest.raises(DataError, match=r"1 row here was labelled for other questions .*'q5'"):
        load_splits(out.path, None, edited)
    with pytest.raises(DataError, match="labelled for other questions"):
        labelled_questions(DataConfig(label_file=str(out.path)), edited)
    # a questions file without the gold answers (new.csv, or answers' log-probabilities only)
    # is compared by the text alone: the same questions read, an edited one does not
    bare = [dataclasses.replace(x, answers=()) for x in made]
    assert len(load_splits(out.path, None, bare).test.questions) == 4
    with pytest.raises(DataError, match=r"1 row here was labelled for other questions .*'q5'"):
        load_splits(out.path, None, [dataclasses.replace(x, answers=()) for x in edited])
    with pytest.raises(DataError, match=r"other questions .*'q5'"):  # other answers: refused
        load_splits(out.path, None, [*made[:5], dataclasses.replace(made[5], answers=("x",)),
                                     *made[6:]])  # fmt: skip


def test_an_id_labelled_twice_otherwise_is_refused_naming_both_lines(tmp_path):
    """Two label runs joined with `cat` can hold one question twice: the same label twice is
    read (the last row), another label (or strategy target) is refused, naming both lines;
    the last row used to win silently."""
    from retrieval_gate.labels.label_files import read_label_file

    path = tmp_path / "joined.jsonl"
    rows = [{"id": "q1", "label": 1, "prediction": "a"}, {"id": "q2", "label": 0},
            {"id": 1, "label": 0}, {"id": "q1", "label": 1, "prediction": "b"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_label_file(path).rows["q1"]["prediction"] == "b"
    for second, field in [
        ({"id": "1", "label": 1}, "label"),
        ({"id": "q2", "label": 0, "target": "one_retrieval"}, "target"),
    ]:
        path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, second]))
        with pytest.raises(DataError, match=rf"line 5: id '\w+' is here twice, on lines \d and "
                                            rf"5, with another {field} "):  # fmt: skip
            read_label_file(path)


# ------------------------------------------------------------------ RRCP arithmetic


def test_normalised_entropy_by_hand():
    assert normalised_entropy(np.array([1.0, 1.0])) == pytest.approx(1.0)
    assert normalised_entropy(np.array([1.0, 0.0])) == 0.0
    assert normalised_entropy(np.array([0.0, 0.0])) == 0.0
    # p = (.25, .25, .5): H = -(2 * .25 ln .25 + .5 ln .5) = 1.0397; / ln 3 = 0.9464
    h = -(2 * 0.25 * math.log(0.25) + 0.5 * math.log(0.5)) / math.log(3)
    assert normalised_entropy(np.array([1.0, 1.0, 2.0])) == pytest.approx(h)
    assert h == pytest.approx(0.9464, abs=1e-4)


def test_completeness_averages_documents_by_hand():
    question = np.eye(3)  # three orthogonal unit token embeddings
    covers_all = np.eye(3)  # relevance (1, 1, 1): entropy 1
    covers_one = np.array([[1.0, 0.0, 0.0]])  # relevance (1, 0, 0): entropy 0
    assert completeness(question, [covers_all]) == pytest.approx(1.0)
    assert completeness(question, [covers_all, covers_one]) == pytest.approx(0.5)
    assert completeness(question, []) == 0.0


def test_answerability_completeness_complex_by_hand():
    d = rrcp_decision([0.10, 0.14], s_d=0.85)  # no document reaches T_ans = 0.15
    assert (d["ans"], d["com"], d["complex"], d["max_s"]) == (False, True, True, 0.14)
    d = rrcp_decision([0.02, 0.15], s_d=0.85)  # T_ans is inclusive
    assert (d["ans"], d["complex"]) == (True, False)
    d = rrcp_decision([0.0], s_d=0.79)  # incomplete: not complex, just unanswerable
    assert (d["ans"], d["com"], d["complex"]) == (False, False, False)
    d = rrcp_decision([0.1], s_d=0.5, t_ans=0.05, t_com=0.4)
    assert (d["ans"], d["com"]) == (True, True)
    assert [rrcp_label3(True, False, False), rrcp_label3(False, True, False)] == [0, 1]
    assert [rrcp_label3(False, False, True), rrcp_label3(False, False, False)] == [2, None]


def test_overlap_score_by_hand():
    assert overlap_score("The capital is Paris.", ["paris"]) == 1.0
    assert overlap_score("John was born here", ["John Smith"]) == pytest.approx(0.25)
    assert overlap_score("nothing relevant", ["Paris", ""]) == 0.0


# ------------------------------------------------------------------ generator-free policies


def test_retrievalqa_and_popularity_policies():
    rq = load_dataset("retrievalqa")
    rows = retrievalqa_rows(rq)
    assert len(rows) == 250 and {r["label"] for r in rows} == {1}  # the 250 all need it
    full = q(1, source="retrievalqa", extra={"param_knowledge_answerable": 1})
    assert retrievalqa_rows([full])[0]["label"] == 0
    pop = popularity_rows([q(1, s_pop=99), q(2, s_pop=100), q(3), q(4, source="triviaqa")])
    assert [(r["id"], r["label"]) for r in pop] == [("q1", 1), ("q2", 0)]


def test_retrievalqa_style_rules():
    right = {"match": True, "guess": False, "em": True, "f1": 1.0}
    wrong = {"match": False, "guess": False, "em": False, "f1": 0.0}
    crit = "loose-no-guess"
    assert style_row(q(1, source="toolqa"), None, crit)["label"] == 1
    fresh = q(2, source="freshqa", fact_type="fast-changing")
    assert style_row(fresh, right, crit)["reason"] == "new-world"
    assert style_row(q(3, s_pop=50), wrong, crit) == {
        "id": "q3",
        "label": 1,
        "reason": "long-tail-failed",
    }
    assert style_row(q(4, s_pop=5000), right, crit)["label"] == 0
    assert style_row(q(5, s_pop=5000), wrong, crit)["label"] is None
    assert style_row(q(6, source="triviaqa"), None, crit)["label"] is None


def test_rag_gain_effects():
    assert [effect(False, True), effect(True, False), effect(True, True)] == [
        "helps",
        "hurts",
        "both",
    ]
    assert gain_label("neither") is None and gain_label("neither", 1) == 1
    assert [gain_label("helps"), gain_label("hurts"), gain_label("both")] == [1, 0, 0]


# ------------------------------------------------------------------ on the real engine


@pytest.fixture(scope="module")
def popqa_docs():
    return [x for x in load_dataset("popqa") if x.contexts][:2]


def test_closed_book_rows_on_vllm(vllm_generator, tmp_path):
    qs = [
        q(1, "What is the capital of France?"),
        q(2, "Who wrote Romeo and Juliet?", ("William Shakespeare",)),
    ]
    out = LabelFile(tmp_path / "cb.jsonl")
    stats = label_closed_book(vllm_generator, qs, out, chunk_size=1)
    rows = LabelFile(out.path).rows
    assert stats["questions"] == 2 and set(rows) == {"q1", "q2"}
    r = rows["q1"]
    assert set(r) >= {"id", "label", "prediction", "match", "em", "f1", "idk", "guess"}
    assert r["match"] and r["label"] == 0 and r["mean_logprob"] < 0
    meta = out.meta
    assert meta["generator_checksum"] == vllm_generator.checksum
    assert meta["prompt_id"] == "retrievalqa-closed-book-v1" and meta["rows"] == 2
    assert "What is" not in out.path.read_text()  # keyed by id, no question text
    assert label_closed_book(vllm_generator, qs, out)["questions"] == 0  # resumed: nothing left


def test_every_generator_policy_through_label(vllm_generator, popqa_docs, tmp_path):
    req = dict(datasets=["popqa"], limit=2, labels_dir=tmp_path, chunk_size=2)
    cb = label(LabelRequest("closed-book", **req), generator=vllm_generator)
    assert cb["rows"] == 2
    ctx = ContextRetriever()
    rg = label(LabelRequest("rag-gain", **req), vllm_generator, ctx)
    rows = LabelFile(rg["path"]).rows
    assert set(rows) == {x.id for x in popqa_docs}  # --limit counts questions with documents
    for r in rows.values():
        assert r["effect"] == effect(r["closed_correct"], r["rag_correct"])
        assert r["label"] == gain_label(r["effect"])
        assert 1 <= len(r["doc_ids"]) <= 5
    rr = label(LabelRequest("rrcp", **req), vllm_generator, ctx)
    for r in LabelFile(rr["path"]).rows.values():
        assert 0 <= r["s_d"] <= 1 and 0 <= r["max_s_llm"] <= 1
        assert r["complex"] == ((not r["ans"]) and r["com"])
        assert r["label"] == (None if r["label3"] is None else int(r["label3"] > 0))
    st = label(LabelRequest("retrievalqa-style", **req))
    assert st["rows"] == 2
    for policy in ("retrievalqa", "popularity"):
        label(LabelRequest(policy, datasets=["popqa", "retrievalqa"], labels_dir=tmp_path))
    # relabelling from stored measures: same criterion changes nothing; loose = not match
    for policy in ("closed-book", "rag-gain", "rrcp"):
        assert relabel(policy, "loose-no-guess", labels_dir=tmp_path)["labels_changed"] == 0
    relabel("closed-book", "loose", labels_dir=tmp_path)
    cb_rows = LabelFile(cb["path"]).rows.values()
    assert all(r["label"] == int(not r["match"]) for r in cb_rows)
    relabel("rag-gain", "em", labels_dir=tmp_path, neither_label=1)
    for r in LabelFile(rg["path"]).rows.values():
        assert r["rag_correct"] == r["rag_em"] and r["label"] is not None
    text = report(labels_dir=tmp_path)
    assert "closed-book accuracy" in text and "with retrieval" in text and "popularity" in text


def test_cli_generator_free_policy_and_errors(tmp_path, capsys):
    out = tmp_path / "pop.jsonl"
    assert main(["label", "--policy", "popularity", "--dataset", "popqa", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 3818
    assert (tmp_path / "pop.meta.json").is_file()
    assert main(["label"]) == 2
    assert "--policy" in capsys.readouterr().err
    assert label_path("rrcp", "/x/SmolLM2-135M-Instruct").parts[-2] == "smollm2-135m-instruct"


def test_closed_book_rows_are_one_generator_call(vllm_generator):
    calls = []
    real = vllm_generator.generate

    def counting(prompts, *a, **kw):
        calls.append(len(prompts))
        return real(prompts, *a, **kw)

    vllm_generator.generate = counting
    try:
        rows = closed_book_rows(vllm_generator, [q(i, f"What is {i} + 1?") for i in range(3)], {})
    finally:
        del vllm_generator.generate
    assert calls == [3] and len(rows) == 3


def test_a_label_row_naming_a_key_twice_is_refused_not_read_as_its_last(tmp_path):
    """json.loads keeps the last of two keys: this row read as label 0."""
    path = tmp_path / "l.jsonl"
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": 1, "label": 0}\n')
    with pytest.raises(DataError, match=r"l.jsonl, line 2: key 'label' is given twice"):
        LabelFile(path)
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": 1, "label": 0}')
    with pytest.raises(DataError, match=r"line 2: key 'label' is given twice"):
        LabelFile(path)  # a last row without its newline is whole, not half-written


def test_a_label_row_whose_id_is_no_text_nor_number_is_refused(tmp_path):
    """`{"id": null, ...}` labelled a question "None", `{"id": true, ...}` one "True"."""
    path = tmp_path / "l.jsonl"
    for bad, shown in (("null", "null"), ("true", "true"), ('{"q": 1}', '{"q": 1}')):
        path.write_text(f'{{"id": 3, "label": 1}}\n{{"id": {bad}, "label": 0}}\n')
        with pytest.raises(DataError, match=rf"line 2: the id is {re.escape(shown)}: name"):
            LabelFile(path)
    path.write_text('{"id": 3, "label": 1}\n{"id": "b", "label": 0}\n')
    assert LabelFile(path).labels() == {"3": 1, "b": 0}


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path, caplog):
    path = tmp_path / "l.jsonl"
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "lab\n{"id": "c", "label": 0}\n')
    with pytest.raises(DataError, match=r"l.jsonl, line 2: malformed JSON"):
        LabelFile(path)
    # a whole last row without its newline ("\n".join(rows) writes that) is a row, kept
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": 0}')
    (tmp_path / "l.meta.json").write_text('{"policy": "closed-book"}')  # a label run made it
    lf = LabelFile(path)
    assert lf.labels() == {"a": 1, "b": 0} and path.read_text().count("\n") == 1  # never cut
    lf.append([{"id": "c", "label": 1}])  # ends b's line first
    assert path.read_text().splitlines()[1:] == [
        '{"id": "b", "label": 0}',
        '{"id": "c", "label": 1}',
    ]
    assert LabelFile(path).labels() == {"a": 1, "b": 0, "c": 1}
    # a half-written one is not read (a note says so), and the next append cuts it off
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "lab')
    with caplog.at_level("INFO", logger="retrieval_gate.labels.label_files"):
        LabelFile(path)
        lf = LabelFile(path)  # read again (train reads its file three times): said once
    assert caplog.text.count("line 2 is half-written") == 1, caplog.text
    assert lf.done_ids() == {"a"} and path.read_text().endswith('"lab')
    lf.append([{"id": "b", "label": 1}])
    assert path.read_text() == '{"id": "a", "label": 1}\n{"id": "b", "label": 1}\n'


# ------------------------------------------------------------------ user files and flags


@pytest.mark.parametrize("policy", ["popularity", "retrievalqa", "retrievalqa-style"])
@pytest.mark.parametrize(
    "content", [b"KEY=1", b'{"id": "q1", "label": 1}\n{"id": "q2", "la', b"a,b\n1,2\n"]
)
def test_label_never_changes_a_file_it_did_not_make(tmp_path, capsys, policy, content):
    """Defect 4: a user's file (no .meta.json beside it) is refused, byte for byte intact."""
    f = tmp_path / "f"
    f.write_bytes(content)
    argv = ["label", "--policy", policy, "--dataset", "popqa", "--limit", "3", "--out", str(f)]
    assert main(argv) == 2
    assert f.read_bytes() == content
    err = capsys.readouterr().err
    assert str(f) in err and "Traceback" not in err


def test_label_resume_refuses_other_settings_unless_relabel(tmp_path):
    out = tmp_path / "cb.jsonl"
    out.write_text('{"id": "q1", "label": 1}\n')
    meta = {"policy": "closed-book", "generator": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "criterion": "match"}  # fmt: skip
    (tmp_path / "cb.meta.json").write_text(json.dumps(meta))
    req = LabelRequest("closed-book", ["popqa"], limit=2, criterion="exact", out=out)
    with pytest.raises(DataError, match="criterion='match'.*--relabel"):
        label(req, generator=object())  # refused before any question is generated
    req = LabelRequest("rag-gain", ["popqa"], limit=2, out=out)
    with pytest.raises(DataError, match="policy='closed-book'"):
        label(req, generator=object())
    req = LabelRequest("closed-book", ["popqa"], limit=2, criterion="match", generator="x/Other",
                       out=out)  # fmt: skip
    with pytest.raises(DataError, match="generator"):
        label(req, generator=object())
    assert out.read_text() == '{"id": "q1", "label": 1}\n'
    # another prompt id (known once the labeller starts) is refused before any row is written
    (tmp_path / "cb.meta.json").write_text(json.dumps({**meta, "prompt_id": "a"}))
    with pytest.raises(DataError, match="prompt_id='a'"):
        LabelFile(out).write_meta({**meta, "prompt_id": "b"})


@pytest.mark.parametrize(
    "policy, recorded, options, message",
    [("rag-gain", {"top_k": 5}, {"k": 1}, "top_k=5, not 1"),
     ("rag-gain", {"top_k": 5, "neither_label": None}, {"neither_label": 1},
      "neither_label=None, not 1"),
     ("rag-gain", {"retriever": "bm25"}, {"retriever": "contexts"}, "retriever='bm25'"),
     ("rrcp", {"t_ans": 0.15, "evaluator": "overlap"}, {"t_ans": 0.95}, "t_ans=0.15, not 0.95"),
     ("rrcp", {"t_com": 0.5}, {}, "t_com=0.5, not 0.8"),  # the flag left out: its default
     ("rrcp", {"evaluator": "mean"}, {}, "evaluator='mean', not 'overlap'"),
     ("rag-gain", {"corpus_sha256": None}, {"corpus": "CORPUS"}, "corpus_sha256=None")],
)  # fmt: skip
def test_a_resume_under_other_document_settings_is_refused(tmp_path, policy, recorded, options,
                                                           message):  # fmt: skip
    """Rows made from 5 documents and from 1 (or with another neither label, thresholds,
    evaluator, retriever or corpus) mixed under one sidecar that claimed the last run's."""
    out = tmp_path / f"{policy}.jsonl"
    out.write_text('{"id": "q1", "label": 1}\n')
    meta = {"policy": policy, "generator": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "criterion": "loose-no-guess", **recorded}  # fmt: skip
    (tmp_path / f"{policy}.meta.json").write_text(json.dumps(meta))
    if "corpus" in options:
        corpus = tmp_path / "docs.jsonl"
        corpus.write_text('{"id": "d1", "title": "t", "text": "x"}\n')
        options = {**options, "corpus": corpus}
    req = LabelRequest(policy, ["popqa"], limit=2, out=out, options=options)
    with pytest.raises(DataError, match=re.escape(message)):
        label(req, generator=object(), retriever=object())  # refused before any generation
    assert out.read_text() == '{"id": "q1", "label": 1}\n'


@pytest.mark.parametrize(
    "flags, message",
    [(["--limit", "0"], "--limit"), (["--limit", "-5"], "--limit"),
     (["--chunk-size", "0"], "--chunk-size")],
)  # fmt: skip
def test_label_flags_checked_before_work(tmp_path, capsys, flags, message):
    out = tmp_path / "cb.jsonl"
    assert main(["label", "--policy", "closed-book", "--dataset", "popqa", *flags,
                 "--out", str(out)]) == 2  # fmt: skip
    assert message in capsys.readouterr().err and not out.exists()


def test_label_limit_above_available_is_clamped_with_a_note(tmp_path, capsys):
    out = tmp_path / "pop.jsonl"
    argv = ["label", "--policy", "popularity", "--dataset", "popqa", "--limit", "99999"]
    assert main([*argv, "--out", str(out)]) == 0
    assert "labelling all 3818" in capsys.readouterr().err


def test_label_out_in_an_unwritable_folder_is_a_message(tmp_path, capsys):
    (tmp_path / "file").write_text("")  # a folder that cannot be made (even by root)
    argv = ["label", "--policy", "popularity", "--dataset", "popqa", "--limit", "3"]
    assert main([*argv, "--out", str(tmp_path / "file" / "pop.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "nothing can be written under it" in err and "--out" in err and "Traceback" not in err


def test_a_provenance_file_an_editor_saved_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "cb.meta.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"policy": "closed-book"}).encode())
    assert read_meta(path) == {"policy": "closed-book"}  # was "not valid JSON (damaged)"
    path.write_bytes(b"\xef\xbb\xbf[]")
    with pytest.raises(DataError, match="provenance file must hold a JSON object"):
        read_meta(path)


def test_rows_ending_in_a_lone_carriage_return_are_named_not_taken_as_half_written(tmp_path):
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b'{"id": "a", "label": 1}\r{"id": "b", "label": 0}\r')
    with pytest.raises(DataError, match="cr.jsonl: rows end in a lone carriage return"):
        LabelFile(path)  # was "line 1 is half-written", then "no labelled rows"
    path.write_bytes(b'{"id": "a", "label": 1}\r\n{"id": "b", "label": 0}\r\n')  # Windows: fine
    assert LabelFile(path).labels() == {"a": 1, "b": 0}


class _Weights:
    """A generator stand-in whose weights checksum is given: it answers every prompt alike."""

    name = "my-llm"
    backend = "test"

    def __init__(self, checksum: str) -> None:
        self.checksum = checksum

    def generate(self, prompts, max_new_tokens=24, logprobs=False):  # noqa: ANN001, ANN201
        from retrieval_gate.generation.base import Generation

        return [Generation("Paris", 10, 1, [-0.1] if logprobs else None) for _ in prompts]


def test_a_label_file_is_resumed_by_the_weights_that_began_it_only(tmp_path):
    """A model folder changed in place (fine-tuned, converted again) resumed a closed-book file
    begun with the old weights: half its answers from each, under the new checksum."""
    qs = [Question(f"w{i}", f"What is the capital of place {i}?", ("Paris",), "mine")
          for i in range(4)]  # fmt: skip

    def run(questions: list[Question], checksum: str) -> dict:
        req = LabelRequest("closed-book", generator="my-llm", questions=questions,
                           labels_dir=tmp_path)  # fmt: skip
        return label(req, generator=_Weights(checksum))

    assert run(qs[:2], "a" * 64)["rows"] == 2
    with pytest.raises(DataError, match=r"made with other weights of its generator \(checksum "
                       r"aaaaaaaaaaaa\.\.\., now bbbbbbbbbbbb\.\.\.\): resuming would mix"):  # fmt: skip
        run(qs[:3], "b" * 64)
    assert run(qs[:3], "a" * 64)["rows"] == 3  # the same weights resume
    out = tmp_path / "my-llm" / "closed-book.jsonl"
    for old, new in (("remote:http://h:8000/v1:m", "remote:http://h:9000/v1:m"), (None, "c")):
        meta = read_meta(out.with_suffix(".meta.json"))  # a moved server, a file from before
        out.with_suffix(".meta.json").write_text(json.dumps({**meta, "generator_checksum": old}))
        LabelFile(out).write_meta({**meta, "generator_checksum": new})
