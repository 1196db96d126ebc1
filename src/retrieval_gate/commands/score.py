"""`retrieval-gate score --model export/<name> --input questions.txt|jsonl|csv`: scores
questions with the exported ONNX gate. Imports no torch (a deployment needs only onnxruntime).

Every flag and the whole input are checked before the model is loaded; an input with no
scorable line is an error (exit 2), bad lines otherwise become error records."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..artifacts import Artifact, open_artifact
from ..data.question_lines import iter_question_lines
from ..errors import InputError
from ..fileio import not_an_input, sha256_file
from ..gates.onnx_format import VARIANTS
from ..pricing import check_budget
from ..resumable_output import ResumableOutput
from .gate_args import add_strategies_option, check_threshold
from .plan import check_output_file
from .question_args import add_question_args, questions_from

log = logging.getLogger(__name__)
# questions scored, then written, at a time: a stopped run keeps what it wrote; batches start
# at multiples of it, resumed or not (a router cascade's budget caps each batch's escalations)
CHUNK = 2048


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
    p.add_argument("--output", help="JSONL output (default, - or /dev/stdout: stdout); never "
                   "one of the inputs; written as it goes (as <output>.partial until "
                   "complete)")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="continue an --output a stopped run left part-written (the same "
                   "model, input and options)")  # fmt: skip
    p.add_argument("--variant", default="fp32", choices=tuple(VARIANTS),
                   help="ONNX file of the export")  # fmt: skip
    p.add_argument("--provider", choices=("cpu", "cuda"),
                   help="force an execution provider (default: CUDA when onnxruntime-gpu sees a "
                   "GPU, else CPU)")  # fmt: skip
    p.add_argument("--threshold", type=float,
                   help="a binary gate's threshold, 0..1 (default: the export's; a router's "
                   "operating point is --budget)")  # fmt: skip
    p.add_argument("--budget", type=float,
                   help="a router's budget: mean cost per question (default: the exported "
                   "default operating point); each record then names its strategy")  # fmt: skip
    p.add_argument("--answer-gate", metavar="DIR",
                   help="the cascade, on answers already made: a two-stage gate export that "
                   "reads the closed-book answers' token_logprobs (a --questions column) of the "
                   "questions --model keeps without retrieval, and escalates the unsure ones "
                   "as rag's cascade does (records gain escalated, answer_score); default: "
                   "none")  # fmt: skip
    add_strategies_option(p)
    p.set_defaults(run=run)


def check_operating_point(
    artifact: Artifact, budget: float | None, threshold: float | None
) -> None:
    """--budget goes with a router export, within its costs, and --threshold with a binary
    gate's: a router's strategy, and so whether it retrieves, comes from its budget (read
    before the model loads)."""
    router = artifact.router
    if router is not None and threshold is not None:
        raise InputError("--threshold goes with a binary gate export (this one is a router: "
                         "its operating point is --budget, a mean cost per question)",
                         artifact.folder)  # fmt: skip
    if budget is None:
        return
    if router is None:
        raise InputError("--budget goes with a router export (this one is a binary gate: "
                         "its operating point is --threshold)", artifact.folder)  # fmt: skip
    check_budget(budget, router.costs, "--budget")


def _say_answers_read(gate: Any, questions: list) -> None:
    """A two-stage gate scores a question without its answer's log-probabilities on the text
    alone: say how many had them (a column named otherwise than token_logprobs or logprobs, and
    not given by --field, gives none). A gate that reads no answers, given some: say so."""
    from ..data.answer_confidence import MEAN_LOGPROB, TOKEN_LOGPROBS
    from ..gates.base import reads_answers

    given = sum(any(q.extra.get(c) is not None for c in (TOKEN_LOGPROBS, MEAN_LOGPROB))
                for q in questions)  # fmt: skip
    if not reads_answers(gate):
        if given:  # the user's LLM's confidence, given to a gate that reads the text alone
            log.warning(f"{given} of {len(questions)} questions came with their answer's "
                        f"{TOKEN_LOGPROBS}, which this gate does not read (it scores the "
                        "question alone): --answer-gate DIR puts a two-stage gate (`train "
                        "--config cascade-closed-book`) behind it to read them")  # fmt: skip
        return
    confidence = getattr(getattr(gate, "side_features", None), "confidence", None)
    alone = sum(confidence is not None and not confidence.reads(q)
                and q.extra.get(MEAN_LOGPROB) is not None for q in questions)  # fmt: skip
    if alone:
        given -= alone
        log.warning(f"{alone} of {len(questions)} questions carry {MEAN_LOGPROB} alone, which "
                    f"this gate never saw in training (its answers had {TOKEN_LOGPROBS}): "
                    f"they got the question-only score; give their {TOKEN_LOGPROBS}")  # fmt: skip
    if given == 0 and not alone:
        log.warning(f"none of the {len(questions)} questions has a {TOKEN_LOGPROBS} (or "
                    f"{MEAN_LOGPROB}) value: every score is the question-only score of this "
                    f"two-stage gate; to read the answers, name their column with --field "
                    f"{TOKEN_LOGPROBS}=COLUMN")  # fmt: skip
    elif 0 < given < len(questions):
        log.info(f"{given} of {len(questions)} questions came with their answer's "
                 "log-probabilities; the others got the question-only score")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if bool(args.input) == bool(args.questions):
        raise InputError("pass exactly one of --input FILE and --questions SPEC")
    inputs = [args.input or args.questions]
    _check_answer_gate(args)
    if args.output in STDOUT_NAMES:  # standard output, not a file called "-" (/dev/stdout
        args.output = None  # was "a symbolic link to /proc/.../pipe:[...], which does not exist")
    if args.output:
        not_an_input(args.output, inputs)
        check_output_file(Path(args.output), "--output")
    elif args.resume:
        raise InputError("--resume continues an --output file; pass the same --output")
    questions = questions_from(args)
    lines = _lines(args, questions)
    stamp = _stamp(args.input)
    columns: set[str] = set()  # every row's, not the first's: a later row's answers were unread
    total, good, first = _tally(lines(columns))  # the whole input read before the model loads
    if not good:
        raise InputError(f"no line could be scored ({first or 'the file is empty'})", args.input)
    artifact = open_artifact(args.model, "export", "--model")  # the manifest, before the model
    check_operating_point(artifact, args.budget, args.threshold)
    artifact.model_file(args.variant, "--variant")
    from ..gates.onnx import open_onnx

    gate = open_onnx(args.model, args.variant, provider=args.provider)
    threshold = gate.threshold if args.threshold is None else args.threshold
    from ..rag.decisions import loop_registry
    from ..strategies import BUILTIN

    registry = loop_registry(gate, args.strategies or BUILTIN)  # a router's, before any output
    cascade = None
    if args.answer_gate is not None:
        from ..rag.cascade import Cascade, escalation_strategy

        cascade = Cascade(gate, open_onnx(args.answer_gate, provider=args.provider))
        escalation_strategy(cascade, registry)  # before any output
    if questions is None:
        _refuse_side_features(gate, args.input)
        _refuse_answers_unread(cascade.answer_gate if cascade else gate, args.input, columns)
    else:
        _say_answers_read(cascade.answer_gate if cascade else gate, questions)
    out = _output(args, gate, threshold, lines, cascade, questions)
    try:
        with tqdm(total=total, initial=out.done, desc="score", unit="q",
                  disable=total - out.done <= CHUNK) as bar:  # fmt: skip
            # a resume scores the batch it stopped in whole again, as a run never stopped
            # did, and writes only its lines not yet written
            i = out.done // CHUNK * CHUNK
            skip = out.done - i
            for records in _chunks(itertools.islice(lines(), i, None), CHUNK):
                part = questions[i : i + len(records)] if questions is not None else None
                text = _scored(gate, records, part, threshold, args.budget, registry, cascade)
                out.write(text.split("\n", skip)[skip])  # "\n" inside a JSON string is escaped
                i += len(records)
                bar.update(len(records) - skip)
                skip = 0
        if _stamp(args.input) != stamp:
            raise InputError("the input changed while it was scored, so the lines written may "
                             "come from two versions of it: score it again", args.input)  # fmt: skip
        out.finish()
    finally:
        out.release()  # stopped part-way: the lines stay for --resume, the output free to take
    bad = total - good
    point = f"threshold {threshold}" if artifact.router is None else (
        f"budget {args.budget:g}" if args.budget is not None else "its default budget")  # fmt: skip
    log.info(f"scored {good} question{'s' * (good != 1)} with {gate.name} on "
             f"{gate.provider} ({point}); {bad} bad line{'s' * (bad != 1)} reported")  # fmt: skip
    return 0


def _lines(args: argparse.Namespace, questions: Any) -> Callable[..., Iterator[dict]]:
    """A fresh pass over the input's records each call: an --input file is streamed (millions
    of questions take the memory of a chunk), --questions were loaded whole. Given a set, a
    pass over an --input file gathers its rows' column names in it."""
    if questions is not None:
        return lambda columns=None: ({"id": q.id, "text": q.text} for q in questions)
    return lambda columns=None: iter_question_lines(Path(args.input), columns)


