"""Training configuration: typed, frozen sections read from YAML files that may `extends:`
others, plus `--set key.path=value` command-line overrides.

`TrainConfig` has the sections `run`, `data`, `model`, `trainer` and `early_stopping`. Every key
of `run`, `data`, `model` and `early_stopping` is a typed dataclass field; values are checked
(and numeric strings such as YAML's `1e-3` converted) when a section is built, so a wrong type,
an unknown key (with the close ones named) or a value outside its choices is a `ConfigError`
naming the key, before anything loads. `trainer` stays an open mapping of Lightning `Trainer`
arguments, checked against its signature (tests and torchrun launches set
`limit_train_batches`, `devices`, `num_nodes`).

Extending: a new `data.task` is one `Task` entry in `TASKS` (training/tasks.py); a new model key is one field of
`ModelConfig` with its type and default (the checks follow from the annotation)."""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import importlib.util
import inspect
import math
import os
import statistics
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError, clipped
from ..fileio import not_a_file, plain_name
from ..strategies import (
    BUILTIN,
    StrategyRegistry,
    load_strategies,
    registry_from_list,
)
from ..strict_rows import first_repeated
from ..yaml_files import Misread, load_yaml, read_yaml
from .tasks import TASKS, Task


def _close(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(key), [str(k) for k in known], n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# ----------------------------------------------------------------------------- value checks


def _check(where: str, value: Any, hint: Any) -> Any:
    """`value` as the annotated type `hint`, or a ConfigError naming the key (`where`)."""
    if value is None:
        if _optional(hint):
            return None
        raise ConfigError(f"{where}=null: a value is required ({_describe(hint)})")
    hint = _strip_none(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(
                f"{where}={value!r}: expected one of {', '.join(map(str, choices))}"
                + _close(value, choices)
            )
        return value
    if origin is tuple:  # tuple[str, ...] / tuple[float, ...]: a YAML list, kept immutable
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}={value!r}: expected a list, e.g. {where}=[{value}]")
        item = typing.get_args(hint)[0]
        return tuple(_check(f"{where}[{i}]", v, item) for i, v in enumerate(value))
    if origin is dict:  # dict[str, str]
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}={value!r}: expected a mapping, e.g. {{question: title}}")
        return {_check(f"{where} key", k, str): _check(f"{where}.{k}", v, str)
                for k, v in value.items()}  # fmt: skip
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}={value!r}: expected a mapping of keys")
        return _section(hint, value, where)
    return _scalar(where, value, hint)


