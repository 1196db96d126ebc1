"""Optuna studies: objectives with known optima, resume, the test split never read, the
popularity study vs brute force, and a real (tiny) Lightning hyper-parameter study."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import LeakageError
from retrieval_gate.gates.popularity import fit_popularity
from retrieval_gate.labels.evalset import EvalSet
from retrieval_gate.questions import Question
from retrieval_gate.tuning.objectives import DevData, exhaustive_best, objective
from retrieval_gate.tuning.popularity_study import tune_relations
from retrieval_gate.tuning.threshold import pareto_front, tune_threshold
from retrieval_gate.tuning.threshold_studies import tune_gate_thresholds, tuning_identity

optuna.logging.set_verbosity(optuna.logging.WARNING)


def synthetic(n: int = 20, seed: int = 11) -> DevData:
    """Scores uniform in [0, 1]; questions above 0.6 need retrieval (y); the closed-book answer
    is right below 0.3, the with-retrieval answer right from 0.3 up. The same data in any test
    order (a module-level generator gave each test the draw its place in the order left it)."""
    s = np.sort(np.random.default_rng(seed).random(n))
    y = (s > 0.6).astype(int)
    return DevData(y, s, (s < 0.3).astype(float), (s >= 0.3).astype(float))


def test_macro_f1_study_finds_the_separating_threshold(tmp_path):
    dev = synthetic()
    res = tune_threshold(objective("macro-f1"), dev)
    assert res.value == pytest.approx(1.0) and res.n_candidates == len(dev.scores) + 1
    assert dev.scores[dev.y == 0].max() < res.threshold <= dev.scores[dev.y == 1].min()


def test_adaptive_accuracy_study_finds_the_answer_switch(tmp_path):
    dev = synthetic()
    res = tune_threshold(objective("adaptive-accuracy"), dev)
    assert res.value == pytest.approx(1.0)
    assert dev.scores[dev.scores < 0.3].max() < res.threshold <= dev.scores[dev.scores >= 0.3].min()
    assert res.dev_figures["retrieval_rate"] == pytest.approx(np.mean(dev.scores >= 0.3))


def test_min_retrieval_meets_the_target_with_the_fewest_retrievals(tmp_path):
    s = np.linspace(0, 1, 41)
    # retrieval fixes questions with score >= 0.5 only; closed-book gets the rest right
    dev = DevData((s >= 0.5).astype(int), s, (s < 0.5).astype(float), np.ones_like(s))
    # target 0.9 of always-retrieve (1.0): may leave at most ~10% wrong -> retrieve from ~0.6
    obj = objective("min-retrieval", target=0.9)
    ref_t, ref_v = exhaustive_best(obj, dev)
    assert ref_v == pytest.approx(np.mean(s >= 0.6), abs=0.03)
    res = tune_threshold(obj, dev)
    assert (res.threshold, res.value) == (ref_t, ref_v)  # the saved threshold is the optimum
    assert res.dev_figures["adaptive_accuracy"] >= 0.9


def test_pareto_front_is_non_dominated_and_spans_the_trade_off(tmp_path):
    dev = synthetic()
    # in a journal file: 40 trials' SQLite bookkeeping took 4-6 s (the resume test keeps SQLite);
    # 60 trials: 40 missed the one threshold of the 21 that is right everywhere on some draws
    front, trials = pareto_front(dev, "p", f"journal:{tmp_path / 's.log'}", n_trials=60)
    assert len(trials) == 60 and len(front) >= 3
    for a in front:
        for b in front:
            assert not (
                b["adaptive_accuracy"] > a["adaptive_accuracy"]
                and b["retrieval_rate"] < a["retrieval_rate"]
            )
    assert max(p["adaptive_accuracy"] for p in front) == pytest.approx(1.0)


def test_study_resumes_without_losing_trials(tmp_path):
    dev, db = synthetic(), tmp_path / "s.db"
    pareto_front(dev, "r", db, n_trials=10)
    url = f"sqlite:///{db.resolve()}"
    first = [t.params for t in optuna.load_study(study_name="r", storage=url).trials]
    _, trials = pareto_front(dev, "r", db, n_trials=15)  # "rerun after a stop"
    again = optuna.load_study(study_name="r", storage=url).trials
    assert len(trials) == 15 and len(again) == 15
    assert [t.params for t in again[:10]] == first


@pytest.mark.slow  # waits for the cut-off trial's heartbeat to go stale (4 s)
def test_a_storage_that_fails_mid_study_is_said_and_the_study_continues_after(
    tmp_path, monkeypatch, request
):
    """A full disk under the study's SQLite file failed a trial's commit: Optuna's
    StorageInternalError, then its "Should not reach" AssertionError, and `tune` said
    "internal error (a bug)". Here SQLite itself finds the file full (a page limit on each
    connection: SQLITE_FULL, as on a full disk); once it has room, rerunning finishes."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from retrieval_gate.errors import BackendError

    monkeypatch.setenv("RETRIEVAL_GATE_HEARTBEAT", "1")  # the cut-off trial: stale in 4 s

    # the study file as on a RAM disk: a trial commits ~16 times, each with an fsync (most of
    # this test's time); its pages, and so the page limit below, are the same without them
    def no_fsync(dbapi_connection, _record):
        dbapi_connection.execute("PRAGMA synchronous = OFF")

    event.listen(Engine, "connect", no_fsync)
    request.addfinalizer(lambda: event.remove(Engine, "connect", no_fsync))
    dev, db = synthetic(), tmp_path / "s.db"
    pareto_front(dev, "full", db, n_trials=10)
    with sqlite3.connect(db) as con:
        pages = con.execute("PRAGMA page_count").fetchone()[0]

    def full_soon(dbapi_connection, _record):  # room for a few more trials' rows
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages + 1}")

    event.listen(Engine, "connect", full_soon)
    try:
        with pytest.raises(BackendError, match="database or disk is full") as said:
            pareto_front(dev, "full", db, n_trials=60)
    finally:
        event.remove(Engine, "connect", full_soon)
    assert str(said.value).startswith(f"the study storage sqlite:///{db.resolve()} failed "
                                      "during tuning")  # fmt: skip
    assert "run the same tune command again to continue" in str(said.value)
    _, trials = pareto_front(dev, "full", db, n_trials=60)
    assert len(trials) == 60  # those kept and the rest