def _tally(records: Iterable[dict]) -> tuple[int, int, str | None]:
    """(records, scorable ones, the first bad line's error)."""
    total = good = 0
    first = None
    for r in records:
        total += 1
        good += "text" in r
        if first is None and "error" in r:
            first = f"line {r['line']}: {r['error']}"
    return total, good, first


def _chunks(records: Iterator[dict], size: int) -> Iterator[list[dict]]:
    while chunk := list(itertools.islice(records, size)):
        yield chunk


def _stamp(path: str | None) -> tuple[int, int] | None:
    """An --input file's size and modification time: a file rewritten during the run is said."""
    try:
        st = os.stat(path) if path and path != "-" else None
    except OSError:  # no such file: the reader says so
        return None
    return (st.st_size, st.st_mtime_ns) if st else None


def _check_answer_gate(args: argparse.Namespace) -> None:
    """--answer-gate reads each question's answer from a --questions column, and names a
    two-stage gate's export (both checked before any model loads)."""
    if args.answer_gate is None:
        return
    if args.questions is None:
        raise InputError("--answer-gate reads each question's closed-book answer's "
                         "token_logprobs, which a line of --input cannot carry: pass "
                         "--questions FILE with that column")  # fmt: skip
    from ..rag.cascade import check_answer_gate_folder

    check_answer_gate_folder(args.answer_gate)
    open_artifact(args.answer_gate, "export", "--answer-gate").model_file("fp32", "--answer-gate")


