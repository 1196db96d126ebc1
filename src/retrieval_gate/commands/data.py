"""`retrieval-gate data summary`."""

from __future__ import annotations

import argparse

from ..data import (
    BadRows,
    dataset_names,
    format_table,
    load_dataset,
    resolve_data_dir,
    summary_rows,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect the datasets")
    verbs = p.add_subparsers(dest="data_verb", required=True)
    s = verbs.add_parser("summary", help="rows, answers, popularity, fact types per dataset")
    s.add_argument(
        "--data-dir", help="dataset folder (default: $RETRIEVAL_GATE_DATA, ../shared/datasets)"
    )
    s.add_argument("--datasets", nargs="+", choices=dataset_names(), help="default: all")
    s.add_argument(
        "--skip-bad-rows", action="store_true", help="count malformed rows instead of stopping"
    )
    s.set_defaults(run=run_summary)


def run_summary(args: argparse.Namespace) -> int:
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
