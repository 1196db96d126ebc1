"""Thresholds on dev scores: the exact optimum of one objective, or NSGA-II's Pareto front of
adaptive accuracy vs retrieval rate (an Optuna study)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from .. import metrics as M
from .objectives import (
    DevData,
    Objective,
    candidate_thresholds,
    exhaustive_best,
    figures,
    llm_calls_per_question,
)
from .studies import open_study
from .workers import optimize_until, run_workers


def suggest_threshold(trial: optuna.Trial, candidates: np.ndarray) -> float:
    """A threshold as the rank of a distinct dev score: every distinct decision is one value
    of the search space, however the scores bunch up (LLM probabilities sit near 0 and 1)."""
    t = float(candidates[trial.suggest_int("rank", 0, len(candidates) - 1)])
    trial.set_user_attr("threshold", t)
    return t


@dataclass
class ThresholdResult:
    objective: str
    threshold: float
    value: float
    n_candidates: int  # distinct decisions searched: `candidate_thresholds`
    dev_figures: dict[str, Any]


def tune_threshold(obj: Objective, dev: DevData) -> ThresholdResult:
    """The exact optimum of a one-dimensional objective: every distinct dev score is tried, so
    no sampler is needed (Optuna runs the Pareto front and the per-relation and
    hyper-parameter studies, where the space is too large to enumerate)."""
    if obj.needs_answers:
        dev = dev.require_answers()
    t, value = exhaustive_best(obj, dev)
    return ThresholdResult(
        obj.name, t, value, len(candidate_thresholds(dev.scores)), figures(dev, t)
    )


def _nsga(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=20)


def pareto_front(
    dev: DevData,
    name: str,
    storage: str | Path,
    n_trials: int = 100,
    seed: int = 0,
    workers: int = 1,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """NSGA-II over the threshold: maximise adaptive accuracy, minimise retrieval rate, by
    `workers` processes on one study. Returns (front sorted by retrieval rate, all trials),
    each row with its LLM calls per question too (the second cost axis)."""
    dev = dev.require_answers()
    if workers > 1:
        return run_workers(pareto_front, {"dev": dev, "name": name, "storage": storage,
                           "n_trials": n_trials, "seed": seed}, workers)  # fmt: skip
    study = open_study(name, storage, _nsga, seed, ["maximize", "minimize"])
    cands = candidate_thresholds(dev.scores)

    def trial_values(trial: optuna.Trial) -> tuple[float, float]:
        t = suggest_threshold(trial, cands)
        d = dev.scores >= t
        return float(M.adaptive_accuracy(d, dev.closed, dev.rag)), float(d.mean())

    optimize_until(study, trial_values, n_trials)

    def row(t: optuna.trial.FrozenTrial) -> dict[str, float | None]:
        calls = llm_calls_per_question(dev.scores >= t.user_attrs["threshold"], dev.llm_calls)
        return {"threshold": t.user_attrs["threshold"], "adaptive_accuracy": t.values[0],
                "retrieval_rate": t.values[1], "llm_calls_per_question": calls}  # fmt: skip

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    front = sorted((row(t) for t in study.best_trials), key=lambda r: r["retrieval_rate"])
    # one row per distinct operating point (many thresholds make the same decisions)
    unique = list({(r["adaptive_accuracy"], r["retrieval_rate"]): r for r in front}.values())
    return unique, [row(t) for t in done]


def plot_pareto(
    front: list[dict], trials: list[dict], always: float, closed: float, path: Path, title: str
) -> Path:
    from ..figures import plt, save_figure

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter([t["retrieval_rate"] for t in trials], [t["adaptive_accuracy"] for t in trials],
               s=10, c="lightgray", label="trials")  # fmt: skip
    ax.plot([r["retrieval_rate"] for r in front], [r["adaptive_accuracy"] for r in front],
            "o-", c="C3", label="Pareto front")  # fmt: skip
    ax.axhline(always, ls="--", c="C0", lw=0.8, label=f"always retrieve ({always:.3f})")
    ax.axhline(closed, ls=":", c="C2", lw=0.8, label=f"never retrieve ({closed:.3f})")
    ax.set(xlabel="retrieval rate (dev)", ylabel="adaptive QA accuracy (dev)", title=title)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
