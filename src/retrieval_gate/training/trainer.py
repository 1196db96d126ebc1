"""`train(config, questions, labels)`: DataModule + module + Trainer -> a run folder with
metrics beside it, returned as a `TrainedRun`. Labels come from `data.label_file` or, in
memory, from a mapping question id -> label; the caller's config is never changed.

A run folder belongs to one configuration: `run.json` records the hash of the resolved config
and of the labels (the label file's bytes), and the questions file's checksum. Training into an
existing folder is refused unless `overwrite` (the run's files are replaced) or `resume` with the
same hash and questions (Lightning's
`lightning/latest.ckpt`, written every epoch, or the `last.ckpt` of a fit's end, whichever
trained more, is continued; the epochs before it stay in `metrics.json` and
`logs/metrics.csv`). Early stopping and the kept checkpoint follow
validation AUROC."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import os
import resource
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, TQDMProgressBar
from torch.utils.data import DataLoader, DistributedSampler

from .. import work
from ..errors import ConfigError, first_line
from ..fileio import disk_errors_named, nearest_existing, sha256_file, write_json, write_text
from ..known_noise import LinesStartingWith, warnings_hidden
from ..labels.lock import single_writer
from ..questions import Question
from ..run_folder import RunFolder
from .backbones import check_max_length, load_tokenizer, resolve_backbone
from .calibrate_router import (
    calibrate_router,
    out_of_fold_metrics,
    router_figures,
)
from .checkpoint import read_run_json, save_run
from .config import TrainConfig
from .datamodule import GateDataModule
from .heads import HEADS, RunCheckpoint
from .launch import rank_zero
from .loggers import build_loggers
from .module import RetrievalGateModule
from .sources import check_monitor

log = logging.getLogger(__name__)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


RUN_FILES = RunFolder.WRITTEN  # what a training run writes (all that `overwrite` removes)


class Throughput(pl.Callback):
    """Training examples/s and wall time per epoch (the figures the issue asks for), of all
    ranks together under DDP. Its list is saved in Lightning's checkpoints, so a resumed run
    keeps the epochs before it."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs = list(state_dict.get("epochs", []))

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # a run resumed from a mid-epoch checkpoint (a step budget, val_check_interval < 1)
        # enters its epoch without on_train_epoch_start: count from here
        self.on_train_epoch_start(trainer, module)

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self._start, self._n = time.perf_counter(), 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        n = int(batch["labels"].shape[0])
        self._n += n
        work.add(train_examples=n, train_tokens=int(batch["attention_mask"].sum()))

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        wall = time.perf_counter() - self._start
        n = self._n
        if trainer.world_size > 1:  # each rank read its share of the epoch (rank 0: half of 2)
            mine = torch.tensor(n, device=module.device)  # NCCL reduces CUDA tensors only
            n = int(trainer.strategy.reduce(mine, reduce_op="sum"))
        self.epochs.append(
            {"epoch": trainer.current_epoch, "examples": n, "train_seconds": wall,
             "examples_per_s": n / max(wall, 1e-9)}
        )  # fmt: skip


LATEST = "latest"  # lightning/latest.ckpt: every epoch's state (`_trainer`)


def run_name(config: TrainConfig) -> str:
    if config.run.name:
        return config.run.name
    label = Path(config.data.label_file).stem if config.data.label_file else "labels"
    return f"{config.model.backbone}-{Path(config.model.name).name}-{label}"


