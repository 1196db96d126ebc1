"""A cheap Optuna job for the multi-worker tests, importable by the spawned worker processes:
each trial takes `seconds` and records which process ran it."""

from __future__ import annotations

import os
import time

import optuna


def sleepy_study(name: str, storage: str, n_trials: int, seed: int = 0, workers: int = 1,
                 seconds: float = 0.4) -> int:  # fmt: skip
    from retrieval_gate.tuning.studies import open_study
    from retrieval_gate.tuning.workers import optimize_until, run_workers

    if workers > 1:
        return run_workers(sleepy_study, {"name": name, "storage": storage, "n_trials": n_trials,
                           "seed": seed, "seconds": seconds}, workers)  # fmt: skip
    study = open_study(
        name, storage, lambda s: optuna.samplers.RandomSampler(seed=s), seed, ["minimize"]
    )

    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr("pid", os.getpid())
        time.sleep(seconds)
        return trial.suggest_float("x", -1, 1) ** 2

    return optimize_until(study, objective, n_trials, poll=0.2)