def _refuse_side_features(gate: Any, path: str) -> None:
    """Bare lines of text cannot carry a gate's side features (a stacked gate's own text
    features are not named)."""
    from ..gates.base import side_columns

    if columns := side_columns(gate):
        names = ", ".join(columns)
        raise InputError(
            f"gate {gate.name} also reads the side features {names}, which a line of text "
            f"cannot carry: pass --questions FILE (a .csv, .jsonl or .parquet with a `question` "
            f"column and {names}) instead of --input",
            path,
        )


def _refuse_answers_unread(gate: Any, path: str, columns: set[str]) -> None:
    """--input reads a question's id and text alone: a two-stage gate scored every question on
    its text, the answers' log-probabilities in the file's columns unread, without a word.
    `columns`: those of every row of the file (a CSV's header, each JSON object's keys)."""
    from ..data.answer_confidence import TOKEN_LOGPROBS
    from ..data.user_questions import ANSWER_FIELDS, DEFAULT_COLUMNS
    from ..gates.base import reads_answers

    if not reads_answers(gate):
        return
    read = {c for field in ANSWER_FIELDS for c in DEFAULT_COLUMNS[field]}  # as --questions does
    answers = sorted({c.lower() for c in columns} & read)
    if answers:
        raise InputError(f"gate {gate.name} reads the answers' log-probabilities, and --input "
                         f"reads a question's id and text alone (its {answers[0]!r} column "
                         f"would go unread): pass the file as --questions {path}", path)  # fmt: skip
    log.info(f"--input gives no answers: every score is the question-only score of the "
             f"two-stage gate {gate.name}; --questions FILE with a {TOKEN_LOGPROBS} column reads "
             "them")  # fmt: skip


