"""Where a gate's labels came from: label file path, sha256, its .meta.json provenance."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..labels.files import meta_path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def label_provenance(label_file: Path) -> dict[str, Any]:
    mp = meta_path(label_file)
    with open(label_file, "rb") as f:
        lines = sum(1 for line in f if line.strip())
    return {
        "path": str(label_file),
        "sha256": sha256_file(label_file),
        "rows_in_file": lines,
        "meta": json.loads(mp.read_text()) if mp.is_file() else None,
    }
