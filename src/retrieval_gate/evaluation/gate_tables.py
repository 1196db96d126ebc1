"""Markdown tables of evaluation results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..tables import fmt, markdown_table


def with_ci(value: float | None, ci: Sequence[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{value:.3f}"


COLUMNS = (
    "gate", "threshold", "accuracy [95% CI]", "macro P", "macro R", "macro F1 [95% CI]",
    "AUROC [95% CI]", "AP", "ECE", "retrieval rate", "LLM calls/q", "retrieval acc.",
    "adaptive QA acc. [95% CI]", "cost ms/question (median, batch 1)",
)  # fmt: skip


def comparison_table(results: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in results:
        m, ci = r["metrics"], r["ci95"]
        rows.append(
            [
                r["name"],
                r["threshold"],
                with_ci(m["accuracy"], ci["accuracy"]),
                m["macro_precision"],
                m["macro_recall"],
                with_ci(m["macro_f1"], ci["macro_f1"]),
                with_ci(m["auroc"], ci["auroc"]) if m["auroc"] is not None else "n/a (one class)",
                m["ap"],
                m["ece"],
                m["retrieval_rate"],
                fmt(m.get("llm_calls_per_question"), 2),
                m["retrieval_accuracy"],
                with_ci(m["adaptive_accuracy"], ci["adaptive_accuracy"]),
                fmt(r["cost_ms_per_question"], 2),
            ]
        )
    return markdown_table(COLUMNS, rows)


def per_source_table(results: Sequence[dict[str, Any]], counts: dict[str, Any]) -> str:
    """One row per gate, one cell per source: AUROC / macro-F1 / retrieval rate."""
    sources = sorted(counts)
    header = ["gate"] + [
        f"{s} (n={counts[s]['n']}, {counts[s]['positive']:.0%} need)" for s in sources
    ]
    rows = []
    for r in results:
        cells = [r["name"]]
        for s in sources:
            m = r["per_source"].get(s)
            auc = fmt(m["auroc"]) if m["auroc"] is not None else "n/a"
            cells.append(f"{auc} / {fmt(m['macro_f1'])} / {fmt(m['retrieval_rate'], 2)}")
        rows.append(cells)
    return markdown_table(header, rows)
