"""Mallen's per-relation popularity thresholds as an Optuna study, checked against the
brute-force search of the popularity gate: each relation's threshold is a categorical choice
among the same candidate cuts brute force scans, so the study can reach its optimum exactly
(TPE samples each parameter independently, which suits this separable objective)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna

from ..errors import MissingInputError
from ..gates.popularity import PopularityGate, candidate_cuts, fit_popularity
from ..labels.evalset import EvalSet
from ..metrics import adaptive_accuracy
from .studies import open_study, require_no_test, tpe
from .workers import optimize_until, run_workers


def tune_relations(
    dev: EvalSet,
    name: str,
    storage: str | Path,
    n_trials: int = 300,
    seed: int = 0,
    min_per_relation: int = 5,
    workers: int = 1,
) -> dict[str, Any]:
    require_no_test(dev, "the popularity study")
    if workers > 1:  # `workers` processes on one study (tuning/workers.py)
        return run_workers(tune_relations, {"dev": dev, "name": name, "storage": storage,
                           "n_trials": n_trials, "seed": seed,
                           "min_per_relation": min_per_relation}, workers)  # fmt: skip
    keep = (
        np.array([q.s_pop is not None for q in dev.questions])
        & ~np.isnan(dev.closed_correct)
        & ~np.isnan(dev.rag_correct)
    )
    part = dev.subset(keep)
    if not len(part):
        raise MissingInputError(
            "no dev question has s_pop and recorded answers (PopQA with rag-gain rows)"
        )
    reference = fit_popularity(part.questions, part.y, part.closed_correct, part.rag_correct,
                               min_per_relation=min_per_relation)  # fmt: skip
    rel = np.array([q.relation or "" for q in part.questions])
    pops = np.array([q.s_pop for q in part.questions], float)
    relations = sorted(reference.relation_thresholds)
    cands = {r: [float(c) for c in candidate_cuts(pops[rel == r])] for r in relations}

    def gate_for(thresholds: dict[str, float]) -> PopularityGate:
        return PopularityGate(thresholds, reference.global_threshold, reference.fallback_score)

    def accuracy(gate: PopularityGate) -> float:
        d = gate.scores(part.questions) >= 0.5
        return float(adaptive_accuracy(d, part.closed_correct, part.rag_correct))

    study = open_study(name, storage, tpe, seed, ["maximize"])

    def trial_value(trial: optuna.Trial) -> float:
        return accuracy(gate_for({r: trial.suggest_categorical(r, cands[r]) for r in relations}))

    optimize_until(study, trial_value, n_trials)
    best = gate_for({r: float(study.best_params[r]) for r in relations})
    return {
        "study": name,
        "n_trials": len(study.trials),
        "n_questions": len(part),
        "optuna_accuracy": study.best_value,
        "brute_force_accuracy": accuracy(reference),
        "optuna_thresholds": best.relation_thresholds,
        "brute_force_thresholds": reference.relation_thresholds,
        "gate": best,
    }
