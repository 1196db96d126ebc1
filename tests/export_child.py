"""The export test_export's killed children run, in a module of its own: each child, forked
from a forkserver that imported the exporter once for both, imports this (nothing else on top)
instead of the test module (pytest, conftest, transformers' tiny models)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from retrieval_gate.export.build import build_export


def export_child(run_dir: Path, target: Path, tmp: Path, text: str) -> None:
    """A child's export: all three variants, its temporary files (ONNX Runtime's optimiser
    keeps one in a TemporaryDirectory, which a SIGKILL leaves behind) in `tmp`."""
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # read TMPDIR again
    build_export(run_dir, target, ("fp32", "opt", "int8"), parity=([text], None))