def test_a_journal_whose_last_record_was_cut_short_resumes(tmp_path):
    """A full disk (or a kill) cut a journal's last record short; Optuna then appended the
    next record to the torn one and the journal could not be read again ("Extra data", an
    internal error). The torn bytes are cut before the journal opens; a journal damaged
    inside is refused, left as it is."""
    from retrieval_gate.errors import InputError

    dev, journal = synthetic(), tmp_path / "studies.log"
    pareto_front(dev, "j", f"journal:{journal}", n_trials=5)
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "ab')  # the write a full disk cut
    _, trials = pareto_front(dev, "j", f"journal:{journal}", n_trials=8)
    assert len(trials) == 8 and journal.read_bytes().startswith(whole)
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:3]) + lines[3].rstrip(b"\n") + b"".join(lines[4:]))
    with pytest.raises(InputError, match="this Optuna journal is damaged .*left as it is"):
        pareto_front(dev, "j", f"journal:{journal}", n_trials=9)


def _evalset(split: str, n: int = 60) -> EvalSet:
    qs = tuple(Question(f"{split}{i}", f"q {i}?", ("a",), "popqa", split=split) for i in range(n))
    y = np.array([i % 2 for i in range(n)])
    return EvalSet(qs, y, (y == 0).astype(float), (y == 1).astype(float))


class RecordingGate:
    name, threshold = "recording", 0.5

    def __init__(self):
        self.seen: list[Question] = []

    def scores(self, questions):
        self.seen += list(questions)
        return np.array(
            [0.9 if q.id.endswith(("1", "3", "5", "7", "9")) else 0.1 for q in questions]
        )


