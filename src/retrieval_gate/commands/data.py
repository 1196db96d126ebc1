"""`retrieval-gate data summary`."""

from __future__ import annotations

import argparse
from collections import Counter

from ..data import (
    BadRows,
    dataset_names,
    format_table,
    load_dataset,
    resolve_data_dir,
    summary_rows,
)
from ..errors import InputError
from .question_args import add_data_dir, add_dataset_arg, add_question_args, questions_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect the datasets")
    verbs = p.add_subparsers(dest="data_verb", required=True)
    s = verbs.add_parser("summary", help="rows, answers, popularity, fact types per dataset")
    add_data_dir(s)
    add_dataset_arg(s, "dataset to summarise (default: the default set)", dataset_names(True))
    s.add_argument(
        "--skip-bad-rows", action="store_true", help="count malformed rows instead of stopping"
    )
    add_question_args(s, "question file to summarise", "the bundled datasets")
    s.set_defaults(run=run_summary)


def run_summary(args: argparse.Namespace) -> int:
    bundled = [flag for flag, given in (("--dataset", args.datasets),
                                        ("--skip-bad-rows", args.skip_bad_rows)) if given]  # fmt: skip
    if bundled and args.questions is not None:  # it summarised the file alone, unsaid
        raise InputError(f"{bundled[0]} is for the bundled datasets, and --questions summarises "
                         "your file: drop one of them")  # fmt: skip
    questions = questions_from(args)
    if questions is not None:
        print(f"questions: {args.questions}")
        print(format_table(summary_rows(list(questions))))
        splits = Counter(q.split for q in questions)
        print(f"total questions: {len(questions)} (" + ", ".join(
            f"{s} {splits[s]}" for s in ("train", "dev", "test")) + ")")  # fmt: skip
        return 0
    data_dir = resolve_data_dir(args.data_dir)
    bad = BadRows(skip=args.skip_bad_rows)
    questions = []
    for name in args.datasets or dataset_names():
        questions += load_dataset(name, data_dir, bad=bad)
    print(f"data folder: {data_dir}")
    print(format_table(summary_rows(questions)))
    print(f"total questions: {len(questions)}")
    for path, n in bad.counts.items():
        print(f"skipped {n} bad rows in {path} (first: {bad.examples[path]})")
    return 0
