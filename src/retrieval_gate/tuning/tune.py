"""`run_tuning(TuneConfig)`: everything `retrieval-gate tune` does, as a library call the CLI
fills in. Threshold studies for one gate (built from train/dev only), Mallen's per-relation
popularity study, the learned gate's hyper-parameter study; each writes `<out>/<stem>.md` and
`.json`. Only after a study has finished are its chosen thresholds applied to the test split
(`tuning.tuned_report`), and only `save_objective` writes into a training run."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import open_artifact
from ..errors import ConfigError, InputError, MissingInputError
from ..fileio import content_id, sha256_file
from ..gates.base import Gate, reads_answers
from ..gates.registry import (
    GateOptions,
    LazyGenerator,
    RecordedGenerator,
    asks_generator,
    check_options,
    check_recorded_answers,
    labelling_generator,
    needing,
    refuse_prompting,
)
from ..labels.evalset import EvalSet, Splits, load_splits, policy_name, with_recorded_answers
from ..labels.labelling_run import LabellingRun, run_dir_for
from ..models import SMOLLM2
from ..outputs import write_owned
from ..pricing import Calibration, answer_read_calls, binary_llm_calls, check_budget, llm_calls_for
from ..questions import Question
from ..strategies import StrategyRegistry, with_cost
from ..tables import markdown_table
from .storage import check_storage
from .studies import STUDIES_FILE, study_name

log = logging.getLogger(__name__)

THRESHOLDS = ("macro-f1", "adaptive-accuracy", "min-retrieval", "pareto")
OWN_STUDIES = ("relations", "hparams")  # they build their own gates
# a router's price (tuning/router_budgets.py); the last two on the LLM-calls axis
ROUTER = ("budget-accuracy", "min-cost", "cost-pareto", "llm-budget-accuracy", "min-llm-calls")
LLM_BUDGET = "llm-budget-accuracy"  # the objective --budget-llm-calls goes with
OBJECTIVES = (*THRESHOLDS, *OWN_STUDIES, *ROUTER)
TRAFFIC = "traffic"  # --save-objective: the price read on --calibrate-on questions
# studies Optuna samples (trials, a storage); the other threshold objectives (and the router's
# price sweep) are exact
SAMPLED = ("pareto", *OWN_STUDIES)
MAX_TRIALS = 100_000  # trials of one run (a tf-idf trial takes ~0.05 s, a training one minutes)
LOCAL_COPY = "--generator MODEL (a local copy of it)"  # the fix where no copy is known
# where the labels' generator has no local copy: a prompt gate asks it for every question
NO_COPY = (f"pass {LOCAL_COPY}, or tune a gate that reads its recorded answers "
           "(confidence) or the labels alone (e.g. tfidf), or label with one that runs here "
           f"(`retrieval-gate label --generator MODEL`: {SMOLLM2} or a Hub name)")  # fmt: skip


@dataclass
class TuneConfig:
    """One `tune` run; every field is a flag of the command."""

    gate: str
    labels: Path
    objectives: Sequence[str] = ("macro-f1", "adaptive-accuracy", "min-retrieval", "pareto")
    target: float = 0.95  # min-retrieval: share of always-retrieve accuracy
    trials: int = 100
    seed: int = 0
    storage: str | Path | None = None  # an Optuna storage (storage.py); None: <out>/studies.db
    workers: int = 1  # processes on one study (tuning/workers.py)
    out: Path = Path("reports/tune")
    run_dir: Path | None = None  # the labelling run (recorded answers): `run_dir_for(labels)`
    gate_options: GateOptions = field(default_factory=GateOptions)
    save_objective: str | None = None  # threshold saved into the learned run
    config: str = "minilm-lora"  # hparams: the training config (a path, or an example by name)
    overrides: Sequence[str] = ("data.max_train_examples=2000", "data.max_eval_examples=1000")
    max_epochs: int = 3  # hparams: upper bound of the epochs searched
    questions: Sequence[Question] | None = None  # None: the bundled datasets
    command: str = ""  # shown in the reports
    budget: float = 1.0  # router: mean cost per question (budget-accuracy, --calibrate-on)
    calibrate_on: str | None = None  # router: a user's unlabelled questions (their traffic)
    budget_llm_calls: float | None = None  # router: mean LLM calls a question (llm-budget-...)
    strategies: StrategyRegistry | None = None  # --strategies: specs (LLM calls) of the labels'
    generator_model: str | None = None  # --generator: the labels' generator's local copy

    def __post_init__(self) -> None:
        self.run_dir = run_dir_for(self.labels, self.run_dir)
        self.storage_named = self.storage is not None  # checked even when no study opens it
        if self.storage is None:  # beside the reports, not in a folder of its own
            self.storage = Path(self.out) / STUDIES_FILE
        self._labelling: tuple[LazyGenerator, str] | None = None

    def generator(self) -> tuple[LazyGenerator, str]:
        """--generator's model (checked against the labels'), else the labelling generator
        (the label file's .meta.json names it, else its run's), and where that was read: the
        one the gate asks and keys its cached scores by (it was SmolLM2 whatever made the
        labels). Read once: a local folder's weights are hashed."""
        if self._labelling is None:
            labelling = labelling_generator(self.labels, self.run_dir)
            if self.generator_model is not None:
                check_local_copy(self.generator_model, *labelling)
                labelling = LazyGenerator(name_or_path=self.generator_model), "--generator"
            self._labelling = labelling
        return self._labelling

    def check(self) -> None:
        """Values and combinations, before any gate is built or study opened."""
        unknown = [o for o in self.objectives if o not in OBJECTIVES]
        if unknown:
            raise ConfigError(f"unknown objective {unknown[0]!r}; use {', '.join(OBJECTIVES)}")
        if not 1 <= self.trials <= MAX_TRIALS:  # past it a study runs for days
            raise InputError(f"--trials must be from 1 to {MAX_TRIALS:,}, got {self.trials}")
        if not 0 <= self.seed < 2**32:  # Optuna's samplers seed numpy's legacy generator
            raise InputError(f"--seed {self.seed}: expected a whole number from 0 to 4294967295")
        # A --storage the user named is reached (and made) before any work, also beside the
        # exact objectives alone (a typo is said now, not at the next sampled study). The
        # default file in --out is made by the first study, once the labels have been read (a
        # bad label file leaves no folder and no database); exact sweeps alone leave it unmade.
        if set(self.objectives) & set(SAMPLED) or self.storage_named:
            check_storage(self.storage, self.workers, reach=self.storage_named)
        if not 0.0 < self.target <= 1.0:
            raise InputError(f"--target must be in (0, 1], got {self.target}")
        if set(self.objectives) - set(OWN_STUDIES):
            check_options([self.gate], self.gate_options)
            if set(self.objectives) & set(THRESHOLDS) and asks_generator([self.gate]):
                refuse_prompting(self.generator()[0], [self.gate], NO_COPY)  # labels unread
        elif given := _gate_flags_given(self.gate_options):  # read by no study here
            raise ConfigError(f"--objective {' '.join(self.objectives)} builds gates of its "
                              f"own (hparams: from --config {self.config}; relations: on "
                              f"s_pop), and reads no {' / '.join(given)}: drop it, or add an "
                              "objective that tunes that gate's threshold (e.g. macro-f1)")  # fmt: skip
        self._check_router()
        self._check_used()
        self._check_generator_used()
        if "hparams" in self.objectives:
            self.hparams_config()
        if self.save_objective:
            if self.gate != "learned":
                raise ConfigError(
                    "--save-objective saves into a learned run: use it with --gate learned"
                )
            tuned = [o for o in self.objectives if o in (*THRESHOLDS, *ROUTER)
                     and o not in ("pareto", "cost-pareto")]  # fmt: skip
            tuned += [TRAFFIC] if self.calibrate_on else []
            if self.save_objective not in tuned:
                raise ConfigError(f"--save-objective {self.save_objective!r} must be one of the "
                                  f"threshold objectives tuned here: {', '.join(tuned)}")  # fmt: skip

    def hparams_config(self) -> Any:
        """The training config the hparams study searches (--config and --set), loaded and
        checked: a stacked head is fitted in closed form and reads none of the searched
        hyper-parameters but data.balance (its trials were a gradient-trained placeholder)."""
        from ..training.config import load_config

        loaded = load_config(self.config, [*self.overrides, f"data.label_file={self.labels}"])
        if loaded.model.head == "stacked":
            raise ConfigError(f"--objective hparams searches what gradient training reads "
                              "(learning rate, epochs, LoRA, dropout), and --config "
                              f"{self.config} has model.head=stacked, fitted in closed form on "
                              "the frozen body: train it as it is, or search a linear-head "
                              "config (--config minilm-lora-closed-book)")  # fmt: skip
        return loaded

    def _check_used(self) -> None:
        """A flag set away from its default that none of the objectives reads is refused (it
        went unused: --budget beside macro-f1 changed nothing)."""
        defaults = TuneConfig(gate="", labels=Path())
        readers = {"target": ("min-retrieval", "min-cost", "min-llm-calls"),
                   "budget": ("budget-accuracy",), "config": ("hparams",),
                   "overrides": ("hparams",), "max_epochs": ("hparams",),
                   "workers": SAMPLED}  # fmt: skip
        flags = {"overrides": "--set", "max_epochs": "--max-epochs"}

        def plain(value: Any) -> Any:  # the CLI's lists and the defaults' tuples alike
            return list(value) if isinstance(value, list | tuple) else value

        for name, objectives in readers.items():
            unset = plain(getattr(self, name)) == plain(getattr(defaults, name))
            read = set(objectives) & set(self.objectives) or (
                name == "budget" and self.calibrate_on
            )
            if unset or read:
                continue
            flag = flags.get(name, f"--{name}")
            raise ConfigError(f"{flag} is read by --objective {' / '.join(objectives)}, and "
                              f"this run tunes {' '.join(self.objectives)}: drop it, or add "
                              "the objective")  # fmt: skip

    def _check_generator_used(self) -> None:
        """--generator is read where a threshold objective scores a gate that asks the
        generator (as `evaluate` refuses it beside gates that never ask it)."""
        if self.generator_model is None:
            return
        if set(self.objectives) & set(THRESHOLDS) and asks_generator([self.gate]):
            return
        raise ConfigError(f"--generator is asked by the {' / '.join(needing('generator'))} "
                          f"gates' threshold objectives, and this run tunes {self.gate} "
                          f"({' '.join(self.objectives)}): drop it, or tune one of those "
                          "gates")  # fmt: skip

    def _check_router(self) -> None:
        """--budget and --budget-llm-calls against the router's own costs and LLM calls (from
        its files, before it is loaded)."""
        self._check_llm_budget()
        # where --budget is read alone (`_check_used`): its unread default 1.0 was refused
        # beside min-cost for a router with costs in ms, and so was --budget 500 (unread)
        if "budget-accuracy" in self.objectives or self.calibrate_on:
            costs = declared_costs(self.gate, self.gate_options)
            check_budget(self.budget, costs or [float("inf")], "--budget")
        if (
            self.calibrate_on
            and not Path(self.calibrate_on).exists()
            and not str(self.calibrate_on).startswith("hf:")
        ):
            raise InputError("--calibrate-on: no such question file", self.calibrate_on)

    def _check_llm_budget(self) -> None:
        """--budget-llm-calls goes with llm-budget-accuracy (and it with the flag), from 0 to
        the dearest strategy's LLM calls where the router's files declare them."""
        given, asked = self.budget_llm_calls is not None, LLM_BUDGET in self.objectives
        if asked and not given:
            raise ConfigError(f"--objective {LLM_BUDGET} needs --budget-llm-calls X (mean LLM "
                              "calls per question)")  # fmt: skip
        if given and not asked:
            raise ConfigError(f"--budget-llm-calls goes with --objective {LLM_BUDGET} (the "
                              "most accurate routing within that many LLM calls a question)")  # fmt: skip
        if given:
            calls = declared_llm_calls(self.gate, self.gate_options, self.strategies)
            check_budget(self.budget_llm_calls, calls or [float("inf")], "--budget-llm-calls",
                         "number of LLM calls")  # fmt: skip

    def check_llm_budget_for(self, strategies: Sequence[str]) -> None:
        """--budget-llm-calls against the label file's strategies (a router fitted here, e.g.
        router-tfidf, has no files to read it from): before the router is built."""
        calls = llm_calls_for(strategies, self.strategies)
        if self.budget_llm_calls is not None and calls:
            check_budget(self.budget_llm_calls, calls, "--budget-llm-calls",
                         "number of LLM calls")  # fmt: skip