def _scalar(where: str, value: Any, hint: type) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r}: expected true or false")
        return value
    if hint in (int, float):
        number = value
        if isinstance(value, str):  # YAML reads 1e-3 as a string
            try:
                number = float(value) if hint is float else int(value)
            except ValueError:
                number = None
        ok = isinstance(number, int) and not isinstance(number, bool)
        ok = ok or (hint is float and isinstance(number, float))
        if not ok or not math.isfinite(number):
            kind = "a number" if hint is float else "an integer"
            raise ConfigError(f"{where}={value!r}: expected {kind}")
        if hint is int and abs(number) >= 2**63:  # torch and islice overflowed mid-training
            raise ConfigError(f"{where}={value!r}: expected an integer of at most 19 digits")
        return float(number) if hint is float else number
    # str, the only other type a field has
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}={value!r}: expected a string")
    return value


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _strip_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _describe(hint: Any) -> str:
    hint = _strip_none(hint)
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def _section(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """`cls(**values)` with unknown keys refused (naming the close ones)."""
    known = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in known:
            raise ConfigError(
                f"unknown key {key!r} in {where}{_close(key, known)}; known: {', '.join(known)}"
            )
    return cls(**values)


# A number's allowed values (a test, and what to say when it fails): a negative learning rate
# or a dropout of 1 would train, silently, into nothing useful.
Range = tuple[Callable[[Any], bool], str]
POSITIVE: Range = (lambda v: v > 0, "a number above 0")
AT_LEAST_0: Range = (lambda v: v >= 0, "0 or more")
AT_LEAST_1: Range = (lambda v: v >= 1, "1 or more")
FRACTION: Range = (lambda v: 0 <= v <= 1, "a number from 0 to 1")
DROPOUT: Range = (lambda v: 0 <= v < 1, "a number from 0 up to (not including) 1")
# AdamW's step size: past 1 it diverges at once, and past float32 torch overflowed mid-fit
LR: Range = (lambda v: 0 < v <= 1, "a number above 0 and at most 1 (1e-5 to 1e-3 is usual)")
SEED: Range = (lambda v: 0 <= v < 2**32, "a whole number from 0 to 4294967295 (numpy's seeds)")
# Past these, torch's thread count overflowed (an internal error) and the DataLoader forked
# worker after worker until the machine ran out of memory.
THREADS: Range = (lambda v: 1 <= v <= 1024, "a whole number from 1 to 1024 (torch threads; "
                  "this machine's cores is usual)")  # fmt: skip
WORKERS: Range = (lambda v: 0 <= v <= 64, "a whole number from 0 to 64 (DataLoader worker "
                  "processes, each a copy of this one; 0 loads in the main process)")  # fmt: skip


class _Checked:
    """Checks and converts every field against its annotation (and `_ranges`) when the
    section is built."""

    _where = ""
    _ranges: dict[str, Range] = {}  # a class table, not a field

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _check(f"{self._where}.{f.name}", getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        for key, (ok, what) in self._ranges.items():
            value = getattr(self, key)
            if value is not None and not ok(value):
                raise ConfigError(f"{self._where}.{key}={value}: expected {what}")

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML-able values (lists, not tuples)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _plain(value: Any) -> Any:
    if isinstance(value, _Checked):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


# ----------------------------------------------------------------------------- the sections


@dataclass(frozen=True)
class RunConfig(_Checked):
    _where = "run"
    _ranges = {"seed": SEED, "num_threads": THREADS}
    name: str | None = None  # the run folder's name; default: backbone-model-labels
    seed: int = 0
    output_dir: str = "checkpoints"
    num_threads: int | None = None  # torch threads; on a shared CPU fewer than cores can be faster

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name is not None:
            plain_name(self.name, "run.name")


@dataclass(frozen=True)
class DataConfig(_Checked):
    _where = "data"
    _ranges = {"max_train_examples": AT_LEAST_1, "max_eval_examples": AT_LEAST_1,
               "num_workers": WORKERS}  # fmt: skip
    label_file: str | None = None  # or labels handed to train() in memory
    task: str = "binary"  # a key of TASKS
    split_seed: int = 0  # the canonical split: assign_splits(load_all(), seed=0)
    datasets: tuple[str, ...] | None = None  # None = every bundled dataset
    questions: str | None = None  # your own question file / hf:NAME (replaces datasets)
    fields: dict[str, str] | None = None  # {question: title, ...}: columns read as fields
    features: tuple[str, ...] | None = None  # numeric side features beside the text, e.g. [s_pop]
    max_length: int = 64
    batch_size: int = 32
    eval_batch_size: int = 128
    balance: Literal["class_weights", "sampler", "none"] = "class_weights"
    max_train_examples: int | None = None  # seeded subsample of the train split (CPU budgets)
    max_eval_examples: int | None = None
    num_workers: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in TASKS:
            raise ConfigError(
                f"data.task={self.task!r}: expected one of {', '.join(TASKS)}"
                + _close(self.task, TASKS)
            )
        for key in ("max_length", "batch_size", "eval_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"data.{key}={getattr(self, key)}: expected a positive integer")
        if repeated := first_repeated(self.features or ()):  # it trained on two copies
            raise ConfigError(f"data.features names {repeated!r} twice; name each column once")
        for name in self.features or ():
            if name in NOT_FEATURES:
                raise ConfigError(f"data.features names {name!r}: {NOT_FEATURES[name]}; "
                                  "data.features lists numeric columns (e.g. views, s_pop)")  # fmt: skip

    @property
    def task_spec(self) -> Task:
        return TASKS[self.task]


_TEXT = "a field of the question read as text (the gate reads the question already)"
_ANSWER = ("the answer's confidence, which a two-stage gate reads (--config cascade-closed-book, "
           "model.answer_confidence: true)")  # fmt: skip
# names a user may list as side features that are no number a question has
NOT_FEATURES = {**dict.fromkeys(("id", "question", "text", "answers", "answer", "source", "split",
                                 "relation", "entity", "date"), _TEXT),
                **dict.fromkeys(("token_logprobs", "logprobs", "mean_logprob"), _ANSWER)}  # fmt: skip


@dataclass(frozen=True)
class LoraConfig(_Checked):
    _where = "model.lora"
    _ranges = {"r": AT_LEAST_1, "alpha": POSITIVE, "dropout": DROPOUT}
    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] | None = None  # None: peft's default for the model type


@dataclass(frozen=True)
class ModelConfig(_Checked):
    _where = "model"
    _ranges = {"lr": LR, "head_lr": LR, "weight_decay": AT_LEAST_0,
               "dropout": DROPOUT, "warmup_ratio": FRACTION}  # fmt: skip
    backbone: Literal["encoder", "t5-lora", "decoder-lora"] = "encoder"
    name: str = "minilm"  # a bundled name, a Hub id or a local folder
    pooling: Literal["mean", "cls", "last"] | None = None  # None = the backbone's default
    lora: LoraConfig | None = None  # required for *-lora backbones
    dropout: float = 0.1
    lr: float = 5e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    threshold: float = 0.5
    # linear: one layer over the pooled embedding, trained with the body. stacked: the body
    # frozen, logistic models over its embedding, TF-IDF n-grams, the wording's shape and a
    # source posterior (training/stacked.py), fitted in seconds, no epochs (routers and gates)
    head: Literal["linear", "stacked"] = "linear"
    # routers (data.task=strategies): each strategy's cost in your unit (None: the label
    # file's per-question costs, else retrievals: 0, 1, 3.35), and the default operating
    # point, a budget = mean cost per question (the best dev accuracy within it)
    costs: tuple[float, ...] | None = None
    budget: float = 1.0
    # the splits a stacked head fits on: [train] (its price calibrated on dev), or [train, dev]
    # (more data; the price calibrated on out-of-fold predictions of both, as no dev is left)
    fit_on: tuple[str, ...] = ("train",)
    # a stacked head's source model, P(source | text), which its heads read: it helps the
    # router; a binary gate's config may drop it (docs/train.md: no gain there, most of the fit)
    source_model: bool = True
    # a two-stage gate (binary task, stacked head): the closed-book answer's token
    # log-probabilities as inputs beside the question (data/answer_confidence.py), read from
    # the label file at training and per question when scoring; a question without them gets
    # the question-only score. Apart from data.features, the user's own numeric columns
    answer_confidence: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"model.threshold must be in [0, 1], got {self.threshold}")
        if self.costs is not None and (len(self.costs) < 2 or min(self.costs) < 0):
            raise ConfigError(f"model.costs={list(self.costs)}: give one cost of 0 or more per "
                              "strategy, cheapest first, e.g. [0, 1, 3.35]")  # fmt: skip
        if self.costs is not None and list(self.costs) != sorted(self.costs):
            # the labels' targets are the cheapest strategy that answers, in that order
            raise ConfigError(f"model.costs={list(self.costs)}: give them cheapest first, in "
                              "the label file's strategy order (e.g. [0, 1, 3.35] for "
                              "no_retrieval, one_retrieval, multi_step)")  # fmt: skip
        if self.budget < 0:
            raise ConfigError(f"model.budget={self.budget}: a budget (mean cost per question) is "
                              "0 or more")  # fmt: skip
        if tuple(self.fit_on) not in (("train",), ("train", "dev")):
            raise ConfigError(f"model.fit_on={list(self.fit_on)}: give [train] or [train, dev]")


# What a stacked head (closed form on the frozen body: no optimizer, epochs or early stopping)
# never reads; `--set` of one is said (it changed nothing). Key prefixes.
CLOSED_FORM_UNREAD = ("model.lr", "model.head_lr", "model.weight_decay", "model.dropout",
                      "model.warmup_ratio", "model.lora", "trainer.max_epochs",
                      "trainer.max_steps", "trainer.accumulate_grad_batches",
                      "trainer.gradient_clip_val", "early_stopping")  # fmt: skip


def unread_keys(config: TrainConfig, keys: Iterable[str]) -> list[str]:
    """The `keys` (dotted, as --set names them) the config's head does not read."""
    if config.model.head != "stacked":
        return []
    return [k for k in keys if any(k == p or k.startswith(p + ".") for p in CLOSED_FORM_UNREAD)]


# What the module logs for train and val (training/module.py: the loss and `gate_metrics`):
# early stopping on another name failed after the first epoch, with a traceback.
METRICS = ("loss", "acc", "macro_f1", "auroc", "ap", "ece", "retrieval_rate")
MONITORS = tuple(f"{stage}/{m}" for stage in ("val", "train") for m in METRICS)
# the mode each metric is better in (retrieval_rate: neither, the user's choice)
BETTER = {"loss": "min", "ece": "min", "acc": "max", "macro_f1": "max", "auroc": "max",
          "ap": "max"}  # fmt: skip


@dataclass(frozen=True)
class EarlyStoppingConfig(_Checked):
    _where = "early_stopping"
    _ranges = {"patience": AT_LEAST_0}
    monitor: str = "val/auroc"
    mode: Literal["min", "max"] = "max"
    patience: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.monitor not in MONITORS:
            raise ConfigError(f"early_stopping.monitor={self.monitor!r}: not a logged metric"
                              f"{_close(self.monitor, MONITORS)}; one of "
                              f"{', '.join(MONITORS[:len(METRICS)])} (or train/...)")  # fmt: skip
        better = BETTER.get(self.monitor.split("/", 1)[1])
        if better is not None and self.mode != better:  # it kept the worst epoch's weights
            raise ConfigError(f"early_stopping.mode={self.mode} with monitor={self.monitor}, "
                              f"which is better {'lower' if better == 'min' else 'higher'}: it "
                              f"would stop on and keep the worst epoch; set "
                              f"early_stopping.mode={better}")  # fmt: skip


# Lightning Trainer arguments set by default, with the types they are checked against (any
# other argument of `pytorch_lightning.Trainer` may be set too, as given).
TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": 2,
    "accelerator": "auto",
    "devices": "auto",
    "strategy": "auto",
    "precision": "32-true",
    "log_every_n_steps": 20,
    "gradient_clip_val": 1.0,
    "deterministic": False,
}
TRAINER_TYPES: dict[str, Any] = {"max_epochs": int, "log_every_n_steps": int,
                                 "gradient_clip_val": float, "deterministic": bool,
                                 "accumulate_grad_batches": int, "max_steps": int,
                                 "check_val_every_n_epoch": int}  # fmt: skip
