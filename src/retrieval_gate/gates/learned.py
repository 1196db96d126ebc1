"""`LearnedGate`: a gate trained by `retrieval-gate train`, scored with PyTorch."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from ..data.features import SideFeatures
from ..fileio import sha256_file
from ..questions import Question
from ..training.checkpoint import load_run


def default_device() -> str:
    """CUDA when torch sees a GPU, else CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class LearnedGate:
    """Loads a run folder (checkpoints/<run>/); threshold from its metadata.json (tuned
    thresholds written by `save_threshold` included; 0.5 when absent). `device` is a torch
    device ("cpu", "cuda", "cuda:1"); by default CUDA when available."""

    def __init__(
        self,
        run_dir: str | Path,
        batch_size: int = 64,
        name: str | None = None,
        device: str | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.device = torch.device(device or default_device())
        module, self.tokenizer, self.metadata = load_run(self.run_dir)
        self.module = module.to(self.device)
        self.threshold = float(self.metadata.get("threshold", 0.5))
        self.max_length = int(self.metadata["max_length"])
        self.batch_size = batch_size
        self.name = name or f"learned:{self.run_dir.name}"
        self.side_features = SideFeatures.from_dict(self.module.model_cfg.get("side_features"))

    @cached_property
    def checksum(self) -> str:
        """The weights' identity: tuning keys its studies and caches by it, not by the folder
        name. Hashed on first use, so loading a gate to score pays nothing for it."""
        return sha256_file(self.run_dir / "gate.pt")

    @torch.inference_mode()
    def score_texts(self, texts: Sequence[str], features: np.ndarray | None = None) -> np.ndarray:
        """P(needs retrieval) per text (with its row of scaled side `features` when the gate
        has them). Texts are batched in length order so each batch pads only to similar
        lengths, and results are put back in input order."""
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty(len(texts), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            idx = order[start : start + self.batch_size]
            enc = self.tokenizer(
                [texts[i] for i in idx],
                truncation=True,
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            )
            ids, mask = enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)
            feats = None if features is None else torch.from_numpy(features[idx]).to(self.device)
            logits = self.module(ids, mask, feats)
            out[idx] = self.module.retrieval_probability(logits).cpu().numpy()
        return out

    def scores(self, questions: Sequence[Question]) -> np.ndarray:
        side = self.side_features
        return self.score_texts([q.text for q in questions], side and side.matrix(questions))
