"""Label files: one JSON object a line keyed by question id (never the question text), written
as results arrive so an interrupted run resumes where it stopped, plus a `.meta.json` sidecar
with provenance (policy, generator and checksum, prompt id, decoding, date, version).

Row fields: `id`, `label` (1 = needs retrieval, 0 = does not, null = dropped by the policy),
then whatever the policy records (prediction, match, mean_logprob, ...)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DataError

LABELS_ENV = "RETRIEVAL_GATE_LABELS"
# The committed label files: $RETRIEVAL_GATE_LABELS, else data/labels under the working
# directory (the repository root); commands that read or write labels also take a flag.
LABELS_DIR = Path(os.environ.get(LABELS_ENV) or Path.cwd() / "data" / "labels")


def meta_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")


class LabelFile:
    """A label file on disk: read what is there, append new rows, record provenance."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.rows: dict[str, dict[str, Any]] = {}
        self._partial_at: int | None = None  # byte offset of a half-written last line
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        with open(self.path, "rb") as f:
            lines = f.readlines()
        offset = 0
        for lineno, raw in enumerate(lines, start=1):
            start, offset = offset, offset + len(raw)
            if lineno == len(lines) and not raw.endswith(b"\n"):
                # A last line without its newline is what an interrupted run leaves (or a run
                # still writing): skip it; the next `append` cuts it off before writing, so
                # the resumed run redoes that id on a clean line.
                self._partial_at = start
                break
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise DataError("malformed JSON in label file", self.path, lineno) from None
            if not isinstance(row, dict) or "id" not in row or "label" not in row:
                raise DataError("label row needs 'id' and 'label' fields", self.path, lineno)
            self.rows[str(row["id"])] = row

    @property
    def meta(self) -> dict[str, Any]:
        mp = meta_path(self.path)
        if not mp.exists():
            raise DataError(f"label file has no provenance file {mp.name} beside it", self.path)
        return json.loads(mp.read_text())

    def write_meta(self, meta: dict[str, Any]) -> None:
        mp = meta_path(self.path)
        mp.parent.mkdir(parents=True, exist_ok=True)
        tmp = mp.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        tmp.replace(mp)

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Appends rows and flushes them to disk at once (resumability)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._partial_at is not None:  # only the writer repairs (readers never truncate)
            with open(self.path, "r+b") as f:
                f.truncate(self._partial_at)
            self._partial_at = None
        with open(self.path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                self.rows[str(row["id"])] = row
            f.flush()

    def rewrite(self, rows: Iterable[dict[str, Any]]) -> None:
        """Replaces the whole file atomically (relabelling; never while a run appends)."""
        tmp = self.path.with_suffix(".rewrite.tmp")
        self.rows = {}
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                self.rows[str(row["id"])] = row
        tmp.replace(self.path)
        self._partial_at = None

    def done_ids(self) -> set[str]:
        return set(self.rows)

    def labels(self) -> dict[str, int]:
        """id -> label for the rows the policy kept (label not null)."""
        return {i: int(r["label"]) for i, r in self.rows.items() if r["label"] is not None}


def read_labels(path: str | Path) -> dict[str, int]:
    """id -> label of a label file; a clear error when it is missing or empty."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            "label file not found; run `retrieval-gate label` first or pass a path", path
        )
    labels = LabelFile(path).labels()
    if not labels:
        raise DataError("label file has no labelled rows", path)
    return labels
