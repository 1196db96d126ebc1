"""`retrieval-gate demo`: the main job end to end (see retrieval_gate.demo)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .question_args import add_data_dir


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..demo import STAGES  # the list itself: a hand-written copy lacked router-tune

    p = sub.add_parser("demo", help="run the whole pipeline on the default data")
    p.add_argument("--out", default="runs/demo", help="demo folder")
    p.add_argument(
        "--stage",
        help=f"re-run one stage alone ({', '.join(s.name for s in STAGES)}; default: every "
        "stage not finished yet)",
    )
    add_data_dir(p)
    p.add_argument("--force", action="store_true", help="re-run finished stages too")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(Path(args.out), only=args.stage, force=args.force)
