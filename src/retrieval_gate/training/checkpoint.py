"""A run folder `checkpoints/<run>/` holds everything needed to use or ship a gate:

    config.yaml        the resolved training config
    labels.json        label-file provenance (path, sha256, counts, the label file's .meta.json)
    backbone/          the backbone's Hugging Face config (architecture without weights)
    tokenizer/         the tokenizer
    gate.pt            the best module's state dict (LoRA unmerged)
    metrics.json       dev/test metrics, throughput, wall time, peak RSS
    metadata.json      task, class names, threshold + the objective that chose it

`save_threshold` lets tuning record a tuned threshold; `LearnedGate` and the exporter read it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import yaml

from .. import __version__
from ..errors import DataError
from ..fileio import read_json, write_json, write_text
from ..run_folder import RunFolder
from .backbones import load_tokenizer, saved_config
from .data import CLASS_NAMES
from .module import RetrievalGateModule

REQUIRED = RunFolder.REQUIRED


def read_run_json(path: Path) -> dict[str, Any]:
    """One JSON file of a run folder."""
    return read_json(path, missing="missing file; is this a training run folder?")


def save_run(
    run_dir: Path,
    config: dict[str, Any],
    module: RetrievalGateModule,
    tokenizer: Any,
    labels: dict[str, Any],
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    write_json(run_dir / "labels.json", labels)
    module.backbone.hf_config.save_pretrained(run_dir / "backbone")
    tokenizer.save_pretrained(run_dir / "tokenizer")
    torch.save(module.state_dict(), run_dir / "gate.pt")
    meta_file = run_dir / "metadata.json"
    meta = read_run_json(meta_file) if meta_file.is_file() else {}
    meta.update(
        {
            "task": config["data"]["task"],
            "classes": CLASS_NAMES[config["data"]["task"]],
            "score": "P(needs retrieval) = 1 - P(no_retrieval); retrieve iff score >= threshold",
            "backbone": config["model"]["backbone"],
            "model_name": config["model"]["name"],
            "max_length": config["data"]["max_length"],
            "package_version": __version__,
        }
    )
    meta.setdefault("threshold", float(config["model"]["threshold"]))
    meta.setdefault("objective", "default 0.5 (not tuned)")
    write_json(meta_file, meta)


def read_metadata(run_dir: str | Path) -> dict[str, Any]:
    return read_run_json(Path(run_dir) / "metadata.json")


def save_threshold(
    run_dir: str | Path, threshold: float, objective: str, dev_figures: dict[str, Any]
) -> None:
    """Records a tuned threshold (and the objective and dev figures that chose it) in the run's
    metadata.json; LearnedGate and the ONNX exporter use it from then on."""
    if not 0.0 <= float(threshold) <= 1.0:
        raise DataError(f"threshold must be in [0, 1], got {threshold}")
    path = Path(run_dir) / "metadata.json"
    meta = read_run_json(path)
    meta.update(
        threshold=float(threshold),
        objective=objective,
        dev_figures=dev_figures,
        tuned_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write_json(path, meta)


def load_run(run_dir: str | Path) -> tuple[RetrievalGateModule, Any, dict[str, Any]]:
    """(module in eval mode, tokenizer, metadata) from a run folder, with clear errors for a
    missing, corrupt or mismatched checkpoint."""
    run_dir = Path(run_dir)
    missing = [name for name in REQUIRED if not (run_dir / name).exists()]
    if missing:
        raise DataError(
            f"not a complete training run: missing {', '.join(missing)} "
            "(train with `retrieval-gate train`)",
            run_dir,
        )
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    meta = read_metadata(run_dir)
    module = RetrievalGateModule(
        config["model"], len(meta["classes"]), hf_config=saved_config(run_dir / "backbone")
    )
    try:
        state = torch.load(run_dir / "gate.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated/garbled files
        raise DataError(f"checkpoint gate.pt is corrupt or unreadable ({e})", run_dir) from None
    state = {k: v for k, v in state.items() if not k.startswith("loss.")}
    try:
        module.load_state_dict(state, strict=False)
        _check_keys(module, state, run_dir)
    except RuntimeError as e:
        raise DataError(
            f"gate.pt does not match config.yaml/backbone ({str(e).splitlines()[0]})", run_dir
        ) from None
    module.threshold = float(meta.get("threshold", 0.5))
    return module.eval(), load_tokenizer(run_dir / "tokenizer"), meta


def _check_keys(module: RetrievalGateModule, state: dict[str, Any], run_dir: Path) -> None:
    expected = {k for k in module.state_dict() if not k.startswith("loss.")}
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise DataError(
            f"gate.pt does not match config.yaml/backbone: {len(missing)} missing weights "
            f"(e.g. {sorted(missing)[:2]}), {len(unexpected)} unexpected "
            f"(e.g. {sorted(unexpected)[:2]})",
            run_dir,
        )
