"""A closed-book labelling run made through a user's server (`label --generator-url`), with
no local copy of its generator: what the evaluate and tune tests of the labelling generator
share (with conftest's `no_generator`)."""

from __future__ import annotations

import json
from pathlib import Path

from retrieval_gate.data.user_questions import question_set

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = str(ROOT / "examples" / "your-data" / "questions.csv")
REMOTE = "remote:http://127.0.0.1:18431/v1:stub-llm:/models/stub"


def labelled_run(
    folder: Path, checksum: str | None = REMOTE, unanswered: str | None = None
) -> Path:
    """A closed-book labelling run as `label --generator-url` writes one, in
    `folder`/stub-llm/, its label file; `unanswered` (a split): its answers miss two of that
    split's questions, and a label file of every question (another policy's) is returned
    beside them."""
    run = folder / "stub-llm"
    run.mkdir(parents=True)
    qs = question_set(QUESTIONS)
    left_out = sorted(q.id for q in qs if q.split == unanswered)[:2]
    rows = []
    for i, q in enumerate(qs):
        wrong = i % 2
        rows.append({"id": q.id, "label": wrong, "match": not wrong, "idk": False,
                     "mean_logprob": -1.5 if wrong else -0.1, "prediction": "x"})  # fmt: skip
    meta = {"policy": "closed-book", "generator": "stub-llm", "generator_checksum": checksum,
            "backend": "RemoteGenerator"}  # fmt: skip
    _write(run / "closed-book.jsonl", [r for r in rows if r["id"] not in left_out], meta)
    if unanswered is None:
        return run / "closed-book.jsonl"
    _write(run / "other.jsonl", rows, {**meta, "policy": "other"})
    return run / "other.jsonl"


def _write(path: Path, rows: list[dict], meta: dict) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path.with_suffix(".meta.json").write_text(json.dumps(meta))