def test_tuning_never_reads_test_questions(tmp_path):
    gate = RecordingGate()
    out = tune_gate_thresholds(gate, _evalset("train"), _evalset("dev"), "synthetic",
                               ["macro-f1", "adaptive-accuracy", "pareto"], tmp_path / "s.db", tmp_path, 8)  # fmt: skip
    assert {q.split for q in gate.seen} == {"dev"}
    assert set(out["thresholds"]) == {"macro-f1", "adaptive-accuracy"} and "pareto" in out
    with pytest.raises(LeakageError, match="test-split"):
        tune_gate_thresholds(
            gate,
            _evalset("train"),
            _evalset("test"),
            "x",
            ["macro-f1"],
            tmp_path / "s.db",
            tmp_path,
        )
    with pytest.raises(LeakageError, match="test-split"):
        tune_relations(_evalset("test"), "rel", tmp_path / "s.db", 5)


def test_the_tuned_report_applies_dev_thresholds_to_test(tmp_path):
    from retrieval_gate.tuning.tuned_report import dev_test_rows, tuned_markdown

    gate = RecordingGate()
    out = tune_gate_thresholds(gate, _evalset("train"), _evalset("dev"), "synthetic",
                               ["macro-f1"], tmp_path / "s.db", tmp_path)  # fmt: skip
    rows = dev_test_rows(out, gate, _evalset("test"))
    # the gate separates the classes perfectly on every split: the optimum carries over
    assert rows[0]["value"] == 1.0 and rows[0]["test"]["macro_f1"] == 1.0
    assert "| macro-f1 |" in tuned_markdown(out, rows)


def test_popularity_study_matches_brute_force(tmp_path):
    rng = np.random.default_rng(11)
    qs, closed, rag = [], [], []
    for i in range(40):
        rel = "AB"[i % 2]
        pop = int(rng.choice([10, 30, 80, 200, 400, 900, 3000]))
        qs.append(
            Question(f"p{i}", f"q{i}?", ("a",), "popqa", split="dev", s_pop=pop, relation=rel)
        )
        cut = 300 if rel == "A" else 50
        noisy = rng.random() < 0.1
        closed.append(float((pop >= cut) != noisy))
        rag.append(float(pop < cut))
    closed, rag = np.array(closed), np.array(rag)
    dev = EvalSet(tuple(qs), (rag > closed).astype(int), closed, rag)
    # Optuna's journal file: in SQLite the 60 trials' bookkeeping took 4 of the test's 6 s
    res = tune_relations(dev, "rel", f"journal:{tmp_path / 's.journal'}", n_trials=60)
    ref = fit_popularity(qs, dev.y, closed, rag)
    assert res["brute_force_thresholds"] == ref.relation_thresholds
    assert res["optuna_accuracy"] == pytest.approx(res["brute_force_accuracy"])


@pytest.mark.slow  # Optuna trials train gates with Lightning
def test_hparam_study_trains_with_lightning_and_prunes(tmp_path):
    """A real trial of MiniLM-LoRA on 40 questions; a pruner that prunes at the first report
    proves the Lightning callback reaches Optuna."""
    from retrieval_gate.tuning import hparams

    words = ["weather today", "stock price now", "capital city", "famous author"]
    qs = [
        Question(f"h{i}", f"what is the {words[i % 4]} number {i}?", ("a",), "popqa")
        for i in range(60)
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(json.dumps({"id": q.id, "label": int(i % 4 < 2)}) + "\n" for i, q in enumerate(qs))
    )
    sets = ["data.batch_size=16", "data.max_length=16", "trainer.log_every_n_steps=1",
            "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
            "trainer.num_sanity_val_steps=0"]  # 5 fits, no sanity check before each  # fmt: skip
    res = hparams.tune_hparams(
        labels, "hp", tmp_path / "s.db", 2, overrides=sets, max_epochs=1, questions=qs
    )
    assert res["n_complete"] == 2 and 0.0 <= res["best_dev_auroc"] <= 1.0
    assert set(res["best_params"]) >= {"lr", "epochs", "lora_r", "dropout", "balance"}
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(lower=2.0))  # prunes all
    from retrieval_gate.training.config import load_config

    cfg = load_config(
        "configs/backbones/minilm-lora.yaml",
        [*sets, f"data.label_file={labels}", "trainer.max_epochs=1"],
    )
    study.optimize(lambda t: hparams.fit_trial(cfg, t, qs), n_trials=1)
    assert study.trials[0].state == optuna.trial.TrialState.PRUNED
    # a trial whose loss turns NaN is pruned, and the study goes on (it stopped the run)
    from torch import nn

    study = optuna.create_study(direction="maximize")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nn.CrossEntropyLoss, "forward", lambda self, x, y: x.sum() * float("nan"))
        study.optimize(lambda t: hparams.fit_trial(cfg, t, qs), n_trials=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.PRUNED] * 2


