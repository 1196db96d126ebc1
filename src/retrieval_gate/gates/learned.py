"""`LearnedGate`: a gate trained by `retrieval-gate train`, scored with PyTorch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..fileio import sha256_file
from ..questions import Question
from ..training.checkpoint import load_run


class LearnedGate:
    """Loads a run folder (checkpoints/<run>/); threshold from its metadata.json (tuned
    thresholds written by `save_threshold` included; 0.5 when absent)."""

    def __init__(self, run_dir: str | Path, batch_size: int = 64, name: str | None = None):
        self.run_dir = Path(run_dir)
        self.module, self.tokenizer, self.metadata = load_run(self.run_dir)
        self.threshold = float(self.metadata.get("threshold", 0.5))
        self.max_length = int(self.metadata["max_length"])
        self.batch_size = batch_size
        self.name = name or f"learned:{self.run_dir.name}"
        # the weights' identity: tuning keys its studies and caches by it, not by the folder name
        self.checksum = sha256_file(self.run_dir / "gate.pt")

    @torch.inference_mode()
    def score_texts(self, texts: Sequence[str]) -> np.ndarray:
        """P(needs retrieval) per text. Texts are batched in length order so each batch pads
        only to similar lengths, and results are put back in input order."""
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
            logits = self.module(enc["input_ids"], enc["attention_mask"])
            out[idx] = self.module.retrieval_probability(logits).numpy()
        return out

    def scores(self, questions: Sequence[Question]) -> np.ndarray:
        return self.score_texts([q.text for q in questions])
