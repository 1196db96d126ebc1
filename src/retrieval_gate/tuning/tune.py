"""`run_tuning(TuneConfig)`: everything `retrieval-gate tune` does, as a library call the CLI
fills in. Threshold studies for one gate (built from train/dev only), Mallen's per-relation
popularity study, the learned gate's hyper-parameter study; each writes `<out>/<stem>.md` and
`.json`. Only after a study has finished are its chosen thresholds applied to the test split
(`tuning.report`), and only `save_objective` writes into a training run."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from ..fileio import content_id, sha256_file, write_text
from ..gates.registry import GateOptions, check_options
from ..labels.evalset import Splits, load_splits, policy_name
from ..labels.labelling_run import LabellingRun, run_dir_for
from ..questions import Question
from ..tables import markdown_table
from .storage import check_storage
from .studies import DEFAULT_STORAGE, study_name

log = logging.getLogger(__name__)

THRESHOLDS = ("macro-f1", "adaptive-accuracy", "min-retrieval", "pareto")
OWN_STUDIES = ("relations", "hparams")  # they build their own gates
OBJECTIVES = (*THRESHOLDS, *OWN_STUDIES)
# studies Optuna samples (trials, a storage); the other threshold objectives are exact sweeps
SAMPLED = ("pareto", *OWN_STUDIES)


@dataclass
class TuneConfig:
    """One `tune` run; every field is a flag of the command."""

    gate: str
    labels: Path
    objectives: Sequence[str] = ("macro-f1", "adaptive-accuracy", "min-retrieval", "pareto")
    target: float = 0.95  # min-retrieval: share of always-retrieve accuracy
    trials: int = 100
    seed: int = 0
    storage: str | Path = DEFAULT_STORAGE  # an Optuna storage: SQLite file or URL (storage.py)
    workers: int = 1  # processes on one study (tuning/workers.py)
    out: Path = Path("reports/tune")
    run_dir: Path | None = None  # the labelling run (recorded answers): `run_dir_for(labels)`
    gate_options: GateOptions = field(default_factory=GateOptions)
    save_objective: str | None = None  # threshold saved into the learned run
    config: str = "configs/backbones/minilm-lora.yaml"  # hparams: the training config
    overrides: Sequence[str] = ("data.max_train_examples=2000", "data.max_eval_examples=1000")
    max_epochs: int = 3  # hparams: upper bound of the epochs searched
    questions: Sequence[Question] | None = None  # None: the bundled datasets
    command: str = ""  # shown in the reports

    def __post_init__(self) -> None:
        self.run_dir = run_dir_for(self.labels, self.run_dir)

    def check(self) -> None:
        """Values and combinations, before any gate is built or study opened."""
        unknown = [o for o in self.objectives if o not in OBJECTIVES]
        if unknown:
            raise ConfigError(f"unknown objective {unknown[0]!r}; use {', '.join(OBJECTIVES)}")
        if self.trials < 1:
            raise InputError(f"--trials must be at least 1, got {self.trials}")
        if set(self.objectives) & set(SAMPLED):  # reachable and writable before any work;
            check_storage(self.storage, self.workers)  # exact sweeps create no study file
        if not 0.0 < self.target <= 1.0:
            raise InputError(f"--target must be in (0, 1], got {self.target}")
        if set(self.objectives) - set(OWN_STUDIES):
            check_options([self.gate], self.gate_options)
        if self.save_objective:
            if self.gate != "learned":
                raise ConfigError(
                    "--save-objective saves into a learned run: use it with --gate learned"
                )
            tuned = [o for o in self.objectives if o in THRESHOLDS and o != "pareto"]
            if self.save_objective not in tuned:
                raise ConfigError(f"--save-objective {self.save_objective!r} must be one of the "
                                  f"threshold objectives tuned here: {', '.join(tuned)}")  # fmt: skip


def run_tuning(cfg: TuneConfig) -> list[Path]:
    """Runs the requested studies; returns the markdown reports written, in order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar says enough
    cfg.check()
    cfg.out.mkdir(parents=True, exist_ok=True)
    written = []
    if "hparams" in cfg.objectives:
        written.append(_hparams(cfg))
    splits = load_splits(cfg.labels, cfg.run_dir, cfg.questions)
    if "relations" in cfg.objectives:
        written.append(_relations(cfg, splits))
    thresholds = [o for o in cfg.objectives if o in THRESHOLDS]
    if thresholds:
        written.append(_thresholds(cfg, splits, thresholds))
    return written


