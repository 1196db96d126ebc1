"""Metrics against scikit-learn, bootstrap, the evaluation of gates, transfer splits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    precision_recall_fscore_support,
    recall_score,
    roc_auc_score,
)

from retrieval_gate import metrics as M
from retrieval_gate.evaluation.bootstrap import bootstrap_ci
from retrieval_gate.evaluation.evaluate import evaluate_gate
from retrieval_gate.gates.trivial import always_gate
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.questions import Question

RNG = np.random.default_rng(7)


def small_cases():
    for n in (5, 17, 60):
        y = RNG.integers(0, 2, n)
        y[0], y[1] = 0, 1  # both classes present
        s = np.round(RNG.random(n), 1)  # rounding makes ties, which sklearn handles its way
        yield y, s, s >= 0.5


@pytest.mark.parametrize("case", list(small_cases()))
def test_metrics_match_sklearn(case):
    y, s, d = case
    assert M.accuracy(y, d) == pytest.approx(accuracy_score(y, d))
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(y, d) == pytest.approx((p, r, f))
    assert M.auroc(y, s) == pytest.approx(roc_auc_score(y, s))
    assert M.average_precision(y, s) == pytest.approx(average_precision_score(y, s))
    assert M.retrieval_accuracy(y, d) == pytest.approx(recall_score(y, d))
    prob_true, prob_pred = calibration_curve(y, s, n_bins=10, strategy="uniform")
    pred, true, count = M.reliability(y, s, 10)
    assert pred == pytest.approx(prob_pred) and true == pytest.approx(prob_true)
    assert count.sum() == len(y)
    assert M.ece(y, s) == pytest.approx(np.sum(count * np.abs(prob_true - prob_pred)) / len(y))


def test_degenerate_predictions_match_sklearn():
    y = np.array([0, 1, 1, 0, 1])
    d = np.zeros(5, bool)  # never retrieve: precision of class 1 undefined -> 0
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(y, d) == pytest.approx((p, r, f))


@pytest.mark.parametrize("y, d", [([1, 1, 1], [1, 1, 1]), ([0, 0, 0], [0, 0, 0]),
                                  ([1, 1, 1], [1, 0, 1]), ([0, 0], [1, 1])])  # fmt: skip
def test_one_class_macro_scores_match_sklearn(y, d):
    """A perfect gate on a one-class source read 0.5 (the absent class averaged in)."""
    p, r, f, _ = precision_recall_fscore_support(y, d, average="macro", zero_division=0)
    assert M.macro_prf(np.array(y), np.array(d, bool)) == pytest.approx((p, r, f))


def test_undefined_metrics_are_none():
    y = np.ones(4, int)
    assert M.auroc(y, np.array([0.1, 0.2, 0.3, 0.4])) is None
    assert M.average_precision(np.zeros(3, int), np.array([0.1, 0.5, 0.9])) is None
    assert M.retrieval_accuracy(np.zeros(3, int), np.ones(3, bool)) is None


def test_adaptive_accuracy_routes_answers_and_skips_unknown():
    d = np.array([True, False, True, False])
    closed = np.array([1.0, 1.0, 0.0, np.nan])
    rag = np.array([0.0, 0.0, 1.0, 1.0])
    # q0 retrieves -> rag 0; q1 keeps -> closed 1; q2 retrieves -> 1; q3 lacks an answer -> skipped
    assert M.adaptive_accuracy(d, closed, rag) == pytest.approx(2 / 3)
    # skipped whichever way the gate routes it: every gate is judged on the same questions
    assert M.adaptive_accuracy(~d, closed, rag) == pytest.approx(1 / 3)
    assert M.adaptive_accuracy(d, np.full(4, np.nan), rag) is None


def test_bootstrap_ci_brackets_the_mean():
    x = RNG.random(200)
    lo, hi = bootstrap_ci(lambda i: float(x[i].mean()), len(x), 500)
    assert lo < x.mean() < hi and hi - lo < 0.2


def _evalset(n: int = 40) -> EvalSet:
    qs = tuple(
        Question(id=f"q{i}", text=f"question {i}?", answers=("a",), source="ab"[i % 2])
        for i in range(n)
    )
    y = np.array([i % 3 == 0 for i in range(n)], int)
    return EvalSet(qs, y, np.full(n, 1.0), np.zeros(n))


def test_evaluate_gate_reports_per_source_and_undefined_auroc():
    result = evaluate_gate(always_gate(), _evalset(), n_resamples=50)
    assert result.metrics["retrieval_rate"] == 1.0
    assert result.metrics["adaptive_accuracy"] == 0.0  # retrieval always wrong here
    assert set(result.per_source) == {"a", "b"}
    assert result.metrics["auroc"] == pytest.approx(0.5)  # constant scores: chance


# ---------------------------------------------------------------- transfer

from retrieval_gate.evaluation.transfer import loso, sources_of, transfer_cells  # noqa: E402
from retrieval_gate.labels.evalset import Splits  # noqa: E402

SOURCES = ("popqa", "entityquestions", "triviaqa", "freshqa", "toolqa", "retrievalqa")


def _multi_source(split: str, per_source: int = 12) -> EvalSet:
    qs, ys = [], []
    for s in SOURCES:
        for i in range(per_source):
            word = "today" if i % 2 else "capital"
            qs.append(
                Question(f"{s}-{split}-{i}", f"{s} {word} question {i}?", ("a",), s, split=split)
            )
            ys.append(int(s in ("freshqa", "toolqa") or i % 2))  # two single-class sources
    n = len(qs)
    return EvalSet(tuple(qs), np.array(ys), np.full(n, np.nan), np.full(n, np.nan))


def test_loso_never_trains_on_the_held_out_source():
    sp = Splits(_multi_source("train"), _multi_source("dev"), _multi_source("test"))
    assert sources_of(sp) == list(SOURCES)
    for held in SOURCES:
        part = loso(sp, held)
        assert held not in set(part.train.sources) | set(part.dev.sources)
        assert set(part.test.sources) == {held}
        assert len(part.train) == 5 * 12 and len(part.test) == 12


def test_transfer_cells_fit_without_the_source_and_flag_single_class_auroc():
    sp = Splits(_multi_source("train"), _multi_source("dev"), _multi_source("test"))
    seen = []

    def fit(part, policy, held_out):
        seen.append(
            (held_out, set(part.train.sources), set(part.test.sources) if len(part.test) else set())
        )
        from retrieval_gate.gates.tfidf import TfidfGate

        return TfidfGate.fit(part.train.questions, part.train.y)

    cells = transfer_cells(sp, "synthetic", {"tfidf": fit})
    for held, train_sources, test_sources in seen:
        assert held not in train_sources and not test_sources - {held}
    assert len(cells) == 2 * len(SOURCES)  # in-domain and held-out per source
    fresh = [c for c in cells if c.source == "freshqa"]
    assert all(c.auroc is None and "only label 1" in c.note for c in fresh)
    assert all(c.auroc is not None for c in cells if c.source == "popqa")


def test_transfer_on_a_users_file_takes_its_sources_from_the_source_column(tmp_path, capsys):
    """Issue 24 item 8: a user's question file with its own `source` column gets a
    leave-one-source-out matrix (the six bundled names were hard-coded: the matrix was empty)."""
    from retrieval_gate.cli import main

    rows, labels = ["id,question,answer,source"], []
    for i in range(90):
        source = ("helpdesk", "wiki", "news")[i % 3]
        y = i % 2
        word = ("latest", "today's") if y else ("capital", "author")
        rows.append(f"u{i},what is the {word[i % 4 // 2]} figure of {source} item {i}?,x,{source}")
        labels.append(json.dumps({"id": f"u{i}", "label": y}))
    questions = tmp_path / "mine.csv"
    questions.write_text("\n".join(rows) + "\n")
    label_file = tmp_path / "labels" / "mine.jsonl"
    label_file.parent.mkdir()
    label_file.write_text("\n".join(labels) + "\n")
    out = tmp_path / "report"
    code = main(["transfer", "--questions", str(questions), "--labels", str(label_file),
                 "--gates", "tfidf", "--out", str(out)])  # fmt: skip
    assert code == 0
    cells = json.loads((out / "transfer.json").read_text())
    assert {c["source"] for c in cells} == {"helpdesk", "wiki", "news"}
    assert {c["setting"] for c in cells} == {"in-domain", "held-out"} and len(cells) == 6
    assert all(c["n"] > 0 and c["auroc"] is not None for c in cells)
    assert "helpdesk (n=" in (out / "transfer.md").read_text()

    one = tmp_path / "one.csv"
    one.write_text("\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")  # no source column
    code = main(["transfer", "--questions", str(one), "--labels", str(label_file), "--gates",
                 "tfidf", "--out", str(out)])  # fmt: skip
    assert code == 2 and "at least two sources" in capsys.readouterr().err


def test_transfer_says_what_it_leaves_out_and_refuses_one_held_out_source(tmp_path, caplog):
    """A source without test questions was left out of the matrix unsaid (one left: a single
    column, its held-out cell unfittable, exit 0), and so were questions without labels and
    labels of no question; a learned cell whose dev questions were all the held-out source's
    stopped the matrix after the other cells had trained (no report): it is a cell that
    cannot fit."""
    from retrieval_gate.cli import main
    from retrieval_gate.errors import InputError
    from retrieval_gate.evaluation.transfer import CANNOT_FIT, _fittable, _held_out
    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.questions import Question

    rows, labels = ["id,question,answer,source,split"], []
    for i in range(60):
        source, split = ("wiki", "news", "tiny")[i % 3], ("train", "dev", "test")[i // 3 % 3]
        split = "train" if source == "tiny" else split  # no test question of its own
        rows.append(f"u{i},what is the figure of {source} item {i}?,x,{source},{split}")
        labels.append(json.dumps({"id": f"u{i}", "label": i % 2}))
    questions = tmp_path / "mine.csv"
    questions.write_text("\n".join(rows[:-3]) + "\n")  # 3 labelled ids are no question
    label_file = tmp_path / "mine.jsonl"
    label_file.write_text("\n".join(labels) + "\n")
    out = tmp_path / "report"
    assert main(["transfer", "--questions", str(questions), "--labels", str(label_file),
                 "--gates", "tfidf", "--out", str(out)]) == 0  # fmt: skip
    assert "1 sources have no test questions and are not held out (they stay in training): " \
        "'tiny'" in caplog.text  # fmt: skip
    assert "3 of 60 label ids are no question of these data (e.g. 'u57')" in caplog.text
    assert {c["source"] for c in json.loads((out / "transfer.json").read_text())} == {
        "wiki", "news"}  # fmt: skip
    sp = load_splits(label_file, None, [q for q in _questions(rows) if q.source != "news"])
    with pytest.raises(InputError, match=r"needs test questions from at least two sources; "
                       r"'wiki' has them \(1 without: 'tiny'\)"):  # fmt: skip
        _held_out(sp, ["wiki", "tiny"])
    pool = [Question(f"q{i}", "x?", (), "a", split=s) for i, s in enumerate(["train", "test"])]
    with pytest.raises(CANNOT_FIT, match="without 'b' no dev questions are left"):
        _fittable(pool, "b")


def _questions(rows: list[str]) -> list:
    from retrieval_gate.questions import Question

    out = []
    for row in rows[1:]:
        qid, text, answer, source, split = row.split(",")
        out.append(Question(qid, text, (answer,), source, split=split))
    return out


# ---------------------------------------------------------------- the evaluate command


def test_evaluate_command_writes_report_and_plots(tmp_path):
    """`retrieval-gate evaluate` end to end on real questions with a small label file."""
    from retrieval_gate.cli import main
    from retrieval_gate.data import canonical_questions

    qs = [q for q in canonical_questions() if q.source in ("popqa", "freshqa", "triviaqa")][::6]
    run = tmp_path / "run"
    run.mkdir()
    lines, cb, rg = [], [], []
    for i, q in enumerate(qs):
        y = int(q.source == "freshqa" or (q.s_pop is not None and q.s_pop < 1000))
        lines.append({"id": q.id, "label": y})
        cb.append(
            {"id": q.id, "label": y, "match": not y, "idk": i % 7 == 0, "mean_logprob": -0.2 - y}
        )
        rg.append(
            {"id": q.id, "label": y, "closed_correct": not y, "rag_correct": bool(y or i % 3)}
        )
    for path, rows in (
        (tmp_path / "policy.jsonl", lines),
        (run / "closed-book.jsonl", cb),
        (run / "rag-gain.jsonl", rg),
    ):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report"
    code = main(["evaluate", "--gates", "always", "never", "popularity", "confidence", "tfidf",
                 "--labels", str(tmp_path / "policy.jsonl"), "--run-dir", str(run), "--out", str(out),
                 "--resamples", "30", "--no-cost"])  # fmt: skip
    assert code == 0
    report = (out / "report.md").read_text()
    for gate in ("always", "never", "popularity", "confidence", "tfidf"):
        assert f"| {gate} |" in report
    assert "| retrieval rate | LLM calls/q |" in report  # the built-ins: 1 LLM call either way
    assert "| 1.000 | 1.00 |" in report and "the generator to decide, confidence, also" in report
    assert {p.name for p in out.glob("*.png")} == {
        "policy-roc-pr.png",
        "policy-reliability.png",
        "policy-mallen.png",
    }
    results = json.loads((out / "results.json").read_text())["policies"]["policy"]
    conf = next(g for g in results["gates"] if g["name"] == "confidence")
    assert conf["metrics"]["auroc"] > 0.9  # lower log-probability marks the need-retrieval rows
    assert "Mallen et al.'s protocol" in report
    assert results["n_test"] == len([q for q in qs if q.split == "test"])


@pytest.mark.parametrize(
    "damage",
    ['{"q1": 0.5', "[1, 2]", '{"q1": "abc"}', "[" * 100_000],
    ids=["cut-short", "a-list", "a-text-score", "nested-past-the-recursion-limit"],
)
def test_a_damaged_score_cache_is_scored_again_not_an_internal_error(tmp_path, caplog, damage):
    """evaluate keeps each gate's scores in OUT/scores/; one cut short or edited stopped the
    next run with a traceback (or mixed a list into the scores)."""
    from retrieval_gate.cli import main
    from retrieval_gate.data import canonical_questions

    qs = [q for q in canonical_questions() if q.split == "test"][:40]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": q.id, "label": i % 2}) + "\n"
                              for i, q in enumerate(qs)))  # fmt: skip
    out = tmp_path / "report"
    argv = ["evaluate", "--gates", "always", "--labels", str(labels), "--out", str(out),
            "--resamples", "10", "--no-cost"]  # fmt: skip
    assert main(argv) == 0
    (cache,) = (out / "scores").iterdir()
    first, scores = (out / "results.json").read_text(), cache.read_text()
    cache.write_text(damage)
    assert main(argv) == 0
    assert "a damaged cache of scores; scoring again" in caplog.text
    assert cache.read_text() == scores
    (gate,) = json.loads((out / "results.json").read_text())["policies"]["labels"]["gates"]
    assert gate["metrics"] == json.loads(first)["policies"]["labels"]["gates"][0]["metrics"]


def test_score_cache_entries_are_the_questions_not_their_ids(tmp_path):
    """The score cache was keyed by question id: the same ids with edited texts (or another
    questions file numbering its rows 1, 2, ...) were given the first file's scores."""
    from types import SimpleNamespace

    from retrieval_gate.evaluation.gate_comparison import _label_free_scores
    from retrieval_gate.gates.registry import GATES, GateOptions
    from retrieval_gate.labels.evalset import EvalSet

    asked = []
    gate = SimpleNamespace(checksum="sha-gate", scores=lambda qs: asked.extend(qs) or [
        len(q.text) / 100 for q in qs])  # fmt: skip

    def scored(*texts: str, **extra) -> list[float]:
        qs = tuple(Question(id=str(i), text=t, answers=("x",), source="s", extra=extra)
                   for i, t in enumerate(texts))  # fmt: skip
        y = np.zeros(len(qs))
        tests = {"p": EvalSet(qs, y, y, np.full(len(qs), np.nan))}
        return list(_label_free_scores(GATES["learned"], gate, "p", tests, tmp_path, GateOptions()))

    assert scored("Who?", "Who wrote it?") == [0.04, 0.13]
    assert scored("Who?", "Who wrote it?") == [0.04, 0.13] and len(asked) == 2  # from the cache
    assert scored("Who?", "Who wrote Hamlet?") == [0.04, 0.17] and len(asked) == 3  # id 1 edited
    scored("Who?", views=3)  # a column a gate may read: another entry
    assert len(asked) == 4


