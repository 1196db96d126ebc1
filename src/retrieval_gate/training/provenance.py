"""Where a gate's labels came from: label file path, sha256, its .meta.json provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..fileio import sha256_file
from ..labels.label_files import meta_path, read_meta


def label_provenance(label_file: Path) -> dict[str, Any]:
    mp = meta_path(label_file)
    with open(label_file, "rb") as f:
        lines = sum(1 for line in f if line.strip())
    return {
        "path": str(label_file),
        "sha256": sha256_file(label_file),
        "rows_in_file": lines,
        "meta": read_meta(mp) if mp.is_file() else None,
    }
