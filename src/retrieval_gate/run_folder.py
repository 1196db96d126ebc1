"""What a training run folder (`checkpoints/<run>/`) holds: the one list of its files, used by
training (what it writes, what `--overwrite` removes), loading (what a gate needs) and
`RetrievalGate.save_pretrained` (what a saved gate is). A leaf: no torch, so the base install
can read it.

    config.yaml     the resolved training config
    labels.json     label-file provenance (path, sha256, counts, the label file's .meta.json)
    backbone/       the backbone's Hugging Face config (architecture without weights)
    tokenizer/      the tokenizer
    gate.pt         the best module's state dict (LoRA unmerged)
    metrics.json    dev/test metrics, throughput, wall time, peak RSS
    metadata.json   task, class names, threshold + the objective that chose it
    run.json        the config and label-file hashes (training state)
    lightning/      Lightning's checkpoints (training state)
    logs/           Lightning's CSV metrics (training state)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class RunFolder:
    path: Path

    CONFIG: ClassVar[str] = "config.yaml"
    LABELS: ClassVar[str] = "labels.json"
    BACKBONE: ClassVar[str] = "backbone"
    TOKENIZER: ClassVar[str] = "tokenizer"
    WEIGHTS: ClassVar[str] = "gate.pt"
    METRICS: ClassVar[str] = "metrics.json"
    METADATA: ClassVar[str] = "metadata.json"
    RUN: ClassVar[str] = "run.json"
    LIGHTNING: ClassVar[str] = "lightning"
    LOGS: ClassVar[str] = "logs"

    # what loading a gate needs
    REQUIRED: ClassVar[tuple[str, ...]] = (CONFIG, BACKBONE, TOKENIZER, WEIGHTS, METADATA)
    # the gate itself (what `save_pretrained` copies; the rest is training state)
    GATE: ClassVar[tuple[str, ...]] = (*REQUIRED, LABELS, METRICS)
    # everything training writes (all that `--overwrite` removes; nothing else in the folder)
    WRITTEN: ClassVar[tuple[str, ...]] = (RUN, CONFIG, LABELS, BACKBONE, TOKENIZER, WEIGHTS,
                                          METRICS, METADATA, LIGHTNING, LOGS)  # fmt: skip

    @property
    def weights(self) -> Path:
        return Path(self.path) / self.WEIGHTS

    def is_run(self) -> bool:
        """Whether the folder holds a trained gate (its weights)."""
        return self.weights.is_file()