def test_an_interrupted_scoring_keeps_the_batches_scored_before(tmp_path, monkeypatch):
    """A label-free gate scored every test question in one call, cached after it: a prompt
    gate over 10,000 questions (an hour on a 2-core CPU) killed near its end lost it all. Each
    batch is cached as it is scored; the rerun asks only for the rest."""
    from types import SimpleNamespace

    from retrieval_gate.evaluation import gate_comparison
    from retrieval_gate.gates.registry import GATES, GateOptions
    from retrieval_gate.labels.evalset import EvalSet

    monkeypatch.setattr(gate_comparison, "SCORE_CHUNK", 2)
    qs = tuple(Question(id=str(i), text=f"Who wrote book {i}?", answers=("x",), source="s")
               for i in range(5))  # fmt: skip
    y = np.zeros(len(qs))
    tests = {"p": EvalSet(qs, y, y, np.full(len(qs), np.nan))}
    asked: list[str] = []

    def scores(batch):
        if len(asked) >= 4:  # killed in its third batch
            raise KeyboardInterrupt
        asked.extend(q.id for q in batch)
        return [int(q.id) / 10 for q in batch]

    gate = SimpleNamespace(checksum="sha-gate", scores=scores)

    def run() -> list[float]:
        return list(gate_comparison._label_free_scores(GATES["learned"], gate, "p", tests,
                                                        tmp_path, GateOptions()))  # fmt: skip

    with pytest.raises(KeyboardInterrupt):
        run()
    assert asked == ["0", "1", "2", "3"]
    asked.clear()
    assert run() == [0.0, 0.1, 0.2, 0.3, 0.4] and asked == ["4"]