# Bounds Lightning does not check before the fit (0 batches to accumulate, or validation every
# 0 epochs, was a traceback once training started; a negative clipping norm flips every
# gradient's sign, silently).
TRAINER_RANGES: dict[str, Range] = {"log_every_n_steps": AT_LEAST_1, "gradient_clip_val":
                                    AT_LEAST_0, "accumulate_grad_batches": AT_LEAST_1,
                                    "check_val_every_n_epoch": AT_LEAST_1}  # fmt: skip
# The precisions the module trains in: the "-true" ones (and 64) cast the weights but not the
# features and side inputs, a dtype mismatch at the first batch.
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16", "16-mixed", "16")


# Trainer arguments retrieval-gate passes itself (training/trainer.py `_trainer`, the tuning
# trial's tuning/hparams.py `fit_trial`): a config's own value was a second keyword, a
# TypeError once the data and model had loaded. (`logger` is read as a config key; the
# keys a tuning trial sets over the config's, `val_check_interval`, `logger` and
# `enable_checkpointing`, are the config's own in training.)
PROJECT_SET: dict[str, str] = {
    "default_root_dir": "the run folder, run.output_dir/run.name: set those",
    "callbacks": "its checkpoints, early stopping (the early_stopping section), progress bar "
    "and throughput; a tuning trial's pruning",
}