def check_local_copy(model: str, labelling: LazyGenerator, named_by: str) -> None:
    """--generator MODEL must be a model this machine can load (checked in milliseconds) and,
    where the labels record their model folder's weights checksum, hold those weights: a
    prompt gate's threshold tuned on another model's answers to labels it did not make means
    nothing. A server's or a Hub name's labels record no weights to compare (as `evaluate`)."""
    from ..generation.model_folders import CAN_LOAD, check_model_folder, folder_checksum

    check_model_folder(model, "pass --generator " + CAN_LOAD.removeprefix("pass "))
    expected = _labels_weights(labelling)
    if expected is None:
        return
    got = folder_checksum(Path(model)) if Path(model).is_dir() else None
    if got == expected:
        return
    has = f"holds weights {got[:12]}" if got else "is not a model folder here"
    raise ConfigError(f"--generator {model} is not the model that made the labels: "
                      f"{labelling.name} ({named_by}) had weights {expected[:12]}, and {model} "
                      f"{has}: pass the folder holding those weights (a copy of "
                      f"{labelling.name}), or label with {model} first")  # fmt: skip


def _labels_weights(labelling: LazyGenerator) -> str | None:
    """The weights checksum the labels' generator is known by (a local model folder's); None
    where it is known by a name or a server only."""
    if isinstance(labelling, RecordedGenerator):
        return labelling.identity if labelling.weights_known else None
    name = Path(str(labelling.options["name_or_path"]))
    if not name.is_dir():
        return None
    from ..generation.model_folders import folder_checksum

    return folder_checksum(name)


