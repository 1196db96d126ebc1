"""`retrieval-gate score --model export/<name> --input questions.txt|jsonl|csv`: scores
questions with the exported ONNX gate. Imports no torch (a deployment needs only onnxruntime).

Every flag and the whole input are checked before the model is loaded; an input with no
scorable line is an error (exit 2), bad lines otherwise become error records."""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import not_an_input, write_text
from .question_args import add_question_args, questions_from

log = logging.getLogger(__name__)
HEADER_WORDS = ("question", "questions", "text")  # a .txt first line like this is a header
QUESTION_COLUMNS = ("question", "text")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a question file with an exported ONNX gate")
    p.add_argument("--model", required=True, help="export folder, e.g. export/<name>")
    p.add_argument(
        "--input",
        help=".txt (one question a line, an optional `question` header line), .jsonl "
        "({id, question}) or .csv (a `question` or `text` column, optional `id`)",
    )
    add_question_args(
        p, "questions to score instead of --input (their columns feed a gate's side features)"
    )
    p.add_argument("--output", help="JSONL output (default: stdout); never one of the inputs")
    p.add_argument("--variant", default="fp32", help="fp32 | opt | int8 | fp16")
    p.add_argument("--provider", help="force an execution provider: cpu | cuda")
    p.add_argument("--threshold", type=float, help="override the exported threshold (0..1)")
    p.set_defaults(run=run)


def read_questions(path: Path) -> list[dict[str, Any]]:
    """One record a line: {line, id, text} or {line, id, error}. Bad lines (not UTF-8, empty,
    malformed JSON, no question field) become error records; the rest are still scored. A file
    that cannot be read at all is an InputError."""
    if not path.is_file():
        raise InputError("input file not found", path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read the input ({e.strerror})", path) from None
    if path.suffix.lower() == ".csv":
        return _read_csv(data, path)
    records = []
    for lineno, raw in enumerate(data.splitlines(keepends=True), start=1):
        rec = _parse_line(raw, lineno, path.suffix.lower() == ".jsonl")
        if lineno == 1 and rec.get("text", "").strip().lower() in HEADER_WORDS:
            continue  # a header line, not a question
        records.append(rec)
    return records


def _parse_line(raw: bytes, lineno: int, is_jsonl: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {"line": lineno, "id": str(lineno)}
    try:
        line = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        return {**rec, "error": f"not valid UTF-8 (byte {e.start}); re-encode the file as UTF-8"}
    if is_jsonl and line.strip():
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            return {**rec, "error": f"malformed JSON ({e.msg})"}
        if not isinstance(row, dict):
            return {**rec, "error": "expected a JSON object with a 'question' field"}
        if row.get("id") is not None:  # the line's own id, also on its error record
            rec["id"] = str(row["id"])
        line = row.get("question", row.get("text"))
        if not isinstance(line, str):
            return {**rec, "error": "no 'question' or 'text' string field"}
    if not line.strip():
        return {**rec, "error": "empty question"}
    return {**rec, "text": line}


def _read_csv(data: bytes, path: Path) -> list[dict[str, Any]]:
    """A CSV with a header naming a `question` (or `text`) column and optionally `id`."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"not valid UTF-8 (byte {e.start}); re-encode it as UTF-8", path) from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise InputError(f"not a readable CSV file ({e})", path) from None
    if not rows:
        return []
    header = [h.strip().lower() for h in rows[0]]
    col = next((header.index(c) for c in QUESTION_COLUMNS if c in header), None)
    if col is None:
        raise InputError(
            f"CSV header {rows[0]!r} has no 'question' or 'text' column; add one", path, 1
        )
    id_col = header.index("id") if "id" in header else None
    records = []
    for lineno, row in enumerate(rows[1:], start=2):
        rec: dict[str, Any] = {"line": lineno, "id": str(lineno)}
        if id_col is not None and id_col < len(row) and row[id_col].strip():
            rec["id"] = row[id_col]
        question = row[col] if col < len(row) else ""
        records.append(
            {**rec, "text": question} if question.strip() else {**rec, "error": "empty question"}
        )
    return records


def check_threshold(value: float | None, flag: str = "--threshold") -> float | None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InputError(f"{flag} must be a number in [0, 1], got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    check_threshold(args.threshold)
    if bool(args.input) == bool(args.questions):
        raise InputError("pass exactly one of --input FILE and --questions SPEC")
    inputs = [args.input or args.questions]
    if args.output:
        not_an_input(args.output, inputs)
    questions = questions_from(args)
    if questions is not None:
        records = [{"id": q.id, "text": q.text} for q in questions]
    else:
        records = read_questions(Path(args.input))
    good = [r for r in records if "text" in r]
    if not good:
        first = next((f"line {r['line']}: {r['error']}" for r in records), "the file is empty")
        raise InputError(f"no line could be scored ({first})", args.input)
    from ..gates.onnx import OnnxGate

    gate = OnnxGate(args.model, args.variant, provider=args.provider)
    threshold = gate.threshold if args.threshold is None else args.threshold
    if questions is not None:  # with the side features of each question, if the gate has any
        scores = gate.scores(questions)
    else:
        scores = gate.score_texts([r["text"] for r in good])
    for rec, score in zip(good, scores, strict=True):
        rec.update(score=round(float(score), 6), retrieve=bool(score >= threshold))
    lines = []
    for rec in records:
        rec.pop("text", None)
        lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
    if args.output:
        write_text(args.output, "".join(lines))  # temp file + rename
    else:
        sys.stdout.write("".join(lines))
    bad = len(records) - len(good)
    log.info(f"scored {len(good)} questions with {gate.name} on {gate.provider} "
             f"(threshold {threshold}); {bad} bad lines reported")  # fmt: skip
    return 0
