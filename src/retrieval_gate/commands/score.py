"""`retrieval-gate score --model export/<name> --input questions.txt|jsonl|csv`: scores
questions with the exported ONNX gate. Imports no torch (a deployment needs only onnxruntime).

Every flag and the whole input are checked before the model is loaded; an input with no
scorable line is an error (exit 2), bad lines otherwise become error records."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from ..artifacts import Artifact, open_artifact
from ..data.question_lines import read_question_lines
from ..errors import InputError
from ..fileio import not_an_input
from ..gates.onnx_format import VARIANTS
from ..outputs import write_owned
from ..pricing import check_budget
from .gate_args import check_threshold
from .plan import check_output_file
from .question_args import add_question_args, questions_from

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a question file with an exported ONNX gate")
    p.add_argument("--model", required=True, help="export folder, e.g. export/<name>")
    p.add_argument(
        "--input",
        help=".txt (one question a line, an optional `question` header line), .jsonl or .ndjson "
        "({id, question}), .json (the same, or an array of them) or .csv / .tsv (a `question` or "
        "`text` column, optional `id`); default: none, "
        "give --input or --questions",
    )
    add_question_args(
        p,
        "questions to score instead of --input (their columns feed a gate's side features)",
        "none, give --input or --questions",
    )
    p.add_argument("--output", help="JSONL output (default: stdout); never one of the inputs")
    p.add_argument("--variant", default="fp32", choices=tuple(VARIANTS),
                   help="ONNX file of the export")  # fmt: skip
    p.add_argument("--provider", choices=("cpu", "cuda"),
                   help="force an execution provider (default: CUDA when onnxruntime-gpu sees a "
                   "GPU, else CPU)")  # fmt: skip
    p.add_argument("--threshold", type=float,
                   help="override the exported threshold, 0..1 (default: the export's)")  # fmt: skip
    p.add_argument("--budget", type=float,
                   help="a router's budget: mean cost per question (default: the exported "
                   "default operating point); each record then names its strategy")  # fmt: skip
    p.set_defaults(run=run)


def check_router_budget(artifact: Artifact, budget: float | None) -> None:
    """--budget goes with a router export, within its costs (read before the model loads)."""
    if budget is None:
        return
    router = artifact.router
    if router is None:
        raise InputError("--budget goes with a router export (this one is a binary gate: "
                         "its operating point is --threshold)", artifact.folder)  # fmt: skip
    check_budget(budget, router.costs, "--budget")


def _say_answers_read(gate: Any, questions: list) -> None:
    """A two-stage gate scores a question without its answer's log-probabilities on the text
    alone: say how many had them (a column named otherwise than token_logprobs or logprobs, and
    not given by --field, gives none)."""
    from ..data.answer_confidence import MEAN_LOGPROB, TOKEN_LOGPROBS
    from ..gates.base import reads_answers

    if not reads_answers(gate):
        return
    given = sum(any(q.extra.get(c) is not None for c in (TOKEN_LOGPROBS, MEAN_LOGPROB))
                for q in questions)  # fmt: skip
    if given == 0:
        log.warning(f"none of the {len(questions)} questions has a {TOKEN_LOGPROBS} (or "
                    f"{MEAN_LOGPROB}) value: every score is the question-only score of this "
                    f"two-stage gate; to read the answers, name their column with --field "
                    f"{TOKEN_LOGPROBS}=COLUMN")  # fmt: skip
    elif given < len(questions):
        log.info(f"{given} of {len(questions)} questions came with their answer's "
                 "log-probabilities; the others got the question-only score")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if bool(args.input) == bool(args.questions):
        raise InputError("pass exactly one of --input FILE and --questions SPEC")
    inputs = [args.input or args.questions]
    if args.output:
        not_an_input(args.output, inputs)
        check_output_file(Path(args.output), "--output")
    questions = questions_from(args)
    if questions is not None:
        records = [{"id": q.id, "text": q.text} for q in questions]
    else:
        records = read_question_lines(Path(args.input))
    good = [r for r in records if "text" in r]
    if not good:
        first = next((f"line {r['line']}: {r['error']}" for r in records), "the file is empty")
        raise InputError(f"no line could be scored ({first})", args.input)
    artifact = open_artifact(args.model, "export", "--model")  # the manifest, before the model
    check_router_budget(artifact, args.budget)
    artifact.model_file(args.variant, "--variant")
    from ..gates.base import as_questions, is_router, side_columns
    from ..gates.onnx import open_onnx

    gate = open_onnx(args.model, args.variant, provider=args.provider)
    threshold = gate.threshold if args.threshold is None else args.threshold
    items = questions if questions is not None else as_questions([r["text"] for r in good])
    if questions is not None:  # with the side features of each question, if the gate has any
        scores = gate.scores(questions)
        _say_answers_read(gate, questions)
    elif columns := side_columns(gate):  # a stacked gate's own text features are not named
        names = ", ".join(columns)
        raise InputError(
            f"gate {gate.name} also reads the side features {names}, which a line of text "
            f"cannot carry: pass --questions FILE (a .csv, .jsonl or .parquet with a `question` "
            f"column and {names}) instead of --input",
            args.input,
        )
    else:
        scores = gate.score_texts([r["text"] for r in good])
    routes = gate.route(items, args.budget) if is_router(gate) else None  # type: ignore[attr-defined]
    for i, (rec, score) in enumerate(zip(good, scores, strict=True)):
        rec.update(score=round(float(score), 6), retrieve=bool(score >= threshold))
        if routes is not None:  # a router: the strategy too
            rec["strategy"] = routes[i]
    lines = []
    for rec in records:
        rec.pop("text", None)
        lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
    if args.output:
        write_owned(args.output, "".join(lines), "--output")  # temp file + rename
    else:
        sys.stdout.write("".join(lines))
    bad = len(records) - len(good)
    log.info(f"scored {len(good)} question{'s' * (len(good) != 1)} with {gate.name} on "
             f"{gate.provider} (threshold {threshold}); {bad} bad line{'s' * (bad != 1)} "
             "reported")  # fmt: skip
    return 0
