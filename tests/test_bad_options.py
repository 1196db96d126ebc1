"""A plan before engines (issue 36): every verb refuses a bad option value with one clear line
that names the flag or file (exit 2; no traceback) BEFORE any engine, server, Ray cluster,
training run or export starts. Each case runs `retrieval_gate.cli.main` in-process with every
engine constructor replaced by one that fails the test, so a check that comes too late shows
as "engine started" rather than as a slow test. No model is loaded anywhere in this file."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass

import pytest

from retrieval_gate.cli import main

# What starts an engine, a server, a cluster or heavy work (a training run, an export, worker
# processes); `retrieval_gate.rag.backends.open_generator` and `lazy_generator` come before
# any vLLM or transformers engine (they read the model's config and tokenizer).
ENGINES = (
    "retrieval_gate.generation.build_generator",
    "retrieval_gate.generation.vllm_backend.VLLMGenerator.__init__",
    "retrieval_gate.generation.hf_backend.TransformersGenerator.__init__",
    "retrieval_gate.generation.cache.lazy_generator",
    "retrieval_gate.generation.remote.RemoteGenerator.__init__",
    "retrieval_gate.rag.backends.open_generator",
    "retrieval_gate.labels.ray_engine.RayEngine.__init__",
    "retrieval_gate.labels.ray_engine._init_ray",
    "retrieval_gate.rag.service.create_app",
    "retrieval_gate.rag.service.serve",
    "uvicorn.run",
    "retrieval_gate.export.build.build_export",
    "retrieval_gate.training.trainer.train",
    "retrieval_gate.tuning.workers.run_workers",
)

# Cases whose fix belongs to code another engineer owns (commands/score.py): reported there.
ELSEWHERE: dict[str, str] = {}  # cases another module still fails (none)


def _started(*_, **__):
    raise AssertionError("engine started")


@pytest.fixture
def no_engine(monkeypatch):
    for target in ENGINES:
        if importlib.util.find_spec(target.split(".")[0]):  # uvicorn: the serve extra
            monkeypatch.setattr(target, _started)


def _lines(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _workspace(t) -> None:
    """The bad (and a few good) inputs the cases point at, under the test's tmp_path."""
    (t / "dir").mkdir()
    (t / "file.txt").write_text("not a folder\n")
    (t / "mine").mkdir()  # files of the user's, named as the verbs name their reports
    for name in ("report.md", "tune-popularity-closed-book.json", "transfer.md", "r.modes.jsonl"):
        (t / "mine" / name).write_text("mine\n")
    (t / "q.jsonl").write_text(_lines({"id": f"q{i}", "question": f"Who is {i}?",
                                       "answers": ["x"]} for i in range(4)))  # fmt: skip
    (t / "bad_row.jsonl").write_text('{"id": "q1", "question": "Who?"}\n{"id": "q2", "quest\n')
    (t / "empty.jsonl").write_text("")
    (t / "dup.yaml").write_text(
        "strategies:\n  - name: no_retrieval\n  - name: one_retrieval\n  - name: no_retrieval\n"
    )
    (t / "two.yaml").write_text("strategies:\n  - name: no_retrieval\n  - name: one_retrieval\n")
    three = ["no_retrieval", "one_retrieval", "multi_step"]
    (t / "strategies.jsonl").write_text(_lines(  # strategy labels over three strategies
        {"id": f"q{i}", "label": 1, "correct": dict.fromkeys(three, True),
         "target": "one_retrieval"} for i in range(4)))  # fmt: skip
    (t / "strategies.meta.json").write_text(json.dumps({"policy": "strategies",
                                                        "strategies": three}))  # fmt: skip
    (t / "labels_bad.jsonl").write_text('{"id": "q1", "label": 1}\n{"id": "q2"}\n')
    (t / "labels_bad.meta.json").write_text('{"policy": "closed-book"}')
    _exports(t, three)
    (t / "run_empty").mkdir()
    (t / "run_answers_folder" / "closed-book.jsonl").mkdir(parents=True)  # read as no answers
    run = t / "run_truncated"  # every file a run has, the metadata cut short
    for part in ("backbone", "tokenizer"):
        (run / part).mkdir(parents=True)
    (run / "gate.pt").write_bytes(b"")
    (run / "metadata.json").write_text('{"task": "bin')
    (run / "config.yaml").write_text("model: {")


def _exports(t, strategies: list[str]) -> None:
    """Export folders: empty, metadata cut short, a router (costs 0, 1, 3.35) and a router
    whose calibration lacks its costs. Their model.onnx is not ONNX: nothing may load it."""
    (t / "export_empty").mkdir()
    bad = t / "export_truncated"
    bad.mkdir()
    (bad / "model.onnx").write_bytes(b"")
    (bad / "gate_metadata.json").write_text('{"router": {"strategies": ["no_re')
    curve = {"price": [0.0], "mean_cost": [1.0], "shares": [[0.2, 0.6, 0.2]]}
    router = {"strategies": strategies, "costs": [0.0, 1.0, 3.35], "dev": curve,
              "default_budget": 1.0, "default_price": 0.0, "objective": "budget-accuracy"}  # fmt: skip
    nocosts = {k: v for k, v in router.items() if k != "costs"}
    for name, meta in (("router", router), ("router_nocosts", nocosts)):
        (t / name).mkdir()
        (t / name / "model.onnx").write_bytes(b"not onnx")
        (t / name / "tokenizer.json").write_text("{}")
        (t / name / "gate_metadata.json").write_text(json.dumps({"task": "strategies",
                                                                 "router": meta}))  # fmt: skip


