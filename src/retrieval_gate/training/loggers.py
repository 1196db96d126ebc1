"""`trainer.logger: csv | tensorboard | mlflow`: Lightning's own loggers. The CSV log is always
written (`logs/metrics.csv` is the run's record, kept across a resume); `tensorboard` adds
`logs/tensorboard/` (`tensorboard --logdir <run>/logs/tensorboard`), `mlflow` a run in
$MLFLOW_TRACKING_URI, else in the SQLite store `<run>/mlflow.db` with artifacts in
`<run>/mlartifacts` (`mlflow ui --backend-store-uri sqlite:///<run>/mlflow.db`; MLflow 3 no
longer takes a plain folder as its store).
Both come with the `tracking` extra."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger, Logger

from ..errors import BackendError, ConfigError

LOGGERS = ("csv", "tensorboard", "mlflow")
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # logger -> module it needs


def check_logger(value: object) -> str:
    if value not in LOGGERS:
        raise ConfigError(f"trainer.logger must be one of {', '.join(LOGGERS)}, got {value!r}")
    return str(value)


def mlflow_store(run_dir: Path) -> str:
    """The run's own MLflow store, when $MLFLOW_TRACKING_URI names none."""
    return f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"


def build_loggers(kind: str, run_dir: Path, run_name: str) -> list[Logger]:
    """The CSV logger, plus the one `trainer.logger` names; a missing package is an error
    naming the extra, before training starts."""
    loggers: list[Logger] = [CSVLogger(str(run_dir), name="logs", version="")]
    module = PACKAGES.get(check_logger(kind))
    if module and importlib.util.find_spec(module) is None:
        raise BackendError(
            f"trainer.logger={kind} needs the optional package {module!r}: pip install "
            "'retrieval-gate[tracking]' (or set trainer.logger=csv)"
        )
    if kind == "tensorboard":
        from pytorch_lightning.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(str(run_dir / "logs"), name="tensorboard", version=""))
    elif kind == "mlflow":
        from pytorch_lightning.loggers import MLFlowLogger

        uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow_store(run_dir)
        artifacts = (run_dir / "mlartifacts").resolve().as_uri()
        loggers.append(MLFlowLogger(experiment_name="retrieval-gate", run_name=run_name,
                                    tracking_uri=uri, artifact_location=artifacts))  # fmt: skip
    return loggers
