"""Datasets as Questions: loaders by name, data-folder resolution, leakage-free splits."""

from ..errors import DataError
from .bad_rows import BadRows
from .catalog import dataset_names, load_all, load_dataset
from .loaders import load_entityquestions_train, load_hub, popqa_relation
from .paths import resolve_data_dir
from .splits import assign_splits, canonical_questions, with_splits
from .summary import format_table, summary_rows

__all__ = [
    "BadRows",
    "DataError",
    "assign_splits",
    "canonical_questions",
    "dataset_names",
    "format_table",
    "load_all",
    "load_dataset",
    "load_entityquestions_train",
    "load_hub",
    "popqa_relation",
    "resolve_data_dir",
    "summary_rows",
    "with_splits",
]