# ------------------------------------------------------------------ identity, not names


def test_retrained_gate_under_the_same_name_is_tuned_afresh(tmp_path, capsys, train_gate):
    """Defects 1 and 2: two different models in folders with the same name (A/x, B/x) never
    share trials or cached dev scores; the threshold is saved only with --save-objective."""
    from retrieval_gate.data import canonical_questions
    from retrieval_gate.gates.learned import LearnedGate
    from retrieval_gate.labels.evalset import load_splits
    from retrieval_gate.training import read_metadata
    from tiny_backbones import tiny_backbone, tiny_config, write_label_file

    popqa = [q for q in canonical_questions() if q.source == "popqa"][:400]
    labels = write_label_file(
        tmp_path / "pop.jsonl", {q.id: int(len(q.text) % 3 == 0) for q in popqa}
    )
    # a tiny body: what is tested is two models in folders of one name, not MiniLM
    body = tiny_backbone("roberta", tmp_path / "body", [q.text for q in popqa])
    runs = []
    for parent, lr in (("A", "1e-3"), ("B", "3e-3")):
        cfg = tiny_config(labels, tmp_path / parent, "encoder", str(body), pooling="cls")
        cfg = cfg.override("run.name=x", f"model.lr={lr}", "data.datasets=[popqa]")
        runs.append(train_gate(cfg))
    storage, out = tmp_path / "studies.db", tmp_path / "tune"
    dev = load_splits(labels, tmp_path / "no-run").dev

    def tune(run, *extra):
        argv = ["tune", "--gate", "learned", "--learned-run", str(run), "--labels", str(labels),
                "--objective", "macro-f1", "--trials", "4", "--storage", str(storage),
                "--out", str(out), *extra]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        return json.loads((out / "tune-learned-pop.json").read_text())["thresholds"]["macro-f1"]

    before = read_metadata(runs[0])["threshold"]
    tune(runs[0])
    assert read_metadata(runs[0])["threshold"] == before  # defect 2: no --save-objective
    second = tune(runs[1], "--save-objective", "macro-f1")
    fresh = LearnedGate(runs[1]).scores(dev.questions)
    cached = np.load(out / "learned:x-pop.dev-scores.npz")["scores"]
    np.testing.assert_allclose(cached, fresh, atol=1e-6)  # defect 1: B's scores, not A's
    best, _ = exhaustive_best(objective("macro-f1"), DevData(dev.y, fresh, dev.closed_correct,
                                                              dev.rag_correct))  # fmt: skip
    assert second["threshold"] == pytest.approx(best)
    assert read_metadata(runs[1])["threshold"] == pytest.approx(best)
    # the identity the Pareto/relations studies are named by differs too
    sp = load_splits(labels, tmp_path / "no-run")
    ids = {tuning_identity((sp.train, sp.dev), tmp_path, LearnedGate(r)) for r in runs}
    assert len(ids) == 2


def test_the_tuning_identity_is_the_questions_not_their_ids(tmp_path):
    """Studies and dev scores were named by the label file, the run and the gate: a questions
    file edited under the same ids (`tune --questions`) reused the old questions' trials."""
    from retrieval_gate.labels.evalset import build_evalset
    from retrieval_gate.questions import Question

    def identity(*texts: str, label: int = 1) -> str:
        qs = [Question(id=str(i), text=t, answers=("x",), source="user")
              for i, t in enumerate(texts, start=1)]  # fmt: skip
        return tuning_identity((build_evalset(qs, {"1": label}),), tmp_path)

    assert identity("Who wrote Hamlet?") == identity("Who wrote Hamlet?")
    assert identity("Who wrote Hamlet?") != identity("Who wrote Macbeth?")
    assert identity("Who wrote Hamlet?") != identity("Who wrote Hamlet?", label=0)