def _gate_flags_given(options: GateOptions) -> list[str]:
    """The gate flags set away from their defaults (`--learned-run`, `--feature`, ...)."""
    return [f"--{f.name.replace('_', '-')}" for f in fields(options)
            if getattr(options, f.name) != f.default]  # fmt: skip


def _declared_router(gate: str, options: GateOptions) -> dict[str, Any] | None:
    """A learned router run's or router export's calibration, from its manifest
    (`artifacts.open_artifact`); None for a gate, or a folder not given or not there (the
    gate's own checks name it)."""
    folder, kind = {"learned": (options.learned_run, "run"),
                    "onnx": (options.onnx, "export")}.get(gate, (None, None))  # fmt: skip
    if folder is None or not Path(folder).is_dir():
        return None
    return open_artifact(folder, kind).manifest.calibration


def declared_costs(gate: str, options: GateOptions) -> list[float] | None:
    """A learned router run's or router export's costs, read from its metadata file."""
    router = _declared_router(gate, options)
    return list(router["costs"]) if router else None


def declared_llm_calls(
    gate: str, options: GateOptions, registry: StrategyRegistry | None = None
) -> tuple[float, ...] | None:
    """The LLM calls per question of a router run's or export's strategies (--strategies'
    specs, else the router's own), read from its metadata file."""
    router = _declared_router(gate, options)
    return Calibration.from_dict(router).llm_calls(registry) if router else None


