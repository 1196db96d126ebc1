"""`build_export`: export, check every variant, write the model card (the `export` verb)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..fileio import staged_folder
from ..questions import Question
from .card import write_model_card
from .onnx_export import Progress, check_export_target, keep_users_files, write_export
from .parity import calibration_set, check_parity, parity_set


def build_export(
    run_dir: str | Path,
    out_dir: str | Path,
    variants: Sequence[str] = ("fp32", "opt", "int8"),
    parity_limit: int | None = 1000,
    parity: tuple[Sequence[str], Sequence[int] | None] | None = None,
    questions: Sequence[Question] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """`parity` = (texts, labels[, side features]) to check on; by default the run's test split (up to
    `parity_limit` questions) of `questions` (default: the run's own question set). The folder
    (ONNX files, tokenizer, parity.json, model card) appears whole or not at all, and not at
    all when its fp32 file misses the parity bar (a BackendError; an older export is kept)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_export_target(out_dir, variants)
    texts, labels, *features = (
        parity if parity is not None else parity_set(run_dir, parity_limit, questions=questions)
    )
    calibration = calibration_set(run_dir, questions) if "int8" in variants else None
    progress = Progress()
    with staged_folder(out_dir) as stage:
        write_export(run_dir, stage, variants, calibration, progress)
        progress.step(f"parity: {len(texts)} test questions through PyTorch and each variant")
        report = check_parity(run_dir, stage, texts, labels, features[0] if features else None)
        _refuse_failed_fp32(report, out_dir)  # raised here, the stage is discarded
        progress.step("model card")
        write_model_card(run_dir, stage, report, name=out_dir.name, path=str(out_dir))
        keep_users_files(out_dir, stage)
    return out_dir, report


def _refuse_failed_fp32(report: dict[str, Any], out_dir: Path) -> None:
    """The fp32 graph scoring otherwise than PyTorch is a broken export: it replaced the
    folder (an older, good export too) and loaded silently everywhere, its parity.json alone
    saying `passed: false`."""
    fp32 = report["variants"].get("fp32") or {}
    if not fp32.get("runnable") or fp32["passed"]:
        return
    bar = fp32["bar"]
    raise BackendError(
        f"{out_dir}: fp32 ONNX does not match PyTorch; do not ship this export (on "
        f"{report['n']} test questions: max |score diff| {fp32['max_abs_diff']:.3g} against "
        f"{bar['max_abs_diff']}, decision agreement {fp32['decision_agreement']:.4f} against "
        f"{bar['min_agreement']}); nothing was written, the folder is as it was: check the "
        "installed torch, onnx and onnxruntime versions, and report it with the run's backbone"
    )
