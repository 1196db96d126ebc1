"""The data flags every verb that reads questions shares: `--questions SPEC` and `--field
FIELD=COLUMN` (see `retrieval_gate.data.user_questions`), `--dataset NAME` (repeatable, one
shape everywhere) and `--data-dir DIR` (the folder of the bundled datasets)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..questions import Question

BUNDLED = "the bundled datasets, canonical split"


def add_question_args(
    p: argparse.ArgumentParser, what: str = "questions", default: str = BUNDLED
) -> None:
    p.add_argument(
        "--questions",
        metavar="SPEC",
        help=f"your own {what}: a .jsonl (.ndjson), .json, .csv, .tsv, .parquet or .txt file, "
        f"a `datasets` save_to_disk folder or hf:NAME[:CONFIG][@SPLIT] (default: {default})",
    )
    p.add_argument(
        "--field",
        action="append",
        metavar="FIELD=COLUMN",
        help="read a field from another column, e.g. --field question=title (repeatable; "
        "default: the column named like the field)",
    )


def questions_source(spec: str, fields: list[str] | None) -> dict[str, Any]:
    """What a label file records of the questions it labels: the --questions spec (a file's
    absolute path) and the --field mappings, as `data.questions` and `data.fields` take them."""
    path = Path(spec)
    source: dict[str, Any] = {"questions": str(path.resolve()) if path.exists() else spec}
    if fields:
        source["fields"] = dict(item.split("=", 1) for item in fields if "=" in item)
    return source


def add_data_dir(p: argparse.ArgumentParser) -> None:
    """`--data-dir`: the one spelling of "where the bundled datasets are" on every verb that
    reads them (the CLI hands it on as $RETRIEVAL_GATE_DATA, which every loader reads)."""
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="folder of the bundled datasets (default: $RETRIEVAL_GATE_DATA, else "
        "../shared/datasets, else the official releases downloaded once)",
    )


def add_dataset_arg(
    p: argparse.ArgumentParser, help_: str, choices: list[str], dest: str = "datasets"
) -> None:
    """`--dataset NAME`: repeatable (`--dataset popqa --dataset triviaqa`), one or more names
    each time (`--dataset popqa triviaqa` keeps working); `--datasets` is its old spelling."""
    p.add_argument(
        "--dataset",
        "--datasets",
        dest=dest,
        action="extend",
        nargs="+",
        choices=choices,
        metavar="NAME",
        help=f"{help_} (repeatable; one of: {' '.join(choices)})",
    )


def questions_from(args: argparse.Namespace) -> tuple[Question, ...] | None:
    """SPEC's questions with their split, or None when --questions was not given."""
    if not args.questions:
        if args.field:
            from ..errors import DataError

            raise DataError("--field maps the columns of --questions SPEC; pass --questions too")
        return None
    from ..data.user_questions import question_set

    return question_set(args.questions, args.field)
