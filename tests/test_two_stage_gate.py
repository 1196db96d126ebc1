"""The two-stage gate (issue 37): the question and, when given, the closed-book answer's token
log-probabilities; through the CLI as a user runs it (label --policy outcomes, train
--config cascade-closed-book with a numeric column, export, score --questions), and its
pieces: the confidence columns, the config's refusals, bad cells named by file and line."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from retrieval_gate.cli import main
from retrieval_gate.data.answer_confidence import AnswerConfidence
from retrieval_gate.data.features import SideFeatures
from retrieval_gate.data.gate_features import features_from_dict
from retrieval_gate.data.text_features import TextFeatures, TokenLayout
from retrieval_gate.errors import ConfigError, DataError
from retrieval_gate.questions import Question
from retrieval_gate.training import load_config

WORDS = ["alder", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "jasper",
         "kestrel", "lagoon", "marsh", "nook", "oriel", "pike", "quarry", "ridge", "spruce"]  # fmt: skip


def _q(i: int, **extra) -> Question:
    return Question(id=f"q{i}", text=f"what is q{i}?", answers=("x",), source="s", extra=extra)


def test_confidence_columns_scale_flag_and_round_trip():
    train = [_q(0, token_logprobs=[-0.1, -0.3]), _q(1, token_logprobs=[-2.0, -1.0, -3.0]),
             _q(2, mean_logprob=-0.5), _q(3)]  # fmt: skip
    conf = AnswerConfidence.fit(train)
    m = conf.matrix(train)
    assert m.shape == (4, 8) and conf.names[-1] == "has_answer"
    assert m[:, -1].tolist() == [1, 1, 1, 0]  # the last has no answer: question-only score
    assert m[2, 4:7].tolist() == [1, 1, 1]  # the mean alone: min, first, length missing
    assert m[3, :4].tolist() == [0, 0, 0, 0]
    assert m[0, 0] > m[1, 0]  # a surer answer has the higher mean column
    feats = TextFeatures(("class:a", "class:b"), TokenLayout(10, 11),
                         SideFeatures(("pop",), (1.0,), (2.0,)), conf)  # fmt: skip
    back = features_from_dict(json.loads(json.dumps(feats.to_dict())))
    assert back == feats and back.width == 11 + 2 + 8 and not back.from_text
    with pytest.raises(DataError, match="no training question has"):
        AnswerConfidence.fit([_q(0), _q(1)])
    with pytest.raises(DataError, match="q5.*empty list"):
        conf.matrix([_q(5, token_logprobs=[])])


@pytest.mark.parametrize(
    "sets, match",
    [(["model.head=linear"], "needs model.head=stacked"),
     (["data.task=3way"], "data.task=binary")],
)  # fmt: skip
def test_answer_confidence_needs_a_stacked_binary_gate(sets, match):
    with pytest.raises(ConfigError, match=match):
        load_config("cascade-closed-book").override(*sets)


def _write_user_data(root: Path, n: int = 480, seed: int = 0) -> tuple[Path, Path]:
    """A user's questions (with a weakly telling `popularity` column) and outcomes whose
    answers' log-probabilities tell right from wrong, noisily (confidence AUROC about 0.8);
    the text tells nothing."""
    rng = random.Random(seed)
    questions, outcomes = root / "questions.csv", root / "outcomes.jsonl"
    with open(questions, "w", newline="") as f, open(outcomes, "w") as o:
        w = csv.writer(f)
        w.writerow(["id", "question", "answers", "popularity"])
        for i in range(n):
            known = rng.random() < 0.5
            pop = int(10 ** rng.gauss(3.3 if known else 2.7, 1.0))
            words = rng.sample(WORDS, 3)
            w.writerow([f"u{i}", f"What is the {words[0]} of the {words[1]} {words[2]} {i}?",
                        "x", pop])  # fmt: skip
            correct = known if rng.random() < 0.9 else not known
            sure = rng.gauss(-0.4 if correct else -1.3, 0.6)
            lps = [round(min(0.0, rng.gauss(sure, 0.5)), 4) for _ in range(rng.randint(1, 9))]
            o.write(json.dumps({"id": f"u{i}", "correct": correct, "token_logprobs": lps}) + "\n")
    return questions, outcomes


def _tiny_body(root: Path, questions: Path) -> list[str]:
    """A tiny body for MiniLM: these questions' wording tells nothing (the README's two-stage
    block trains the config on MiniLM itself)."""
    from tiny_backbones import tiny_body_sets

    with open(questions, newline="") as f:
        return tiny_body_sets(root / "body", [row["question"] for row in csv.DictReader(f)])


@pytest.mark.slow  # a stacked training run and an ONNX export, through the CLI
def test_the_two_stage_gate_through_the_cli_ranks_at_least_as_well_as_the_confidence(
    tmp_path, capsys
):
    questions, outcomes = _write_user_data(tmp_path)
    labels = tmp_path / "labels"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(questions), "--generator", "my-llm", "--labels-dir", str(labels)]) == 0  # fmt: skip
    label_file = labels / "my-llm" / "closed-book.jsonl"
    body = _tiny_body(tmp_path, questions)
    assert main(["train", "--config", "cascade-closed-book", "--set", *body,
                 f"data.questions={questions}", f"data.label_file={label_file}",
                 "data.features=[popularity]", f"run.output_dir={tmp_path / 'runs'}"]) == 0  # fmt: skip
    run = tmp_path / "runs" / "cascade-closed-book"
    assert "frozen body: train: 100%" in capsys.readouterr().err  # minutes on 70,000: a bar
    assert main(["export", "--run", str(run), "--out-dir", str(tmp_path / "export"),
                 "--variants", "fp32", "--questions", str(questions)]) == 0  # fmt: skip
    export = tmp_path / "export" / "cascade-closed-book"
    # the model card says what the gate reads, and its snippet runs as written
    card = (export / "README.md").read_text()
    assert "side features popularity" in card and "answer's token log-probabilities" in card
    snippet = re.search(r"## Use\n```python\n(.*?)```", card, re.S).group(1)
    capsys.readouterr()
    exec(compile(snippet, "card", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.strip() in ("[ True]", "[False]")
    # the test split's questions, with their answers' log-probabilities as a user passes them
    from retrieval_gate.data.user_questions import question_set

    test = [q for q in question_set(str(questions)) if q.split == "test"]
    assert len(test) > 50
    rows = rows_lp = {json.loads(line)["id"]: json.loads(line) for line in open(label_file)}
    scored = tmp_path / "test.jsonl"
    with open(scored, "w") as f:
        for q in test:
            row = {"id": q.id, "question": q.text, "popularity": q.extra["popularity"],
                   "token_logprobs": rows[q.id]["token_logprobs"]}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    capsys.readouterr()
    assert main(["score", "--model", str(export), "--questions", str(scored)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    y = np.array([rows[r["id"]]["label"] for r in out])
    gate = roc_auc_score(y, [r["score"] for r in out])
    confidence = roc_auc_score(y, [-rows[r["id"]]["mean_logprob"] for r in out])
    assert confidence > 0.7  # the data are as meant: the answer tells
    print(f"two-stage AUROC {gate:.3f}, confidence alone {confidence:.3f}")
    assert gate >= confidence - 0.01, (gate, confidence)
    # a row without log-probabilities gets the question-only score of the same export
    from retrieval_gate import RetrievalGate

    g = RetrievalGate.from_pretrained(export)
    plain = g.predict_proba(test[:5])
    alone = g.predict_proba([q.text for q in test[:5]], {"popularity": [q.extra["popularity"]
                            for q in test[:5]]}, token_logprobs=[None] * 5)  # fmt: skip
    np.testing.assert_allclose(plain, alone, atol=1e-6)
    assert not np.allclose(plain, [r["score"] for r in out[:5]], atol=1e-3)
    # evaluate reads the answers from the label file: the gate beside its question-only score
    report = tmp_path / "eval"
    assert main(["evaluate", "--labels", str(label_file), "--questions", str(questions),
                 "--gates", "onnx", "--onnx", str(export), "--no-cost", "--out",
                 str(report)]) == 0  # fmt: skip
    rows = {g["name"]: g for g in json.loads((report / "results.json").read_text())[
        "policies"]["my-llm/closed-book"]["gates"]}  # fmt: skip
    both, alone = rows[f"onnx:{export.name}:fp32"], rows[f"onnx:{export.name}:fp32 (question only)"]
    assert both["metrics"]["auroc"] == pytest.approx(gate, abs=1e-6)
    assert both["metrics"]["auroc"] > alone["metrics"]["auroc"] + 0.05
    # a questions file that carries the answers' column too: the question-only row is still
    # the question alone (it read the column, and showed the two-stage score twice)
    carried = tmp_path / "carried.jsonl"
    with open(carried, "w") as f:
        for q in question_set(str(questions)):
            f.write(json.dumps({"id": q.id, "question": q.text, "split": q.split,
                                "popularity": q.extra["popularity"],
                                "token_logprobs": rows_lp[q.id]["token_logprobs"]}) + "\n")  # fmt: skip
    assert main(["evaluate", "--labels", str(label_file), "--questions", str(carried),
                 "--gates", "onnx", "--onnx", str(export), "--no-cost", "--out",
                 str(tmp_path / "eval-carried")]) == 0  # fmt: skip
    again = {g["name"]: g["metrics"]["auroc"] for g in json.loads(
        (tmp_path / "eval-carried" / "results.json").read_text())["policies"][
        "my-llm/closed-book"]["gates"]}  # fmt: skip
    assert again[alone["name"]] == pytest.approx(alone["metrics"]["auroc"], abs=1e-6)
    assert again[both["name"]] == pytest.approx(gate, abs=1e-6)
    # served: /score takes each question's side feature and answer's log-probabilities
    # (it could carry neither: the answer's confidence was left out, silently)
    from fastapi.testclient import TestClient

    from retrieval_gate.gates.onnx import OnnxGate
    from retrieval_gate.rag.service import create_app

    body = {"questions": [q.text for q in test[:5]],
            "features": {"popularity": [None if q.extra["popularity"] in (None, "") else
                                        float(q.extra["popularity"]) for q in test[:5]]},
            "token_logprobs": [rows_lp[q.id]["token_logprobs"] for q in test[:5]]}  # fmt: skip
    with TestClient(create_app(OnnxGate(export), warm_up=True)) as client:
        served = client.post("/score", json=body)
        assert served.status_code == 200, served.text
        bad = client.post("/score", json={**body, "token_logprobs": [[0.5]] * 5})
        # as an OpenAI-compatible reply has them: its `logprobs`, or the list of token entries
        chat = [{"content": [{"token": "t", "logprob": v, "top_logprobs": []} for v in lps]}
                if k % 2 else [{"token": "t", "logprob": v} for v in lps]
                for k, lps in enumerate(body["token_logprobs"])]  # fmt: skip
        openai = client.post("/score", json={**body, "token_logprobs": chat})
        odd = client.post("/score", json={**body, "token_logprobs": [[{"token": "t"}]] * 5})
    assert openai.status_code == 200, openai.text
    assert openai.json()["scores"] == served.json()["scores"]
    assert odd.status_code == 422 and "token 1" in odd.text
    np.testing.assert_allclose([s["probability"] for s in served.json()["scores"]],
                               [r["score"] for r in out[:5]], atol=1e-5)  # fmt: skip
    assert bad.status_code == 422 and "0.5 is above 0; a log-probability is 0 or below" in bad.text
    # a file whose log-probability column is named otherwise: every score question-only, said
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text("".join(json.dumps({"question": q.text, "popularity":
                                           q.extra["popularity"], "conf": [-0.1]}) + "\n"
                               for q in test[:3]))  # fmt: skip
    capsys.readouterr()
    assert main(["score", "--model", str(export), "--questions", str(renamed)]) == 0
    said = capsys.readouterr()
    assert "none of the 3 questions has a token_logprobs (or mean_logprob) value: every score " \
           "is the question-only score" in said.err and "--field token_logprobs=COLUMN" in said.err  # fmt: skip
    alone = [json.loads(line)["score"] for line in said.out.splitlines()]
    fields = ["--field", "token_logprobs=conf"]
    assert main(["score", "--model", str(export), "--questions", str(renamed), *fields]) == 0
    said = capsys.readouterr()
    assert "none of the 3" not in said.err  # read under the name given: the answer level scores
    assert not np.allclose(alone, [json.loads(line)["score"] for line in said.out.splitlines()])


@pytest.mark.parametrize(
    "cell, match",
    [('"[-0.1, oops]"', "not a JSON list"), ('"[-0.1, 0.5]"', "above 0"),
     ('"[]"', "empty list"), ('"{""a"": 1}"', "not a list")],
)  # fmt: skip
def test_a_bad_token_logprobs_cell_is_named_by_file_and_line(
    tmp_path, cell, match, monkeypatch, capsys
):
    import retrieval_gate.gates.onnx as onnx_gates

    def no_model(*a, **k):
        raise AssertionError("the model was opened before the input was checked")

    monkeypatch.setattr(onnx_gates, "open_onnx", no_model)
    path = tmp_path / "q.csv"
    path.write_text(f'question,token_logprobs\nWho wrote Hamlet?,"[-0.1]"\nWho?,{cell}\n')
    model = tmp_path / "export"
    model.mkdir()
    (model / "gate_metadata.json").write_text("{}")
    assert main(["score", "--model", str(model), "--questions", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}, line 3" in err and match in err, err


def test_features_training_never_saw_read_as_missing_when_scoring():
    """Trained on means only (SmolLM2's committed labels), a full token list scores as its
    mean: min, first token and length stay flagged missing, as in training."""
    conf = AnswerConfidence.fit([_q(0, mean_logprob=-0.2), _q(1, mean_logprob=-1.5)])
    assert conf.observed == (True, False, False, False)
    full = conf.matrix([_q(2, token_logprobs=[-0.1, -0.3])])
    mean_only = conf.matrix([_q(3, mean_logprob=-0.2)])
    np.testing.assert_array_equal(full, mean_only)


def test_a_question_only_gate_or_router_on_answer_logprobs_names_what_reads_them(tmp_path, caplog):
    from retrieval_gate.training.trainer import _say_answers_unread

    labels = tmp_path / "closed-book.jsonl"
    labels.write_text('{"id": "a", "label": 1, "token_logprobs": [-0.5, -2.0]}\n'
                      '{"id": "b", "label": 0}\n')  # fmt: skip
    said = "1 questions of"
    for config, says in (("minilm-closed-book", True), ("cascade-closed-book", False)):
        caplog.clear()
        with caplog.at_level("INFO"):
            _say_answers_unread(load_config(config, [f"data.label_file={labels}"]))
        assert (said in caplog.text and "--config cascade-closed-book" in caplog.text) == says
    caplog.clear()  # said once a file: `transfer --learned` trains a gate per cell
    with caplog.at_level("INFO"):
        _say_answers_unread(load_config("minilm-closed-book", [f"data.label_file={labels}"]))
    assert said not in caplog.text
    # a router's strategy labels: the two-stage gate behind it, by --answer-gate
    strategies = tmp_path / "strategies.jsonl"
    row = {"id": "a", "label": 0, "correct": {"no_retrieval": True, "one_retrieval": True},
           "cheapest": "no_retrieval", "target": "no_retrieval", "target_from": "cheapest",
           "token_logprobs": {"no_retrieval": [-0.1], "one_retrieval": None}}  # fmt: skip
    strategies.write_text(json.dumps(row) + "\n")
    (tmp_path / "strategies.meta.json").write_text(
        json.dumps({"strategies": ["no_retrieval", "one_retrieval"]})
    )
    caplog.clear()
    with caplog.at_level("INFO"):
        _say_answers_unread(load_config("router-adaptive-rag-llama8b",
                                        [f"data.label_file={strategies}"]))  # fmt: skip
    assert "1 questions of" in caplog.text and "`--answer-gate`" in caplog.text
    labels.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": 0}\n')  # none recorded
    caplog.clear()
    with caplog.at_level("INFO"):
        _say_answers_unread(load_config("minilm-closed-book", [f"data.label_file={labels}"]))
    assert said not in caplog.text


@pytest.mark.slow  # trains and exports a gate (seconds)
def test_score_input_refuses_answers_it_would_not_read(tmp_path, capsys, caplog):
    """`score --input` reads ids and texts alone: a two-stage gate scored a file's
    token_logprobs rows on their text, every score question-only, without a word."""
    questions, outcomes = _write_user_data(tmp_path)
    labels = tmp_path / "labels"
    assert main(["label", "--policy", "outcomes", "--outcomes", str(outcomes), "--questions",
                 str(questions), "--generator", "my-llm", "--labels-dir", str(labels)]) == 0  # fmt: skip
    body = _tiny_body(tmp_path, questions)
    assert main(["train", "--config", "cascade-closed-book", "--set", *body,
                 f"data.questions={questions}", f"data.label_file={labels / 'my-llm' / 'closed-book.jsonl'}",
                 f"run.output_dir={tmp_path / 'runs'}"]) == 0  # fmt: skip
    assert main(["export", "--run", str(tmp_path / "runs" / "cascade-closed-book"), "--out-dir",
                 str(tmp_path / "export"), "--variants", "fp32"]) == 0  # fmt: skip
    export = str(tmp_path / "export" / "cascade-closed-book")
    scored = tmp_path / "q.csv"
    scored.write_text('id,question,token_logprobs\n1,Who wrote Hamlet?,"[-0.1, -2.0]"\n')
    capsys.readouterr()
    assert main(["score", "--model", export, "--input", str(scored)]) == 2
    assert "its 'token_logprobs' column would go unread): pass the file as --questions" in (
        capsys.readouterr().err
    )
    text = tmp_path / "q.txt"
    text.write_text("Who wrote Hamlet?\n")
    assert main(["score", "--model", export, "--input", str(text)]) == 0
    assert "every score is the question-only score of the two-stage gate" in caplog.text


def test_the_columns_score_gathers_from_an_input_file(tmp_path):
    from retrieval_gate.data.question_lines import iter_question_lines

    def columns(name: str) -> set[str]:
        seen: set[str] = set()
        for _ in iter_question_lines(tmp_path / name, seen):
            pass
        return seen

    (tmp_path / "a.csv").write_text('\ufeffID,Question,Token_LogProbs\n1,Who?,"[-0.1]"\n')
    (tmp_path / "b.tsv").write_text("question\tmean_logprob\nWho?\t-0.3\n")
    (tmp_path / "c.jsonl").write_text('\n{"question": "Who?", "logprobs": {"content": []}}\n')
    (tmp_path / "d.jsonl").write_text("[1, 2]\n")
    (tmp_path / "e.txt").write_text("Who wrote Hamlet?\n")
    assert columns("a.csv") == {"id", "question", "token_logprobs"}
    assert columns("b.tsv") == {"question", "mean_logprob"}
    assert columns("c.jsonl") == {"question", "logprobs"}
    assert columns("d.jsonl") == columns("e.txt") == set()


def test_the_answer_level_fits_with_three_or_four_answers_of_a_kind():
    """3 right answers passed the check (at least 3 of each), then the choice of inputs asked
    scikit-learn for 5 stratified folds: a traceback (exit 1)."""
    from scipy.sparse import csr_matrix

    from retrieval_gate.training.stacked import _second_level

    rng = np.random.default_rng(0)
    n = 40
    y = np.array([1] * 30 + [0] * 10, float)
    answered = np.zeros(n, bool)
    answered[[0, 1, 2, 30, 31, 32, 33]] = True  # 3 needing retrieval, 4 not
    conf = np.where(y > 0, -2.0, -0.1) + rng.normal(0, 0.1, n)
    rest = np.column_stack([conf * answered, answered.astype(float)])
    X = csr_matrix(rng.normal(size=(n, 5)))
    w, bias = _second_level(X, y, rest, 0, None, seed=0)
    assert w.shape == (3,) and np.isfinite(w).all() and np.isfinite(bias)