def _trainer_keys() -> set[str]:
    """The parameters of Lightning's `Trainer.__init__`, read from its source: importing
    Lightning takes seconds, and a misspelt key is refused before that."""
    spec = importlib.util.find_spec("pytorch_lightning")  # the package, not imported
    source = Path(spec.origin).parent / "trainer" / "trainer.py" if spec and spec.origin else None
    if source is not None and source.is_file():
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == "Trainer":
                init = next((f for f in node.body if isinstance(f, ast.FunctionDef)
                             and f.name == "__init__"), None)  # fmt: skip
                if init is not None:
                    args = init.args
                    return {a.arg for a in (*args.args, *args.kwonlyargs)} - {"self"}
    import pytorch_lightning as pl  # not installed (a clear error), or laid out otherwise

    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def check_trainer(values: Mapping[str, Any]) -> dict[str, Any]:
    """Trainer arguments: names checked against Lightning's `Trainer`, known ones typed."""
    if not isinstance(values, Mapping):
        raise ConfigError("config section 'trainer' must be a mapping of keys")
    known = _trainer_keys()
    out = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"unknown key {key!r} in section 'trainer'{_close(key, known)}")
        if key in PROJECT_SET:
            raise ConfigError(f"trainer.{key} is set by retrieval-gate itself ({PROJECT_SET[key]}"
                              f"), not by the config; leave trainer.{key} out")  # fmt: skip
        hint = TRAINER_TYPES.get(key)
        out[key] = _check(f"trainer.{key}", value, hint | None) if hint else copy.deepcopy(value)
        ok, what = TRAINER_RANGES.get(key, (None, ""))
        if ok is not None and out[key] is not None and not ok(out[key]):
            raise ConfigError(f"trainer.{key}={out[key]}: expected {what}")
    epochs, steps = out.get("max_epochs"), out.get("max_steps", -1)
    if epochs is not None and epochs < 1 and epochs != -1:  # 0 trained nothing, and saved it
        raise ConfigError(f"trainer.max_epochs={epochs}: expected at least 1 (or -1 with "
                          "trainer.max_steps)")  # fmt: skip
    if steps is not None and steps < 1 and steps != -1:
        raise ConfigError(f"trainer.max_steps={steps}: expected at least 1 (or -1: no limit)")
    if epochs == -1 and steps in (None, -1):  # the warm-up and decay span a known step count
        raise ConfigError("trainer.max_epochs=-1 (no epoch limit) needs trainer.max_steps, "
                          "which the learning-rate schedule spans; set it, e.g. "
                          "trainer.max_steps=2000")  # fmt: skip
    _check_fit_keys(out)
    if "logger" in out:  # Lightning's own loggers, by name (training/loggers.py)
        from .loggers import check_logger

        out["logger"] = check_logger(out["logger"])
    return out


