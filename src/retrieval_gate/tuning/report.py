"""Dev vs test at tuned thresholds, and the tuning report: applied only after every study has
finished (`run_tuning`), so no study ever sees a test question."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gates.base import Gate
from ..labels.evalset import EvalSet
from ..tables import fmt, markdown_table
from .objectives import DevData, figures


def figures_at(scores: np.ndarray, test: EvalSet, t: float) -> dict[str, float | None]:
    """The tuner's dev figures, computed on test questions."""
    return figures(DevData(test.y, scores, test.closed_correct, test.rag_correct), t)


def dev_test_rows(result: dict[str, Any], gate: Gate, test: EvalSet) -> list[dict[str, Any]]:
    """One row per objective: threshold, dev figures, test figures at that threshold."""
    scores = np.asarray(gate.scores(test.questions), float)
    rows = []
    for obj, r in result["thresholds"].items():
        rows.append({"objective": obj, "threshold": r["threshold"], "value": r["value"],
                     "n_candidates": r["n_candidates"], "dev": r["dev_figures"],
                     "test": figures_at(scores, test, r["threshold"])})  # fmt: skip
    for p in result.get("pareto", {}).get("front", []):
        p["test"] = figures_at(scores, test, p["threshold"])
    always = figures_at(np.ones(len(test)), test, 0.5)
    result["test_always_retrieve"] = always
    result["test_never_retrieve"] = figures_at(np.zeros(len(test)), test, 0.5)
    return rows


def tuned_markdown(result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    keys = ("macro_f1", "retrieval_rate", "adaptive_accuracy")
    header = ["objective", "threshold", "dev value", "thresholds tried"]
    header += [f"dev {k}" for k in keys] + [f"test {k}" for k in keys]
    body = [[r["objective"], r["threshold"], r["value"], r["n_candidates"],
             *(r["dev"][k] for k in keys), *(r["test"][k] for k in keys)] for r in rows]  # fmt: skip
    lines = [
        f"## {result['gate']} on labels {result['policy']}",
        "",
        markdown_table(header, body),
        "",
    ]
    a, n = result["test_always_retrieve"], result["test_never_retrieve"]
    lines.append(f"Test reference points: always retrieve adaptive accuracy {fmt(a['adaptive_accuracy'])}, "
                 f"never retrieve {fmt(n['adaptive_accuracy'])}.")  # fmt: skip
    for obj, why in result["skipped"].items():
        lines.append(f"- {obj} skipped: {why}")
    if "pareto" in result:
        pr = result["pareto"]
        front = [[p["threshold"], p["adaptive_accuracy"], p["retrieval_rate"],
                  p["test"]["adaptive_accuracy"], p["test"]["retrieval_rate"]] for p in pr["front"]]  # fmt: skip
        lines += ["", f"Pareto front (NSGA-II, {pr['n_trials']} trials): adaptive accuracy vs retrieval rate", "",
                  markdown_table(["threshold", "dev adaptive acc.", "dev retrieval rate", "test adaptive acc.",
                         "test retrieval rate"], front), "", f"![pareto]({pr['plot']})"]  # fmt: skip
    return "\n".join(lines) + "\n"