def run_tuning(cfg: TuneConfig) -> list[Path]:
    """Runs the requested studies; returns the markdown reports written, in order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar says enough
    cfg.check()
    splits = load_splits(cfg.labels, cfg.run_dir, cfg.questions)  # a bad label file: no folder
    check_dev(splits, auroc="hparams" in cfg.objectives)
    cfg.out.mkdir(parents=True, exist_ok=True)
    written = []
    if "hparams" in cfg.objectives:
        written.append(_hparams(cfg, splits))
    if "relations" in cfg.objectives:
        written.append(_relations(cfg, splits))
    thresholds = [o for o in cfg.objectives if o in THRESHOLDS]
    if thresholds:
        written.append(_thresholds(cfg, splits, thresholds))
    router = [o for o in cfg.objectives if o in ROUTER]
    if router or cfg.calibrate_on:
        written.append(_router(cfg, splits, router))
    return written


def check_dev(sp: Splits, auroc: bool = False) -> None:
    """Thresholds and operating points are chosen on dev: none is refused (it was an internal
    error, "index -1 is out of bounds"; hparams's came from inside its first trial, a FAIL
    trial and a traceback), one class alone is said (any threshold separates it perfectly,
    and the one saved means nothing) and refused where dev AUROC is the objective (`auroc`:
    hparams, whose "best" trial scored 0.0 of an undefined AUROC)."""
    counts = f"train {len(sp.train)}, dev {len(sp.dev)}, test {len(sp.test)}"
    if not len(sp.dev):
        raise MissingInputError(f"tune chooses on the dev split, and these labels give none "
                                f"({counts}): label more questions, or give --questions a "
                                "`split` column with dev rows")  # fmt: skip
    if sp.dev.strategies or len(np.unique(sp.dev.y)) > 1:
        return
    what = "needs retrieval" if sp.dev.y[0] else "needs no retrieval"
    if auroc:
        raise MissingInputError(f"--objective hparams maximises dev AUROC, and every dev "
                                f"question {what} ({counts}), where AUROC is undefined: label "
                                "more questions, or give dev rows of both labels")  # fmt: skip
    log.warning(f"every dev question {what} ({counts}): a threshold chosen there separates "
                "nothing, and its dev figures say nothing of the test split; label more "
                "questions")  # fmt: skip


def _router(cfg: TuneConfig, sp: Splits, objectives: list[str]) -> Path:
    from ..data.user_questions import question_set
    from .router_budgets import (
        calibrate_on,
        calibration_source,
        router_markdown,
        saved_calibration,
        test_figures,
        traffic_summary,
        tune_router,
    )
    from .threshold_studies import build_for_tuning

    traffic = question_set(cfg.calibrate_on) if cfg.calibrate_on else ()  # read before the model
    cfg.check_llm_budget_for(sp.dev.strategies)  # before the router is built
    costs = None
    if cfg.strategies is not None:  # its prices, for a router fitted here (router-tfidf)
        costs = cfg.strategies.costs_in_order(
            sp.dev.strategies, f"the label file's strategies ({cfg.strategies.source})"
        )
    built = build_for_tuning(cfg.gate, sp.train, sp.dev, {}, cfg.gate_options, costs,
                             cfg.generator()[0])  # fmt: skip
    priced_alike(built, cfg.strategies)
    gate = _at_budget(built, cfg, objectives)
    result = tune_router(gate, sp.dev, objectives, cfg.budget, cfg.target, cfg.budget_llm_calls,
                         cfg.strategies, cfg.labels)  # fmt: skip
    test_figures(gate, result, sp.test)  # tuning is over: only now are test questions routed
    calibration = None
    if cfg.calibrate_on:
        calibration = calibrate_on(gate, traffic, calibration_source(cfg.calibrate_on), cfg.budget)
        dev_price = gate.calibration.price(cfg.budget)  # type: ignore[attr-defined]
        result["traffic"] = traffic_summary(calibration, len(traffic), dev_price,
                                            result["llm_calls"])  # fmt: skip
    md = f"# Router tuning\n\n`{cfg.command}`\n\n" + router_markdown(result)
    if cfg.save_objective in (*ROUTER, TRAFFIC):
        from ..training.checkpoint import save_router

        if cfg.save_objective != TRAFFIC:
            calibration = saved_calibration(gate, result, cfg.save_objective)
        save_router(cfg.gate_options.learned_run, calibration)
        log.info(f"saved the router's default operating point ({calibration.objective}, price "
                 f"{calibration.default_price:.4g}) into {cfg.gate_options.learned_run}")  # fmt: skip
    return _write(cfg, "router", result, md)


def priced_alike(gate: Gate, registry: StrategyRegistry | None) -> None:
    """A router's own costs are those --strategies declares for its strategies (`merged`):
    a file pricing them otherwise had tune read --budget in the router's unit and the LLM
    calls in the file's (score, serve and rag refuse it so)."""
    own = getattr(gate, "costs", None)
    if registry is None or not own:
        return
    registry.merged([with_cost(registry[s], c) for s, c in dict(own).items() if s in registry],
                    f"router {gate.name!r}")  # fmt: skip


