"""Training learned gates with PyTorch Lightning (see run.train and configs/)."""

from .checkpoint import load_run, read_metadata, save_threshold
from .config import TASKS, TrainConfig, load_config
from .data import CLASS_NAMES, GateDataModule
from .module import RetrievalGateModule
from .trainer import TrainedRun, train

__all__ = [
    "CLASS_NAMES",
    "GateDataModule",
    "RetrievalGateModule",
    "TASKS",
    "TrainConfig",
    "TrainedRun",
    "load_config",
    "load_run",
    "read_metadata",
    "save_threshold",
    "train",
]