def _scored(
    gate: Any,
    records: list[dict],
    questions: list | None,
    threshold: float,
    budget: float | None,
    registry: Any,
    cascade: Any = None,
) -> str:
    """The JSON lines of `records` (bad lines as they are), scored in one batch; `questions`:
    theirs, with their side features, when read from --questions; `registry`: what each of a
    router's strategies retrieves; `cascade`: `gate` with the answer gate of --answer-gate."""
    from ..gates.base import as_questions, is_router

    good = [r for r in records if "text" in r]
    texts = [r["text"] for r in good]
    items = questions if questions is not None else as_questions(texts)
    if not good:  # a stretch of bad lines only: nothing to score
        scores, routes = [], None
    else:
        # a router's scores and routes come from one pass (its probabilities, kept for the
        # batch): score_texts and then route ran the model twice
        router = is_router(gate)
        scores = gate.scores(items) if questions is not None or router else gate.score_texts(texts)
        routes = gate.route(items, budget) if router else None
    specs = registry if routes is not None else None
    for i, (rec, score) in enumerate(zip(good, scores, strict=True)):
        rec.update(score=round(float(score), 6), retrieve=bool(score >= threshold))
        if routes is not None and specs is not None:  # a router: its strategy says whether
            rec.update(strategy=routes[i], retrieve=specs[routes[i]].retrieves)  # it retrieves
    if cascade is not None and good:
        _escalate(cascade, list(items), good, budget, registry)
    return "".join(json.dumps({k: v for k, v in rec.items() if k != "text"},
                              ensure_ascii=False) + "\n" for rec in records)  # fmt: skip


def _escalate(
    cascade: Any, items: list, good: list[dict], budget: float | None, registry: Any
) -> None:
    """The cascade on the records of one batch: the questions its first gate keeps
    closed-book have their answers read by its answer gate, and those it escalates (within the
    budget's slack, as rag's cascade picks them) take the next strategy."""
    from ..rag.cascade import escalate_kept, escalation_strategy

    closed, up = escalation_strategy(cascade, registry)
    first = [r.get("strategy") or (up if r["retrieve"] else closed) for r in good]
    picked, scores = escalate_kept(cascade, items, first, budget, registry)
    for i, rec in enumerate(good):
        rec["escalated"] = i in picked
        if i in scores:
            rec["answer_score"] = round(scores[i], 6)
        if i in picked:
            rec["retrieve"] = registry[up].retrieves
            if "strategy" in rec:
                rec["strategy"] = up


class _Stdout:
    """Lines to standard output as they are scored (nothing to resume)."""

    done = 0

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def finish(self) -> None:
        pass

    def release(self) -> None:
        pass


STDOUT_NAMES = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _output(
    args: argparse.Namespace,
    gate: Any,
    threshold: float,
    lines: Callable[[], Iterator[dict]],
    cascade: Any = None,
    questions: Any = None,
) -> Any:
    """Where the lines go: --output written as they are made (resumable), else stdout. A
    partial --output continues only for the same model, input and options, and only when each
    of its lines is the one written for the input's record in its place (`_line_says`)."""
    if not args.output:
        return _Stdout()
    source = Path(args.input or args.questions)
    # a file by its bytes; a dataset folder or hf: spec by the questions it gave (its name
    # stays when its rows change: a resume mixed two versions)
    identity = {"model": gate.checksum, "variant": args.variant,
                "input": _digest(questions) if questions is not None and not source.is_file()
                else sha256_file(source),
                "field": sorted(args.field or []), "threshold": threshold, "budget": args.budget}  # fmt: skip
    if cascade is not None:  # only then: a partial file of a run without it resumes as before
        identity["answer_gate"] = cascade.answer_gate.checksum
    return ResumableOutput(args.output, identity, args.resume, "--output",
                           records=lambda: map(_line_says, lines()))  # fmt: skip


def _digest(questions: Any) -> str:
    """The sha256 of the questions as loaded (every field, `extra`'s columns too), one pass."""
    h = hashlib.sha256()
    for q in questions:
        h.update(q.digest(leave_out=()).encode())  # every field, arrays whole
    return h.hexdigest()


def _line_says(rec: dict) -> dict[str, Any]:
    """What the output line of an input record holds of it, checked on each line a resume keeps
    (cheaply: nothing scored again): its line (absent for --questions) and id, and whether it was
    scored (a scored record's line has no error, a bad one's no score)."""
    return {"line": rec.get("line"), "id": rec.get("id"),
            **({"error": None} if "text" in rec else {"score": None})}  # fmt: skip