@dataclass(frozen=True)
class Case:
    argv: str  # `{t}` is the test's tmp_path
    expect: tuple[str, ...]  # each of these is in the error
    forbid: tuple[str, ...] = ()  # more targets this case must not reach


def C(argv: str, *expect: str, forbid: tuple[str, ...] = ()) -> Case:
    return Case(argv, expect, forbid)


LABELS = "data/labels/smollm2-135m-instruct/closed-book.jsonl"
URL = "--generator-url http://127.0.0.1:9/v1"  # nothing listens: asking it would hang, then fail
LABEL = f"label --policy closed-book {URL} --labels-dir {{t}}/lab"
STRAT = f"label --policy strategies {URL} --labels-dir {{t}}/lab"
GATE = "--gate always"
EVAL = f"evaluate --gates always --labels {LABELS} --out {{t}}/ev --no-cost"
TUNE = f"tune --gate popularity --labels {LABELS} --out {{t}}/tu"
SCORE = "score --model {t}/router --input {t}/q.jsonl"

# fmt: off
CASES = {
    # ---------------------------------------------------------------- label
    "label-backend-unused": C("label --policy popularity --backend vllm --out {t}/p.jsonl", "--backend picks the in-process generator", "popularity"),
    "label-questions-missing": C(f"{LABEL} --questions {{t}}/missing.jsonl", "missing.jsonl"),
    "label-questions-bad-row": C(f"{LABEL} --questions {{t}}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    "label-questions-empty": C(f"{LABEL} --questions {{t}}/empty.jsonl", "empty.jsonl"),
    "label-questions-dir": C(f"{LABEL} --questions {{t}}/dir", "dir"),
    "label-limit-negative": C(f"{LABEL} --limit -1", "--limit"),
    "label-chunk-size-zero": C(f"{LABEL} --chunk-size 0", "--chunk-size"),
    "label-k-zero": C(f"{LABEL} --k 0", "--k"),
    "label-eq-sample-negative": C(f"{LABEL} --eq-sample -1", "--eq-sample"),
    "label-t-ans-out-of-range": C(f"label --policy rrcp --t-ans 2 {URL}", "--t-ans"),
    "label-throughput-negative": C("label --throughput -1 --backend transformers", "--throughput"),
    "label-labels-dir-is-a-file": C(f"label --policy closed-book {URL} --labels-dir {{t}}/file.txt", "--labels-dir", "file.txt"),
    "label-out-and-labels-dir": C("label --policy popularity --out {t}/p.jsonl --labels-dir {t}/lab", "--out and --labels-dir both say where --policy popularity writes"),
    "label-outcomes-missing": C("label --policy outcomes --questions {t}/q.jsonl --labels-dir {t}/lab --outcomes {t}/missing.csv", "missing.csv"),
    "label-corpus-missing": C(f"{LABEL} --policy rag-gain --corpus {{t}}/missing.jsonl", "missing.jsonl"),
    "label-generator-url-bad": C("label --policy closed-book --generator-url host:8000 --labels-dir {t}/lab", "--generator-url"),
    "label-ray-actors-absurd": C(f"{LABEL} --engine ray --actors 100000", "--actors"),
    "label-ray-actors-zero": C(f"{LABEL} --engine ray --actors 0", "--actors"),
    "label-ray-in-flight-zero": C(f"{LABEL} --engine ray --in-flight 0", "--in-flight"),
    "label-ray-batch-zero": C(f"{LABEL} --engine ray --ray-batch-size 0", "--ray-batch-size"),
    # a thread per request in flight, a batch's rows in memory: 10^20 of either reached Ray
    "label-ray-in-flight-absurd": C(f"{LABEL} --engine ray --in-flight {10**20}", "--in-flight", "at most 1,024"),
    "label-ray-batch-absurd": C(f"{LABEL} --engine ray --ray-batch-size {10**20}", "--ray-batch-size", "at most 100,000"),
    # the --engine ray flags, --eq-sample/--seed and the question picks went unused
    "label-ray-flag-local": C(f"{LABEL} --actors 0", "--actors goes with --engine ray"),
    "label-ray-backend-local": C(f"{LABEL} --ray-backend vllm", "--ray-backend goes with --engine ray"),
    "label-eq-sample-no-eq": C(f"{LABEL} --dataset popqa --eq-sample 5", "--eq-sample sets the EntityQuestions sample", "--dataset popqa"),
    "label-seed-own-questions": C(f"{LABEL} --questions {{t}}/q.jsonl --seed 3", "--seed sets the EntityQuestions sample", "--questions"),
    "label-outcomes-limit": C("label --policy outcomes --questions {t}/q.jsonl --labels-dir {t}/lab --outcomes {t}/q.jsonl --limit 5", "--limit picks the questions", "every row"),
    "label-outcomes-dataset": C("label --policy outcomes --labels-dir {t}/lab --outcomes {t}/q.jsonl --dataset triviaqa", "--dataset picks the questions"),
    "label-strategies-duplicate": C(f"{STRAT} --strategies {{t}}/dup.yaml", "dup.yaml", "duplicate"),
    "label-strategies-unknown-name": C(f"{STRAT} --strategies no_retrieval bogus", "bogus"),
    "label-strategies-max-steps-zero": C(f"{STRAT} --max-steps 0", "--max-steps"),
    "label-strategies-limit-negative": C(f"{STRAT} --limit -1", "--limit"),
    "label-strategies-questions-bad-row": C(f"{STRAT} --questions {{t}}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    # ---------------------------------------------------------------- rag
    "rag-limit-negative": C("rag --modes never --limit -1", "--limit"),
    # 0 was "every question" (label and evaluate refuse it): `--limit all` says so on purpose
    "rag-limit-zero": C("rag --modes never --limit 0", "--limit", "--limit all"),
    # a gate flag no gate of the run reads went unused, even a missing folder
    "rag-gate-flag-unused": C("rag --modes never --onnx {t}/missing-export", "--onnx is read by the onnx gate", "never"),
    "rag-labels-unused": C("rag --modes never always --labels {t}/missing.jsonl", "--labels fits the gates", "never always"),
    "rag-oracle-labels-unused": C("rag --modes never --oracle-labels {t}/missing.jsonl", "--oracle-labels goes with the oracle mode"),
    "evaluate-generator-unused": C(f"{EVAL} --generator {{t}}/missing-model", "--generator is asked by the", "(always)"),
    "evaluate-cost-questions-unused": C(f"{EVAL} --cost-questions 5", "--cost-questions", "--no-cost"),
    "evaluate-cost-axis-binary": C(f"{EVAL} --cost-axis both", "--cost-axis both", "binary"),
    "evaluate-gate-flag-unused": C(f"{EVAL} --learned-run {{t}}/missing-run", "--learned-run is read by the learned gate"),
    "tune-budget-unused": C(f"{TUNE} --objective macro-f1 --budget 0.5", "--budget is read by --objective budget-accuracy", "macro-f1"),
    "tune-set-unused": C(f"{TUNE} --objective macro-f1 --set model.lr=0.1", "--set is read by --objective hparams"),
    "tune-target-unused": C(f"{TUNE} --objective adaptive-accuracy --target 0.5", "--target is read by"),
    "tune-workers-unused": C(f"{TUNE} --objective macro-f1 --workers 2", "--workers is read by --objective pareto"),
    "tune-gate-flag-unused": C(f"{TUNE} --variant int8", "--variant is read by the onnx gate", "popularity"),
    "serve-gate-flag-unused": C("serve --mode gate --router {t}/router --variant int8", "--variant is read by the onnx gate", "router"),
    "rag-progress-file-of-yours": C("rag --modes never --out {t}/mine/r.md", "r.modes.jsonl", "not its progress file"),
    "rag-unknown-mode": C("rag --modes never bogus", "bogus", "--modes"),
    "rag-mode-twice": C("rag --modes never always never", "--modes", "more than once"),
    "rag-strategies-duplicate": C("rag --modes never --strategies {t}/dup.yaml", "dup.yaml", "duplicate"),
    "rag-strategies-missing": C("rag --modes never --strategies {t}/missing.yaml", "missing.yaml"),
    "rag-k-zero": C("rag --modes never -k 0", "-k"),
    # comma-joined values were one unknown choice, with no word of the spaces they go with
    "rag-modes-comma-joined": C("rag --modes never,always", "separate the modes with spaces: --modes never always"),
    "evaluate-gates-comma-joined": C(f"evaluate --gates tfidf,always --labels {LABELS}", "separate the values with spaces: --gates tfidf always"),
    "rag-k-as-label-spells-it": C("rag --modes never --k 0", "-k must be at least 1, got 0"),
    "rag-max-new-tokens-zero": C("rag --modes never --max-new-tokens 0", "--max-new-tokens"),
    "rag-max-steps-absurd": C("rag --modes never --max-steps 999", "--max-steps"),
    "rag-multi-step-unused": C("rag --modes never always --step-k 2", "--step-k", "no mode of this run runs it", "add the multi-step mode"),
    # the retrieval flags went unused (the report named them as its setup)
    "rag-retrieval-unused": C("rag --modes never -k 9", "-k sets the retrieval", "no mode of this run retrieves (never)"),
    "rag-corpus-unused": C("rag --modes never no_retrieval --corpus {t}/missing.jsonl", "--corpus sets the retrieval", "(never no_retrieval)"),
    "serve-retriever-unused": C("serve --gate never --retriever dense", "--retriever sets the retrieval", "(never)"),
    "serve-multi-step-unused": C(f"serve {GATE} --max-docs 3", "--max-docs", "no mode of this run runs it (always)"),
    "rag-tensor-parallel-absurd": C("rag --modes never --tensor-parallel-size 999", "--tensor-parallel-size"),
    "rag-data-parallel-zero": C("rag --modes never --data-parallel-size 0", "--data-parallel-size"),
    "rag-data-parallel-in-process": C("rag --modes never --data-parallel-size 2", "--data-parallel-size", "--generator-url"),
    "rag-generator-url-bad": C("rag --modes never --generator-url ftp://host/v1", "--generator-url", "http"),
    "rag-questions-missing": C("rag --modes never --questions {t}/missing.jsonl", "missing.jsonl"),
    "rag-questions-bad-row": C("rag --modes never --questions {t}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    "rag-corpus-missing": C("rag --modes always --corpus {t}/missing.jsonl", "missing.jsonl"),
    "rag-corpus-dir": C("rag --modes always --corpus {t}/dir", "dir", "--corpus"),
    "rag-model-missing": C("rag --modes never --model {t}/missing-model", "missing-model"),
    # label's spelling: read as --generator-url (its prefix), "give the server's http(s) URL"
    "rag-generator-as-label-spells-it": C("rag --modes never --generator {t}/missing-model", "missing-model: no model folder here"),
    # --labels, a prefix of --labels-dir: a folder named new.jsonl was made, the labels in it
    "label-labels-dir-a-file-name": C("label --policy popularity --dataset popqa --limit 3 --labels {t}/new.jsonl", "names a folder", "to name the label file, pass --out"),
    "label-model-as-rag-spells-it": C(f"{LABEL.replace(URL, '--model {t}/missing-model')}", "missing-model: no model folder here"),
    "rag-labels-missing": C("rag --modes popularity --labels {t}/missing.jsonl", "missing.jsonl"),
    "rag-threshold-unknown-mode": C("rag --modes never --threshold bogus=0.5", "bogus", "--threshold"),
    "rag-threshold-twice": C("rag --modes never --threshold never=0.2 --threshold never=0.6", "--threshold never is given more than once"),
    "rag-out-under-a-file": C("rag --modes never --out {t}/file.txt/report", "--out", "file.txt"),
    # a trailing slash names a folder (an existing one is refused): `new/` wrote new.md
    "rag-out-new-folder": C("rag --modes never --out {t}/new/", "/new/ names a folder", "pass a file name, e.g. --out ", "/new/report"),
    "rag-out-is-a-file-of-yours": C("rag --modes never --out {t}/mine/report", "report.md", "did not write it", "--out"),
    "rag-onnx-is-a-file": C("rag --modes onnx --onnx {t}/file.txt", "file.txt"),
    "rag-onnx-empty-export": C("rag --modes onnx --onnx {t}/export_empty", "export_empty"),
    "rag-learned-run-empty": C("rag --modes learned --learned-run {t}/run_empty", "run_empty"),
    "rag-learned-run-truncated": C("rag --modes learned --learned-run {t}/run_truncated", "run_truncated"),
    "rag-router-empty": C("rag --modes never router --router {t}/export_empty", "export_empty"),
    "rag-router-truncated": C("rag --modes never router --router {t}/export_truncated", "export_truncated"),
    "rag-router-no-costs": C("rag --modes never router --router {t}/router_nocosts --budget 1", "router_nocosts", "costs"),
    "rag-budget-above-dearest": C("rag --modes never router --router {t}/router --budget 99", "--budget", "3.35"),
    "rag-budget-negative": C("rag --modes never router --router {t}/router --budget -1", "--budget"),
    # ---------------------------------------------------------------- serve
    "serve-recorded-gate": C("serve --mode gate --gate recorded --recorded {t}/q.jsonl", "--gate recorded", "by question id"),
    "serve-port-zero": C(f"serve {GATE} --port 0", "--port"),
    "serve-port-absurd": C(f"serve {GATE} --port 70000", "--port"),
    # a route pasted from a curl example: asked .../chat/completions/models, "no endpoint answered"
    "rag-generator-url-a-route": C("rag --modes never --limit 1 --generator-url http://127.0.0.1:9/v1/chat/completions", "give the server's base URL, http://127.0.0.1:9/v1 (the client adds /chat/completions itself)"),
    "label-generator-url-a-route": C("label --policy closed-book --generator-url http://127.0.0.1:9/v1/completions/ --labels-dir {t}/lab", "base URL, http://127.0.0.1:9/v1 (the client adds /completions"),
    "serve-host-a-url": C(f"serve {GATE} --host http://127.0.0.1", "not an address here", "a host name or address alone"),
    "serve-host-bracketed": C(f"serve {GATE} --host [::1]", "without brackets: --host ::1"),
    "serve-max-batch-zero": C(f"serve {GATE} --max-batch 0", "--max-batch"),
    "serve-timeout-nan": C(f"serve {GATE} --request-timeout nan", "--request-timeout"),
    "serve-tensor-parallel-absurd": C(f"serve {GATE} --tensor-parallel-size 999", "--tensor-parallel-size"),
    "serve-data-parallel-in-process": C(f"serve {GATE} --data-parallel-size 2", "--data-parallel-size"),
    "serve-strategies-duplicate": C(f"serve {GATE} --strategies {{t}}/dup.yaml", "dup.yaml", "duplicate"),
    "serve-model-missing": C(f"serve {GATE} --model {{t}}/missing-model", "missing-model"),
    "serve-corpus-missing": C(f"serve {GATE} --corpus {{t}}/missing.jsonl", "missing.jsonl"),
    "serve-onnx-truncated": C("serve --gate onnx --onnx {t}/export_truncated", "export_truncated"),
    "serve-router-empty": C("serve --router {t}/export_empty", "export_empty"),
    "serve-router-no-costs": C("serve --router {t}/router_nocosts --budget 1", "router_nocosts", "costs"),
    "serve-budget-above-dearest": C("serve --router {t}/router --budget 99", "--budget", "3.35"),
    "serve-gate-mode-budget-above-dearest": C("serve --mode gate --router {t}/router --budget 99", "--budget", "3.35"),
    "serve-unknown-gate": C("serve --gate bogus", "--gate", "bogus"),
    "serve-gate-mode-asks-generator": C("serve --mode gate --gate confidence", "confidence", "--mode answer"),
    "serve-generator-url-bad": C(f"serve {GATE} --generator-url localhost:8000", "--generator-url"),
    "serve-learned-run-truncated": C("serve --gate learned --learned-run {t}/run_truncated", "run_truncated"),
    # ---------------------------------------------------------------- evaluate
    "evaluate-unknown-gate": C(f"evaluate --gates always bogus --labels {LABELS} --out {{t}}/ev", "--gates", "bogus"),
    "evaluate-labels-missing": C("evaluate --gates always --labels {t}/missing.jsonl --out {t}/ev", "missing.jsonl"),
    "evaluate-labels-dir": C("evaluate --gates always --labels {t}/dir --out {t}/ev", "dir"),
    "evaluate-labels-bad-row": C("evaluate --gates always --labels {t}/labels_bad.jsonl --out {t}/ev", "labels_bad.jsonl", "line 2"),
    "evaluate-limit-negative": C(f"{EVAL} --limit -1", "--limit"),
    "evaluate-resamples-zero": C(f"{EVAL} --resamples 0", "--resamples"),
    "evaluate-resamples-a-billion": C(f"{EVAL} --resamples 1000000000", "--resamples", "at most 100000"),
    "evaluate-out-is-a-file": C(f"evaluate --gates always --labels {LABELS} --out {{t}}/file.txt", "--out", "file.txt"),
    "evaluate-run-dir-missing": C(f"{EVAL} --run-dir {{t}}/missing-run", "missing-run"),
    "evaluate-run-dir-answers-a-folder": C(f"{EVAL} --run-dir {{t}}/run_answers_folder", "run_answers_folder/closed-book.jsonl: is a folder, where a labelling run keeps its"),
    "evaluate-run-dir-without-answers": C(f"{EVAL} --run-dir {{t}}/dir", "dir", "holds neither closed-book.jsonl nor rag-gain.jsonl"),
    "evaluate-out-holds-a-file-of-yours": C(
        f"evaluate --gates always --labels {LABELS} --out {{t}}/mine --no-cost", "report.md",
        "did not write it", "--out", forbid=("retrieval_gate.evaluation.gate_comparison.load_splits",)),
    "evaluate-strategies-duplicate": C(f"{EVAL} --strategies {{t}}/dup.yaml", "dup.yaml", "duplicate"),
    "evaluate-strategies-miss-a-label-strategy": C(
        "evaluate --gates tfidf --labels {t}/strategies.jsonl --questions {t}/q.jsonl --out {t}/ev "
        "--no-cost --strategies {t}/two.yaml", "multi_step", "two.yaml",
        forbid=("retrieval_gate.evaluation.gate_comparison.build_gate",
                "retrieval_gate.evaluation.gate_comparison.load_splits")),
    "evaluate-onnx-missing": C(f"evaluate --gates onnx --labels {LABELS} --out {{t}}/ev --onnx {{t}}/missing-export", "missing-export"),
    "evaluate-learned-run-truncated": C(f"evaluate --gates learned --labels {LABELS} --out {{t}}/ev --learned-run {{t}}/run_truncated", "run_truncated"),
    "evaluate-questions-bad-row": C(f"{EVAL} --questions {{t}}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    # ---------------------------------------------------------------- tune
    "tune-workers-absurd": C(f"{TUNE} --objective pareto --workers 100000 --storage journal:{{t}}/j.log", "--workers"),
    "tune-storage-in-memory": C(f"{TUNE} --objective pareto --storage sqlite://", "--storage sqlite:// is a database in memory"),
    "tune-storage-memory-file": C(f"{TUNE} --objective pareto --storage sqlite:///:memory:", "is a database in memory"),
    # ".: cannot write the study journal (Is a directory)"
    "tune-storage-journal-no-path": C(f"{TUNE} --objective pareto --storage journal:", "--storage 'journal:' names no journal file; pass journal:PATH"),
    "tune-storage-journal-a-folder": C(f"{TUNE} --objective pareto --storage journal:{{t}}/dir", "names no journal file"),
    "tune-workers-zero": C(f"{TUNE} --workers 0", "--workers"),
    # a key given twice: the last value won, silently
    "tune-set-twice": C(f"{TUNE} --objective hparams --set model.lr=0.1 model.lr=0.2", "--set gives model.lr more than once"),
    "train-config-is-a-folder": C("train --config {t}/dir", "dir", "is a folder, not a YAML config file"),
    # checked once the router had trained (the fit, minutes on a GPU), or never (descending)
    "train-router-budget-past-costs": C("train --config router-adaptive-rag-llama8b --set run.output_dir={t}/o model.budget=100", "model.budget 100.0", "(3.35)"),
    "train-router-costs-descending": C("train --config router-adaptive-rag-llama8b --set run.output_dir={t}/o model.costs=[3,1,0]", "give them cheapest first"),
    "train-router-costs-too-few": C("train --config router-adaptive-rag-llama8b --set run.output_dir={t}/o model.costs=[0,1]", "2 costs for 3 strategies"),
    "train-router-cost-huge": C("train --config router-adaptive-rag-llama8b --set run.output_dir={t}/o model.costs=[0,1,1e308]", "past it sums of costs overflow"),
    "train-set-twice": C("train --config cascade-closed-book --set trainer.max_epochs=1 trainer.max_epochs=3", "--set gives trainer.max_epochs more than once"),
    "train-set-twice-one-without-value": C("train --config cascade-closed-book --set trainer.max_epochs=1 trainer.max_epochs", "'trainer.max_epochs': expected KEY.PATH=VALUE"),
    "data-field-twice": C("data summary --questions examples/your-data/questions.csv --field question=question --field question=relation", "--field names two columns for question"),
    "tune-trials-zero": C(f"{TUNE} --objective pareto --trials 0", "--trials"),
    "tune-target-out-of-range": C(f"{TUNE} --objective min-retrieval --target 2", "--target"),
    "tune-labels-missing": C("tune --gate popularity --labels {t}/missing.jsonl --out {t}/tu", "missing.jsonl"),
    "tune-labels-dir": C("tune --gate popularity --labels {t}/dir --out {t}/tu", "dir"),
    "tune-run-dir-missing": C(f"{TUNE} --run-dir {{t}}/missing-run", "--run-dir", "missing-run", "no such folder"),
    "tune-run-dir-a-file": C(f"{TUNE} --run-dir {{t}}/file.txt", "--run-dir", "file.txt", "a file, not a folder"),
    "tune-run-dir-answers-a-folder": C(f"{TUNE} --run-dir {{t}}/run_answers_folder", "run_answers_folder/closed-book.jsonl: is a folder, where a labelling run keeps its recorded answers"),
    "tune-run-dir-without-answers": C(f"{TUNE} --run-dir {{t}}/dir", "dir", "holds neither closed-book.jsonl nor rag-gain.jsonl"),
    "tune-out-is-a-file": C(f"tune --gate popularity --labels {LABELS} --out {{t}}/file.txt", "--out", "file.txt"),
    "tune-out-holds-a-file-of-yours": C(f"tune --gate popularity --labels {LABELS} --out {{t}}/mine", "tune-popularity-closed-book.json", "did not write it"),
    "tune-hparams-stacked": C(f"tune --gate learned --objective hparams --labels {LABELS} --out {{t}}/tu --config cascade-closed-book", "model.head=stacked", "minilm-lora-closed-book"),
    "tune-max-epochs-zero": C(f"tune --gate learned --objective hparams --labels {LABELS} --out {{t}}/tu --max-epochs 0", "--max-epochs"),
    "tune-strategies-duplicate": C(f"{TUNE} --strategies {{t}}/dup.yaml", "dup.yaml", "duplicate"),
    "tune-budget-above-dearest": C(f"tune --gate onnx --onnx {{t}}/router --objective budget-accuracy --labels {LABELS} --out {{t}}/tu --budget 99", "--budget", "3.35"),
    "tune-router-no-costs": C(f"tune --gate onnx --onnx {{t}}/router_nocosts --objective budget-accuracy --labels {LABELS} --out {{t}}/tu --budget 1", "router_nocosts", "costs"),
    "tune-router-truncated": C(f"tune --gate onnx --onnx {{t}}/export_truncated --objective budget-accuracy --labels {LABELS} --out {{t}}/tu --budget 1", "export_truncated"),
    "tune-calibrate-on-missing": C(f"tune --gate onnx --onnx {{t}}/router --objective budget-accuracy --labels {LABELS} --out {{t}}/tu --calibrate-on {{t}}/missing.jsonl", "missing.jsonl"),
    "tune-questions-bad-row": C(f"{TUNE} --questions {{t}}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    # ---------------------------------------------------------------- score
    "score-model-missing": C("score --model {t}/missing-export --input {t}/q.jsonl", "missing-export"),
    "score-model-is-a-file": C("score --model {t}/file.txt --input {t}/q.jsonl", "file.txt"),
    "score-model-empty": C("score --model {t}/export_empty --input {t}/q.jsonl", "export_empty"),
    "score-input-missing": C("score --model {t}/router --input {t}/missing.jsonl", "missing.jsonl"),
    "score-input-dir": C("score --model {t}/router --input {t}/dir", "dir"),
    "score-output-is-a-folder": C(f"{SCORE} --output {{t}}/dir", "--output", "dir"),
    "score-output-is-a-file-of-yours": C(f"{SCORE} --output {{t}}/file.txt", "file.txt", "did not write it", "--output"),
    "score-budget-above-dearest": C(f"{SCORE} --budget 99", "--budget", "3.35"),
    "score-threshold-with-a-router": C(f"{SCORE} --threshold 0.3", "--threshold goes with a binary gate", "--budget"),
    "score-budget-no-costs": C("score --model {t}/router_nocosts --input {t}/q.jsonl --budget 1", "router_nocosts", "costs"),
    "score-questions-bad-row": C("score --model {t}/router --questions {t}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    "score-budget-truncated": C("score --model {t}/export_truncated --input {t}/q.jsonl --budget 1", "export_truncated"),
    # ---------------------------------------------------------------- transfer
    "transfer-labels-missing": C("transfer --labels {t}/missing.jsonl --out {t}/tr", "missing.jsonl"),
    "transfer-second-labels-missing": C(
        f"transfer --labels {LABELS} {{t}}/missing.jsonl --out {{t}}/tr", "--labels", "missing.jsonl",
        forbid=("retrieval_gate.evaluation.transfer.transfer_cells",)),
    "transfer-feature-unused": C(f"transfer --labels {LABELS} --gates tfidf --feature views --out {{t}}/tr", "--feature is read by the popularity", "(tfidf)"),
    # a column no question has: every popularity cell read "cannot fit", the report written
    "transfer-feature-no-column": C(f"transfer --labels {LABELS} --feature nosuch --out {{t}}/tr", "--feature nosuch: no question has a value in that column", "s_pop", forbid=("retrieval_gate.evaluation.transfer.run_transfer",)),
    "evaluate-feature-no-column": C(f"evaluate --gates popularity --labels {LABELS} --feature nosuch --no-cost --out {{t}}/ev", "--feature nosuch: no question has", forbid=("retrieval_gate.evaluation.gate_comparison.run_evaluation",)),
    "transfer-out-is-a-file": C(f"transfer --labels {LABELS} --out {{t}}/file.txt", "--out", "file.txt"),
    "transfer-out-holds-a-file-of-yours": C(f"transfer --labels {LABELS} --out {{t}}/mine", "transfer.md", "did not write it"),
    "transfer-learned-out-is-a-file": C(f"transfer --labels {LABELS} --out {{t}}/tr --learned --learned-out {{t}}/file.txt", "--learned-out", "file.txt"),
    "transfer-learned-config-missing": C(f"transfer --labels {LABELS} --out {{t}}/tr --learned --learned-out {{t}}/lo --learned-config {{t}}/missing.yaml", "missing.yaml"),
    "transfer-learned-config-unknown-name": C(f"transfer --labels {LABELS} --out {{t}}/tr --learned --learned-out {{t}}/lo --learned-config nosuch", "--learned-config nosuch: no such file"),
    # router gates on binary labels: a report of "n/a (cannot fit)" cells, exit 0
    "transfer-routers-on-binary-labels": C(f"transfer --labels {LABELS} --gates router-tfidf --out {{t}}/tr", "no gate could be fitted on closed-book", "needs strategy labels"),
    "transfer-learned-config-unused": C(f"transfer --labels {LABELS} --out {{t}}/tr --learned-config {{t}}/missing.yaml", "--learned-config", "--learned only"),
    "transfer-run-dir-missing": C(f"transfer --labels {LABELS} --out {{t}}/tr --run-dir {{t}}/missing-run", "missing-run"),
    "transfer-run-dir-without-answers": C(f"transfer --labels {LABELS} --out {{t}}/tr --run-dir {{t}}/dir", "dir", "holds neither"),
    # --run (the prefix of --run-dir) given the gate: "holds neither closed-book.jsonl nor ..."
    "evaluate-run-dir-an-export": C(f"{EVAL} --run-dir {{t}}/router", "(it is an export: an exported gate goes in --onnx)"),
    "transfer-questions-bad-row": C(f"transfer --labels {LABELS} --out {{t}}/tr --questions {{t}}/bad_row.jsonl", "bad_row.jsonl", "line 2"),
    # ---------------------------------------------------------------- export
    "export-run-missing": C("export --run {t}/missing-run --out-dir {t}/ex", "missing-run"),
    "export-run-is-a-file": C("export --run {t}/file.txt --out-dir {t}/ex", "file.txt"),
    "export-run-empty": C("export --run {t}/run_empty --out-dir {t}/ex", "run_empty"),
    "export-run-truncated": C("export --run {t}/run_truncated --out-dir {t}/ex", "run_truncated"),
    "export-out-dir-is-a-file": C("export --run {t}/run_empty --out-dir {t}/file.txt", "--out-dir", "file.txt"),
    "export-parity-limit-negative": C("export --run {t}/run_empty --out-dir {t}/ex --parity-limit -1", "--parity-limit"),
    "export-questions-missing": C("export --run {t}/run_empty --out-dir {t}/ex --questions {t}/missing.jsonl", "missing.jsonl"),
    # ------------------------------------------------- a name past the file system's 255 bytes
    # (an OSError from the first look at the path: a traceback, "internal error (a bug)")
    "score-out-name-too-long": C(f"{SCORE} --out {{t}}/{'a' * 300}.jsonl", "a name in this path is too long", "aaa.jsonl (", " characters)"),
    "evaluate-out-name-too-long": C(f"evaluate --gates always --labels {LABELS} --no-cost --out {{t}}/{'a' * 300}", "a name in this path is too long"),
    "export-out-name-too-long": C(f"export --run {{t}}/run_empty --out-dir {{t}}/{'a' * 300}", "a name in this path is too long"),
    "label-out-name-too-long": C(f"label --policy closed-book {URL} --out {{t}}/{'a' * 300}.jsonl", "a name in this path is too long"),
    "rag-out-name-too-long": C(f"rag --modes never --limit 1 --out {{t}}/{'a' * 300}.json", "a name in this path is too long"),
}
# fmt: on


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=ELSEWHERE[n])) if n in ELSEWHERE else n
        for n in CASES
    ],  # fmt: skip
)
def test_bad_option_is_refused_before_any_engine(name, tmp_path, capsys, monkeypatch, no_engine):
    case = CASES[name]
    for target in case.forbid:
        monkeypatch.setattr(target, _started)
    _workspace(tmp_path)
    argv = case.argv.format(t=tmp_path).split()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal: the verb's usage and one error line
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "engine started" not in err, err
    assert code == 2, err
    assert f"retrieval-gate {argv[0]}: error:" in err, err
    for expected in case.expect:
        assert expected in err, f"{expected!r} not in: {err}"


def test_serve_on_a_port_in_use_is_refused_before_any_engine(capsys, no_engine):
    """Found at the bind, the port came after the engine had loaded (23 s here) with uvicorn's
    own error and exit 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--gate", "always", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}: cannot listen there" in err and "engine started" not in err, err


def test_serve_on_an_address_not_here_warns_of_nothing_else(capsys, no_engine):
    """The warning about serving without --api-key came before the refusal of the address."""
    assert main(["serve", "--gate", "always", "--host", "999.1.1.1"]) == 2
    err = capsys.readouterr().err
    assert "--host 999.1.1.1: not an address here" in err and "--api-key" not in err, err


@pytest.mark.parametrize("verb", ["evaluate --gates always --no-cost", "tune --gate popularity",
                                  "transfer --gates tfidf"])  # fmt: skip
def test_a_refused_label_file_leaves_no_report_folder(verb, tmp_path, capsys, no_engine):
    """A label row naming `label` twice (json keeps the last) is refused; evaluate made its
    --out folder, and tune its studies database there, before reading the labels."""
    labels = tmp_path / "twice.jsonl"
    labels.write_text('{"id": "q1", "label": 1}\n{"id": "q2", "label": 1, "label": 0}\n')
    (tmp_path / "twice.meta.json").write_text('{"policy": "closed-book"}')
    code = main([*verb.split(), "--labels", str(labels), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "twice.jsonl, line 2: key 'label' is given twice" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["evaluate", "--labels", "L", "--gates", "never", "--no-cost", "--out", ""], "--out"),
        (["evaluate", "--labels", "L", "--gates", "never", " ", "--no-cost"], "--gates"),
        (["score", "--model=", "--input", "q.txt"], "--model"),
        (["train", "--set", "  "], "--set"),
    ],
)
def test_an_empty_argument_is_refused_naming_its_flag(argv, flag, tmp_path, capsys, monkeypatch):
    """`--out "$DIR"` with DIR unset: an empty path is the working folder, and `evaluate` wrote
    report.md, results.json, scores/ and its figures there."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} is given an empty value" in err, err
    assert not list(tmp_path.iterdir())
