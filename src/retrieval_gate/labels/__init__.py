"""Label policies and label files keyed by question id.

`label(LabelRequest("closed-book"))` runs a policy (resumable); `read_labels(path)` reads a
file's id -> label; `report()` computes the figures from the files."""

from .label_files import LABELS_DIR, LabelFile, read_labels
from .policies import POLICIES, LabelRequest, label, label_path

__all__ = [
    "LABELS_DIR",
    "POLICIES",
    "LabelFile",
    "LabelRequest",
    "label",
    "label_path",
    "read_labels",
]
