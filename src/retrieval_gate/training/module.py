"""`RetrievalGateModule`: a backbone, a classification head, the loss and the metrics.

Devices, precision and strategy are the Trainer's business; nothing here moves tensors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytorch_lightning as pl
import torch
import torchmetrics
from torch import nn
from torchmetrics.classification import (
    BinaryAUROC,
    BinaryAveragePrecision,
    MulticlassAccuracy,
    MulticlassF1Score,
)
from torchmetrics.utilities import dim_zero_cat
from transformers import PretrainedConfig, get_linear_schedule_with_warmup

from .. import metrics as M
from ..data.gate_features import GateFeatures
from ..errors import InputError, TrainingDiverged
from .backbones import Backbone
from .config import ModelConfig
from .heads import HEADS
from .tasks import TASKS, Task


class RetrievalRate(torchmetrics.MeanMetric):
    """Share of questions sent to retrieval at the threshold."""


class ExpectedCalibrationError(torchmetrics.Metric):
    """ECE of P(needs retrieval) by `metrics.ece`, so training logs, the model card and
    `evaluate` report the same number for the same scores."""

    def __init__(self):
        super().__init__()
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, scores: torch.Tensor, target: torch.Tensor) -> None:
        self.scores.append(scores.float().cpu())
        self.target.append(target.cpu())

    def compute(self) -> torch.Tensor:
        scores = dim_zero_cat(self.scores).float().cpu().numpy()
        target = dim_zero_cat(self.target).cpu().numpy()
        return torch.tensor(M.ece(target, scores))


def gate_metrics(num_classes: int) -> dict[str, torchmetrics.Metric]:
    """Accuracy and macro-F1 over the task's classes (decisions at the threshold for the
    binary task and for a router's binary view), AUROC / AP / ECE of P(needs retrieval), and
    the retrieval rate."""
    return {
        "acc": MulticlassAccuracy(num_classes, average="micro"),
        "macro_f1": MulticlassF1Score(num_classes, average="macro"),
        "auroc": BinaryAUROC(),
        "ap": BinaryAveragePrecision(),
        "ece": ExpectedCalibrationError(),
        "retrieval_rate": RetrievalRate(),
    }


class RetrievalGateModule(pl.LightningModule):
    """P(class | question); class 0 = no retrieval, classes > 0 need retrieval. The `task`
    (training/tasks.py) gives the loss, the probabilities and the binary view the metrics
    take: a router's (task `strategies`) heads are P(correct | strategy), and its
    P(needs retrieval) = 1 - P(correct | no retrieval)."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        num_classes: int = 2,
        class_weights: torch.Tensor | None = None,
        hf_config: PretrainedConfig | None = None,
        side_features: GateFeatures | None = None,
        task: Task = TASKS["binary"],
    ):
        super().__init__()
        self.config = model_cfg
        self.num_classes = num_classes
        self.threshold = model_cfg.threshold
        self.weights_sha256: str | None = None  # load_run: the gate.pt it was loaded from
        self.backbone = Backbone(model_cfg, hf_config)
        self.set_head(side_features)
        self.task = task
        self.loss = task.loss(class_weights)
        metrics = task.metric_classes(num_classes)
        self.metrics = nn.ModuleDict(
            {
                stage: nn.ModuleDict(gate_metrics(metrics))
                for stage in ("train_", "val_", "test_")  # ModuleDict keys cannot be "train"
            }
        )
        self.train()  # from_pretrained leaves bodies in eval mode (dropout off)
        self._memo: dict[bytes, torch.Tensor] | None = None  # `body_memo`

    def set_head(self, side_features: GateFeatures | None) -> None:
        """The head over [pooled embedding, features]. The run's features (side features'
        names + scaling, or a stacked head's text features, fitted on its train split) are a
        training result, not a config key; `model.head` builds it (training/heads.py)."""
        self.side_features = side_features
        self.n_side = side_features.width if side_features else 0
        self.head = HEADS[self.config.head].build(self.config, self.backbone.hidden_size,
                                                  side_features, self.num_classes)  # fmt: skip

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (batch, num_classes); float32 whatever precision the body runs in. A gate
        trained with side features takes them (scaled, data/features.py) beside the text."""
        pooled = self.body(input_ids, attention_mask).float()
        if self.n_side:
            if features is None:
                raise InputError("this gate was trained with side features: pass `features`")
            pooled = torch.cat([pooled, features.float()], dim=-1)
        return self.head(pooled, input_ids)  # a stacked head reads the tokens (their TF-IDF)

    def body(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The body's pooled embedding of a batch; inside `body_memo`, each batch once."""
        if self._memo is None:
            return self.backbone(input_ids, attention_mask)
        key = _batch_key(input_ids, attention_mask)
        if key not in self._memo:
            self._memo[key] = self.backbone(input_ids, attention_mask)
        return self._memo[key]

    @contextmanager
    def body_memo(self, on: bool = True) -> Iterator[None]:
        """Within it (`on`: the body is frozen, a stacked head), `body` encodes each batch once:
        the head's fit, validation, test and a router's figures read the same length-ordered
        batches of dev and test (`GateDataModule.by_length`) again, and the same batch gives
        the same embedding. Off outside, so nothing traced or exported meets a kept batch."""
        self._memo = {} if on else None
        try:
            yield
        finally:
            self._memo = None

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Per class: P(class) (softmax), or for a router P(correct | strategy) (sigmoid)."""
        return self.task.probabilities(logits)

    def retrieval_probability(self, logits: torch.Tensor) -> torch.Tensor:
        """P(needs retrieval) = 1 - P(class 0): one score for binary and 3-way tasks and for
        routers (1 - P(the no-retrieval answer is right))."""
        return 1.0 - self.probabilities(logits)[:, 0]

    def decisions(self, logits: torch.Tensor) -> torch.Tensor:
        return self.task.decisions(logits, self.retrieval_probability(logits), self.threshold)

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], batch.get("features"))
        loss = self.loss(logits, batch["labels"])
        # a router is measured on its binary view: is the no-retrieval answer wrong?
        y = self.task.binary_view(batch["labels"])
        p = self.retrieval_probability(logits).detach()
        metrics = self.metrics[stage + "_"]
        metrics["acc"].update(self.decisions(logits), y)
        metrics["macro_f1"].update(self.decisions(logits), y)
        for name in ("auroc", "ap", "ece"):
            metrics[name].update(p, (y > 0).long())
        metrics["retrieval_rate"].update((p >= self.threshold).float())
        n = y.shape[0]
        # sync_dist: under DDP the epoch loss of val/test is averaged over ranks (the metrics
        # below are torchmetrics objects, which Lightning syncs across ranks itself).
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, batch_size=n,
                 sync_dist=stage != "train")  # fmt: skip
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, batch_size=n)
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self._step(batch, "train")
        if not torch.isfinite(loss):  # it trained on and saved a gate of NaN weights, exit 0
            cfg = self.config
            raise TrainingDiverged(
                f"training diverged at step {self.global_step}: the loss is {loss.item()}; "
                f"lower model.lr ({cfg.lr:g}) or model.head_lr ({cfg.head_lr:g}) and train "
                "again (--overwrite replaces this run)"
            )
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], batch.get("features"))
        return self.retrieval_probability(logits)

    def configure_optimizers(self) -> Any:
        cfg = self.config
        body = [p for p in self.backbone.parameters() if p.requires_grad]
        groups = [
            {"params": body, "lr": cfg.lr},
            {"params": list(self.head.parameters()), "lr": cfg.head_lr},
        ]
        opt = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        sched = get_linear_schedule_with_warmup(opt, int(total * cfg.warmup_ratio), total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _batch_key(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> bytes:
    """A batch's identity: its shape and every token id and mask value."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(tuple(input_ids.shape)).encode())
    for t in (input_ids, attention_mask):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.digest()
