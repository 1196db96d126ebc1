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
