"""`retrieval-gate tune`: Optuna studies (resumable; `--storage`, `--workers`) for a gate's
threshold, the Pareto front, per-relation popularity thresholds, or the learned gate's
hyper-parameters."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

NOT_THRESHOLDS = ("pareto", "relations", "hparams")
OBJECTIVES = ["macro-f1", "adaptive-accuracy", "min-retrieval", "pareto", "relations", "hparams"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..gates.registry import gate_names
    from ..labels.evalset import DEFAULT_RUN_DIR
    from ..tuning.studies import DEFAULT_STORAGE
    from .question_args import add_question_args

    p = sub.add_parser("tune", help="Optuna: thresholds, Pareto front, hyper-parameters")
    p.add_argument("--gate", required=True, choices=gate_names())
    p.add_argument("--labels", required=True, type=Path, help="label file (.jsonl)")
    p.add_argument(
        "--objective",
        nargs="+",
        default=["macro-f1", "adaptive-accuracy", "min-retrieval", "pareto"],
        choices=OBJECTIVES,
        help="threshold objectives and/or pareto; `relations` (popularity gate) and `hparams` "
        "(learned gate) run their own studies",
    )
    p.add_argument(
        "--target",
        type=float,
        default=0.95,
        help="min-retrieval: share of always-retrieve accuracy",
    )
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--storage",
        default=str(DEFAULT_STORAGE),
        help="Optuna storage: a SQLite file (one process), postgresql://user:pass@host/db or "
        "mysql://... (many workers, heartbeats), journal:PATH (shared file system)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes on one study (hparams, pareto, relations; --trials bounds the study); "
        "needs a non-SQLite --storage; the 1-D threshold objectives are exact and need none",
    )
    p.add_argument("--out", type=Path, default=Path("reports/tune"))
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="labelling run (answers)")
    p.add_argument("--learned-run", help="training run folder (learned gate)")
    p.add_argument(
        "--save-objective",
        help="objective whose threshold is saved into the learned run's metadata.json "
        "(without it tuning never changes the run)",
    )
    p.add_argument(
        "--config", default="configs/backbones/minilm-lora.yaml", help="hparams: training config"
    )
    p.add_argument("--set", nargs="*", default=["data.max_train_examples=2000", "data.max_eval_examples=1000"],
                   help="hparams: training overrides (the CPU budget; drop on a GPU)")  # fmt: skip
    p.add_argument(
        "--max-epochs", type=int, default=3, help="hparams: upper bound of the epochs searched"
    )
    add_question_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import optuna

    from ..labels.evalset import load_splits, policy_name
    from .question_args import questions_from

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar says enough
    _check_flags(args)
    args.out.mkdir(parents=True, exist_ok=True)
    policy = policy_name(args.labels)
    command = "retrieval-gate " + shlex.join(sys.argv[1:])
    questions = questions_from(args)
    if "hparams" in args.objective:
        _hparams(args, policy, command, questions)
    sp = load_splits(args.labels, args.run_dir, questions)
    if "relations" in args.objective:
        _relations(args, sp, policy, command)
    wanted = [o for o in args.objective if o not in ("relations", "hparams")]
    if wanted:
        _thresholds(args, sp, policy, wanted, command)
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """Flag values and combinations, before any gate is built or study opened."""
    from ..errors import ConfigError, InputError
    from ..tuning.storage import check_storage

    if args.trials < 1:
        raise InputError(f"--trials must be at least 1, got {args.trials}")
    check_storage(args.storage, args.workers)  # reachable and writable before any work
    if not 0.0 < args.target <= 1.0:
        raise InputError(f"--target must be in (0, 1], got {args.target}")
    if args.gate == "learned" and not args.learned_run:
        raise ConfigError("--gate learned needs --learned-run (a training run folder)")
    if args.save_objective:
        if args.gate != "learned":
            raise ConfigError(
                "--save-objective saves into a learned run: use it with --gate learned"
            )
        if args.save_objective not in args.objective or args.save_objective in NOT_THRESHOLDS:
            raise ConfigError(
                f"--save-objective {args.save_objective!r} must be one of the threshold "
                f"objectives tuned here: {', '.join(o for o in args.objective if o not in NOT_THRESHOLDS)}"
            )


def _write(args: argparse.Namespace, stem: str, data: dict, markdown: str) -> None:
    from ..fileio import write_text

    write_text(args.out / f"{stem}.json", json.dumps(data, indent=2, default=str))
    write_text(args.out / f"{stem}.md", markdown)
    print(markdown)
    from ..tuning.storage import shown

    print(f"wrote {args.out / stem}.md / .json; studies in {shown(args.storage)}")


def _thresholds(args, sp, policy: str, objectives: list[str], command: str) -> None:
    from ..evaluation.compare import closed_book_records
    from ..evaluation.tuned import dev_test_rows, tuned_markdown
    from ..tuning.run import build_for_tuning, tune_gate_thresholds, tuning_identity

    records = closed_book_records(args.run_dir)
    options = {"run": args.learned_run} if args.gate == "learned" else {}
    gate = build_for_tuning(args.gate, sp.train, sp.dev, records, **options)
    identity = tuning_identity(args.labels, args.run_dir, gate)  # content, not names
    result = tune_gate_thresholds(gate, sp.train, sp.dev, policy, objectives, args.storage, args.out,
                                  args.trials, args.target, args.seed, identity, args.workers)  # fmt: skip
    # tuning is over: only now are the chosen thresholds applied to the test split
    rows = dev_test_rows(result, gate, sp.test)
    result["rows"] = rows
    md = f"# Tuned thresholds\n\n`{command}`\n\n" + tuned_markdown(result, rows)
    if args.save_objective:  # only when asked: tuning alone never changes a run
        _save_threshold(args, result)
    _write(args, f"tune-{args.gate}-{policy}", result, md)


def _save_threshold(args, result: dict) -> None:
    from ..errors import ConfigError
    from ..training.checkpoint import save_threshold

    name = args.save_objective
    key = next((k for k in result["thresholds"] if k.startswith(name)), None)
    if key is None:  # e.g. adaptive accuracy without recorded answers
        why = next((v for k, v in result["skipped"].items() if k.startswith(name)), "not tuned")
        raise ConfigError(
            f"--save-objective {name!r} could not be tuned ({why}); "
            f"nothing saved into {args.learned_run}"
        )
    r = result["thresholds"][key]
    save_threshold(args.learned_run, r["threshold"], key, r["dev_figures"])
    print(f"saved threshold {r['threshold']:.4f} ({key}) into {args.learned_run}/metadata.json")


def _relations(args, sp, policy: str, command: str) -> None:
    from ..tables import markdown_table
    from ..tuning.popularity import tune_relations
    from ..tuning.run import tuning_identity
    from ..tuning.studies import study_name

    identity = tuning_identity(args.labels, args.run_dir)
    name = study_name("popularity", policy, "relations", identity)
    res = tune_relations(sp.dev, name, args.storage, args.trials, args.seed, workers=args.workers)
    gate = res.pop("gate")
    rels = sorted(res["brute_force_thresholds"])
    body = [[r, res["brute_force_thresholds"][r], res["optuna_thresholds"][r]] for r in rels]
    md = (f"# Per-relation popularity thresholds (Optuna vs brute force)\n\n`{command}`\n\n"
          f"{res['n_questions']} dev PopQA questions with recorded answers, {res['n_trials']} trials. "
          f"Adaptive accuracy on dev: Optuna {res['optuna_accuracy']:.4f}, brute force "
          f"{res['brute_force_accuracy']:.4f}; global fallback threshold {gate.global_threshold:g}.\n\n"
          + markdown_table(["relation", "brute-force threshold", "Optuna threshold"], body) + "\n")  # fmt: skip
    _write(args, f"tune-popularity-relations-{policy}", res, md)


def _hparams(args, policy: str, command: str, questions) -> None:
    from ..fileio import content_id, sha256_file
    from ..tuning.hparams import tune_hparams
    from ..tuning.studies import study_name

    # trials depend on the label file's content, the training config and the search space
    config = Path(args.config)
    identity = content_id(sha256_file(args.labels), sha256_file(config) if config.is_file() else None,
                          *sorted(args.set), str(args.max_epochs))  # fmt: skip
    name = study_name("learned-hparams", policy, "dev-auroc", identity)
    res = tune_hparams(
        args.labels,
        name,
        args.storage,
        args.trials,
        args.config,
        args.set,
        args.max_epochs,
        args.seed,
        questions,
        args.workers,
    )
    md = (f"# Hyper-parameter study of the learned gate\n\n`{command}`\n\n"
          + "\n".join(f"- {k}: {v}" for k, v in res.items()) + "\n")  # fmt: skip
    _write(args, f"tune-hparams-{policy}", res, md)