def test_cost_per_question_times_single_questions():
    from retrieval_gate.evaluation.evaluate import cost_per_question
    from retrieval_gate.gates.tfidf import TfidfGate

    es = _evalset()
    gate = TfidfGate.fit(es.questions, es.y)
    ms = cost_per_question(gate, es.questions, n=5)
    assert 0 < ms < 1000
    # one test question (evaluate --limit 1): timed after its warm-up, not the median of
    # nothing (NaN, written into results.json as a token JSON parsers refuse)
    assert 0 < cost_per_question(gate, es.questions[:1], n=5) < 1000


def test_cost_questions_zero_is_refused_for_no_cost(capsys):
    from retrieval_gate.cli import main

    argv = ["evaluate", "--labels", "x.jsonl", "--gates", "always", "--cost-questions", "0"]
    assert main(argv) == 2
    assert "--cost-questions must be at least 1, got 0" in capsys.readouterr().err


def test_score_cache_is_keyed_by_the_gates_content_not_its_options():
    """A retrained model or another generator under the same flags gets its own scores file."""
    from types import SimpleNamespace

    from retrieval_gate.evaluation.gate_comparison import score_cache_key
    from retrieval_gate.gates.registry import GATES, GateOptions

    opts, none = GateOptions(learned_run="checkpoints/my-gate"), GateOptions()
    learned = GATES["learned"]
    old, new = SimpleNamespace(checksum="sha-old"), SimpleNamespace(checksum="sha-new")
    assert score_cache_key(learned, old, opts) != score_cache_key(learned, new, opts)
    assert score_cache_key(learned, old, opts) == score_cache_key(learned, old, none)
    plain = always_gate()  # no checksum: the options its spec reads are the key
    popularity = GATES["popularity"]
    views = GateOptions(feature="views")
    assert score_cache_key(popularity, plain, none) != score_cache_key(popularity, plain, views)
    assert score_cache_key(GATES["always"], plain, none) == score_cache_key(
        GATES["always"], plain, views
    )


