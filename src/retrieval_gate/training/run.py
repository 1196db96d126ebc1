"""`train(config)`: DataModule + module + Trainer -> a run folder with metrics beside it.

Resumable: Lightning writes `lightning/last.ckpt` every epoch and a rerun of the same run name
continues from it. Early stopping and the kept checkpoint follow validation AUROC."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint, TQDMProgressBar
from pytorch_lightning.loggers import CSVLogger

from ..fileio import write_json
from .backbones import load_tokenizer, resolve_backbone
from .checkpoint import save_run
from .data import GateDataModule
from .module import RetrievalGateModule


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Throughput(pl.Callback):
    """Training examples/s and wall time per epoch (the figures the issue asks for)."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._start, self._n = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        self._n += int(batch["labels"].shape[0])

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        wall = time.perf_counter() - self._start
        self.epochs.append(
            {"epoch": trainer.current_epoch, "examples": self._n, "train_seconds": wall,
             "examples_per_s": self._n / max(wall, 1e-9)}
        )  # fmt: skip


def run_name(config: dict[str, Any]) -> str:
    if config["run"]["name"]:
        return str(config["run"]["name"])
    label = Path(config["data"]["label_file"]).stem
    return f"{config['model']['backbone']}-{Path(config['model']['name']).name}-{label}"


def _trainer(config: dict[str, Any], run_dir: Path, callbacks: list[pl.Callback]) -> pl.Trainer:
    es = config["early_stopping"]
    ckpt = ModelCheckpoint(
        dirpath=run_dir / "lightning",
        monitor=es["monitor"],
        mode=es["mode"],
        save_top_k=1,
        save_last=True,
        filename="best",
    )
    stop = EarlyStopping(monitor=es["monitor"], mode=es["mode"], patience=int(es["patience"]))
    if config["trainer"].get("enable_progress_bar", True):  # tqdm: readable in log files too
        callbacks = [*callbacks, TQDMProgressBar(refresh_rate=10)]
    return pl.Trainer(
        **config["trainer"],
        default_root_dir=str(run_dir),
        logger=CSVLogger(str(run_dir), name="logs", version=""),
        callbacks=[ckpt, stop, *callbacks],
    )


def _stage_metrics(results: list[dict[str, float]], stage: str) -> dict[str, float]:
    out = {}
    for k, v in (results[0] if results else {}).items():
        out[k.removeprefix(f"{stage}/")] = float(v)
    return out


def train(config: dict[str, Any], questions: list | None = None) -> Path:
    """Trains one gate as configured; returns its run folder."""
    pl.seed_everything(int(config["run"]["seed"]), workers=True)
    if config["run"]["num_threads"]:  # on a shared CPU fewer threads than cores can be faster
        torch.set_num_threads(int(config["run"]["num_threads"]))
    run_dir = Path(config["run"]["output_dir"]) / run_name(config)
    tokenizer = load_tokenizer(resolve_backbone(config["model"]["name"]))
    dm = GateDataModule(tokenizer, config["data"], int(config["run"]["seed"]), questions)
    module = RetrievalGateModule(config["model"], dm.num_classes, dm.class_weights())
    throughput = Throughput()
    trainer = _trainer(config, run_dir, [throughput])
    last = run_dir / "lightning" / "last.ckpt"
    started = time.perf_counter()
    trainer.fit(module, datamodule=dm, ckpt_path=str(last) if last.is_file() else None)
    best = trainer.checkpoint_callback.best_model_path
    if best:  # weights of the best validation epoch, not the last one
        state = torch.load(best, map_location="cpu", weights_only=False)["state_dict"]
        module.load_state_dict(state)
    dev = _stage_metrics(trainer.validate(module, datamodule=dm, verbose=False), "val")
    test = _stage_metrics(trainer.test(module, datamodule=dm, verbose=False), "test")
    # Under DDP every rank runs this function; validate/test metrics are already gathered
    # across ranks (torchmetrics sync), and only rank zero writes the run folder (all ranks
    # writing it would race on the same *.tmp files). The barrier keeps the other ranks
    # from returning a folder that is not written yet.
    metrics = {
        "dev": dev,
        "test": test,
        "epochs": throughput.epochs,
        "fit_seconds": time.perf_counter() - started,
        "peak_rss_mb": peak_rss_mb(),
        "trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in module.parameters()),
        "torch_threads": torch.get_num_threads(),
        "splits": dm.summary(),
        "world_size": trainer.world_size,
    }
    if trainer.is_global_zero:
        save_run(run_dir, config, module, tokenizer, {**dm.provenance, "counts": dm.summary()})
        write_json(run_dir / "metrics.json", metrics)
    trainer.strategy.barrier("run folder written")
    return run_dir
