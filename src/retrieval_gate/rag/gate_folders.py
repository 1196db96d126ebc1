"""The run or export folders a verb's gate options name (`--learned-run`, `--onnx`), opened
by `artifacts.open_artifact` before any gate loads or engine starts (issue 36: a plan before
engines): damaged, partial or contradictory metadata is an error naming the file and field."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..artifacts import open_artifact
from ..gates.registry import GATES, GateOptions

# the GateOptions fields that name a gate's folder -> (the kind it must hold, its flag)
FOLDER_OPTIONS = {"learned_run": ("run", "--learned-run"), "onnx": ("export", "--onnx")}


def check_gate_folders(gates: Sequence[str], options: GateOptions) -> None:
    """The run or export folder each named gate reads (when given and there; a missing one
    is the gate's own error): opened and checked, of the kind its flag takes."""
    for name in gates:
        for option in set(GATES[name].options) & set(FOLDER_OPTIONS):
            folder = getattr(options, option)
            if folder and Path(folder).is_dir():
                open_artifact(folder, *FOLDER_OPTIONS[option])