def test_one_markdown_table_writer():
    from retrieval_gate.tables import markdown_table

    assert markdown_table(["a", "b"], [[1, 0.5], [None, "x"]]) == (
        "| a | b |\n|---|---|\n| 1 | 0.500 |\n| n/a | x |"
    )
    padded = markdown_table(["name", "n"], [["popqa", 12]], pad=True).splitlines()
    assert padded == ["| name  | n  |", "|-------|----|", "| popqa | 12 |"]


def test_limit_larger_than_the_split_zero_or_negative(caplog):
    import logging

    import numpy as np

    from retrieval_gate.errors import InputError
    from retrieval_gate.evaluation.gate_comparison import sample_test
    from retrieval_gate.labels.evalset import EvalSet
    from retrieval_gate.questions import Question

    caplog.set_level(logging.INFO, logger="retrieval_gate")
    qs = tuple(Question(id=f"q{i}", text=f"t{i}", answers=(), source="s") for i in range(5))
    test = EvalSet(qs, np.zeros(5, int), np.full(5, np.nan), np.full(5, np.nan))
    assert len(sample_test(test, 3)) == 3 and not caplog.records
    assert sample_test(test, 99) is test
    assert "--limit 99 is more than the 5 test questions; evaluating all 5" in caplog.text
    for bad in (0, -2):
        with pytest.raises(InputError, match="--limit must be a positive"):
            sample_test(test, bad)


