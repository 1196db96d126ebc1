"""What a gate's folder (a training run or an export, as `--router`, `--onnx` or
`--learned-run` name it) declares, read from its metadata file before anything loads (issue 36:
a plan before engines). Damaged metadata, or a router calibration missing a field, is an
error naming the file and key: never a traceback, never a fallback to a binary gate."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from ..gates.registry import GATES, GateOptions
from ..pricing import Calibration
from ..run_folder import RunFolder

EXPORT_METADATA = "gate_metadata.json"  # an export's copy of its run's metadata.json
FOLDER_OPTIONS = ("learned_run", "onnx")  # the GateOptions fields that name a gate's folder


def metadata_file(folder: str | Path) -> Path | None:
    """A run's metadata.json or an export's gate_metadata.json; None when it has neither."""
    for name in (RunFolder.METADATA, EXPORT_METADATA):
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def folder_metadata(folder: str | Path) -> dict[str, Any]:
    """The folder's metadata as a JSON object ({} when it has no metadata file)."""
    path = metadata_file(folder)
    if path is None:
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # truncated, not JSON, not UTF-8
        raise DataError(
            f"unreadable metadata ({e}); re-train or re-export this gate", path
        ) from None
    if not isinstance(meta, dict):
        raise DataError("metadata must be a JSON object; re-train or re-export this gate", path)
    return meta


def declared_router(folder: str | Path) -> Calibration | None:
    """The router calibration (strategies, costs, default budget) a folder declares; None for
    a binary gate's folder."""
    meta = folder_metadata(folder)
    if "router" not in meta:
        return None
    try:
        return Calibration.from_dict(meta["router"])
    except InputError as e:
        raise DataError(f"key router: {e}", metadata_file(folder)) from None


def check_gate_folders(gates: Sequence[str], options: GateOptions) -> None:
    """The run or export folder each named gate reads (when given): its metadata readable and
    any router calibration whole, before any gate loads or engine starts."""
    for name in gates:
        for option in set(GATES[name].options) & set(FOLDER_OPTIONS):
            folder = getattr(options, option)
            if folder and Path(folder).is_dir():
                declared_router(folder)
