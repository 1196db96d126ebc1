"""The docs/your-data.md chain from the CLI alone, on a CSV the test writes: outcomes ->
labels -> train (text + a side feature) -> tune -> export (ONNX, parity) -> evaluate -> score
new questions. A tiny RoBERTa keeps it to seconds; every component is the real one."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from retrieval_gate.cli import main
from retrieval_gate.errors import DataError
from retrieval_gate.gates.learned import LearnedGate
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.questions import Question
from tiny_backbones import synthetic_questions, tiny_backbone


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("your-data")
    qs, labels = synthetic_questions(160, seed=3)
    rng = np.random.default_rng(0)
    # the user's question file: a popularity-like column, low where the LLM fails
    rows = [{"id": q.id, "question": q.text, "answers": json.dumps(["x"]),
             "hits": "" if i % 17 == 0 else int(rng.integers(1, 50) if labels[q.id] else
                                                 rng.integers(500, 9000))}
            for i, q in enumerate(qs)]  # fmt: skip
    questions = _write_csv(root / "questions.csv", rows)
    outcomes = _write_csv(root / "outcomes.csv", [
        {"id": q.id, "correct": str(not labels[q.id]).lower(), "rag_correct": "true"}
        for q in qs
    ])  # fmt: skip
    model = tiny_backbone("roberta", root / "tiny-roberta", [q.text for q in qs])
    run_labels = root / "labels"
    assert (
        main(
            [
                "label",
                "--policy",
                "outcomes",
                "--outcomes",
                str(outcomes),
                "--questions",
                str(questions),
                "--generator",
                "my-llm",
                "--labels-dir",
                str(run_labels),
            ]
        )
        == 0
    )
    labels_file = run_labels / "my-llm" / "closed-book.jsonl"
    assert main(["train", "--config", "configs/backbones/minilm.yaml", "--set",
                 f"data.questions={questions}", "data.features=[hits]",
                 f"data.label_file={labels_file}", f"run.output_dir={root / 'ck'}", "run.name=mine",
                 f"model.name={model}", "model.pooling=cls", "data.max_length=24",
                 "trainer.max_epochs=2", "trainer.enable_progress_bar=false", "model.lr=1e-3",
                 "model.head_lr=1e-2"]) == 0  # fmt: skip
    run = root / "ck" / "mine"
    assert main(["tune", "--gate", "learned", "--learned-run", str(run), "--labels",
                 str(labels_file), "--run-dir", str(labels_file.parent), "--questions",
                 str(questions), "--objective", "adaptive-accuracy", "--trials", "10",
                 "--storage", str(root / "studies.db"), "--out", str(root / "tune"),
                 "--save-objective", "adaptive-accuracy"]) == 0  # fmt: skip
    assert main(["export", "--run", str(run), "--out-dir", str(root / "export"),
                 "--variants", "fp32", "int8"]) == 0  # fmt: skip
    assert main(["evaluate", "--labels", str(labels_file), "--run-dir", str(labels_file.parent),
                 "--questions", str(questions), "--gates", "always", "never", "popularity",
                 "onnx", "--onnx", str(root / "export" / "mine"), "--feature", "hits",
                 "--no-cost", "--resamples", "50", "--out", str(root / "report")]) == 0  # fmt: skip
    return {"root": root, "run": run, "export": root / "export" / "mine", "labels": labels_file}


def test_run_and_export_carry_the_side_feature(chain):
    model = onnx.load(str(chain["export"] / "model.onnx"))
    meta = {p.key: p.value for p in model.metadata_props}
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "features"]
    side = json.loads(meta["side_features"])
    assert side["names"] == ["hits"] and len(side["mean"]) == 1
    assert (
        float(meta["threshold"])
        == json.loads((chain["run"] / "metadata.json").read_text())["threshold"]
    )
    parity = json.loads((chain["export"] / "parity.json").read_text())
    assert parity["variants"]["fp32"]["passed"] and parity["n"] > 0
    # the scaling is a training result in metadata.json, not a config key
    run_meta = json.loads((chain["run"] / "metadata.json").read_text())
    assert run_meta["side_features"] == side
    assert (
        "side_features" not in yaml.safe_load((chain["run"] / "config.yaml").read_text())["model"]
    )


def test_a_run_from_before_the_typed_config_still_loads(chain, tmp_path):
    """Runs trained before the scaling moved to metadata.json kept it in config.yaml as
    model.side_features: they load, score and export the same."""
    import shutil

    old = Path(shutil.copytree(chain["run"], tmp_path / "old-run"))
    meta = json.loads((old / "metadata.json").read_text())
    config = yaml.safe_load((old / "config.yaml").read_text())
    config["model"]["side_features"] = meta.pop("side_features")
    (old / "metadata.json").write_text(json.dumps(meta))
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    (old / "manifest.json").unlink()  # such runs had none: read from their metadata and config
    meta.pop("manifest")  # nor did their metadata say they wrote one
    (old / "metadata.json").write_text(json.dumps(meta))
    qs = [Question(f"n{i}", t, ("x",), "mine", extra={"hits": h})
          for i, (t, h) in enumerate([("who is zorblat quenvik?", 3), ("capital of france?", 4000)])]  # fmt: skip
    np.testing.assert_array_equal(LearnedGate(old).scores(qs), LearnedGate(chain["run"]).scores(qs))


def test_a_folder_that_wrote_a_manifest_and_lost_it_is_refused(chain, tmp_path):
    """Deleting a new export's (or run's) manifest.json turned every checksum check off: it
    was read as a folder from before manifests, a swapped model file scored unchecked."""
    import shutil

    from retrieval_gate.artifacts import open_artifact
    from retrieval_gate.errors import DataError

    for kind in ("run", "export"):
        copy = Path(shutil.copytree(chain[kind], tmp_path / kind))
        (copy / "manifest.json").unlink()
        with pytest.raises(DataError, match=r"manifest.json is missing, and its \w*metadata.json "
                           f"says this {kind} wrote one"):  # fmt: skip
            open_artifact(copy)


def test_feature_changes_the_score_and_missing_one_is_an_error(chain):
    gate = OnnxGate(chain["export"])
    base = dict(id="new", text="what is the zorblat of quenvik tesque number 999?", answers=(),
                source="mine")  # fmt: skip
    rare = gate.scores([Question(**base, extra={"hits": 3})])
    famous = gate.scores([Question(**base, extra={"hits": 80000})])
    unknown = gate.scores([Question(**base, extra={"hits": None})])
    assert rare[0] != famous[0] and np.isfinite(unknown[0])
    torch_gate = LearnedGate(chain["run"])
    assert abs(torch_gate.scores([Question(**base, extra={"hits": 3})])[0] - rare[0]) < 1e-4
    with pytest.raises(DataError, match="has no 'hits': this gate uses the side features hits"):
        gate.scores([Question(**base)])
    with pytest.raises(DataError, match="needs the side features hits"):
        gate.score_texts(["who?"])


def test_evaluate_report_and_score_new_questions(chain, capsys):
    report = json.loads((chain["root"] / "report" / "results.json").read_text())
    gates = {g["name"] for g in report["policies"]["my-llm/closed-book"]["gates"]}
    assert {"always", "never", "popularity", "onnx:mine:fp32"} <= gates
    assert "Your question file's split" in (chain["root"] / "report" / "report.md").read_text()
    new = _write_csv(chain["root"] / "new.csv", [
        {"question": "who is the author of grisk ulbrecht?", "hits": 4},
        {"question": "what is the capital of france paris?", "hits": 7000},
    ])  # fmt: skip
    out = chain["root"] / "scores.jsonl"
    assert main(["score", "--model", str(chain["export"]), "--questions", str(new),
                 "--output", str(out)]) == 0  # fmt: skip
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == 2 and all(0 <= r["score"] <= 1 for r in scored)
    assert scored[0]["id"].startswith("q-")  # no id column: a stable id from the text


def test_tune_takes_the_onnx_gate_with_its_flag(chain):
    """`tune --gate onnx --onnx DIR` (the shared gate flags: tune had no --onnx before)."""
    out = chain["root"] / "tune-onnx"
    assert main(["tune", "--gate", "onnx", "--onnx", str(chain["export"]), "--variant", "int8",
                 "--labels", str(chain["labels"]), "--run-dir", str(chain["labels"].parent),
                 "--questions", str(chain["root"] / "questions.csv"), "--objective", "macro-f1",
                 "--storage", str(out / "studies.db"), "--out", str(out)]) == 0  # fmt: skip
    result = json.loads((out / "tune-onnx-closed-book.json").read_text())
    assert result["gate"] == "onnx:mine:int8"
    assert [k for k in result["thresholds"] if k.startswith("macro-f1")]


def test_model_card_is_true_to_the_gate_and_its_snippet_runs(chain, capsys):
    """The card names the user's question file and side feature (no bundled datasets), and its
    "Use" snippet, run as written, scores with the feature."""
    import re

    card = (chain["export"] / "README.md").read_text()
    assert "questions.csv" in card and "side features hits" in card
    assert "canonical split" not in card and "datasets:" not in card.split("---")[1]
    snippet = re.search(r"## Use\n```python\n(.*?)```", card, re.S).group(1)
    assert 'features={"hits": [None]}' in snippet
    exec(compile(snippet, "card", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.strip() in ("[ True]", "[False]")


def test_score_tells_a_side_feature_gate_needs_questions(chain, capsys):
    lines = chain["root"] / "lines.txt"
    lines.write_text("who is the author of grisk ulbrecht?\n")
    assert main(["score", "--model", str(chain["export"]), "--input", str(lines)]) == 2
    err = capsys.readouterr().err
    assert "side features hits" in err and "pass --questions FILE" in err


def test_export_notes_each_step_and_keeps_library_warnings_out(chain, tmp_path, capsys):
    capsys.readouterr()
    assert main(["export", "--run", str(chain["run"]), "--out-dir", str(tmp_path),
                 "--variants", "fp32", "int8"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    steps = [line for line in err.splitlines() if line.startswith("note: export: ")]
    assert [s.split(" [")[0] for s in steps][1:] == [
        "note: export: fp32 ONNX graph (tracing the model)",
        f"note: export: int8 (static, scales calibrated on {len(steps) and _dev(chain)} dev questions)",
        f"note: export: parity: {_test(chain)} test questions through PyTorch and each variant",
        "note: export: model card",
    ]
    assert "Warning" not in err and "WARNING" not in err, err
    assert not any(line.startswith("INFO:") for line in err.splitlines()), err  # no root handler


def _dev(chain) -> int:
    return len(json.loads((chain["run"] / "metadata.json").read_text())["calibration"]["texts"])


def _test(chain) -> int:
    return json.loads((chain["run"] / "labels.json").read_text())["counts"]["test"]["n"]


def test_serve_takes_each_questions_side_features_in_the_request(chain):
    """`serve` of a gate trained with `data.features` failed at startup (its warm-up question
    had no `hits`: a traceback, exit); /score could not carry a feature at all."""
    from fastapi.testclient import TestClient

    from retrieval_gate.rag.service import create_app

    gate = OnnxGate(chain["export"])
    texts = ["who is the author of grisk ulbrecht?", "what is the capital of france paris?"]
    with TestClient(create_app(gate, warm_up=True)) as client:  # the warm-up runs here
        ok = client.post("/score", json={"questions": texts, "features": {"hits": [4, None]}})
        assert ok.status_code == 200, ok.text
        sent = [Question(f"h{i}", t, (), "http", extra={"hits": h})
                for i, (t, h) in enumerate(zip(texts, [4, None], strict=True))]  # fmt: skip
        got = [s["probability"] for s in ok.json()["scores"]]
        np.testing.assert_allclose(got, gate.scores(sent), atol=1e-6)  # as score --questions
        for body, detail in [
            (
                {"questions": texts},
                "reads side features (hits), per column one value per "
                'question, null when unknown, e.g. {"hits": [1.0, null]}',
            ),  # fmt: skip
            (
                {"questions": texts, "features": {"hits": [4]}},
                "'hits' has 1 values for 2 "
                "questions: give one per question (None, null in JSON: unknown)",
            ),
            # pydantic: "Input should be a valid number / list / dictionary or object ..."
            (
                {"questions": texts, "features": {"hits": [4, "x"]}},
                "features.hits.1: a string; "
                'send a number (null when unknown), e.g. {"hits": [1.0, null]}',
            ),
            (
                {"questions": texts, "features": {"hits": 4}},
                "features.hits: a number; send a list of one value per question",
            ),
            (
                {"questions": texts, "features": [{"hits": 4}, {"hits": 1}]},
                "features: an array; send one list per column, of one value per question",
            ),
            (
                {"questions": texts, "features": {"hits": [1, 2], "views": [1, 2]}},
                "features.views: not a side feature of the served gate (it reads hits)",
            ),
            (
                {"questions": texts, "features": {"hits": [1, 2]}, "token_logprobs": None},
                "token_logprobs: not a key this request takes (it takes questions, features): "
                "answers' log-probabilities are read by a two-stage gate",
            ),  # a gate of the question alone reads no answer
        ]:
            bad = client.post("/score", json=body)
            assert bad.status_code == 422 and detail in bad.json()["detail"], bad.text
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert schema["ScoreRequest"]["required"] == ["questions", "features"]


def test_the_framework_adapters_refuse_a_gate_that_reads_side_features(chain):
    """A framework hands the adapter the question alone: a gate trained with `hits` failed at
    the first question ("question '0' has no 'hits' ... pass them in Question.extra")."""
    from langchain_core.runnables import RunnableLambda

    from retrieval_gate import RetrievalGate
    from retrieval_gate.errors import ConfigError
    from retrieval_gate.integrations.langchain import GateRouter

    gate = RetrievalGate.from_pretrained(chain["export"])
    echo = RunnableLambda(lambda x: x)
    with pytest.raises(ConfigError, match="also reads the side features hits beside the "
                       "question, which a framework's input does not carry"):  # fmt: skip
        GateRouter(gate, retrieve=echo, direct=echo)