def test_label_names_apart_in_any_case_and_unknown_ids_of_the_bundled_questions_said(
    tmp_path, caplog
):
    """`closed-book.jsonl` and `Closed-Book.jsonl` in one report wrote `closed-book-*.png` and
    `Closed-Book-*.png`: one file where case is ignored (macOS, Windows), one section showing
    the other's figures. And label ids that are no bundled question were left out unsaid (the
    user's --questions got a warning). Now the names differ in any case, and the ids are said."""
    from retrieval_gate.data import canonical_questions
    from retrieval_gate.labels.evalset import label_file_names, load_splits

    folder = tmp_path / "g"
    folder.mkdir()
    names = label_file_names([folder / "closed-book.jsonl", folder / "Closed-Book.jsonl"])
    assert len({n.casefold() for n in names}) == 2, list(names)
    qs = [q for q in canonical_questions() if q.source == "popqa"][::20]
    rows = [{"id": q.id, "label": i % 2} for i, q in enumerate(qs)]
    rows += [{"id": f"ghost-{i}", "label": 1} for i in range(5)]
    label_file = folder / "closed-book.jsonl"
    label_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING"):
        load_splits(label_file)
    assert f"5 of {len(rows)} label ids are no question of these data (e.g. 'ghost-0')" in (
        caplog.text)  # fmt: skip
    assert "questions have no label" not in caplog.text  # a part of the bundled ones: the rule