def _check_fit_keys(out: Mapping[str, Any]) -> None:
    """Trainer values Lightning takes and the fit then fails on, or trains nothing with."""
    precision = out.get("precision")
    if precision is not None and str(precision) not in PRECISIONS:
        raise ConfigError(f"trainer.precision={precision!r}: expected one of "
                          f"{', '.join(PRECISIONS[::2])} (16-mixed on a GPU)")  # fmt: skip
    interval = out.get("val_check_interval")
    if interval is not None and (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or interval <= 0
        or (isinstance(interval, float) and interval > 1)
    ):
        raise ConfigError(
            f"trainer.val_check_interval={interval!r}: expected a fraction of "
            "an epoch in (0, 1] (e.g. 0.5) or a number of batches (e.g. 100)"
        )
    for key, what in (("limit_train_batches", "trains"), ("limit_val_batches", "validates")):
        limit = out.get(key)  # trained nothing and saved it; validating none failed at the end
        if limit is not None and not isinstance(limit, bool) and limit == 0:
            raise ConfigError(f"trainer.{key}=0 {what} on no batch; give a fraction in (0, 1] "
                              "or a number of batches, or leave it out")  # fmt: skip
    if out.get("enable_checkpointing") is False:  # Lightning refused the run's own callback
        raise ConfigError("trainer.enable_checkpointing=false: the run keeps its best "
                          "validation epoch's weights through a checkpoint; leave it out")  # fmt: skip
    if out.get("fast_dev_run") not in (None, False, 0):  # saved a gate fitted on one batch
        raise ConfigError(f"trainer.fast_dev_run={out['fast_dev_run']}: Lightning's smoke test "
                          "keeps no checkpoint, and the run folder would hold a gate fitted on "
                          "a batch or two; for a quick real run set trainer.max_steps=10 "
                          "data.max_train_examples=256, or leave it out")  # fmt: skip