def _write(cfg: TuneConfig, stem: str, data: dict[str, Any], markdown: str) -> Path:
    write_text(cfg.out / f"{stem}.json", json.dumps(data, indent=2, default=str))
    return write_text(cfg.out / f"{stem}.md", markdown)


def _thresholds(cfg: TuneConfig, sp: Splits, objectives: list[str]) -> Path:
    from .report import dev_test_rows, tuned_markdown
    from .run import build_for_tuning, tune_gate_thresholds, tuning_identity

    policy = policy_name(cfg.labels)
    records = LabellingRun(cfg.run_dir).records()
    gate = build_for_tuning(cfg.gate, sp.train, sp.dev, records, cfg.gate_options)
    identity = tuning_identity(cfg.labels, cfg.run_dir, gate)  # content, not names
    result = tune_gate_thresholds(gate, sp.train, sp.dev, policy, objectives, cfg.storage,
                                  cfg.out, cfg.trials, cfg.target, cfg.seed, identity,
                                  cfg.workers)  # fmt: skip
    # tuning is over: only now are the chosen thresholds applied to the test split
    result["rows"] = rows = dev_test_rows(result, gate, sp.test)
    md = f"# Tuned thresholds\n\n`{cfg.command}`\n\n" + tuned_markdown(result, rows)
    if cfg.save_objective:  # only when asked: tuning alone never changes a run
        _save_threshold(cfg, result)
    return _write(cfg, f"tune-{cfg.gate}-{policy}", result, md)


def _save_threshold(cfg: TuneConfig, result: dict[str, Any]) -> None:
    from ..training.checkpoint import save_threshold

    name, run = cfg.save_objective, cfg.gate_options.learned_run
    key = next((k for k in result["thresholds"] if k.startswith(str(name))), None)
    if key is None:  # e.g. adaptive accuracy without recorded answers
        why = next(
            (v for k, v in result["skipped"].items() if k.startswith(str(name))), "not tuned"
        )
        raise ConfigError(f"--save-objective {name!r} could not be tuned ({why}); "
                          f"nothing saved into {run}")  # fmt: skip
    r = result["thresholds"][key]
    save_threshold(run, r["threshold"], key, r["dev_figures"])
    log.info(f"saved threshold {r['threshold']:.4f} ({key}) into {run}/metadata.json")


def _relations(cfg: TuneConfig, sp: Splits) -> Path:
    from .popularity import tune_relations
    from .run import tuning_identity

    policy = policy_name(cfg.labels)
    name = study_name("popularity", policy, "relations", tuning_identity(cfg.labels, cfg.run_dir))
    res = tune_relations(sp.dev, name, cfg.storage, cfg.trials, cfg.seed, workers=cfg.workers)
    gate = res.pop("gate")
    rels = sorted(res["brute_force_thresholds"])
    body = [[r, res["brute_force_thresholds"][r], res["optuna_thresholds"][r]] for r in rels]
    md = (f"# Per-relation popularity thresholds (Optuna vs brute force)\n\n`{cfg.command}`\n\n"
          f"{res['n_questions']} dev PopQA questions with recorded answers, {res['n_trials']} trials. "
          f"Adaptive accuracy on dev: Optuna {res['optuna_accuracy']:.4f}, brute force "
          f"{res['brute_force_accuracy']:.4f}; global fallback threshold {gate.global_threshold:g}.\n\n"
          + markdown_table(["relation", "brute-force threshold", "Optuna threshold"], body) + "\n")  # fmt: skip
    return _write(cfg, f"tune-popularity-relations-{policy}", res, md)


def _hparams(cfg: TuneConfig) -> Path:
    from .hparams import tune_hparams  # torch and Lightning: only for this study

    # trials depend on the label file's content, the training config and the search space
    config = Path(cfg.config)
    identity = content_id(sha256_file(cfg.labels), sha256_file(config) if config.is_file() else None,
                          *sorted(cfg.overrides), str(cfg.max_epochs))  # fmt: skip
    policy = policy_name(cfg.labels)
    name = study_name("learned-hparams", policy, "dev-auroc", identity)
    res = tune_hparams(cfg.labels, name, cfg.storage, cfg.trials, cfg.config, list(cfg.overrides),
                       cfg.max_epochs, cfg.seed, cfg.questions, cfg.workers)  # fmt: skip
    md = (f"# Hyper-parameter study of the learned gate\n\n`{cfg.command}`\n\n"
          + "\n".join(f"- {k}: {v}" for k, v in res.items()) + "\n")  # fmt: skip
    return _write(cfg, f"tune-hparams-{policy}", res, md)