def test_two_generators_closed_book_files_keep_their_own_sections(tmp_path):
    """Label files are named by generator/policy from their provenance, never by stem: two
    generators' closed-book.jsonl in one report stay apart (they overwrote each other)."""
    from retrieval_gate.cli import main
    from retrieval_gate.data import canonical_questions
    from retrieval_gate.labels.evalset import label_file_names

    qs = [q for q in canonical_questions() if q.source == "popqa"][::20]
    files = []
    for gen, flip in (("gen-a", 0), ("Org/Gen-B", 1)):
        folder = tmp_path / gen.split("/")[-1]
        folder.mkdir()
        rows = [{"id": q.id, "label": (i + flip) % 2} for i, q in enumerate(qs)]
        (folder / "closed-book.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        meta = {"policy": "closed-book", "generator": gen}
        (folder / "closed-book.meta.json").write_text(json.dumps(meta))
        files.append(folder / "closed-book.jsonl")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "closed-book.jsonl").write_text(files[0].read_text())  # no provenance: its stem
    assert list(label_file_names([*files, bare / "closed-book.jsonl"])) == [
        "gen-a/closed-book", "gen-b/closed-book", "closed-book"]  # fmt: skip
    assert list(label_file_names([files[0], files[0]])) == [
        "gen-a/closed-book", "gen-a/closed-book-2"]  # fmt: skip
    out = tmp_path / "report"
    assert main(["evaluate", "--gates", "always", "tfidf", "--labels", *map(str, files),
                 "--out", str(out), "--resamples", "20", "--no-cost"]) == 0  # fmt: skip
    policies = json.loads((out / "results.json").read_text())["policies"]
    assert list(policies) == ["gen-a/closed-book", "gen-b/closed-book"]
    assert [p["label_file"]["generator"] for p in policies.values()] == ["gen-a", "Org/Gen-B"]
    assert (out / "gen-b-closed-book-roc-pr.png").is_file()
    report = (out / "report.md").read_text()
    assert "## Labels: gen-a/closed-book" in report and "## Labels: gen-b/closed-book" in report


@pytest.mark.slow  # trains a (tiny) stacked router per cell
def test_transfer_learned_routers_leave_one_dataset_of_the_release_out(tmp_path):
    """`transfer --labels adaptive-rag --learned` with the shipped router config (a tiny body
    in place of MiniLM): one router trained per held-out dataset on the release's own
    questions (the bundled sets' were used: no label id matched), routed figures per cell."""
    from retrieval_gate.cli import main
    from tiny_backbones import tiny_release_router_sets

    sets = tiny_release_router_sets(tmp_path / "body")
    out, runs = tmp_path / "report", tmp_path / "runs"
    code = main(["transfer", "--labels", "adaptive-rag", "--gates", "router-prior", "--learned",
                 "--learned-config", "router-adaptive-rag-llama8b", "--learned-set", *sets,
                 "--learned-out", str(runs), "--out", str(out)])  # fmt: skip
    assert code == 0
    cells = [c for c in json.loads((out / "transfer.json").read_text()) if c["gate"] == "learned"]
    sources = {"nq", "squad", "trivia", "hotpotqa", "2wikimultihopqa", "musique"}
    assert {c["source"] for c in cells} == sources and len(cells) == 12
    assert all(c["routed_accuracy"] is not None and c["n"] == 75 for c in cells)
    trained = {p.name[:-13] for p in runs.iterdir() if (p / "gate.pt").is_file()}
    assert trained == {f"transfer-adaptive-rag-without-{s}" for s in [*sources, "nothing"]}


