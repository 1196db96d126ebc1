"""`retrieval-gate export --run checkpoints/<run> [--name NAME] [--variants fp32 opt int8]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import InputError
from ..gates.onnx_format import VARIANTS
from ..run_folder import RunFolder
from .plan import Distinct, check_input_dir, check_output_dir
from .question_args import add_data_dir, add_question_args, questions_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a trained gate to ONNX (+ int8/fp16, model card)")
    p.add_argument(
        "--run", dest="run_dir", required=True, help="training run folder, checkpoints/<run>"
    )
    p.add_argument("--name", help="export folder name (default: the run's folder name)")
    p.add_argument("--out-dir", default="export", help="parent folder of exports")
    p.add_argument(
        "--variants",
        nargs="+",
        action=Distinct,
        default=["fp32", "opt", "int8"],
        choices=list(VARIANTS),
        help="fp32 (always), opt (ORT fusions), int8 (CPU), fp16 (GPU)",
    )
    p.add_argument(
        "--parity-limit",
        type=int,
        default=1000,
        help="test-split questions for the parity/quality check (0 = all)",
    )
    add_question_args(p, "questions for the parity check", "the run's own question set")
    add_data_dir(p)
    p.set_defaults(run=run)


def check_run(run_dir: Path) -> None:
    """--run is a whole training run: its files, and a manifest (or metadata) that opens."""
    from ..artifacts import open_artifact

    check_input_dir(run_dir, "--run", "pass the folder `retrieval-gate train` wrote "
                    "(checkpoints/<run>)")  # fmt: skip
    missing = [f for f in RunFolder.REQUIRED if not (run_dir / f).exists()]
    if missing:
        raise InputError(f"--run: not a complete training run (missing {', '.join(missing)}); "
                         "pass the folder `retrieval-gate train` wrote, or train it again",
                         run_dir)  # fmt: skip
    open_artifact(run_dir, "run", "--run")


def run(args: argparse.Namespace) -> int:
    from ..fileio import plain_name, refuse_link

    # every flag, then the run's files, before torch and onnx load (seconds)
    check_output_dir(Path(args.out_dir), "--out-dir")
    if args.parity_limit < 0:
        raise InputError(f"--parity-limit must be 0 (all) or more, got {args.parity_limit}")
    run_dir = Path(args.run_dir)
    out = Path(args.out_dir) / plain_name(args.name or run_dir.resolve().name, "--name")
    refuse_link(out, "--name")  # the export would replace the link, after all its work
    questions = questions_from(args)
    check_run(run_dir)
    from ..export.build import build_export

    out, report = build_export(
        run_dir, out, args.variants, args.parity_limit or None, questions=questions
    )
    print(f"export folder: {out}")
    auroc = report["pytorch"]["auroc"]
    auroc = "n/a: one class" if auroc is None else auroc
    print(f"parity on {report['n']} test questions (PyTorch AUROC {auroc}):")
    for variant, r in report["variants"].items():
        print(f"  {variant:5s} {json.dumps(r)}")
    # an fp32 file that misses its bar is a BackendError in build_export, nothing written
    failed = [v for v, r in report["variants"].items() if r.get("runnable") and not r["passed"]]
    if failed:
        print(f"warning: {', '.join(failed)} missed their quality bar (see parity.json)")
    return 0