@dataclass(frozen=True)
class TrainConfig:
    """One training run's configuration. Build it with `load_config` (YAML + `--set`),
    `TrainConfig.from_dict`, or directly from the sections; `override` gives a changed copy."""

    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: dict[str, Any] = field(default_factory=lambda: dict(TRAINER_DEFAULTS))
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    # a router's strategy specs (issue 36): a `strategies:` list as in a strategies YAML file,
    # or that file's path; None: the built-ins. Their costs price the router (model.costs wins)
    strategies: tuple[dict[str, Any], ...] | str | None = None

    def registry(self) -> StrategyRegistry:
        if self.strategies is None:
            return BUILTIN
        if isinstance(self.strategies, str):
            return load_strategies(self.strategies)
        return registry_from_list([dict(x) for x in self.strategies], "config strategies")

    def router_costs(
        self,
        strategies: Sequence[str],
        question_costs: Mapping[str, Any] | None = None,
        train_ids: Sequence[str] = (),
    ) -> tuple[float, ...]:
        """A router's strategy costs: model.costs; else the config's `strategies:` specs';
        else the mean of the labels' per-question costs when every training question has
        them (exactly rounded: 0.6 of every question is 0.6, a budget of 0.6 its top); else
        retrievals (0, 1, 3.35). Checked against `strategies`."""
        from ..errors import InputError
        from ..pricing import check_costs, default_costs

        if self.model.costs is not None:
            check_costs(self.model.costs, strategies, "model.costs")
            return tuple(self.model.costs)
        if self.strategies is not None:  # priced in the label file's order: cheapest first
            label_file = self.data.label_file
            where = f"data.label_file {label_file} (its strategies)" if label_file else (
                "the labels' strategies")  # fmt: skip
            return self.registry().costs_in_order(strategies, where)
        lacking = next((i for i in train_ids if i not in (question_costs or {})), None)
        if question_costs and train_ids and lacking is None:
            rows = [question_costs[i] for i in train_ids]
            # exactly rounded (fractions): np.mean stored 0.5999999999999976 for 0.6 each
            return tuple(float(statistics.mean(map(float, col))) for col in zip(*rows, strict=True))
        try:
            return default_costs(strategies)
        except InputError as e:  # said of the row: its file's other rows have costs
            if not question_costs or lacking is None:
                raise
            raise InputError(f"{e}; the labels give per-question costs, but not for training "
                             f"question {lacking!r}: re-import the outcomes with every row's "
                             "costs") from None  # fmt: skip

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ConfigError(f"config section {name!r} must be a {cls.__name__}")
        object.__setattr__(self, "trainer", check_trainer(self.trainer))
        if self.model.fit_on != ("train",) and not (
            self.model.head == "stacked" and self.data.task_spec.routes
        ):
            raise ConfigError("model.fit_on=[train, dev] is for model.head=stacked with "
                              "data.task=strategies (a router: its price read out of fold): a "
                              "linear head trains by epochs and keeps dev to choose its best one, "
                              "a gate's threshold is tuned on dev")  # fmt: skip
        if self.model.answer_confidence and (
            self.model.head != "stacked" or self.data.task_spec.routes
            or len(self.data.task_spec.classes) != 2
        ):  # fmt: skip
            raise ConfigError("model.answer_confidence=true is a two-stage binary gate: it needs "
                              "model.head=stacked and data.task=binary, not "
                              f"head={self.model.head}, task={self.data.task}")  # fmt: skip
        if self.data.balance == "sampler" and not self.data.task_spec.weighs_classes:
            # the default class_weights is unread there too, but a sampler is asked for by name
            raise ConfigError(f"data.balance=sampler: data.task={self.data.task} learns each "
                              "strategy's P(correct) and balances no classes (weighting would "
                              "bias it); drop data.balance")  # fmt: skip
        if self.model.head == "stacked" and self.data.balance == "sampler":
            # a closed-form fit draws no batches: "sampler" balanced nothing, silently
            raise ConfigError("data.balance=sampler draws balanced batches, and model.head="
                              "stacked is fitted in closed form on every question at once: use "
                              "data.balance=class_weights (its equivalent there) or none")  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrainConfig:
        """Sections as mappings (missing keys take their defaults; `trainer` is merged over
        TRAINER_DEFAULTS); unknown sections and keys are refused with the close ones named."""
        if not isinstance(raw, Mapping):
            raise ConfigError("a config must be a mapping of sections")
        known = [*SECTIONS, "trainer", "strategies"]
        for name in raw:
            if name not in known:
                raise ConfigError(
                    f"unknown config section {name!r}{_close(name, known)}; "
                    f"known: {', '.join(known)}"
                )
        sections = {}
        for name, section in SECTIONS.items():
            values = raw.get(name) or {}
            if not isinstance(values, Mapping):
                raise ConfigError(f"config section {name!r} must be a mapping of keys")
            sections[name] = _section(section, values, f"section {name!r}")
        trainer = raw.get("trainer") or {}
        if not isinstance(trainer, Mapping):
            raise ConfigError("config section 'trainer' must be a mapping of keys")
        strategies = raw.get("strategies")
        if strategies is not None and not isinstance(strategies, str):
            registry_from_list(strategies, "config strategies")  # checked, keys named
            strategies = tuple(dict(x) for x in strategies)
        config = cls(**sections, trainer={**TRAINER_DEFAULTS, **trainer}, strategies=strategies)
        config.registry()  # a file named is read and checked now
        return config

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain YAML-able data (a run's config.yaml)."""
        out = {name: getattr(self, name).to_dict() for name in SECTIONS}
        extra = {} if self.strategies is None else {
            "strategies": self.strategies if isinstance(self.strategies, str)
            else [dict(x) for x in self.strategies]}  # fmt: skip
        return {**out, "trainer": _plain(self.trainer), **extra}

    def override(self, *items: str) -> TrainConfig:
        """A copy with `--set`-style `KEY.PATH=VALUE` overrides applied and checked."""
        return TrainConfig.from_dict(apply_overrides(self.to_dict(), items))


SECTIONS: dict[str, type] = {"run": RunConfig, "data": DataConfig, "model": ModelConfig,
                             "early_stopping": EarlyStoppingConfig}  # fmt: skip


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` merged into `base`, key by key. An empty (null) section in `over` keeps the base
    one: a child config's `model:` with every key commented out is null to YAML, and it
    dropped the parent's whole section (a stacked recipe trained as a full fine-tune). A null
    value still replaces a value (`max_train_examples: null` lifts the parent's cap)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(out.get(key), Mapping) and (value is None or isinstance(value, Mapping)):
            out[key] = deep_merge(out[key], value or {})
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError("config `extends` forms a cycle", path)
    if not path.is_file():
        named = f" (named by `extends:` in {seen[-1]})" if seen else ""
        kind = not_a_file(path)
        what = f"is {kind}, not a YAML config file" if path.exists() else "config file not found"
        raise ConfigError(f"{what}{named}", path)
    misreads: list[Misread] = []
    try:
        raw = read_yaml(path, misreads) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config is not valid YAML: {e}", path) from None
    if not isinstance(raw, dict):
        raise ConfigError("config must be a YAML mapping", path)
    for misread in misreads:
        if why := _misread_why(misread, ()):
            raise ConfigError(why, path, misread.line)
    raw = _project_paths(raw, path)
    merged: dict[str, Any] = {}
    for parent in _parents(raw.pop("extends", None), path):
        merged = deep_merge(merged, _read_yaml(_parent_config(path, parent), (*seen, path)))
    return deep_merge(merged, raw)


def _parents(extends: Any, path: Path) -> list[str]:
    """What `extends:` names, as a list: `extends: 5` was a traceback, and `extends: {x: 1}`
    was read as `extends: x`."""
    if extends is None:  # none, or `extends:` left empty
        return []
    if isinstance(extends, str):
        return [extends]
    if not isinstance(extends, list) or not all(isinstance(p, str) for p in extends):
        raise ConfigError(f"`extends: {clipped(repr(extends))}`: name a config file or an "
                          "example config, or a list of them (extends: [../base.yaml, minilm])",
                          path)  # fmt: skip
    return extends


def _parent_config(path: Path, parent: Any) -> Path:
    """What `extends:` names: a file beside the config, else an example config by name, as
    `--config` takes it (`extends: router-adaptive-rag-llama8b`)."""
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"`extends: {parent!r}`: name a config file or an example config", path)
    beside = path.parent / parent
    if beside.is_file() or Path(parent).suffix in (".yaml", ".yml") or len(Path(parent).parts) > 1:
        return beside  # a path (a missing one is reported with its name)
    try:
        return find_config(parent)
    except ConfigError:
        raise ConfigError(f"`extends: {parent}`: no config file of that name beside this one "
                          "and no example config of that name", path) from None  # fmt: skip


def apply_overrides(config: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """`trainer.max_epochs=3`-style overrides; values are parsed as YAML (numbers, null, lists).
    A mapping given for a section is merged into it, as `extends` merges (`model={dropout:
    0.2}` replaced the whole section: the stacked recipe's `head: stacked` gone, a full
    fine-tune ran); anything else given for a section is refused."""
    config = copy.deepcopy(dict(config))
    given: dict[str, tuple[str, bool]] = {}  # leaf key -> the item that set it, via a mapping
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. trainer.max_epochs=2")
        if not value.strip():  # `--set run.name=$NAME` with NAME unset read as null: a default
            raise ConfigError(f"--set {item!r}: the value is empty (an unset shell variable?); "
                              f"give one, or {key.strip()}=null for the default")  # fmt: skip
        *parents, leaf = key.strip().split(".")
        node = config
        for part in parents:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a section")
        misreads: list[Misread] = []
        try:
            parsed = load_yaml(value, misreads)
        except yaml.YAMLError as e:
            raise ConfigError(
                f"--set {clipped(item)!r}: the value is not valid YAML ({e})"
            ) from None
        _refuse_misreads(misreads, key.strip(), item)
        _set_once(given, key.strip(), parsed, item)
        node[leaf] = _over(node.get(leaf), parsed, item, key.strip())
    return config


def _set_once(given: dict[str, tuple[str, bool]], key: str, value: Any, item: str) -> None:
    """Records the keys `item` sets; one a mapping sets too (`model.lr=1e-3 "model={lr:
    2e-2}"`) is refused, as a key given twice is: the last one won, unsaid. Plain repeats are
    the command's to refuse (`check_overrides`): callers append their own (`run.name=...`)."""
    mapping = isinstance(value, Mapping) and bool(value)
    for leaf in _leaves(key, value):
        before, by_mapping = given.get(leaf, (None, False))
        if before is not None and (mapping or by_mapping):
            raise ConfigError(f"--set gives {leaf} more than once ({clipped(before)!r} and "
                              f"{clipped(item)!r}); keep one")  # fmt: skip
        given[leaf] = (item, mapping)