@pytest.mark.slow
def test_a_popularity_feature_is_its_own_study_and_dev_scores(tmp_path, capsys):
    """--feature was keyed by nothing: an o_pop run read the s_pop run's cached dev scores
    (534 thresholds tried, where o_pop's own have 329) and would resume its Pareto study."""
    labels = Path(__file__).parents[1] / "data/labels/smollm2-135m-instruct/closed-book.jsonl"

    def tune(feature: str, out: Path) -> dict:
        argv = ["tune", "--gate", "popularity", "--labels", str(labels), "--objective",
                "macro-f1", "--feature", feature, "--out", str(out)]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        return json.loads((out / "tune-popularity-closed-book.json").read_text())["thresholds"]

    out = tmp_path / "tune"
    tune("s_pop", out)  # its dev scores cached in `out` first
    assert tune("o_pop", out) == tune("o_pop", tmp_path / "fresh")  # o_pop's own, not s_pop's


def test_a_release_folder_or_name_as_labels_is_tuned_not_a_traceback(tmp_path, capsys):
    """sha256 of `adaptive-rag` (a name) or a release folder: FileNotFoundError,
    IsADirectoryError (exit 1)."""
    argv = ["tune", "--gate", "router-tfidf", "--labels", "adaptive-rag", "--objective",
            "macro-f1", "--out", str(tmp_path / "tune")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert [p.name for p in (tmp_path / "tune").glob("tune-router-tfidf-*.md")]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped"])
def test_a_damaged_dev_score_cache_is_scored_again(tmp_path, damage):
    """The dev-score cache of a tuning run, damaged: tune stopped with BadZipFile or a pickle
    ValueError as 'internal error (a bug)'; a bit flipped in the scores was not caught by
    anything. Now the zip's CRC is checked and the gate scores dev again."""
    from retrieval_gate.tuning.threshold_studies import dev_scores

    dev, cache = _evalset("dev"), tmp_path / "g.dev-scores.npz"
    first = dev_scores(RecordingGate(), dev, cache, "id")
    data = bytearray(cache.read_bytes())
    start = data.index(b"\x93NUMPY", data.index(b"scores.npy")) + 128  # the scores' numbers
    flipped = data[:start] + bytes([data[start] ^ 0x40]) + data[start + 1 :]
    data = {"truncated": data[: len(data) // 2], "garbage": bytearray(b"\x80\x04not npz"),
            "flipped": flipped}[damage]  # fmt: skip
    cache.write_bytes(bytes(data))
    gate = RecordingGate()
    np.testing.assert_array_equal(dev_scores(gate, dev, cache, "id"), first)
    assert len(gate.seen) == len(dev.ids)  # scored again, and kept whole again
    again = RecordingGate()
    dev_scores(again, dev, cache, "id")
    assert again.seen == []


def test_the_hparams_study_is_keyed_by_the_resolved_config_not_its_name(tmp_path):
    """A config passed by name (`--config minilm-closed-book`) was keyed by nothing: a study of
    another config by name resumed the first one's trials as its own."""
    from pathlib import Path

    from retrieval_gate.tuning.tune import TuneConfig, hparams_study

    labels = Path("data/labels/smollm2-135m-instruct/closed-book.jsonl")

    def study(config: str, *sets: str) -> str:
        return hparams_study(TuneConfig(gate="learned", labels=labels, objectives=["hparams"],
                                        config=config, overrides=sets, out=tmp_path))  # fmt: skip

    lora = study("minilm-lora-closed-book")
    assert lora != study("minilm-closed-book")
    assert lora != study("minilm-lora-closed-book", "data.max_length=32")
    # the same config by name and by path is the same study
    assert lora == study("configs/experiments/minilm-lora-closed-book.yaml")


def test_the_hparams_study_is_keyed_by_content_not_paths(tmp_path, monkeypatch):
    """Edited questions (same label file) and a backbone re-initialised in place resumed the
    old trials; the label file by another path spelling lost them."""
    from retrieval_gate.labels.evalset import build_evalset
    from retrieval_gate.tuning.tune import TuneConfig, hparams_study

    body = tmp_path / "body"
    body.mkdir()
    (body / "model.safetensors").write_bytes(b"weights A")
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "1", "label": 1}\n')

    def study(path: Path, text: str = "Who wrote Hamlet?") -> str:
        qs = [Question(id="1", text=text, answers=("x",), source="user", split="train")]
        cfg = TuneConfig(gate="learned", labels=path, objectives=["hparams"], out=tmp_path,
                         config="minilm-lora-closed-book", overrides=[f"model.name={body}"])  # fmt: skip
        return hparams_study(cfg, (build_evalset(qs, {"1": 1}),))

    first = study(labels)
    monkeypatch.chdir(tmp_path)  # the same file by a relative path
    assert study(Path("labels.jsonl")) == first
    assert study(labels, "Who wrote Macbeth?") != first
    (body / "model.safetensors").write_bytes(b"weights B")
    assert study(labels) != first


def test_a_seeded_study_resumed_samples_new_points(tmp_path):
    """A resumed study (or a second tune on the same storage) replayed the first run's
    parameters: trials 5-9 were trials 0-4 again."""
    from retrieval_gate.tuning.studies import open_study

    def run(n: int) -> list[float]:
        study = open_study("s", tmp_path / "s.db", lambda s: optuna.samplers.RandomSampler(seed=s),
                           0, ["maximize"])  # fmt: skip
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=n)
        return [t.params["x"] for t in study.trials]

    first = run(5)
    both = run(5)
    assert both[:5] == first and len(set(both)) == 10
    assert run_fresh(tmp_path / "t.db")[:5] == first  # a new study is reproducible by its seed


