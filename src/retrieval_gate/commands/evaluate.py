"""`retrieval-gate evaluate`: every gate on the same test questions, one report."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

DEFAULT_GATES = ["always", "never", "popularity", "confidence", "tfidf"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..gates.registry import gate_names
    from .gate_args import add_gate_options
    from .question_args import add_data_dir, add_question_args

    p = sub.add_parser("evaluate", help="compare gates on the canonical test split")
    p.add_argument(
        "--gates",
        nargs="+",
        default=DEFAULT_GATES,
        choices=gate_names(),
        metavar="GATE",
        help=f"gates to compare, any of: {' '.join(gate_names())}",
    )
    p.add_argument("--labels", nargs="+", required=True, type=Path, help="label file(s) (.jsonl)")
    p.add_argument("--out", type=Path, default=Path("reports/evaluate"), help="report folder")
    p.add_argument(
        "--run-dir",
        type=Path,
        help="labelling run with closed-book.jsonl / rag-gain.jsonl (answers for adaptive "
        "accuracy, confidence records, TA-ARE demonstrations; default: the folder of the first "
        "--labels file when it holds one, else the bundled SmolLM2 run)",
    )
    p.add_argument("--generator", help="generator model (default: the labelling generator)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--cost-questions", type=int, default=30, help="questions timed per gate")
    p.add_argument("--no-cost", action="store_true", help="skip the per-question timing")
    p.add_argument("--limit", type=int, help="only N test questions per label file (default: all)")
    add_question_args(p)
    add_data_dir(p)
    add_gate_options(p)
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..evaluation.compare import EvaluationConfig, run_evaluation
    from ..labels.labelling_run import run_dir_for
    from .gate_args import gate_options
    from .question_args import questions_from

    for flag, value, least in (("--limit", args.limit, 1), ("--resamples", args.resamples, 1),
                               ("--cost-questions", args.cost_questions, 0)):  # fmt: skip
        if value is not None and value < least:
            raise InputError(f"{flag} must be at least {least}, got {value}")

    cfg = EvaluationConfig(
        gates=args.gates,
        label_files=args.labels,
        out_dir=args.out,
        run_dir=run_dir_for(args.labels[0], args.run_dir),
        gate_options=gate_options(args),
        generator_options={"name_or_path": args.generator} if args.generator else {},
        n_resamples=args.resamples,
        cost_questions=args.cost_questions,
        measure_cost=not args.no_cost,
        limit=args.limit,
        command="retrieval-gate " + shlex.join(sys.argv[1:]),
        questions=questions_from(args),
        strategies=args.strategies,
    )
    path = run_evaluation(cfg)
    print(f"report: {path}")
    return 0
