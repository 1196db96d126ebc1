"""`retrieval-gate demo`: the main job end to end on the data beside the project."""

from __future__ import annotations

import argparse

from .data import run_summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline on the default data")
    p.add_argument(
        "--data-dir", help="dataset folder (default: $RETRIEVAL_GATE_DATA, ../shared/datasets)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print("== stage 1/1: data summary")
    return run_summary(
        argparse.Namespace(data_dir=args.data_dir, datasets=None, skip_bad_rows=False)
    )