def _trainer(config: TrainConfig, run_dir: Path, callbacks: list[pl.Callback]) -> pl.Trainer:
    es = config.early_stopping
    ckpt = RunCheckpoint(  # a moved run folder's checkpoints are read as its own
        dirpath=run_dir / "lightning", monitor=es.monitor, mode=es.mode, save_top_k=1,
        save_last=True, filename="best",
    )  # fmt: skip
    # every epoch's (or mid-epoch validation's) state: Lightning 2's save_last writes last.ckpt
    # only with a new best (and at the end of a fit), so a resume went back to the best epoch
    # and trained the epochs after it again, logging them twice (`resume_checkpoint`)
    last = RunCheckpoint(dirpath=run_dir / "lightning", filename=LATEST, save_top_k=1,
                         enable_version_counter=False)  # fmt: skip
    stop = EarlyStopping(monitor=es.monitor, mode=es.mode, patience=es.patience)
    if config.trainer.get("enable_progress_bar", True):  # tqdm: readable in log files too
        callbacks = [*callbacks, TQDMProgressBar(refresh_rate=10)]
    trainer = {k: v for k, v in config.trainer.items() if k != "logger"}
    steps = trainer.get("max_steps") or -1
    if steps > 0 and "val_check_interval" not in trainer:
        # A step budget can end mid-epoch, before any validation: validate at that step, so
        # early stopping and the best checkpoint have their metric (also across epochs).
        trainer.update(val_check_interval=steps, check_val_every_n_epoch=None)
    return pl.Trainer(
        **trainer,
        default_root_dir=str(run_dir),
        logger=build_loggers(config.trainer.get("logger", "csv"), run_dir, run_dir.name),
        callbacks=[ckpt, last, stop, *callbacks],
    )


def check_trainer_here(config: TrainConfig) -> int:
    """The trainer arguments against this machine, before any data or model loads: Lightning
    refuses a GPU it cannot find, a precision or strategy it does not know only when its
    Trainer is built (a traceback, once the run folder was claimed), and takes any number of
    CPU devices, each a process. Returns the run's number of processes (its world size)."""
    from lightning_fabric.utilities.exceptions import MisconfigurationException
    from pytorch_lightning.accelerators import CPUAccelerator

    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
             "enable_model_summary": False}  # fmt: skip
    args = {k: v for k, v in config.trainer.items() if k != "logger"} | quiet
    said = logging.getLogger("pytorch_lightning.utilities.rank_zero")  # "GPU available: ..."
    level = said.level
    said.setLevel(logging.WARNING)  # once, by the run's own Trainer
    try:
        trial = pl.Trainer(**args)
    except (
        MisconfigurationException,
        ValueError,
        TypeError,
        RuntimeError,
        ImportError,
        OverflowError,
    ) as e:  # Overflow: trainer.devices=10**24
        raise ConfigError(f"trainer: {e} (the trainer.* keys of the config or --set)") from None
    finally:
        said.setLevel(level)
    cpus = os.cpu_count() or 1
    if isinstance(trial.accelerator, CPUAccelerator) and trial.num_devices > cpus:
        raise ConfigError(f"trainer.devices={config.trainer.get('devices')}: {trial.num_devices} "
                          f"CPU processes on a machine with {cpus} CPUs; use at most {cpus} "
                          "(or a GPU machine)")  # fmt: skip
    return int(trial.world_size)


