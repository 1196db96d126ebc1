"""`retrieval-gate score --model export/<name> --input questions.jsonl|txt`: scores questions
with the exported ONNX gate. Imports no torch (a deployment needs only onnxruntime)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..data.errors import DataError
from .question_args import add_question_args, questions_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score a question file with an exported ONNX gate")
    p.add_argument("--model", required=True, help="export folder, e.g. export/<name>")
    p.add_argument("--input", help=".txt (one question a line) or .jsonl; bad lines reported")
    add_question_args(p, "questions to score (instead of --input)")
    p.add_argument("--output", help="JSONL output (default: stdout)")
    p.add_argument("--variant", default="fp32", help="fp32 | opt | int8 | fp16")
    p.add_argument("--provider", help="force an execution provider: cpu | cuda")
    p.add_argument("--threshold", type=float, help="override the exported threshold")
    p.set_defaults(run=run)


def read_questions(path: Path) -> list[dict[str, Any]]:
    """One record a line: {line, id, text} or {line, error}. Bad lines (not UTF-8, empty,
    malformed JSON, no question field) become error records; the rest are still scored."""
    if not path.is_file():
        raise DataError("input file not found", path)
    records = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            records.append(_parse_line(raw, lineno, path.suffix == ".jsonl"))
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
            text = row.get("question", row.get("text")) if isinstance(row, dict) else None
        except json.JSONDecodeError as e:
            return {**rec, "error": f"malformed JSON ({e.msg})"}
        if not isinstance(text, str):
            return {**rec, "error": "no 'question' or 'text' string field"}
        rec["id"] = str(row.get("id", lineno))
        line = text
    if not line.strip():
        return {**rec, "error": "empty question"}
    return {**rec, "text": line}


def run(args: argparse.Namespace) -> int:
    from ..gates.onnx import OnnxGate

    if bool(args.input) == bool(args.questions):
        raise DataError("pass exactly one of --input FILE and --questions SPEC")
    gate = OnnxGate(args.model, args.variant, provider=args.provider)
    threshold = gate.threshold if args.threshold is None else args.threshold
    if args.questions:
        questions = questions_from(args) or ()
        records = [{"id": q.id, "text": q.text} for q in questions]
        scores = gate.scores(questions)  # with the side features of each question, if any
        good = records
    else:
        records = read_questions(Path(args.input))
        good = [r for r in records if "text" in r]
        scores = gate.score_texts([r["text"] for r in good]) if good else []
    for rec, score in zip(good, scores, strict=True):
        rec.update(score=round(float(score), 6), retrieve=bool(score >= threshold))
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for rec in records:
            rec.pop("text", None)
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            out.close()
    bad = len(records) - len(good)
    print(f"scored {len(good)} questions with {gate.name} on {gate.provider} "
          f"(threshold {threshold}); {bad} bad lines reported", file=sys.stderr)  # fmt: skip
    return 0
