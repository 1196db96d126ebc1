"""Threshold studies: one objective (TPE), or NSGA-II's Pareto front of adaptive accuracy vs
retrieval rate. Both work on dev scores only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from .. import metrics as M
from .objectives import DevData, Objective, candidate_thresholds, exhaustive_best, figures
from .studies import open_study, remaining


def suggest_threshold(trial: optuna.Trial, candidates: np.ndarray) -> float:
    """A threshold as the rank of a distinct dev score: every distinct decision is one value
    of the search space, however the scores bunch up (LLM probabilities sit near 0 and 1)."""
    t = float(candidates[trial.suggest_int("rank", 0, len(candidates) - 1)])
    trial.set_user_attr("threshold", t)
    return t


@dataclass
class ThresholdResult:
    study: str
    objective: str
    threshold: float
    value: float
    reference_threshold: float  # exhaustive search over every distinct dev score
    reference_value: float
    n_trials: int
    dev_figures: dict[str, Any]


def tune_threshold(
    obj: Objective, dev: DevData, name: str, storage: str | Path, n_trials: int = 100, seed: int = 0
) -> ThresholdResult:
    if obj.needs_answers:
        dev = dev.require_answers()
    study = open_study(name, storage, optuna.samplers.TPESampler(seed=seed), [obj.direction])
    cands = candidate_thresholds(dev.scores)

    def trial_value(trial: optuna.Trial) -> float:
        t = suggest_threshold(trial, cands)
        trial.set_user_attr("retrieval_rate", float(np.mean(dev.scores >= t)))
        return obj.value(dev, t)

    study.optimize(trial_value, n_trials=remaining(study, n_trials), show_progress_bar=True)
    best = study.best_trial
    ref_t, ref_v = exhaustive_best(obj, dev)
    t = float(best.user_attrs["threshold"])
    return ThresholdResult(name, obj.name, t, float(best.value), ref_t, ref_v,
                           len(study.trials), figures(dev, t))  # fmt: skip


def pareto_front(
    dev: DevData, name: str, storage: str | Path, n_trials: int = 100, seed: int = 0
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """NSGA-II over the threshold: maximise adaptive accuracy, minimise retrieval rate.
    Returns (front sorted by retrieval rate, all trials)."""
    dev = dev.require_answers()
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=20)
    study = open_study(name, storage, sampler, ["maximize", "minimize"])
    cands = candidate_thresholds(dev.scores)

    def trial_values(trial: optuna.Trial) -> tuple[float, float]:
        t = suggest_threshold(trial, cands)
        d = dev.scores >= t
        return float(M.adaptive_accuracy(d, dev.closed, dev.rag)), float(d.mean())

    study.optimize(trial_values, n_trials=remaining(study, n_trials), show_progress_bar=True)

    def row(t: optuna.trial.FrozenTrial) -> dict[str, float]:
        return {"threshold": t.user_attrs["threshold"], "adaptive_accuracy": t.values[0],
                "retrieval_rate": t.values[1]}  # fmt: skip

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
