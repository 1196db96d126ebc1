"""Training configuration: YAML files that may `extends:` others, plus `--set key.path=value`
command-line overrides. One nested dict with the sections `run`, `data`, `model`, `trainer`,
`early_stopping`; `DEFAULTS` documents every key."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

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


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """Unknown sections/keys are typos: refuse them rather than silently ignore them."""
    for section, values in config.items():
        if section not in DEFAULTS:
            raise ConfigError(f"unknown config section {section!r}; known: {', '.join(DEFAULTS)}")
        if section == "trainer":  # any Trainer argument is allowed
            continue
        unknown = set(values) - set(DEFAULTS[section])
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(sorted(unknown))} in section {section!r}; "
                f"known: {', '.join(DEFAULTS[section])}"
            )
    if not config["data"]["label_file"]:
        raise ConfigError("config needs data.label_file (e.g. --set data.label_file=PATH)")
    if config["data"]["task"] not in ("binary", "3way"):
        raise ConfigError(f"data.task must be binary or 3way, got {config['data']['task']!r}")
    return config


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """DEFAULTS <- the YAML file (and what it extends) <- overrides, validated."""
    config = deep_merge(DEFAULTS, _read_yaml(Path(path)) if path else {})
    return validate(apply_overrides(config, overrides))
