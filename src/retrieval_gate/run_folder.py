"""What a training run folder (`checkpoints/<run>/`) holds: the one list of its files, used by
training (what it writes, what `--overwrite` removes), loading (what a gate needs) and
`RetrievalGate.save_pretrained` (what a saved gate is). A leaf: no torch, so the base install
can read it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class RunFolder:
    path: Path

    CONFIG: ClassVar[str] = "config.yaml"  # the resolved training config
    LABELS: ClassVar[str] = "labels.json"  # label-file provenance
    BACKBONE: ClassVar[str] = "backbone"  # the backbone's Hugging Face config (no weights)
    TOKENIZER: ClassVar[str] = "tokenizer"
    WEIGHTS: ClassVar[str] = "gate.pt"  # the best module's state dict
    METRICS: ClassVar[str] = "metrics.json"  # dev/test metrics, throughput, wall time
    METADATA: ClassVar[str] = "metadata.json"  # task, classes, threshold and its objective
    MANIFEST: ClassVar[str] = "manifest.json"  # kind, task, signals, strategies (artifacts.py)
    RUN: ClassVar[str] = "run.json"  # training state: the config and label-file hashes
    LIGHTNING: ClassVar[str] = "lightning"  # training state: Lightning's checkpoints
    LOGS: ClassVar[str] = "logs"  # training state: Lightning's CSV metrics

    # what loading a gate needs
    REQUIRED: ClassVar[tuple[str, ...]] = (CONFIG, BACKBONE, TOKENIZER, WEIGHTS, METADATA)
    # the gate itself (what `save_pretrained` copies; the rest is training state)
    GATE: ClassVar[tuple[str, ...]] = (*REQUIRED, MANIFEST, LABELS, METRICS)
    # everything training writes (all that `--overwrite` removes, under LOGS its LOG_FILES;
    # nothing else in the folder)
    WRITTEN: ClassVar[tuple[str, ...]] = (RUN, CONFIG, LABELS, BACKBONE, TOKENIZER, WEIGHTS,
                                          METRICS, METADATA, MANIFEST, LIGHTNING, LOGS)  # fmt: skip

    # what training writes under LOGS (the CSV log, set aside over a resume; Lightning's
    # hparams.yaml; the TensorBoard logger's folder): `--overwrite` removes these, not LOGS
    LOG_FILES: ClassVar[tuple[str, ...]] = ("metrics.csv", "metrics.before-resume.csv",
                                            "hparams.yaml", "tensorboard")  # fmt: skip

    # training's own files: any one of them makes the folder a run (`made_by_training`)
    MARKS: ClassVar[tuple[str, ...]] = (RUN, MANIFEST, WEIGHTS)

    @property
    def weights(self) -> Path:
        return Path(self.path) / self.WEIGHTS

    def made_by_training(self) -> bool:
        """Whether training wrote this folder: it holds a file no other program names so (its
        run.json, written first, a manifest or the weights); a folder of the user's own that
        holds a config.yaml or logs/ is not a run to resume or replace."""
        return any((Path(self.path) / name).exists() for name in self.MARKS)

    def is_run(self) -> bool:
        """Whether the folder holds a trained gate (its weights)."""
        return self.weights.is_file()