def test_a_transfer_cell_is_keyed_by_its_config_labels_and_questions(tmp_path):
    """A cell's run was found by its name alone: `transfer --learned` on other labels (here
    every label flipped) reused the gates trained on the first ones, and reported their
    AUROC (0.25 where it was 0.75)."""
    from retrieval_gate.data import canonical_questions
    from retrieval_gate.evaluation.transfer import cell_key
    from retrieval_gate.training.config import load_config

    qs = [q for q in canonical_questions() if q.source == "popqa"][:40]
    files = []
    for flip in (0, 1):
        path = tmp_path / f"labels-{flip}.jsonl"
        path.write_text("".join(json.dumps({"id": q.id, "label": (i + flip) % 2}) + "\n"
                                for i, q in enumerate(qs)))  # fmt: skip
        files.append(path)

    def key(label_file, questions=qs, *sets):
        sets = [f"data.label_file={label_file}", f"run.output_dir={tmp_path}", *sets]
        return cell_key(load_config("minilm-stacked-closed-book", sets), questions)

    first = key(files[0])
    assert len(first) == 12 and key(files[0]) == first  # the same inputs: the same cell
    assert key(files[1]) != first  # other labels
    assert key(files[0], qs[:-1]) != first  # other training questions
    assert key(files[0], qs, "trainer.max_epochs=3") != first  # a longer run too


def test_a_one_class_split_plots_without_a_legend_warning(tmp_path):
    """A test split of one class has no ROC or PR curve; matplotlib warned 'No artists with
    labels found to put in legend' on the user's terminal, twice per label file."""
    import warnings

    from retrieval_gate.evaluation.plots import roc_pr

    scores = {"always": np.ones(12), "popularity": np.linspace(0, 1, 12)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert roc_pr(np.zeros(12), scores, "one class", tmp_path / "a.png").is_file()
        assert roc_pr(np.arange(12) % 2, scores, "two classes", tmp_path / "b.png").is_file()


def test_no_test_split_says_which_cause():
    """ "Do the label file's ids match the data?" was said for too few questions as well, where
    the ids did match."""
    from retrieval_gate.errors import DataError
    from retrieval_gate.labels.evalset import split_evalsets
    from retrieval_gate.questions import Question

    qs = [Question(f"q{i}", f"Q{i}?", ("a",), "mine", split="train") for i in range(3)]
    with pytest.raises(DataError, match=r"\(3 labels; train 3, dev 0, test 0\): the questions "
                       "are too few"):  # fmt: skip
        split_evalsets(qs, {"q0": 1, "q1": 0, "q2": 1})
    with pytest.raises(DataError, match="no labelled id is one of the questions"):
        split_evalsets(qs, {"x": 1})


def test_a_learned_runs_own_questions_scored_as_test_are_said(caplog):
    """A questions file splitting the run's questions otherwise scored its training questions
    as test (AUROC 1.000 where the run's own test said 0.906), unsaid."""
    import numpy as np

    from retrieval_gate.evaluation.gate_comparison import _say_fitted
    from retrieval_gate.labels.evalset import EvalSet
    from retrieval_gate.questions import Question

    qs = tuple(Question(id=f"q{i}", text=f"Q{i}?", answers=("x",), source="s") for i in range(4))
    test = EvalSet(qs, np.zeros(4), np.zeros(4), np.zeros(4))

    class Run:
        name = "learned:mine"

        def fitted_among(self, questions):  # noqa: ANN001, ANN202
            return sum(q.text in ("Q0?", "Q1?") for q in questions)

    _say_fitted(Run(), test, "test")
    assert "learned:mine: 2 of the 4 test questions are ones it was trained" in caplog.text
