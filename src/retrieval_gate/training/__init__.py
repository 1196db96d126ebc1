"""Training learned gates with PyTorch Lightning (see trainer.train and configs/).

The names below load on first use (PEP 562), so `training.config` (what `train` checks a
config and its labels with) is read without Lightning, transformers and the model code: a bad
`--set` or label file is refused in seconds."""

from importlib import import_module
from typing import Any

_HOME = {  # name -> the module defining it
    "load_run": "checkpoint", "read_metadata": "checkpoint", "save_threshold": "checkpoint",
    "TASKS": "tasks", "TrainConfig": "config", "load_config": "config",
    "CLASS_NAMES": "datamodule", "GateDataModule": "datamodule", "RetrievalGateModule": "module",
    "TrainedRun": "trainer", "train": "trainer",
}  # fmt: skip

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOME[name]}", __name__), name)
