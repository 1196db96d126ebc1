"""A user's small question files, written as the label and outcome tests need them."""

from __future__ import annotations

import json
from pathlib import Path

QUESTIONS = [
    {"id": "m1", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare"]},
    {"id": "m2", "question": "What is the capital of France?", "answers": ["Paris"]},
    {"id": "m3", "question": "Who founded Zorblat Inc?", "answers": ["Quen Vik"]},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
