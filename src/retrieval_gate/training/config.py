"""Training configuration: YAML files that may `extends:` others, plus `--set key.path=value`
command-line overrides. One nested dict with the sections `run`, `data`, `model`, `trainer`,
`early_stopping`; `DEFAULTS` documents every key."""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..fileio import plain_name

DEFAULTS: dict[str, Any] = {
    "run": {"name": None, "seed": 0, "output_dir": "checkpoints", "num_threads": None},
    "data": {
        "label_file": None,
        "task": "binary",  # binary (label) | 3way (rrcp label3)
        "split_seed": 0,  # the canonical split: assign_splits(load_all(), seed=0)
        "datasets": None,  # None = every dataset
        "max_length": 64,
        "batch_size": 32,
        "eval_batch_size": 128,
        "balance": "class_weights",  # class_weights | sampler | none
        "max_train_examples": None,  # seeded subsample of the train split (CPU budgets)
        "max_eval_examples": None,
        "num_workers": 0,
    },
    "model": {
        "backbone": "encoder",  # encoder | t5-lora | decoder-lora
        "name": "minilm",
        "pooling": None,  # mean | cls | last; None = the backbone's default
        "lora": None,  # {r, alpha, dropout, target_modules}; required for *-lora backbones
        "dropout": 0.1,
        "lr": 5e-5,
        "head_lr": 1e-3,
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,
        "threshold": 0.5,
    },
    "trainer": {
        "max_epochs": 2,
        "accelerator": "auto",
        "devices": "auto",
        "strategy": "auto",
        "precision": "32-true",
        "log_every_n_steps": 20,
        "gradient_clip_val": 1.0,
        "deterministic": False,
    },
    "early_stopping": {"monitor": "val/auroc", "mode": "max", "patience": 2},
}


# Types of the keys whose default is None (the others are typed by their default value).
OPTIONAL_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("run", "name"): (str,),
    ("run", "num_threads"): (int,),
    ("data", "label_file"): (str, os.PathLike),
    ("data", "datasets"): (list,),
    ("data", "max_train_examples"): (int,),
    ("data", "max_eval_examples"): (int,),
    ("model", "pooling"): (str,),
    ("model", "lora"): (dict,),
}


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError("config `extends` forms a cycle", path)
    if not path.is_file():
        raise ConfigError("config file not found", path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config is not valid YAML: {e}", path) from None
    if not isinstance(raw, dict):
        raise ConfigError("config must be a YAML mapping", path)
    parents = raw.pop("extends", []) or []
    merged: dict[str, Any] = {}
    for parent in [parents] if isinstance(parents, str) else parents:
        merged = deep_merge(merged, _read_yaml(path.parent / parent, (*seen, path)))
    return deep_merge(merged, raw)


def apply_overrides(config: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """`trainer.max_epochs=3`-style overrides; values are parsed as YAML (numbers, null, lists)."""
    config = copy.deepcopy(config)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. trainer.max_epochs=2")
        *parents, leaf = key.strip().split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a section")
        node[leaf] = yaml.safe_load(value)
    return config


def _close(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _trainer_keys() -> set[str]:
    import pytorch_lightning as pl

    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def _typed(section: str, key: str, value: Any) -> Any:
    """`value` as the type of the key's default; YAML reads `1e-3` as a string, so numeric
    strings become numbers and anything else is a ConfigError naming the key."""
    default = DEFAULTS.get(section, {}).get(key)
    where = f"{section}.{key}={value!r}"
    if value is None:
        return value
    if default is None:
        types = OPTIONAL_TYPES.get((section, key))
        if types and (not isinstance(value, types) or isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {' or '.join(t.__name__ for t in types)}")
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false")
        return value
    if isinstance(default, int | float):
        number = value
        if isinstance(value, str):
            try:
                number = float(value) if isinstance(default, float) else int(value)
            except ValueError:
                number = None
        ok_int = isinstance(number, int) and not isinstance(number, bool)
        ok = ok_int or (isinstance(default, float) and isinstance(number, float))
        if not ok or not math.isfinite(number):
            kind = "a number" if isinstance(default, float) else "an integer"
            raise ConfigError(f"{where}: expected {kind}")
        return float(number) if isinstance(default, float) else number
    if section != "trainer" and isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string")
    return value


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """Unknown sections/keys are typos: refuse them (naming close keys) rather than silently
    ignore them; values are typed against DEFAULTS."""
    for section, values in config.items():
        if section not in DEFAULTS:
            raise ConfigError(
                f"unknown config section {section!r}{_close(section, DEFAULTS)}; "
                f"known: {', '.join(DEFAULTS)}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"config section {section!r} must be a mapping of keys")
        known = _trainer_keys() if section == "trainer" else set(DEFAULTS[section])
        for key in sorted(set(values) - known):
            raise ConfigError(
                f"unknown key {key!r} in section {section!r}{_close(key, known)}"
                + ("" if section == "trainer" else f"; known: {', '.join(DEFAULTS[section])}")
            )
        for key, value in values.items():
            values[key] = _typed(section, key, value)
    if not config["data"]["label_file"]:
        raise ConfigError("config needs data.label_file (e.g. --set data.label_file=PATH)")
    if config["data"]["task"] not in ("binary", "3way"):
        raise ConfigError(f"data.task must be binary or 3way, got {config['data']['task']!r}")
    if not 0.0 <= config["model"]["threshold"] <= 1.0:
        raise ConfigError(f"model.threshold must be in [0, 1], got {config['model']['threshold']}")
    if config["run"]["name"] is not None:
        plain_name(config["run"]["name"], "run.name")
    return config


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """DEFAULTS <- the YAML file (and what it extends) <- overrides, validated."""
    config = deep_merge(DEFAULTS, _read_yaml(Path(path)) if path else {})
    return validate(apply_overrides(config, overrides))
