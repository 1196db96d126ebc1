"""`retrieval-gate transfer`: the leave-one-source-out matrix."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..errors import ConfigError
from .override_flags import RepeatableOverrides
from .plan import Distinct

# --learned's flags (the CPU budget by default): given without --learned, they are refused
LEARNED_DEFAULTS = {"learned_config": "minilm", "learned_out": Path("checkpoints/transfer"),
                    "learned_set": ["data.max_train_examples=2000", "data.max_eval_examples=1000",
                                    "trainer.max_epochs=1"]}  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:
    from .question_args import add_data_dir, add_question_args

    p = sub.add_parser("transfer", help="leave-one-source-out transfer matrix")
    p.add_argument(
        "--labels", nargs="+", action=Distinct, required=True, type=Path, help="label file(s)"
    )
    p.add_argument(
        "--gates",
        nargs="+",
        action=Distinct,
        default=["tfidf", "popularity"],
        choices=["tfidf", "popularity", "popularity-global", "router-tfidf", "router-prior"],
        help="gates fitted per cell (--learned adds the learned gate; router-tfidf and "
        "router-prior need strategy labels)",
    )
    p.add_argument(
        "--feature",
        metavar="COLUMN",
        help="numeric signal the popularity gates threshold (default s_pop; any numeric column "
        "of --questions: low value -> retrieve)",
    )
    p.add_argument("--learned", action="store_true", help="also train the learned gate per cell")
    p.add_argument(
        "--learned-config",
        default=LEARNED_DEFAULTS["learned_config"],
        help="training config: a YAML path or an example config's name (minilm = "
        "configs/backbones/minilm.yaml, found from any folder)",
    )
    p.add_argument(
        "--learned-set",
        nargs="*",
        action=RepeatableOverrides,
        default=list(LEARNED_DEFAULTS["learned_set"]),
        help="training overrides (CPU budget by default; drop them on a GPU)",
    )
    p.add_argument(
        "--learned-out",
        type=Path,
        default=LEARNED_DEFAULTS["learned_out"],
        help="folder of the per-cell training runs",
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        help="labelling run (recorded answers; default: each --labels file's own folder when "
        "it holds one, else the bundled SmolLM2 run)",
    )
    p.add_argument("--out", type=Path, default=Path("reports/transfer"), help="report folder")
    add_question_args(p)
    add_data_dir(p)
    p.set_defaults(run=run)


def check_plan(args: argparse.Namespace) -> None:
    """The output folders, --run-dir and (with --learned) the training config and overrides,
    before any cell is fitted or trained."""
    from ..labels.strategy_labels import is_strategy_source
    from .plan import check_input_file, check_output_dir, check_run_dir

    for path in args.labels:  # every file now, not when the matrix reaches it
        if not is_strategy_source(path):
            check_input_file(path, "--labels", "pass a label file that `retrieval-gate label` "
                             "wrote (or a strategy label source)")  # fmt: skip
    from ..evaluation.transfer import WRITES, named_label_files

    named_label_files(args.labels)  # one name each: a report's sections are keyed by it
    check_output_dir(args.out, "--out", WRITES)
    check_run_dir(args.run_dir)
    if args.learned:
        from ..strict_rows import check_overrides
        from ..training.config import load_config

        check_output_dir(args.learned_out, "--learned-out")
        check_overrides(args.learned_set, "--learned-set")
        load_config(args.learned_config, args.learned_set, "--learned-config")  # now
    else:
        _learned_flags_unused(args)


def _learned_flags_unused(args: argparse.Namespace) -> None:
    """--learned-config / --learned-set / --learned-out without --learned: refused, not left
    unused (a missing config passed unseen)."""
    for name, default in LEARNED_DEFAULTS.items():
        if getattr(args, name) != default:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} sets the learned gate's training, which runs with "
                              "--learned only: add --learned, or drop it")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from ..evaluation.transfer import learned_fitter, named_label_files, run_transfer
    from ..fileio import one_writer, writer_busy
    from ..labels.labelling_run import run_dir_for
    from .gate_args import check_feature, gate_options
    from .question_args import questions_from

    check_plan(args)
    options = gate_options(args, args.gates)  # --feature without a gate that reads it: refused
    questions = questions_from(args)
    check_feature(options, questions)
    extra = {}
    if args.learned:
        files = named_label_files(args.labels)
        extra["learned"] = learned_fitter(
            files, args.learned_config, args.learned_set, args.learned_out, questions
        )
    command = "retrieval-gate " + shlex.join(sys.argv[1:])
    # each label file with its own labelling run's answers, not the first file's
    run_dirs = {Path(p): run_dir_for(p, args.run_dir) for p in args.labels}
    busy = writer_busy("transfer run", "--out", args.out)
    with one_writer(args.out, busy):  # one run's matrix in a report folder at a time
        path = run_transfer(
            args.labels, args.gates, args.out, run_dirs, extra, command, questions, options
        )
    print(f"report: {path}")
    return 0
