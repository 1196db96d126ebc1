"""Hyper-parameter search of the learned gate (learning rate, epochs, LoRA rank/alpha/dropout,
head dropout, class balancing) with Optuna, pruning bad trials from their dev AUROC.

Each trial builds the train engineer's DataModule and LightningModule from a training config
plus the trial's choices, and fits with a Lightning Trainer whose pruning callback reports dev
AUROC to Optuna after every validation. The test split's rows are dropped from the DataModule
before fitting and no test loop runs: the objective is dev AUROC only.

Why not optuna_integration.PyTorchLightningPruningCallback: optuna-integration 5.0.0 imports
the unified `lightning.pytorch` namespace, while this project's Trainer is `pytorch_lightning`
(a different Callback class); `LightningPruning` below is the same single-process logic
(report the monitored metric after each validation, raise TrialPruned when told to)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytorch_lightning as pl

from ..errors import TrainingDiverged
from ..training.config import TrainConfig
from ..training.heads import interrupt_as_ctrl_c
from .studies import open_study, tpe
from .workers import optimize_until, run_workers

log = logging.getLogger(__name__)


class LightningPruning(pl.Callback):
    """Reports `monitor` after each validation (step = validation count) and prunes."""

    def __init__(self, trial: optuna.Trial, monitor: str = "val/auroc"):
        self.trial = trial
        self.monitor = monitor
        self.step = 0

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            return
        self.trial.report(float(value), step=self.step)
        self.step += 1
        if self.trial.should_prune():
            raise optuna.TrialPruned(
                f"pruned after validation {self.step} ({self.monitor}={float(value):.4f})"
            )


def suggest(trial: optuna.Trial, max_epochs: int, lora: bool = True) -> list[str]:
    """The searched hyper-parameters, as training-config overrides; the LoRA ones only for a
    config with LoRA (`lora`), which they would otherwise turn a full fine-tune into."""
    out = [
        f"model.lr={trial.suggest_float('lr', 1e-4, 3e-3, log=True)}",
        f"trainer.max_epochs={trial.suggest_int('epochs', 1, max_epochs)}",
    ]
    if lora:
        r = trial.suggest_categorical("lora_r", [4, 8, 16])
        out += [
            f"model.lora.r={r}",
            f"model.lora.alpha={trial.suggest_categorical('lora_alpha_x', [1, 2, 4]) * r}",
            f"model.lora.dropout={trial.suggest_float('lora_dropout', 0.0, 0.2)}",
        ]
    return [
        *out,
        f"model.dropout={trial.suggest_float('dropout', 0.0, 0.3)}",
        f"data.balance={trial.suggest_categorical('balance', ['class_weights', 'sampler', 'none'])}",
    ]


def fit_trial(config: TrainConfig, trial: optuna.Trial, questions: Sequence | None = None) -> float:
    """Fits one configuration; returns the last dev AUROC. Test rows never reach the loaders."""
    from ..training.trainer import prepare

    _, dm, module = prepare(config, questions)
    dm.rows["test"] = []  # tuning never reads the test split
    trainer = pl.Trainer(
        # two pruning checks per epoch; no trial logs (trainer.logger is the final run's)
        **{
            **config.trainer,
            "val_check_interval": 0.5,
            "logger": False,
            "enable_checkpointing": False,
        },  # a config's own value was a second keyword
        callbacks=[LightningPruning(trial)],
    )
    try:
        with interrupt_as_ctrl_c(trainer):  # Ctrl-C: exit 130 as `train`, not Lightning's 1
            trainer.fit(module, datamodule=dm)
    except TrainingDiverged as e:  # that trial's settings, not the study: the next one goes on
        log.warning("trial %d pruned: %s", trial.number, e)
        raise optuna.TrialPruned(str(e)) from e
    return float(trainer.callback_metrics["val/auroc"])


def tune_hparams(
    label_file: Path,
    name: str,
    storage: str | Path,
    n_trials: int = 20,
    config: str | None = "minilm-lora",  # an example config by name: found from any folder
    overrides: Sequence[str] = (),
    max_epochs: int = 3,
    seed: int = 0,
    questions: Sequence | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """A resumable study maximising dev AUROC, run by `workers` processes (one study, shared
    storage; tuning/workers.py); returns best params and wall time. Ctrl-C fails the running
    trial and goes on as a KeyboardInterrupt (the CLI's exit 130); the finished trials stay."""
    from ..training.config import load_config
    from ..training.sources import config_questions

    base = load_config(config, [*overrides, f"data.label_file={label_file}"])
    if questions is None:  # read once, not per trial
        questions = config_questions(base.data)
    if workers > 1:
        return run_workers(tune_hparams, {"label_file": label_file, "name": name,
                           "storage": storage, "n_trials": n_trials, "config": config,
                           "overrides": list(overrides), "max_epochs": max_epochs,
                           "seed": seed, "questions": list(questions)}, workers)  # fmt: skip
    study = open_study(name, storage, tpe, seed, ["maximize"])
    # the pruner is not stored with the study: set it on every (re)open
    study.pruner = optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=1)

    def objective(trial: optuna.Trial) -> float:
        cfg = load_config(
            config,
            [*overrides, f"data.label_file={label_file}",
             *suggest(trial, max_epochs, lora=base.model.lora is not None)],
        )  # fmt: skip
        return fit_trial(cfg, trial, questions)

    started = time.perf_counter()
    todo = optimize_until(study, objective, n_trials)  # trials of dead workers: by heartbeat
    states = [t.state.name for t in study.trials]
    return {
        "study": name,
        "trials_run_now": todo,
        "wall_seconds_now": time.perf_counter() - started,
        "n_complete": states.count("COMPLETE"),
        "n_pruned": states.count("PRUNED"),
        "n_failed": states.count("FAIL"),
        "best_dev_auroc": study.best_value if states.count("COMPLETE") else None,
        "best_params": study.best_params if states.count("COMPLETE") else None,
    }
