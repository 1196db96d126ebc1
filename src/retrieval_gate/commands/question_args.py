"""`--questions SPEC` and `--field FIELD=COLUMN`: the flags every verb that takes questions
shares (see `retrieval_gate.data.user_questions`)."""

from __future__ import annotations

import argparse

from ..questions import Question


def add_question_args(p: argparse.ArgumentParser, what: str = "questions") -> None:
    p.add_argument(
        "--questions",
        metavar="SPEC",
        help=f"your own {what}: a .jsonl, .csv or .parquet file, a `datasets` save_to_disk "
        "folder or hf:NAME[:CONFIG][@SPLIT] (default: the bundled datasets, canonical split)",
    )
    p.add_argument(
        "--field",
        action="append",
        metavar="FIELD=COLUMN",
        help="read a field from another column, e.g. --field question=title (repeatable)",
    )


def questions_from(args: argparse.Namespace) -> tuple[Question, ...] | None:
    """SPEC's questions with their split, or None when --questions was not given."""
    if not args.questions:
        if args.field:
            from ..data.errors import DataError

            raise DataError("--field maps the columns of --questions SPEC; pass --questions too")
        return None
    from ..data.user_questions import question_set

    return question_set(args.questions, args.field)
