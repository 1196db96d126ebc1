"""`retrieval-gate tune`: Optuna studies (resumable; `--storage`, `--workers`) for a gate's
threshold, the Pareto front, per-relation popularity thresholds, or the learned gate's
hyper-parameters (`tuning.tune.run_tuning`)."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from .override_flags import RepeatableOverrides
from .plan import Distinct

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..gates.registry import gate_names
    from ..tuning.studies import STUDIES_FILE
    from ..tuning.tune import MAX_TRIALS, OBJECTIVES, TuneConfig
    from .gate_args import add_gate_options
    from .question_args import add_data_dir, add_question_args

    d = TuneConfig(gate="", labels=Path())
    p = sub.add_parser("tune", help="Optuna: thresholds, Pareto front, hyper-parameters")
    p.add_argument(
        "--gate",
        required=True,
        choices=gate_names(),
        metavar="GATE",
        help=f"the gate to tune, one of: {' '.join(gate_names())}",
    )
    p.add_argument("--labels", required=True, type=Path, help="label file (.jsonl)")
    p.add_argument(
        "--objective",
        nargs="+",
        action=Distinct,
        default=list(d.objectives),
        choices=OBJECTIVES,
        help="threshold objectives and/or pareto; `relations` (popularity gate) and `hparams` "
        "(learned gate) run their own studies",
    )
    p.add_argument("--target", type=float, default=d.target,
                   help="min-retrieval: share of always-retrieve accuracy; min-cost (router): "
                   "share of the best single strategy's accuracy")  # fmt: skip
    p.add_argument("--budget", type=float, default=d.budget,
                   help="router: mean cost per question for budget-accuracy and --calibrate-on "
                   "(0 to the dearest strategy's cost)")  # fmt: skip
    p.add_argument("--budget-llm-calls", type=float, metavar="X",
                   help="router: mean LLM calls per question for llm-budget-accuracy (0 to the "
                   "dearest strategy's llm_calls, each strategy's from its spec; default: "
                   "none)")  # fmt: skip
    p.add_argument("--calibrate-on", metavar="SPEC",
                   help="router: your own unlabelled questions (a question file); the price "
                   "that meets --budget on them (save it with --save-objective traffic); default: none, "
                   "the dev split's calibration")  # fmt: skip
    p.add_argument(
        "--trials",
        type=int,
        help=f"trials of the sampled studies: pareto, relations, hparams, 1 to {MAX_TRIALS:,} "
        f"(default: {d.trials}); "
        "the 1-D threshold objectives are exact and need none",
    )
    p.add_argument("--seed", type=int, help=f"sampler seed, 0 to 4294967295 (default {d.seed})")
    p.add_argument(
        "--storage",
        help="Optuna storage of the sampled studies: a SQLite file (one process), "
        "postgresql://user:pass@host/db or mysql://... (many workers, heartbeats), journal:PATH "
        "(shared file system); the 1-D threshold objectives open none (default: "
        f"{STUDIES_FILE} in --out)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=d.workers,
        help="processes on one study (hparams, pareto, relations; --trials bounds the study); "
        "needs a non-SQLite --storage; the 1-D threshold objectives are exact and need none",
    )
    p.add_argument("--out", type=Path, default=d.out, help="report folder")
    p.add_argument(
        "--run-dir",
        type=Path,
        help="labelling run with the recorded answers (closed-book.jsonl, rag-gain.jsonl; "
        "default: the folder of --labels when it holds one, else the bundled SmolLM2 run)",
    )
    p.add_argument("--generator", metavar="MODEL",
                   help="threshold objectives of a gate that asks the generator (prompt, "
                   "confidence, probe): a local copy of the labelling generator, a name or "
                   "folder (default: the one the --labels file's .meta.json names, else its "
                   "labelling run's; one labelled through a server, imported or from a model "
                   "folder elsewhere has no local copy: its recorded answers are read, and a "
                   "prompt gate needs this flag; a folder other than the one whose weights "
                   "made the labels is refused)")  # fmt: skip
    p.add_argument(
        "--save-objective",
        help="objective whose threshold (a router: its price, or `traffic` for "
        "--calibrate-on) is saved into the learned run's metadata.json (default: none; without "
        "it tuning never changes the run)",
    )
    p.add_argument("--config", default=d.config, help="hparams: training config: a YAML path "
                   "or an example config's name (found from any folder)")  # fmt: skip
    p.add_argument("--set", nargs="*", default=list(d.overrides), action=RepeatableOverrides,
                   help="hparams: training overrides (the CPU budget; drop on a GPU)")  # fmt: skip
    p.add_argument("--max-epochs", type=int, default=d.max_epochs,
                   help="hparams: upper bound of the epochs searched")  # fmt: skip
    add_question_args(p)
    add_data_dir(p)
    add_gate_options(p)
    from .cache import add_no_cache

    add_no_cache(p)
    p.set_defaults(run=run)


def check_plan(args: argparse.Namespace) -> None:
    """What `TuneConfig.check` leaves to the command: counts and their bound (worker processes
    run on this machine), the report folder, the gate's run or export metadata."""
    from ..rag.gate_folders import check_gate_folders
    from ..strict_rows import check_overrides
    from .gate_args import gate_options
    from .plan import check_at_most, check_counts, check_output_dir, check_run_dir, cpu_count

    check_counts(args, {"--workers": 1, "--max-epochs": 1})
    check_overrides(args.set or ())
    cpus = cpu_count()
    check_at_most("--workers", args.workers, cpus, f"workers are processes on this machine, "
                  f"which offers {cpus} CPU(s) (start more on other machines with the same "
                  "--storage)")  # fmt: skip
    from ..outputs import refuse_foreign
    from ..tuning.tune import writes

    check_output_dir(args.out, "--out")
    # the files this run writes, by name: a file of the user's beside them is left alone
    names = writes(args.gate, args.labels, args.objective, args.calibrate_on)
    refuse_foreign([args.out / name for name in names], "--out")
    check_run_dir(args.run_dir)
    # a router's costs, before --budget
    check_gate_folders([args.gate], gate_options(args, [args.gate]))