def check_val_interval(config: TrainConfig, train_rows: int, world_size: int = 1) -> None:
    """A `trainer.val_check_interval` of more batches than an epoch trains (each process's
    share of the training split, in `data.batch_size` batches, within
    `trainer.limit_train_batches`): Lightning refuses it only when the fit starts, once the
    run folder was claimed. Checked once the data are read, before the folder is touched."""
    trainer = config.trainer
    interval = trainer.get("val_check_interval")
    if not isinstance(interval, int) or isinstance(interval, bool):
        return  # a fraction of an epoch, or none
    if trainer.get("check_val_every_n_epoch", 1) is None:  # counted across epochs
        return
    share = -(-train_rows // max(world_size, 1))  # a DistributedSampler pads to equal shares
    batches = -(-share // config.data.batch_size)
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, int) and not isinstance(limit, bool):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = max(int(batches * limit), 1)
    if interval <= batches:
        return
    ranks = f" on each of {world_size} processes" if world_size > 1 else ""
    raise ConfigError(
        f"trainer.val_check_interval={interval}: validation every {interval} batches, but an "
        f"epoch trains {batches}{ranks} ({train_rows} training questions, "
        f"data.batch_size={config.data.batch_size}); give at most {batches}, a fraction of an "
        "epoch (e.g. 0.5), or leave it out"
    )


def _defined_only(metrics: dict[str, float], split: dict[str, int], name: str) -> dict[str, float]:
    """AUROC ranks questions that need retrieval against those that do not: on a split of one
    class it is undefined (torchmetrics reports 0.0, which reads as a measured worst), so it is
    left out, with a warning; so is AP on a split with no question that needs retrieval (it
    printed -0.0)."""
    if 0 < split["positives"] < split["n"]:
        return metrics
    undefined = ("auroc",) if split["positives"] else ("auroc", "ap")
    what = " and ".join(m.upper() for m in undefined) + (" are" if len(undefined) > 1 else " is")
    log.warning(f"the {name} split's {split['n']} questions are all of one class: its {what} "
                "undefined and not reported")  # fmt: skip
    return {k: v for k, v in metrics.items() if k not in undefined}


def _evaluated(
    trainer: pl.Trainer, module: RetrievalGateModule, dm: GateDataModule, stage: str
) -> dict[str, float]:
    """The fitted module's figures on dev (`stage` "val") or test, every question counted once,
    as one process scores them. Under DDP Lightning's DistributedSampler pads a split to a
    multiple of the ranks by repeating questions (15 test questions scored as 16, and the
    figures moved): there every rank reads the whole split instead, through a sampler of one
    replica (which Lightning keeps), so the figures synced across ranks are those of identical
    copies, which are the one process's (each is a mean, a ratio of counts or a ranking: the
    same for the split read twice). It takes one process's time; the run's loggers still
    record the figures, and every rank runs the same batches (as FSDP needs)."""
    read = trainer.validate if stage == "val" else trainer.test
    if trainer.world_size == 1:
        return _stage_metrics(read(module, datamodule=dm, verbose=False), stage)
    loader = dm.val_dataloader() if stage == "val" else dm.test_dataloader()
    whole = DistributedSampler(loader.dataset, num_replicas=1, rank=0, shuffle=False)
    loader = DataLoader(loader.dataset, loader.batch_size, sampler=whole,
                        num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                        pin_memory=loader.pin_memory)  # fmt: skip
    return _stage_metrics(read(module, dataloaders=loader, verbose=False), stage)


def _stage_metrics(results: list[dict[str, float]], stage: str) -> dict[str, float]:
    out = {}
    for k, v in (results[0] if results else {}).items():
        out[k.removeprefix(f"{stage}/")] = float(v)
    return out


# How long to train is not what a run is: a resume may extend it.
LENGTH_KEYS = ("max_epochs", "max_steps")
# Nor where its folder is and how fast it runs: a folder moved or renamed, or mounted elsewhere on
# another node, resumes (runs before 2026-11-29 hashed these: their hash is accepted too).
PLACE_KEYS = {"run": ("output_dir", "name", "num_threads"), "data": ("num_workers",)}


def labels_sha256(config: TrainConfig, labels: Mapping[str, int] | None = None) -> str:
    """The labels' identity: the label file's bytes (a router's labels: their checksum), or
    the in-memory mapping's checksum."""
    task = config.data.task_spec
    if labels is not None:
        return task.from_memory(labels).provenance["sha256"]
    return task.labels_sha256(config.data.label_file)


def config_hash(
    config: TrainConfig, labels: Mapping[str, int] | None = None, placed: bool = False
) -> str:
    """sha256 of the resolved config (but its length, LENGTH_KEYS, and place, PLACE_KEYS,
    which the hash of older runs kept: `placed`) and of the labels: what makes two runs the
    same run (a label file rewritten in place is another)."""
    plain = config.to_dict()
    for section, keys in PLACE_KEYS.items() if not placed else ():
        plain[section] = {k: v for k, v in plain[section].items() if k not in keys}
    trainer = {k: v for k, v in plain["trainer"].items() if k not in LENGTH_KEYS}
    # Runs trained while the side features' scaling was a config key hashed it as null: kept,
    # so that those runs still --resume.
    model = {**plain["model"], "side_features": None}
    model = config.data.task_spec.hashed_model_keys(model)
    if model["head"] == "linear":  # the default, as every run before the key existed
        model.pop("head")
    if model["fit_on"] == ["train"]:  # likewise
        model.pop("fit_on")
    if model["source_model"]:  # likewise
        model.pop("source_model")
    text = json.dumps({**plain, "model": model, "trainer": trainer}, sort_keys=True, default=str)
    text += labels_sha256(config, labels)
    return hashlib.sha256(text.encode()).hexdigest()


def questions_sha256(config: TrainConfig) -> str | None:
    """The checksum of the questions file a run reads (`data.questions`; a save_to_disk
    folder: of its files): an edited file keeps its path, which alone the config hash holds,
    and its new texts or `split` column moved questions trained on into test. None for the
    bundled datasets and hf:NAME."""
    spec = config.data.questions
    path = Path(spec) if spec else None
    if path is None or not path.exists():
        return None
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f"{file.relative_to(path)}\0{sha256_file(file)}\n".encode())
    return h.hexdigest()


