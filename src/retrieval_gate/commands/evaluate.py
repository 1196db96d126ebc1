"""`retrieval-gate evaluate`: every gate on the same test questions, one report."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError, DataError, InputError
from ..evaluation.bootstrap import min_resamples
from ..strategies import COST_AXES, StrategyRegistry
from .plan import Distinct

DEFAULT_GATES = ["always", "never", "popularity", "confidence", "tfidf"]
COST_QUESTIONS = 30  # questions timed per gate (a third for one that asks the generator)
MAX_RESAMPLES = 100_000  # bootstrap resamples: more only costs time

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..gates.registry import gate_names
    from .gate_args import add_gate_options
    from .question_args import add_data_dir, add_question_args

    p = sub.add_parser("evaluate", help="compare gates on the canonical test split")
    p.add_argument(
        "--gates",
        nargs="+",
        action=Distinct,
        default=DEFAULT_GATES,
        choices=gate_names(),
        metavar="GATE",
        help=f"gates to compare, any of: {' '.join(gate_names())}",
    )
    p.add_argument(
        "--labels",
        nargs="+",
        action=Distinct,
        required=True,
        type=Path,
        help="label file(s) (.jsonl)",
    )
    p.add_argument("--out", type=Path, default=Path("reports/evaluate"), help="report folder")
    p.add_argument(
        "--run-dir",
        type=Path,
        help="labelling run with closed-book.jsonl / rag-gain.jsonl (answers for adaptive "
        "accuracy, confidence records, TA-ARE demonstrations; default: each --labels file's "
        "own folder when it holds one, else the bundled SmolLM2 run)",
    )
    p.add_argument("--generator", metavar="MODEL",
                   help="generator model, a name or folder (default: the labelling generator, "
                   "the one the first --labels file's .meta.json names, else its labelling "
                   "run's; one labelled through a server or imported has no local copy: its "
                   "recorded answers are read, and timing it or answering anew needs this "
                   "flag)")  # fmt: skip
    p.add_argument(
        "--resamples",
        type=int,
        default=1000,
        help=f"bootstrap resamples, 1 to {MAX_RESAMPLES:,} (below {min_resamples()} a 95%% "
        "percentile interval has no tails: the report gives no CIs)",
    )
    p.add_argument("--cost-questions", type=int, default=COST_QUESTIONS,
                   help="questions timed per gate; a gate that asks the generator (an LLM "
                   "call each) times a third of them, at least 5 and at most N")  # fmt: skip
    p.add_argument("--no-cost", action="store_true", help="skip the per-question timing")
    p.add_argument("--limit", type=int, help="only N test questions per label file (default: all)")
    p.add_argument("--cost-axis", choices=(*COST_AXES, "both"), default=COST_AXES[0],
                   help="strategy labels: the accuracy-vs-cost figure's x, mean retrievals (the "
                   "strategies' cost) or LLM calls per question, or both panels (default: "
                   "retrievals)")  # fmt: skip
    p.add_argument("--answer-gate", type=Path, metavar="DIR",
                   help="strategy labels: a two-stage gate export (train --config "
                   "cascade-closed-book) that reads the recorded closed-book answers; the "
                   "routing report adds each policy followed by it (the cascade); default: "
                   "none")  # fmt: skip
    add_question_args(p)
    add_data_dir(p)
    add_gate_options(p)
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def check_label_strategies(label_files: Sequence[Path], registry: StrategyRegistry | None) -> None:
    """`--strategies FILE.yaml` prices every strategy of each strategy label file: checked
    when the command starts, not after the gates were scored."""
    if registry is None:
        return
    from ..data.adaptive_rag import STRATEGIES
    from ..labels.label_files import LabelFile
    from ..labels.strategy_labels import is_strategy_source

    for path in label_files:
        if is_strategy_source(path):  # a label file, or a release (its fixed strategies)
            named = LabelFile(path).meta["strategies"] if Path(path).is_file() else STRATEGIES
            registry.check(named, f"--labels {path} (its strategies) against --strategies")


def _refuse_missing_labels(label_files: Sequence[Path]) -> None:
    """A --labels path that is not there, refused before the report folder is locked: the
    refusal came from reading the labels, and left reports/.evaluate.lock (and the folder) in
    the working folder."""
    from ..labels.label_files import missing
    from ..labels.strategy_labels import RELEASE_LABELS

    for path in label_files:
        if str(path) != RELEASE_LABELS and not Path(path).exists():
            raise DataError(missing(Path(path)), path)


def _flags_used(args: argparse.Namespace) -> None:
    """Flags that this run would leave unused are refused (a missing --generator folder
    passed unseen beside gates that never ask it)."""
    from ..evaluation.gate_comparison import asks_generator
    from ..gates.registry import needing
    from ..labels.strategy_labels import is_strategy_source

    if args.generator and not asks_generator(args.gates):
        raise ConfigError(f"--generator is asked by the {' / '.join(needing('generator'))} "
                          f"gates, and this run has none ({' '.join(args.gates)}): drop it, or "
                          "add the gate")  # fmt: skip
    if args.no_cost and args.cost_questions != COST_QUESTIONS:
        raise ConfigError("--cost-questions sets how many questions are timed, and --no-cost "
                          "times none: drop one of them")  # fmt: skip
    if args.cost_axis != COST_AXES[0] and not any(is_strategy_source(p) for p in args.labels):
        raise ConfigError(f"--cost-axis {args.cost_axis} draws the routing figure of strategy "
                          "labels, and these --labels are binary: drop it")  # fmt: skip


def _say_cascade(label_files: Sequence[Path]) -> None:
    """Strategy labels that recorded the closed-book answers' log-probabilities, evaluated
    without --answer-gate: say that the cascade reading them can be scored too."""
    from ..labels.logprobs import answer_logprobs
    from ..labels.strategy_labels import is_strategy_source

    for path in label_files:
        if Path(path).is_file() and is_strategy_source(path) and answer_logprobs(path):
            log.info(f"{path} recorded the closed-book answers' log-probabilities: "
                     "--answer-gate DIR (a two-stage gate, `train --config cascade-closed-book` "
                     "on the closed-book.jsonl beside it) also scores the cascade that reads "
                     "them (docs/router.md)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from ..evaluation.gate_comparison import WRITES, EvaluationConfig, run_evaluation
    from ..fileio import one_writer, writer_busy
    from ..labels.labelling_run import run_dir_for
    from ..rag.gate_folders import check_gate_folders
    from .gate_args import check_feature, gate_options
    from .plan import check_counts, check_output_dir, check_run_dir
    from .question_args import questions_from

    check_counts(args, {"--limit": 1, "--resamples": 1, "--cost-questions": 1})
    if args.resamples > MAX_RESAMPLES:  # a loop per resample, per gate and metric: hours
        raise InputError(f"--resamples {args.resamples}: past {MAX_RESAMPLES:,} a 95% CI moves "
                         "by less than the report rounds it to, and each resample is a pass "
                         f"over every gate; pass at most {MAX_RESAMPLES}")  # fmt: skip
    if args.resamples < min_resamples():
        log.warning(f"--resamples {args.resamples}: a 95% percentile interval needs at least "
                    f"{min_resamples()}, so the report gives no CIs")  # fmt: skip
    check_output_dir(args.out, "--out", WRITES)
    check_run_dir(args.run_dir)
    options = gate_options(args, args.gates)
    check_gate_folders(args.gates, options)
    check_label_strategies(args.labels, args.strategies)  # before any gate is scored
    _flags_used(args)
    if args.answer_gate is None:
        _say_cascade(args.labels)
    questions = questions_from(args)
    check_feature(options, questions)
    cfg = EvaluationConfig(
        gates=args.gates,
        label_files=args.labels,
        out_dir=args.out,
        run_dir=run_dir_for(args.labels[0], args.run_dir),  # the generator's, when unnamed
        run_dirs={Path(p): run_dir_for(p, args.run_dir) for p in args.labels},  # each file's
        gate_options=options,
        generator_options={"name_or_path": args.generator} if args.generator else {},
        n_resamples=args.resamples,
        cost_questions=args.cost_questions,
        measure_cost=not args.no_cost,
        limit=args.limit,
        command="retrieval-gate " + shlex.join(sys.argv[1:]),
        questions=questions,
        strategies=args.strategies,
        cost_axis=args.cost_axis,
        answer_gate=args.answer_gate,
    )
    _refuse_missing_labels(args.labels)  # before the lock: a refusal leaves no folder made
    # two runs writing one report folder would leave one's report beside the other's figures
    with one_writer(args.out, writer_busy("evaluate run", "--out", args.out)):
        path = run_evaluation(cfg)
    print(f"report: {path}")
    return 0
