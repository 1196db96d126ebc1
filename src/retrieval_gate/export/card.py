"""The model card (README.md) the exporter writes beside every export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fileio import write_text
from ..gates.onnx_format import VARIANTS
from ..tables import markdown_table
from ..training.checkpoint import read_run_json


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


def write_model_card(run_dir: Path, export_dir: Path, parity: dict[str, Any] | None) -> Path:
    meta = read_run_json(run_dir / "metadata.json")
    labels = read_run_json(run_dir / "labels.json")
    metrics = read_run_json(run_dir / "metrics.json")
    label_meta = labels.get("meta") or {}
    generator = label_meta.get("generator") or label_meta.get("model") or "none recorded"
    lines = [
        f"# Retrieval gate `{export_dir.name}`",
        "",
        f"Predicts from the question alone whether the generator needs retrieval. Output "
        f"`scores` = {meta['score']}. Classes: {', '.join(meta['classes'])}.",
        "",
        "## Model",
        f"- backbone: {meta['backbone']} (`{meta['model_name']}`), LoRA adapters (if any) merged",
        f"- max length: {meta['max_length']} tokens (longer questions are truncated)",
        f"- trained by retrieval-gate {meta['package_version']} (run `{run_dir.name}`)",
        "",
        "## Training data and labels",
        f"- label file: `{labels['path']}` (sha256 `{labels['sha256'][:16]}...`)",
        f"- label policy: {label_meta.get('policy', 'not recorded')}; generator the labels "
        f"came from: {json.dumps(generator) if not isinstance(generator, str) else generator}",
        f"- split sizes (canonical split, seed 0): {json.dumps(labels.get('counts'))}",
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
        "- Learned from question text only: no knowledge of dates beyond the training data, so "
        "fast-changing facts are judged by wording. Cross-dataset transfer is not guaranteed; "
        "check the transfer report before using it on a new question distribution.",
        "- int8 is for CPUs, fp16 for GPUs; compare their AUROC drop above before choosing.",
        "",
        "Score with `retrieval-gate score --model <this folder> --input questions.txt`.",
    ]
    path = export_dir / "README.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