def check_run_dir(
    run_dir: Path,
    config: TrainConfig,
    overwrite: bool = False,
    resume: bool = False,
    labels: Mapping[str, int] | None = None,
    digest: str | None = None,
    questions_digest: str | None = None,
) -> str:
    """Refuses an existing run unless `overwrite` or `resume` with the same config hash and
    questions (`questions_digest`, `questions_sha256`; None: not compared) (checked before any
    data or model is loaded); returns this config's hash (`digest`: the hash an earlier check
    computed, so that a router's release is not read again for it)."""
    if overwrite and resume:
        raise ConfigError("pass --overwrite or --resume, not both")
    _check_placeable(run_dir)
    if labels is None:
        if not config.data.label_file:
            raise ConfigError(
                "config needs data.label_file (e.g. --set data.label_file=PATH), or labels "
                "handed to train(config, questions, labels)"
            )
        config.data.task_spec.check_source(config.data.label_file)
    digest = digest or config_hash(config, labels)
    existing = _run_files(run_dir)
    if existing and not RunFolder(run_dir).made_by_training():  # --overwrite deleted them
        raise ConfigError(
            f"run folder {run_dir} holds {', '.join(existing)}, which training did not write "
            f"(no {', '.join(RunFolder.MARKS)}): it is no run to resume or replace; pass another "
            "run.name or run.output_dir, or move them away"
        )
    if not existing or overwrite:
        return digest
    if not resume:
        raise ConfigError(
            f"run folder {run_dir} already holds a run ({', '.join(existing)}); pass --resume to "
            "continue it (same config), --overwrite to replace it, or another run.name"
        )
    run_json = run_dir / "run.json"
    recorded = read_run_json(run_json) if run_json.is_file() else {}
    old = recorded.get("config_sha256")
    if old != digest and old != config_hash(config, labels, placed=True):  # hashed again only then
        raise ConfigError(
            f"run folder {run_dir} was trained with another config or label file "
            f"({'no run.json' if old is None else 'config hash differs'}); --resume continues "
            "the same run only: pass --overwrite or another run.name"
        )
    _check_same_questions(run_dir, config, recorded.get("questions_sha256"), questions_digest)
    return digest


def _check_placeable(run_dir: Path) -> None:
    """The run folder can be made: no file in its place, nor in the place of a folder above."""
    there = nearest_existing(run_dir)
    if there.is_dir():
        return
    if there == run_dir:  # the run folder's own place: the run's name is what clashes
        raise ConfigError(f"run.name: {run_dir} is a file, where the run folder would go; pass "
                          "another run.name, or move the file away")  # fmt: skip
    raise ConfigError(f"run.output_dir: {there} is a file, so the run folder {run_dir} "
                      "cannot go under it; pass another run.output_dir")  # fmt: skip


def _check_same_questions(
    run_dir: Path, config: TrainConfig, recorded: Any, now: str | None
) -> None:
    """A resumed run reads the questions it trained on: an edited questions file (reworded,
    a `split` column added) keeps its path, and its new split put questions the first epochs
    trained on into test. Runs whose run.json records no checksum (before it) resume as
    before; so do questions handed in memory (`now` None)."""
    if not isinstance(recorded, str) or now is None or recorded == now:
        return
    raise ConfigError(
        f"data.questions: {config.data.questions} changed since the run in {run_dir} trained "
        "on it (its checksum differs from run.json's), so its split and texts are no longer "
        "that run's; --resume continues the same run only: train into another run.name, or "
        "pass --overwrite"
    )


def _run_files(run_dir: Path) -> list[str]:
    """The files of a run the folder holds (run.json alone: a run stopped as it began)."""
    return [n for n in RUN_FILES if n != "run.json" and (run_dir / n).exists()]


