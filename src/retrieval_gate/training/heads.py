"""How a gate's head is made and fitted (`model.head`). A `Head` builds the module's head
and fits it: gradient-trained by Lightning's epochs (`linear`) or closed-form on the frozen
body (`stacked`, training/stacked.py), so the module and the trainer ask the head instead of
branching on its name. Extending: one `Head` in `HEADS`."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn

from ..data.gate_features import GateFeatures
from ..data.text_features import TextFeatures
from ..errors import DataError, first_line
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
        with interrupt_as_ctrl_c(trainer):
            trainer.fit(module, datamodule=dm, ckpt_path=str(start_from) if start_from else None)
        kept = trainer.checkpoint_callback
        if kept.best_model_path:  # weights of the best validation epoch, not the last one
            module.load_state_dict(best_weights(kept.best_model_path, kept.dirpath))
        return None


class RunCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint`, reading the state saved in a run folder that has moved
    since (renamed, copied, mounted elsewhere) as that folder's own. Lightning keeps only
    `best_model_path` when the saved `dirpath` is not its own: a moved folder's resume loaded
    the OLD folder's best.ckpt (gone: a FileNotFoundError; still there: another run's weights),
    and with the kept best and its score forgotten the first resumed epoch became best-v1.ckpt
    though it only tied. Its state key is Lightning's: checkpoints restore either way."""

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"{ModelCheckpoint.__qualname__}{kwargs!r}"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        was = state_dict.get("dirpath")
        if was and self.dirpath and was != self.dirpath:
            state_dict = moved_state(state_dict, str(was), str(self.dirpath))
        super().load_state_dict(state_dict)


MOVED_PATHS = ("best_model_path", "kth_best_model_path", "last_model_path")


def moved_state(state: dict[str, Any], was: str, now: str) -> dict[str, Any]:
    """A checkpoint callback's `state` saved in the folder `was`, its checkpoint paths under
    `now` (a path outside `was` is left as it is: `best_weights` refuses it)."""

    def move(path: str) -> str:
        return str(Path(now) / Path(path).relative_to(was)) if _under(path, was) else path

    moved = {k: move(state[k]) for k in MOVED_PATHS if state.get(k)}
    kept = {move(p): score for p, score in (state.get("best_k_models") or {}).items()}
    return {**state, **moved, "best_k_models": kept, "dirpath": now}


def _under(path: str, folder: str) -> bool:
    return Path(path).is_relative_to(folder)


def best_weights(best: str, folder: str | None) -> dict[str, Any]:
    """The state dict of the best epoch's checkpoint, read from the run's own checkpoint
    `folder` only: a path elsewhere is another folder's (a moved run's old place)."""
    path = Path(best)
    if folder is None or path.resolve().parent != Path(folder).resolve():
        raise DataError(f"the best epoch's checkpoint recorded for this run, {best}, is not in "
                        "its lightning/ folder; pass --overwrite to train the run again",
                        folder)  # fmt: skip
    if not path.is_file():
        raise DataError(f"the best epoch's checkpoint {path.name} is gone (deleted or moved "
                        "away); put it back, or pass --overwrite to train the run again",
                        folder)  # fmt: skip
    try:
        return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    except Exception as e:  # torch raises several types for truncated/garbled files
        raise DataError(f"the best epoch's checkpoint {path.name} is damaged ({first_line(e)});"
                        " pass --overwrite to train the run again", folder) from None  # fmt: skip


@contextmanager
def interrupt_as_ctrl_c(trainer: pl.Trainer) -> Iterator[None]:
    """Ctrl-C in `trainer.fit` comes out as a KeyboardInterrupt, which the CLI reports as
    "interrupted" (exit 130) as for every verb: Lightning catches it, shuts the fit down (the
    run folder keeps its last epoch's checkpoint: it resumes), ignores SIGINT from then on and
    calls sys.exit(1). The interrupt is raised again and the SIGINT handler put back."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        yield
    except SystemExit as e:
        interrupt = e.__context__  # Lightning's exit is raised in its `except KeyboardInterrupt`
        if not (trainer.interrupted and isinstance(interrupt, KeyboardInterrupt)):
            raise
        raise interrupt from None
    finally:
        main = threading.current_thread() is threading.main_thread()
        if main and handler is not None and signal.getsignal(signal.SIGINT) is not handler:
            signal.signal(signal.SIGINT, handler)


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
