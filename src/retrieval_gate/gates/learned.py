"""`LearnedGate`: a gate trained by `retrieval-gate train`, scored with PyTorch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..artifacts import open_artifact
from ..errors import BackendError, InputError
from ..pricing import Calibration
from ..training.checkpoint import fitted_among, load_run
from .base import Questions, as_questions
from .encoder import EncoderGate
from .strategy_routers import RoutingMixin


def default_device() -> str:
    """CUDA when torch sees a GPU, else CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def checked_device(device: Any) -> torch.device:
    """The torch device to score on (None: `default_device`), refused as the ONNX backend
    refuses a provider: an unknown name ("gpu") was torch's raw RuntimeError, and CUDA on a
    torch without it an AssertionError ("Torch not compiled with CUDA enabled")."""
    if not device:  # as the ONNX backend: "" too
        return torch.device(default_device())
    try:
        dev = torch.device(device.lower() if isinstance(device, str) else device)
    except (RuntimeError, TypeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):  # "meta": no real scores
        raise InputError(f"unknown device {device!r}: choose cpu or cuda (cuda:N for the "
                         "N-th GPU)")  # fmt: skip
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise BackendError(f"device {device!r}: this torch cannot use Apple's MPS here; use "
                           "device='cpu'")  # fmt: skip
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "a torch built without CUDA" if torch.version.cuda is None else "no GPU seen"
            raise BackendError(
                f"device {device!r}: CUDA is not available ({why}); use "
                "device='cpu', or a CUDA build of torch on a GPU machine"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BackendError(f"device {device!r}: there is no GPU {dev.index} (torch sees "
                               f"{torch.cuda.device_count()}); use cuda:0 to "
                               f"cuda:{torch.cuda.device_count() - 1}")  # fmt: skip
    return dev


class LearnedGate(EncoderGate):
    """Loads a run folder (checkpoints/<run>/); threshold from its metadata.json (tuned
    thresholds written by `save_threshold` included; 0.5 when absent). `device` is a torch
    device ("cpu", "cuda", "cuda:1"); by default CUDA when available. Scores strings or
    `Question`s (`gates.encoder.EncoderGate`, shared with `OnnxGate`)."""

    def __init__(
        self,
        run_dir: str | Path,
        batch_size: int = 64,
        name: str | None = None,
        device: str | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.device = checked_device(device)
        module, self.tokenizer, self.metadata = load_run(self.run_dir)
        self.module = module.to(self.device)
        self.threshold = float(self.metadata.get("threshold", 0.5))
        self.max_length = int(self.metadata["max_length"])
        self.batch_size = batch_size
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.name = name or f"learned:{self.run_dir.name}"
        self.side_features = self.module.side_features

    @property
    def checksum(self) -> str:
        """The weights' identity: tuning keys its studies and caches by it, not by the folder
        name. The sha256 `load_run` took of gate.pt to check it against the run's manifest."""
        return str(self.module.weights_sha256)

    def fitted_among(self, questions: Questions) -> int:
        """How many of `questions` this run was fitted or chosen on (its train and dev
        questions): scored as test, they flatter it."""
        return fitted_among(self.run_dir, as_questions(questions))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        return [list(ids) for ids in enc["input_ids"]]

    @torch.inference_mode()
    def logits(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None
    ) -> torch.Tensor:
        """The module's logits for one padded batch, on this gate's device."""
        ids = torch.from_numpy(input_ids).to(self.device)
        attention = torch.from_numpy(mask).to(self.device)
        feats = None if features is None else torch.from_numpy(features).to(self.device)
        return self.module(ids, attention, feats)

    @torch.inference_mode()
    def run_batch(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None
    ) -> np.ndarray:
        logits = self.logits(input_ids, mask, features)
        return self.module.retrieval_probability(logits).float().cpu().numpy()


class LearnedRouter(RoutingMixin, LearnedGate):
    """A router run (task `strategies`): P(correct | strategy) from its per-strategy heads,
    routed by the calibration its metadata.json carries (`gates.strategy_routers.RoutingMixin`)."""

    def __init__(self, run_dir: str | Path, **kw: Any):
        super().__init__(run_dir, **kw)
        self.calibration = Calibration.from_dict(self.metadata["router"])
        self.strategies = self.calibration.strategies

    @torch.inference_mode()
    def _proba_batch(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None
    ) -> np.ndarray:
        logits = self.logits(input_ids, mask, features)
        return self.module.probabilities(logits).float().cpu().numpy()

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        texts, features = self.features_of(questions)
        return self.batched(self._proba_batch, texts, features, (len(self.strategies),))


def load_learned(run_dir: str | Path, **kw: Any) -> LearnedGate:
    """The gate of a run folder: a `LearnedRouter` for a router run (its manifest's task), else
    a `LearnedGate`."""
    router = open_artifact(run_dir, "run").is_router
    return LearnedRouter(run_dir, **kw) if router else LearnedGate(run_dir, **kw)
