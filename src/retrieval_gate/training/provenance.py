"""Where a gate's labels came from: label file path, sha256, its .meta.json provenance."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import DataError
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


def label_source(provenance: dict[str, Any], run_dir: Path, digest: Callable[[str], str]) -> str:
    """Where a run's label file is now, found by its checksum (`digest`, the task's): its path
    as given, where it resolved when the run trained, or the given path under a folder above
    the run (a project copied elsewhere with its runs inside). None of them, or only files
    changed since the run trained, is refused: parity and the card's AUROC would be computed
    on labels the run never saw."""
    given, want = provenance["path"], provenance.get("sha256")
    places = [given, provenance.get("resolved")]
    if not Path(given).is_absolute():
        places += [str(folder / given) for folder in Path(run_dir).resolve().parents]
    changed: tuple[str, str] | None = None  # the first file found with other contents
    for place in dict.fromkeys(p for p in places if p and Path(p).exists()):
        found = digest(place)
        if found == want or want is None:  # a run that recorded no checksum: as found
            return place
        changed = changed or (place, found)
    if changed:
        raise DataError(f"the run's label file has changed since it trained (sha256 "
                        f"{changed[1][:12]}..., the run's labels.json {str(want)[:12]}...): its "
                        "parity and model card would be computed on other labels; restore "
                        "the file, or train the run again on it", changed[0])  # fmt: skip
    if _is_name(given, digest, want):
        return given  # a dataset name (`adaptive-rag`), its own checksum matching
    raise DataError(f"the run's label file ({run_dir}/labels.json) is not found here, nor "
                    f"where it was when the run trained ({provenance.get('resolved')}), nor "
                    "under a folder above the run: run this from the folder the run trained "
                    "in, or put the file back", given)  # fmt: skip


def _is_name(given: str, digest: Callable[[str], str], want: str) -> bool:
    try:
        return digest(given) == want
    except (DataError, OSError):  # a file's path that is gone
        return False


def text_digest(text: str) -> str:
    """A question text's short hash (`GateDataModule.fitted_digests`): 12 hex digits of its
    sha256, whitespace-trimmed."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:12]
