"""Label policies and label files keyed by question id."""

from .files import LABELS_DIR, LabelFile, read_labels

__all__ = ["LABELS_DIR", "LabelFile", "read_labels"]