def claim_run_dir(
    run_dir: Path, digest: str, labels_digest: str, overwrite: bool,
    questions_digest: str | None = None,
) -> None:  # fmt: skip
    """With `overwrite`, removes the files a run writes (RUN_FILES; nothing else in the folder),
    then records this run's identity in run.json (`questions_digest`: `questions_sha256`)."""
    for name in RUN_FILES if overwrite else ():
        if name == RunFolder.LOGS:  # a folder the user may keep notes in too
            _remove_logs(run_dir / name)
            continue
        target = run_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    write_json(run_dir / "run.json", {"config_sha256": digest, "label_sha256": labels_digest,
               "questions_sha256": questions_digest,
               "started": datetime.now(UTC).isoformat(timespec="seconds")})  # fmt: skip


def _remove_logs(logs: Path) -> None:
    """The run's own files under logs/ (RunFolder.LOG_FILES), and the folder once empty;
    any other file there is the user's, and stays."""
    for name in RunFolder.LOG_FILES:
        target = logs / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    if logs.is_dir() and not any(logs.iterdir()):
        logs.rmdir()


def resume_checkpoint(run_dir: Path, set_aside: bool = True) -> Path | None:
    """The readable Lightning checkpoint of the most training steps (the latest epoch's, or
    the end of a fit's last.ckpt), else best's; an unreadable one is reported and renamed
    `*.damaged` (never deleted; not `set_aside`: only skipped, as a DDP run's other ranks do,
    which leave the folder to rank zero), and training falls back."""
    return resume_point(run_dir, set_aside).path


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a resume continues from (None: training starts from scratch), with its
    training steps and its epoch (Lightning's `epoch`: the one it was saved in)."""

    path: Path | None = None
    global_step: int = 0
    epoch: int = -1


def resume_point(run_dir: Path, set_aside: bool = True) -> ResumePoint:
    """`resume_checkpoint`, with the checkpoint's steps and epoch."""
    folder = run_dir / "lightning"
    newest = [folder / f"{LATEST}.ckpt", folder / "last.ckpt"]
    for group in (newest, sorted(folder.glob("best*.ckpt"))):  # best: trained no more
        read = _readable_steps(group, set_aside)
        if read:
            path = max(read, key=lambda p: read[p][0])  # the first of the most steps
            return ResumePoint(path, *read[path])
    if folder.is_dir():
        log.warning("no readable checkpoint in %s; training from scratch", folder)
    return ResumePoint()


def _readable_steps(ckpts: list[Path], set_aside: bool = True) -> dict[Path, tuple[int, int]]:
    """Each readable checkpoint's training steps and epoch; an unreadable one set aside,
    said."""
    steps: dict[Path, tuple[int, int]] = {}
    for ckpt in ckpts:
        if not ckpt.is_file():
            continue
        try:
            state = torch.load(ckpt, map_location="cpu", weights_only=False)
            steps[ckpt] = int(state.get("global_step", 0)), int(state.get("epoch", 0))
        except Exception as e:  # torch raises several types for truncated/garbled files
            if not set_aside:
                continue
            aside = ckpt.with_name(ckpt.name + ".damaged")
            ckpt.replace(aside)
            log.warning("%s is damaged (%s); set aside as %s", ckpt, type(e).__name__, aside.name)
    return steps


def check_resume_length(config: TrainConfig, point: ResumePoint) -> None:
    """A resume may train longer, never shorter: a `trainer.max_epochs` below the epochs the
    checkpoint has trained (or a `max_steps` below its steps) was Lightning's traceback once
    the run's log had been set aside. Refused before the run folder is touched."""
    if point.path is None:
        return
    epochs, steps = config.trainer.get("max_epochs"), config.trainer.get("max_steps")
    trained = point.epoch + 1  # the checkpoint was saved in (at the end of) that epoch
    if epochs is not None and epochs != -1 and epochs < trained:
        raise ConfigError(
            f"trainer.max_epochs={epochs}: --resume continues {point.path.name}, saved in epoch "
            f"{point.epoch} ({trained} epochs, counted from 0 to {point.epoch}); a resume "
            f"trains longer, never shorter: set trainer.max_epochs={trained} or more, or "
            "--overwrite to train a shorter run from the start"
        )
    if steps is not None and steps != -1 and steps < point.global_step:
        raise ConfigError(
            f"trainer.max_steps={steps}: --resume continues {point.path.name}, saved after "
            f"{point.global_step} steps; a resume trains longer, never shorter: set "
            f"trainer.max_steps={point.global_step} or more, or --overwrite to train a shorter "
            "run from the start"
        )


def _read_csv(path: Path) -> list[dict[str, str]]:
    """A metrics log's rows. A damaged one (not UTF-8, not CSV) is set aside as `*.damaged`
    with a note: a log of earlier epochs is not worth stopping a resume for."""
    if not path.is_file():
        return []
    try:
        return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (UnicodeDecodeError, csv.Error) as e:
        aside = path.with_name(path.name + ".damaged")
        path.replace(aside)
        log.warning("%s is damaged (%s); set aside as %s: those epochs' log is lost, the "
                    "training resumes", path, first_line(e), aside.name)  # fmt: skip
        return []


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    fields = sorted({k for r in rows for k in r})
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def keep_csv_history(run_dir: Path, below_step: int | None = None) -> Path:
    """Lightning's CSVLogger deletes `logs/metrics.csv` when it starts: on resume its rows are
    first carried into `logs/metrics.before-resume.csv` (merged back by `merge_csv_history`).
    `below_step`: the resumed checkpoint's global step (0: training starts from scratch); the
    rows logged at or past it (Lightning logs a step's row at the step count before it; a
    killed run's steps past its checkpoint, a finished run's closing validation and test) are
    dropped, as the resumed run logs them again."""
    logs = run_dir / "logs"
    earlier = logs / "metrics.before-resume.csv"
    rows = _read_csv(earlier) + _read_csv(logs / "metrics.csv")
    if below_step is not None:
        rows = [r for r in rows if _logged_before(r, below_step)]
    if rows:
        _write_csv(earlier, rows)
    elif earlier.is_file():  # every row was past the checkpoint
        earlier.unlink()
    return earlier


def _logged_before(row: Mapping[str, str | None], step: int) -> bool:
    """Whether a metrics row was logged before `step` (a row without a step is kept)."""
    try:
        return int(float(row.get("step") or "")) < step
    except ValueError:
        return True


def merge_csv_history(run_dir: Path, earlier: Path) -> None:
    if earlier.is_file():
        current = run_dir / "logs" / "metrics.csv"
        _write_csv(current, _read_csv(earlier) + _read_csv(current))
        earlier.unlink()  # made by keep_csv_history


@dataclass(frozen=True)
class TrainedRun:
    """What `train` returns: the run folder (a path-like: `LearnedGate(run)`, `run / "gate.pt"`)
    with its config, metrics and metadata as written there."""

    path: Path
    config: TrainConfig
    metrics: dict[str, Any]
    metadata: dict[str, Any]

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:  # the folder, as in a command line
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def name(self) -> str:
        return self.path.name

    def iterdir(self) -> Iterator[Path]:
        return self.path.iterdir()


def prepare(
    config: TrainConfig,
    questions: Sequence[Question] | None = None,
    labels: Mapping[str, int] | None = None,
    monitored: bool = False,
) -> tuple[Any, GateDataModule, RetrievalGateModule]:
    """Seeded tokenizer, data module and module for `config` (training and tuning trials);
    `monitored`: early stopping follows `early_stopping.monitor` on dev, checked against the
    dev split before the model loads."""
    pl.seed_everything(config.run.seed, workers=True)
    if config.run.num_threads:  # on a shared CPU fewer threads than cores can be faster
        torch.set_num_threads(config.run.num_threads)
    folder = resolve_backbone(config.model.name)
    tokenizer = load_tokenizer(folder)
    check_max_length(config.data.max_length, config.model.name, folder, tokenizer)
    dm = GateDataModule(tokenizer, config.data, config.run.seed, questions, labels)
    if monitored:
        check_monitor(dm.rows, config, dm.path)
    module = RetrievalGateModule(config.model, dm.num_classes, dm.class_weights(),
                                 side_features=dm.side_features, task=dm.task)  # fmt: skip
    return tokenizer, dm, module


def as_config(config: TrainConfig | Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig, or a mapping of sections checked into one."""
    return config if isinstance(config, TrainConfig) else TrainConfig.from_dict(config)


def train(
    config: TrainConfig | Mapping[str, Any],
    questions: Sequence[Question] | None = None,
    labels: Mapping[str, int] | None = None,
    overwrite: bool = False,
    resume: bool = False,
) -> TrainedRun:
    """Trains one gate as configured; returns its run. `questions` default to the config's
    (`data.questions`, else the bundled datasets), `labels` (question id -> class index) to
    `data.label_file`. An existing run folder is refused unless `overwrite` or `resume` (same
    config and labels) is given."""
    config = as_config(config)
    if labels is not None and config.data.label_file:
        log.info("labels given in memory: data.label_file %s is not read", config.data.label_file)
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, label_file=None))
    run_dir = Path(config.run.output_dir) / run_name(config)
    asked = questions_sha256(config) if questions is None else None
    digest = check_run_dir(run_dir, config, overwrite, resume, labels, questions_digest=asked)
    if resume and not _run_files(run_dir):  # said, not warned: the demo resumes on purpose
        log.info("--resume: the run folder %s holds no run yet; training from the start",
                 run_dir)  # fmt: skip
    world_size = check_trainer_here(config)
    _say_answers_unread(config)  # reads them: a bad cell is refused before the model loads
    tokenizer, dm, module = prepare(config, questions, labels, monitored=True)
    check_val_interval(config, len(dm.rows["train"]), world_size)
    with one_trainer(run_dir), without_known_warnings():  # the data are good: now the folder
        # a run may have ended since (the labels were read and hashed above: not again)
        check_run_dir(run_dir, config, overwrite, resume, labels, digest, asked)
        with disk_errors_named(run_dir):  # Lightning's checkpoints and logs too
            return _fit(run_dir, config, digest, tokenizer, dm, module, overwrite, asked)


def _say_answers_unread(config: TrainConfig) -> None:
    """A gate or router that reads the question alone, trained on labels that recorded the
    closed-book answers' log-probabilities (the user's LLM's own confidence): say what reads
    them (a two-stage gate; behind a router, its --answer-gate). A two-stage gate's are read
    here too: each row's are checked before the model loads (a bad cell was refused once the
    frozen body had run, without its row)."""
    from ..labels.logprobs import answer_logprobs

    path = config.data.label_file
    readable = config.data.task in ("binary", "strategies") and path and Path(path).is_file()
    # a release records none; a two-stage gate's read counts apart from a question-only one's
    said = readable and (*_file_key(Path(path), config.data.task), config.model.answer_confidence)
    if not said or said in _SAID:  # `transfer --learned` trains one gate a cell: say it once
        return
    _SAID.add(said)
    carried = len(answer_logprobs(path))
    if not carried or config.model.answer_confidence:
        return
    router = config.data.task == "strategies"
    reads = ("a two-stage gate trained on the closed-book.jsonl beside it (`--config "
             "cascade-closed-book`) reads them behind this router: `--answer-gate` of evaluate, "
             "score, rag and serve (docs/router.md)" if router else "`--config "
             "cascade-closed-book` trains a two-stage gate that reads them beside the question "
             "(docs/train.md)")  # fmt: skip
    log.info(f"{carried} questions of {path} carry their closed-book answer's log-probabilities, "
             f"which this config does not read: {reads}")  # fmt: skip


_SAID: set[tuple[str, int, int, str, bool]] = set()  # label files this process read for it


def _file_key(path: Path, task: str) -> tuple[str, int, int, str]:
    """A label file as it is now (an edited file is another), and the task read from it."""
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size, task


# Warnings the user can do nothing about, printed on every run: Lightning 2.6 builds torch's
# deprecated LeafSpec; torchmetrics warns twice on a split of one class, which `_defined_only`
# reports once, in words.
KNOWN_WARNINGS = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    (r"No positive samples", UserWarning),
    (r"No negative samples", UserWarning),
)


# Lightning's "💡 Tip: ... try installing [litlogger]" lines, on every run: adverts for its
# cloud services, nothing about this run.
_TIPS = {"pytorch_lightning.utilities.rank_zero": ("💡 Tip",)}


@contextmanager
def without_known_warnings() -> Iterator[None]:
    """KNOWN_WARNINGS and Lightning's tips silenced for the block; every other warning is
    shown as before."""
    tips = LinesStartingWith(_TIPS)  # its own: a nested block's end keeps this one's
    tips.add()
    try:
        with warnings_hidden(KNOWN_WARNINGS):
            yield
    finally:
        tips.remove()


@contextmanager
def one_trainer(run_dir: Path) -> Iterator[None]:
    """One training process writes a run folder at a time: two started at once had both found
    it empty and written into it. The lock is `.<run name>.lock` beside the folder (the
    labelling runs' `single_writer`). A distributed run's rank zero holds it for all its ranks,
    which share the folder: Lightning's own launch locks before it starts the other ranks, and
    under torchrun or srun rank zero locks too (no rank did, and a second `train --overwrite`
    deleted the checkpoints under a running torchrun job)."""
    if not rank_zero():
        yield
        return
    busy = (f"another training run (pid {{pid}}) is writing the run folder {run_dir.name} now; "
            "wait for it to finish, or pass another run.name")  # fmt: skip
    with single_writer(run_dir, busy):
        yield


def _fit(
    run_dir: Path, config: TrainConfig, digest: str, tokenizer: Any, dm: GateDataModule,
    module: RetrievalGateModule, overwrite: bool, questions_digest: str | None = None,
) -> TrainedRun:  # fmt: skip
    """Trains into `run_dir` (checked, and locked) and writes it; returns the run."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the run folder {run_dir} ({e.strerror}); pass "
                          "another run.output_dir") from None  # fmt: skip
    # Rank zero alone claims the folder (the lock is its): the other ranks of a torchrun job
    # refused the lock would delete the running job's files with --overwrite before torchrun
    # stopped them, and a second history kept would log a resumed run's epochs twice.
    writer = rank_zero()
    # overwrite: nothing to resume (rank zero's claim removes lightning/, perhaps not yet)
    point = ResumePoint() if overwrite else resume_point(run_dir, set_aside=writer)
    check_resume_length(config, point)  # before the folder or its log is touched
    start_from = point.path
    if writer:
        claim_run_dir(run_dir, digest, dm.provenance["sha256"], overwrite, questions_digest)
    throughput = Throughput()
    # rows past the checkpoint (all, from scratch) are logged again by this run
    earlier = keep_csv_history(run_dir, point.global_step) if writer else None
    trainer = _trainer(config, run_dir, [throughput])
    started = time.perf_counter()
    head = HEADS[config.model.head]
    with module.body_memo(head.frozen_body):  # a frozen body encodes each batch once
        # by epochs, or (a stacked head) closed-form on the frozen body
        out_of_fold = head.fit(trainer, module, dm, config, start_from)
        dev = _evaluated(trainer, module, dm, "val")
        if out_of_fold is not None:  # fitted on dev: its figures there are in-sample
            dev = out_of_fold_metrics(out_of_fold, "dev", config.model.threshold)
        test = _evaluated(trainer, module, dm, "test")
        fit_seconds = time.perf_counter() - started
        counts = dm.summary()
        dev, test = (
            _defined_only(dev, counts["dev"], "dev"),
            _defined_only(test, counts["test"], "test"),
        )
        router = calibrate_router(module, dm, config, out_of_fold) if dm.task.routes else None
        figures = None if router is None else router_figures(module, dm, router, out_of_fold)
    # Under DDP every rank runs this function; validate/test metrics are already gathered
    # across ranks (torchmetrics sync, `_evaluated`), and only rank zero writes the run folder
    # (all ranks writing it would race on the same *.tmp files). The barrier keeps the other
    # ranks from returning a folder that is not written yet.
    metrics = {
        "dev": dev,
        "test": test,
        "epochs": throughput.epochs,
        "fit_seconds": fit_seconds,
        "peak_rss_mb": peak_rss_mb(),
        "trainable_parameters": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in module.parameters()),
        "torch_threads": torch.get_num_threads(),
        "splits": counts,
        "world_size": trainer.world_size,
    }
    if figures is not None:
        metrics["router"] = figures
    if trainer.is_global_zero:
        if earlier is not None:  # kept by rank zero (`writer`): the same process
            merge_csv_history(run_dir, earlier)
        labels_json = {**dm.provenance, "counts": counts, "fitted": dm.fitted_digests()}
        save_run(run_dir, config, module, tokenizer, labels_json, metrics,
                 dm.calibration_sample(), router)  # fmt: skip
    trainer.strategy.barrier("run folder written")
    return TrainedRun(run_dir, config, metrics, read_run_json(run_dir / "metadata.json"))