def _at_budget(gate: Gate, cfg: TuneConfig, objectives: list[str]) -> Gate:
    """A router fitted here (router-tfidf, router-prior) at --budget where this run reads it,
    checked against its costs now they are known (before, a budget outside them was met by
    routing every question to the cheapest strategy, unsaid); other gates as they are."""
    from ..gates.strategy_routers import FittedRouter

    if not isinstance(gate, FittedRouter) or not ("budget-accuracy" in objectives
                                                  or cfg.calibrate_on):  # fmt: skip
        return gate
    check_budget(cfg.budget, gate.calibration.costs, "--budget")
    return gate.at_budget(cfg.budget)


def report_stems(
    gate: str, labels: Path, objectives: Sequence[str], calibrate_on: str | None = None
) -> dict[str, str]:
    """The stem of each report this run writes (`<out>/<stem>.md` and `.json`), by study:
    known before any work, so the report folder check names these files and no others (a
    user's own `tune-notes.md` there had refused every run)."""
    policy = policy_name(labels)
    stems = {"hparams": f"tune-hparams-{policy}",
             "relations": f"tune-popularity-relations-{policy}",
             "thresholds": f"tune-{gate}-{policy}",
             "router": f"tune-router-{gate}-{policy.replace('/', '-')}"}  # fmt: skip
    runs = {"hparams": "hparams" in objectives, "relations": "relations" in objectives,
            "thresholds": bool(set(objectives) & set(THRESHOLDS)),
            "router": bool(set(objectives) & set(ROUTER) or calibrate_on)}  # fmt: skip
    return {study: stem for study, stem in stems.items() if runs[study]}


