"""A user's small question files, written as the label and outcome tests need them, and the
placeholder weights of run folders no test loads."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

QUESTIONS = [
    {"id": "m1", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare"]},
    {"id": "m2", "question": "What is the capital of France?", "answers": ["Paris"]},
    {"id": "m3", "question": "Who founded Zorblat Inc?", "answers": ["Quen Vik"]},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def placeholder_weights(path: Path) -> Path:
    """A whole (empty) zip archive where a run's gate.pt goes: `open_artifact` accepts it as
    weights a `torch.save` wrote, and the fake run's flags are checked before anything loads."""
    zipfile.ZipFile(path, "w").close()
    return path


def forget_checksums(folder: Path) -> Path:
    """A run or export as written before manifests kept weights checksums (or with a file the
    user changed on purpose): the loader's later checks apply to a file edited by a test."""
    path = Path(folder) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("checksums", None)
    path.write_text(json.dumps(manifest))
    return Path(folder)