def _leaves(key: str, value: Any) -> Iterator[str]:
    """The dotted keys a `--set key=value` sets: `model={lora: {r: 4}}` sets model.lora.r."""
    if not isinstance(value, Mapping) or not value:
        yield key
        return
    for sub, inner in value.items():
        yield from _leaves(f"{key}.{sub}", inner)


def _refuse_misreads(misreads: Iterable[Misread], key: str, item: str) -> None:
    for misread in misreads:
        if why := _misread_why(misread, tuple(key.split(".")), cli=True):
            raise ConfigError(f"--set {clipped(item)!r}: {why}")


def _misread_why(misread: Misread, prefix: tuple[Any, ...], cli: bool = False) -> str | None:
    """Why a scalar YAML 1.1 misreads is refused (None: it is not, a yes/no for a true/false
    key): `run.seed=010` trained with seed 8, `data.max_train_examples=1:30` with 90 examples,
    and `run.name=yes` was "run.name=True: expected a string", a value never typed."""
    path = (*prefix, *misread.path)
    where = misread.where(prefix)
    keyed = cli and not any(isinstance(p, int) for p in path)  # a list item: no KEY=VALUE
    quoted = f"{where}=\"'{misread.text}'\"" if keyed else f"'{misread.text}'"
    read = misread.read_as(where)
    target = _strip_none(_target(path))
    if misread.kind == "a boolean" and target in (None, bool):  # a flag: what yes/on mean
        return None
    if misread.kind == "a boolean" or target is str:
        return f"{read}; quote it if it is text: {quoted}"
    return (f"{read}; write it in decimal (e.g. {misread.decimal()}), or quote it if it is "
            f"text: {quoted}")  # fmt: skip