def pareto_plot(gate: str, labels: Path) -> str:
    """The Pareto front's figure, named by the gate tuned (not its run) and the labels."""
    return f"pareto-{gate}-{policy_name(labels)}.png"


def writes(
    gate: str, labels: Path, objectives: Sequence[str], calibrate_on: str | None = None
) -> list[str]:
    """The names of the files this run writes in --out (checked when the command starts)."""
    stems = report_stems(gate, labels, objectives, calibrate_on).values()
    names = [f"{stem}.{ext}" for stem in stems for ext in ("json", "md")]
    return names + ([pareto_plot(gate, labels)] if "pareto" in objectives else [])


def _write(cfg: TuneConfig, study: str, data: dict[str, Any], markdown: str) -> Path:
    stem = report_stems(cfg.gate, cfg.labels, cfg.objectives, cfg.calibrate_on)[study]
    write_owned(cfg.out / f"{stem}.json", json.dumps(data, indent=2, default=str))
    return write_owned(cfg.out / f"{stem}.md", markdown)


def _thresholds(cfg: TuneConfig, sp: Splits, objectives: list[str]) -> Path:
    from .threshold_studies import build_for_tuning, tune_gate_thresholds, tuning_identity
    from .tuned_report import dev_test_rows, tuned_markdown

    policy = policy_name(cfg.labels)
    _refuse_untunable(cfg, sp.dev, objectives)  # before the gate is built and scores dev
    run = LabellingRun(cfg.run_dir)
    records = run.records()
    generator = _asked_generator(cfg, policy, sp, records, run.closed_book)
    gate = build_for_tuning(cfg.gate, sp.train, sp.dev, records, cfg.gate_options,
                            generator=generator)  # fmt: skip
    calls = binary_llm_calls(sp.dev.strategies, cfg.strategies)  # the LLM-calls axis
    if reads_answers(gate):  # a two-stage gate: tuned on what it reads, the recorded answers
        dev, test = (with_recorded_answers(s, cfg.labels) for s in (sp.dev, sp.test))
        sp = replace(sp, dev=dev, test=test)
        calls = answer_read_calls(calls)
    # what the gate fits on and scores (its answers too), by content, not names
    identity = tuning_identity((sp.train, sp.dev), cfg.run_dir, gate, cfg.gate_options)
    result = tune_gate_thresholds(gate, sp.train, sp.dev, policy, objectives, cfg.storage,
                                  cfg.out, cfg.trials, cfg.target, cfg.seed, identity,
                                  cfg.workers, calls,
                                  pareto_plot(cfg.gate, cfg.labels))  # fmt: skip
    # tuning is over: only now are the chosen thresholds applied to the test split
    result["rows"] = rows = dev_test_rows(result, gate, sp.test)
    md = f"# Tuned thresholds\n\n`{cfg.command}`\n\n" + tuned_markdown(result, rows)
    if asks_generator([cfg.gate]):  # which model scored dev and test
        result["generator"] = {"name": generator.name, "chosen": cfg.generator()[1]}
        md += f"\nThe generator the gate asked: `{generator.name}` ({cfg.generator()[1]}).\n"
    path = _write(cfg, "thresholds", result, md)  # first: a refused save keeps the report
    if cfg.save_objective in THRESHOLDS:  # only when asked: tuning alone never changes a run
        _save_threshold(cfg, result)
    return path


