"""How a gate's head is made and fitted (`model.head`). A `Head` builds the module's head
and fits it: gradient-trained by Lightning's epochs (`linear`) or closed-form on the frozen
body (`stacked`, training/stacked.py), so the module and the trainer ask the head instead of
branching on its name. Extending: one `Head` in `HEADS`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import pytorch_lightning as pl
import torch
from torch import nn

from ..data.gate_features import GateFeatures
from ..data.text_features import TextFeatures
from .stacked import OutOfFold, StackedHead, fit_stacked_head


class LinearHead(nn.Sequential):
    """Dropout and one linear layer over [pooled embedding, side features] (the module's
    `head.0` / `head.1` keys, as every run folder holds them); the tokens are not read."""

    def __init__(self, dropout: float, width: int, outputs: int):
        super().__init__(nn.Dropout(dropout), nn.Linear(width, outputs))

    def forward(self, x: torch.Tensor, input_ids: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x)


class Head(Protocol):
    frozen_body: bool  # the body's weights never change (its embeddings can be kept)

    def build(
        self, config: Any, hidden: int, features: GateFeatures | None, outputs: int
    ) -> nn.Module:
        """The head over the pooled embedding (and `features`), called (x, input_ids)."""

    def fit(
        self, trainer: pl.Trainer, module: Any, dm: Any, config: Any, start_from: Path | None
    ) -> OutOfFold | None:
        """Fits `module` on `dm`; a router's out-of-fold predictions where it makes them."""


class GradientHead:
    """`linear`: trained with the body (or its LoRA) by Lightning's epochs; the weights of the
    best validation epoch are kept."""

    frozen_body = False  # the body's weights change while it trains

    def build(
        self, config: Any, hidden: int, features: GateFeatures | None, outputs: int
    ) -> nn.Module:
        return LinearHead(config.dropout, hidden + (features.width if features else 0), outputs)

    def fit(
        self, trainer: pl.Trainer, module: Any, dm: Any, config: Any, start_from: Path | None
    ) -> OutOfFold | None:
        trainer.fit(module, datamodule=dm, ckpt_path=str(start_from) if start_from else None)
        best = trainer.checkpoint_callback.best_model_path
        if best:  # weights of the best validation epoch, not the last one
            state = torch.load(best, map_location="cpu", weights_only=False)["state_dict"]
            module.load_state_dict(state)
        return None


class ClosedFormHead(GradientHead):
    """`stacked`: logistic models on the frozen body, fitted in closed form (no epochs).
    Until its fit has made the text features, the module holds a linear placeholder."""

    frozen_body = True

    def build(
        self, config: Any, hidden: int, features: GateFeatures | None, outputs: int
    ) -> nn.Module:
        if isinstance(features, TextFeatures):
            return StackedHead(hidden, features, outputs)
        return super().build(config, hidden, features, outputs)

    def fit(
        self, trainer: pl.Trainer, module: Any, dm: Any, config: Any, start_from: Path | None
    ) -> OutOfFold | None:
        return fit_stacked_head(module, dm, config.run.seed, config.model.fit_on)


HEADS: dict[str, Head] = {"linear": GradientHead(), "stacked": ClosedFormHead()}