def _target(path: Sequence[Any]) -> Any:
    """The annotated type of a config key (keys and list indexes from the top), or None where
    it is open: a `trainer` argument of no known type, `strategies`, `extends`."""
    if path and path[0] == "trainer":
        return TRAINER_TYPES.get(path[1]) if len(path) == 2 else None
    hint: Any = SECTIONS.get(path[0]) if path else None
    for part in path[1:]:
        hint = _strip_none(hint)
        if dataclasses.is_dataclass(hint):
            hint = typing.get_type_hints(hint).get(part)
        elif typing.get_origin(hint) in (tuple, dict):
            hint = typing.get_args(hint)[0 if typing.get_origin(hint) is tuple else 1]
        else:
            return None
    return hint


def _over(old: Any, new: Any, item: str, key: str) -> Any:
    """What `--set key=new` leaves where `old` was: a section merged, a value replaced. A
    section inside one is merged likewise (`model={lora: null}` is refused as `model.lora=null`
    is)."""
    if not isinstance(old, Mapping) or not old:
        return new
    if not isinstance(new, Mapping):
        raise ConfigError(f"--set {clipped(item)!r}: {key} is a section ({', '.join(old)}), "
                          f"which a value would drop whole: set its keys, e.g. "
                          f"{key}.{next(iter(old))}=VALUE")  # fmt: skip
    return {**old, **{sub: _over(old.get(sub), v, item, f"{key}.{sub}") for sub, v in new.items()}}


def load_config(
    path: str | Path | None = None, overrides: Iterable[str] = (), flag: str = "--config"
) -> TrainConfig:
    """The YAML file (and what it extends) <- overrides, over the defaults, checked. `path`
    may name an example config (`minilm-closed-book`: `find_config`; `flag` names the option
    that gave it)."""
    raw = _read_yaml(find_config(path, flag)) if path else {}
    return TrainConfig.from_dict(apply_overrides(raw, overrides))


# The example configs of a source checkout (src/retrieval_gate/training -> <checkout>/configs).
CHECKOUT_CONFIGS = Path(__file__).resolve().parents[3] / "configs"
CONFIG_FOLDERS = ("experiments", "backbones", ".")


def find_config(spec: str | Path, flag: str = "--config") -> Path:
    """A config file by path, or an example config by name (`minilm-closed-book` ->
    configs/experiments/minilm-closed-book.yaml), looked up in ./configs, then in the
    checkout this package runs from. `flag`: the option that named it, for the message."""
    path = Path(spec)
    if path.is_file() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path  # a path (a missing one is reported by _read_yaml, with its name)
    roots = list(dict.fromkeys([Path("configs"), CHECKOUT_CONFIGS]))
    for root in roots:
        for folder in CONFIG_FOLDERS:
            candidate = root / folder / f"{spec}.yaml"
            if candidate.is_file():
                return candidate
    known = sorted({p.stem for r in roots for f in CONFIG_FOLDERS if (r / f).is_dir()
                    for p in (r / f).glob("*.yaml")})  # fmt: skip
    raise ConfigError(
        f"{flag} {spec}: no such file and no example config of that name"
        + (f" (examples: {', '.join(known)})" if known else " (no configs/ folder here)")
        + "; pass the path of a YAML config"
    )


# Config keys holding paths: relative ones are read from the working directory, else from the
# project the config file belongs to (the folder above its configs/), so `train --config`
# works from anywhere.
PATH_KEYS = ("label_file", "questions")


def _project_paths(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    data = raw.get("data")
    if not isinstance(data, dict):
        return raw
    root = next((p.parent for p in path.parents if p.name == "configs"), path.parent)
    for key in PATH_KEYS:
        value = data.get(key)
        if not isinstance(value, str) or value.startswith("hf:") or Path(value).is_absolute():
            continue
        if not Path(value).exists() and (root / value).exists():
            data[key] = str(root / value)
    return raw


def read_run_config(path: Path) -> tuple[TrainConfig, dict[str, Any] | None]:
    """A run folder's config.yaml and, for runs trained before the side features' scaling
    moved to metadata.json, the `model.side_features` it stored. An edited file is refused
    by the checksum the run's manifest recorded (a pooling changed: the weights load, and
    score otherwise)."""
    from ..artifacts import recorded_checksums, verified_sha256

    if path.is_file():
        verified_sha256(path.parent, path.name, recorded_checksums(path.parent), "run")
    try:
        raw = read_yaml(path)
    except yaml.YAMLError as e:
        raise ConfigError(f"config is not valid YAML: {e}; re-train the run", path) from None
    # train writes the whole config: anything less is a damaged file, not "all defaults"
    lacking = [k for k in ("run", "data", "model") if not isinstance(raw, dict) or k not in raw]
    if lacking:
        raise ConfigError(f"not the whole config a run's training writes (no {lacking[0]!r} "
                          "section): the file is damaged; re-train the run", path)  # fmt: skip
    model = dict(raw.get("model") or {})
    side = model.pop("side_features", None)
    try:
        return TrainConfig.from_dict({**raw, "model": model}), side
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