def _asked_generator(
    cfg: TuneConfig, policy: str, sp: Splits, records: dict[str, dict], answers: Path
) -> LazyGenerator:
    """The labelling generator, said where the gate asks it; one with no local copy must have
    a recorded answer for every dev and test question the gate scores (checked before it is
    built: nothing prepared or started)."""
    generator, named_by = cfg.generator()
    if asks_generator([cfg.gate]):
        log.info(f"generator for {cfg.gate}: {generator.name} ({named_by})")
    scored = {f"{split} questions of {policy}": getattr(sp, split) for split in ("dev", "test")}
    check_recorded_answers([cfg.gate], scored, records, generator, answers, f"pass {LOCAL_COPY}")
    return generator


def _refuse_untunable(cfg: TuneConfig, dev: EvalSet, objectives: list[str]) -> None:
    """Objectives that need recorded answers, where dev has none, when nothing else was asked
    or the threshold to save is theirs: refused now, not after the gate has scored dev (the
    others are skipped with the reason in the report)."""
    from .objectives import objective, require_answers

    needing = [o for o in objectives if o == "pareto" or objective(o, cfg.target).needs_answers]
    if not needing or (len(needing) < len(objectives) and cfg.save_objective not in needing):
        return
    try:
        require_answers(dev.closed_correct, dev.rag_correct)
    except MissingInputError as e:
        raise MissingInputError(f"--objective {' '.join(needing)}: {e}; nothing tuned") from None


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
    log.info(f"saved threshold {r['threshold']!r} ({key}) into {run}/metadata.json")


def _relations(cfg: TuneConfig, sp: Splits) -> Path:
    from .popularity_study import tune_relations
    from .threshold_studies import tuning_identity

    policy = policy_name(cfg.labels)
    identity = tuning_identity((sp.dev,), cfg.run_dir)
    name = study_name("popularity", policy, "relations", identity)
    res = tune_relations(sp.dev, name, cfg.storage, cfg.trials, cfg.seed, workers=cfg.workers)
    gate = res.pop("gate")
    rels = sorted(res["brute_force_thresholds"])
    body = [[r, res["brute_force_thresholds"][r], res["optuna_thresholds"][r]] for r in rels]
    md = (f"# Per-relation popularity thresholds (Optuna vs brute force)\n\n`{cfg.command}`\n\n"
          f"{res['n_questions']} dev PopQA questions with recorded answers, {res['n_trials']} trials. "
          f"Adaptive accuracy on dev: Optuna {res['optuna_accuracy']:.4f}, brute force "
          f"{res['brute_force_accuracy']:.4f}; global fallback threshold {gate.global_threshold:g}.\n\n"
          + markdown_table(["relation", "brute-force threshold", "Optuna threshold"], body) + "\n")  # fmt: skip
    return _write(cfg, "relations", res, md)


def hparams_study(cfg: TuneConfig, sets: Sequence[EvalSet] = ()) -> str:
    """The hparams study's name: its trials depend on the questions and labels trained and
    judged on (`sets`, by content: an edited questions file resumed the old one's trials), the
    training config as resolved (its `extends` and --set; a config passed by name was keyed by
    nothing, so another config's study resumed) without its file paths, a local backbone by
    its weights (re-initialised in place, it resumed; the label file under another path
    spelling lost its trials), and the search space."""
    from ..generation.model_folders import folder_checksum

    resolved = cfg.hparams_config().to_dict()
    data = {k: v for k, v in resolved["data"].items() if k not in ("label_file", "questions")}
    model = dict(resolved["model"])
    if Path(str(model.get("name"))).is_dir():
        model["name"] = folder_checksum(Path(model["name"]))
    keyed = json.dumps({**resolved, "data": data, "model": model}, sort_keys=True, default=str)
    labels = [s.digest() for s in sets] or [sha256_file(cfg.labels)]
    identity = content_id(*labels, keyed, str(cfg.max_epochs))
    return study_name("learned-hparams", policy_name(cfg.labels), "dev-auroc", identity)


def _hparams(cfg: TuneConfig, sp: Splits) -> Path:
    from .hparams import tune_hparams  # torch and Lightning: only for this study

    name = hparams_study(cfg, (sp.train, sp.dev))
    res = tune_hparams(cfg.labels, name, cfg.storage, cfg.trials, cfg.config, list(cfg.overrides),
                       cfg.max_epochs, cfg.seed, cfg.questions, cfg.workers)  # fmt: skip
    md = (f"# Hyper-parameter study of the learned gate\n\n`{cfg.command}`\n\n"
          + "\n".join(f"- {k}: {v}" for k, v in res.items()) + "\n")  # fmt: skip
    return _write(cfg, "hparams", res, md)