def run_fresh(db: Path) -> list[float]:
    from retrieval_gate.tuning.studies import open_study

    study = open_study("s", db, lambda s: optuna.samplers.RandomSampler(seed=s), 0, ["maximize"])
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=5)
    return [t.params["x"] for t in study.trials]


def test_hparams_with_one_class_on_dev_is_refused():
    """Dev AUROC is undefined there: the study ran and reported best_dev_auroc 0.0."""
    from retrieval_gate.errors import MissingInputError
    from retrieval_gate.labels.evalset import Splits
    from retrieval_gate.tuning.tune import check_dev

    qs = tuple(Question(id=f"q{i}", text=f"q{i}?", answers=("x",), source="s") for i in range(3))
    y = np.zeros(3)
    dev = EvalSet(qs, y, y, y)
    sp = Splits(dev, dev, dev)
    check_dev(sp)  # thresholds: said, not refused
    with pytest.raises(MissingInputError, match="hparams maximises dev AUROC.*undefined"):
        check_dev(sp, auroc=True)


def test_hparams_searches_only_what_the_config_trains():
    """A stacked head's trials trained a gradient placeholder its config never fits, and a full
    fine-tune's trials were LoRA models (the search set model.lora.* on every config)."""
    from pathlib import Path

    from retrieval_gate.errors import ConfigError
    from retrieval_gate.tuning.hparams import suggest
    from retrieval_gate.tuning.tune import TuneConfig

    labels = Path("data/labels/smollm2-135m-instruct/closed-book.jsonl")
    stacked = TuneConfig(gate="learned", labels=labels, objectives=["hparams"],
                         config="cascade-closed-book")  # fmt: skip
    with pytest.raises(ConfigError, match="model.head=stacked, fitted in closed form"):
        stacked.check()
    trial = optuna.trial.FixedTrial({"lr": 1e-3, "epochs": 1, "dropout": 0.1, "balance": "none"})
    full = suggest(trial, 3, lora=False)
    assert not [s for s in full if s.startswith("model.lora")] and "model.lr=0.001" in full
    lora = {**trial.params, "lora_r": 8, "lora_alpha_x": 2, "lora_dropout": 0.1}
    assert "model.lora.alpha=16" in suggest(optuna.trial.FixedTrial(lora), 3, lora=True)