def run(args: argparse.Namespace) -> int:
    from ..tuning.storage import shown, shown_arg
    from ..tuning.tune import SAMPLED, TuneConfig, run_tuning
    from .gate_args import gate_options
    from .question_args import questions_from

    check_plan(args)
    sampled = set(args.objective) & set(SAMPLED)
    study_flags = {"--trials": args.trials, "--seed": args.seed}
    unused = [flag for flag, value in study_flags.items() if value is not None]
    if unused and not sampled:
        log.info(f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not used: the 1-D "
                 "threshold objectives try every distinct dev score (exact), they need no "
                 "sampled study")  # fmt: skip
    if args.storage is not None and not sampled:  # checked and made, as named: a typo is
        log.info("--storage is checked and made ready, but no study is stored in it: the 1-D "
                 "threshold objectives are exact")  # fmt: skip
    sampling = {k: v for k, v in (("trials", args.trials), ("seed", args.seed)) if v is not None}
    cfg = TuneConfig(gate=args.gate, labels=args.labels, objectives=args.objective,
                     target=args.target, storage=args.storage,
                     workers=args.workers, out=args.out, run_dir=args.run_dir,
                     gate_options=gate_options(args, [args.gate]),
                     save_objective=args.save_objective,
                     config=args.config, overrides=args.set, max_epochs=args.max_epochs,
                     budget=args.budget, calibrate_on=args.calibrate_on,
                     budget_llm_calls=args.budget_llm_calls, strategies=args.strategies,
                     generator_model=args.generator,
                     command="retrieval-gate " + shlex.join(map(shown_arg, sys.argv[1:])),
                     **sampling)  # fmt: skip
    cfg.check()  # every flag, before the questions are read
    cfg.questions = questions_from(args)
    for report in run_tuning(cfg):
        print(report.read_text())
        print(f"wrote {report} and {report.with_suffix('.json')}")
    if sampled:
        print(f"studies ({', '.join(sorted(sampled))}) in {shown(cfg.storage)}")
    return 0
