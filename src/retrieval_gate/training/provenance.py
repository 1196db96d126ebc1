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
        **resolved(label_file),
        "sha256": sha256_file(label_file),
        "rows_in_file": lines,
        "meta": read_meta(mp) if mp.is_file() else None,
    }


def resolved(label_file: str | Path) -> dict[str, str]:
    """The label file's absolute path beside the path as given (often relative to where
    training ran), so `export` finds it from another folder; nothing for a dataset name."""
    path = Path(label_file)
    return {"resolved": str(path.resolve())} if path.exists() else {}


def label_source(provenance: dict[str, Any]) -> str:
    """Where a run's label file is now: its path as given, else where it resolved when the run
    trained (an export from another folder)."""
    given, absolute = provenance["path"], provenance.get("resolved")
    return absolute if not Path(given).exists() and absolute and Path(absolute).exists() else given