def test_a_handful_of_labelled_questions_is_said_not_a_traceback(tmp_path, capsys, caplog):
    """Three questions: the tfidf gate's min_df=2 left no word ("After pruning, no terms
    remain", an internal error in evaluate and tune), and tune's empty dev split was "index -1
    is out of bounds". A dev split of one class is tuned with a warning (any threshold
    separates it)."""
    from retrieval_gate.errors import MissingInputError
    from retrieval_gate.gates.tfidf import TfidfGate

    q = tmp_path / "q.csv"
    q.write_text("id,question,answers\nq1,Who wrote Hamlet?,Shakespeare\n"
                 "q2,What is the capital of Spain?,Madrid\n"
                 "q3,Which river flows through Cairo?,Nile\n")  # fmt: skip
    o = tmp_path / "o.csv"
    o.write_text("id,correct\nq1,1\nq2,0\nq3,1\n")
    label = ["label", "--policy", "outcomes", "--outcomes", str(o), "--questions", str(q),
             "--generator", "g", "--labels-dir", str(tmp_path / "labels")]  # fmt: skip
    assert main(label) == 0
    labels = str(tmp_path / "labels" / "g" / "closed-book.jsonl")
    common = ["--labels", labels, "--questions", str(q)]
    assert main(["evaluate", *common, "--gates", "tfidf", "--no-cost", "--out",
                 str(tmp_path / "rep")]) == 0  # fmt: skip
    assert "| tfidf |" in (tmp_path / "rep" / "report.md").read_text()
    tune = ["tune", "--gate", "tfidf", *common, "--objective", "macro-f1"]
    assert main([*tune, "--out", str(tmp_path / "t1")]) == 2
    assert "tune chooses on the dev split, and these labels give none (train 2, dev 0, test 1)" \
        in capsys.readouterr().err  # fmt: skip
    assert not (tmp_path / "t1").exists()
    with pytest.raises(MissingInputError, match="the 2 training questions hold no word"):
        TfidfGate.fit([Question(str(i), t, (), "mine") for i, t in enumerate(["a?", "b?"])],
                      np.array([0, 1]))  # fmt: skip
    split = tmp_path / "s.csv"  # dev: two questions, both needing no retrieval
    split.write_text("id,question,answers,split\n"
                     + "".join(f"t{i},Who wrote book number {i}?,x,train\n" for i in range(6))
                     + "d1,Who wrote the book?,x,dev\nd2,Who wrote the play?,x,dev\n"
                     + "e1,Who wrote the poem?,x,test\ne2,Who wrote a song?,x,test\n")  # fmt: skip
    (tmp_path / "o2.csv").write_text("id,correct\n" + "".join(
        f"{i},{c}\n" for i, c in [*((f"t{i}", i % 2) for i in range(6)), ("d1", 1),
                                  ("d2", 1), ("e1", 0), ("e2", 1)]))  # fmt: skip
    label = ["label", "--policy", "outcomes", "--outcomes", str(tmp_path / "o2.csv"),
             "--questions", str(split), "--generator", "h", "--labels-dir",
             str(tmp_path / "labels")]  # fmt: skip
    assert main(label) == 0
    caplog.clear()
    assert main(["tune", "--gate", "tfidf", "--labels",
                 str(tmp_path / "labels/h/closed-book.jsonl"), "--questions", str(split),
                 "--objective", "macro-f1", "--out", str(tmp_path / "t2")]) == 0  # fmt: skip
    assert "every dev question needs no retrieval (train 6, dev 2, test 2)" in caplog.text


@pytest.mark.slow  # imports Lightning (~5 s)
def test_an_hparam_study_refuses_trainer_keys_each_trial_sets_itself(tmp_path):
    """`tune --objective hparams --set trainer.callbacks=[]` was accepted, then each trial's
    Trainer got callbacks twice (an internal error): refused, named, before any trial."""
    from retrieval_gate.errors import ConfigError
    from retrieval_gate.tuning.hparams import tune_hparams

    with pytest.raises(ConfigError, match=r"trainer.callbacks is set by retrieval-gate itself"):
        tune_hparams(tmp_path / "labels.jsonl", "s", tmp_path / "s.db", n_trials=1,
                     overrides=["trainer.callbacks=[]"])  # fmt: skip
    assert not (tmp_path / "s.db").exists()
