"""Dev vs test at tuned thresholds, and the tuning report: applied only after every study has
finished (`run_tuning`), so no study ever sees a test question."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gates.base import Gate
from ..labels.evalset import EvalSet
from ..tables import fmt, markdown_table
from .objectives import DevData, figures


def figures_at(
    scores: np.ndarray, test: EvalSet, t: float, calls: tuple[float, float] | None = (1.0, 1.0)
) -> dict[str, float | None]:
    """The tuner's dev figures, computed on test questions (`calls`: LLM calls without and
    with retrieval)."""
    return figures(DevData(test.y, scores, test.closed_correct, test.rag_correct, calls), t)


def dev_test_rows(result: dict[str, Any], gate: Gate, test: EvalSet) -> list[dict[str, Any]]:
    """One row per objective: threshold, dev figures, test figures at that threshold."""
    scores = np.asarray(gate.scores(test.questions), float)
    calls = result.get("llm_calls", (1.0, 1.0))
    rows = []
    for obj, r in result["thresholds"].items():
        rows.append({"objective": obj, "threshold": r["threshold"], "value": r["value"],
                     "n_candidates": r["n_candidates"], "dev": r["dev_figures"],
                     "test": figures_at(scores, test, r["threshold"], calls)})  # fmt: skip
    for p in result.get("pareto", {}).get("front", []):
        p["test"] = figures_at(scores, test, p["threshold"], calls)
    always = figures_at(np.ones(len(test)), test, 0.5, calls)
    result["test_always_retrieve"] = always
    result["test_never_retrieve"] = figures_at(np.zeros(len(test)), test, 0.5, calls)
    return rows


def tuned_markdown(result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    keys = ("macro_f1", "retrieval_rate", "llm_calls_per_question", "adaptive_accuracy")
    shown = {"retrieval_rate": "retrievals/q", "llm_calls_per_question": "LLM calls/q"}
    header = ["objective", "threshold", "dev value", "thresholds tried"]
    header += [f"{split} {shown.get(k, k)}" for split in ("dev", "test") for k in keys]
    body = [[r["objective"], exact(r["threshold"]), r["value"], r["n_candidates"],
             *(r["dev"].get(k) for k in keys), *(r["test"].get(k) for k in keys)] for r in rows]  # fmt: skip
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
    lines += _never_note(result.get("dev_retrieved_at_every_threshold", 0.0))
    lines.append(f"Retrievals/q: one for each question sent to retrieval (the retrieval rate); "
                 f"LLM calls/q: {_pair(result.get('llm_calls', (1.0, 1.0)))}.")  # fmt: skip
    if "pareto" in result:
        pr = result["pareto"]
        front = [[exact(p["threshold"]), p["adaptive_accuracy"], p["retrieval_rate"],
                  p.get("llm_calls_per_question"), p["test"]["adaptive_accuracy"],
                  p["test"]["retrieval_rate"], p["test"].get("llm_calls_per_question")]
                 for p in pr["front"]]  # fmt: skip
        lines += ["", f"Pareto front (NSGA-II, {pr['n_trials']} trials): adaptive accuracy vs retrievals/q", "",
                  markdown_table(["threshold", "dev adaptive acc.", "dev retrievals/q", "dev LLM calls/q",
                                  "test adaptive acc.", "test retrievals/q", "test LLM calls/q"], front),
                  "", f"![pareto]({pr['plot']})"]  # fmt: skip
    return "\n".join(lines) + "\n"


def exact(threshold: float) -> str:
    """A threshold as the shortest text that reads back as the same float: one rounded to 3
    places can decide otherwise (0.9996 read 1.000)."""
    return repr(float(threshold))


def _never_note(share: float) -> list[str]:
    """Where the gate scores dev questions 1.0, no threshold never retrieves (retrieve iff
    score >= threshold, and a threshold is at most 1): said, not shown as a threshold."""
    if not share:
        return []
    return [
        f"- The gate scores {share:.1%} of dev questions 1.0: every threshold in [0, 1] "
        "retrieves for them (retrieve iff score >= threshold), so no threshold of this gate "
        "never retrieves; never retrieving is the test reference point above."
    ]


def _pair(calls: tuple[float, float] | None) -> str:
    if calls is None:
        return "n/a (the strategies declare none)"
    return (
        f"{calls[0]:g} a question without retrieval, {calls[1]:g} with it (the strategies' specs)"
    )
