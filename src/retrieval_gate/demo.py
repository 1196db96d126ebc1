"""The main job end to end: each stage is one `retrieval-gate` verb run in its own process,
writing under `runs/demo/`. A finished stage leaves `<stage>.done.json` (command, seconds) and
is reused on the next run; `--stage NAME` re-runs one stage alone, `--force` all of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .fileio import write_text
from .labels import LABELS_DIR
from .tables import markdown_table

# Relative to the project root (the demo's working directory) so commands read as typed.
CLOSED_BOOK = os.path.relpath(LABELS_DIR / "smollm2-135m-instruct" / "closed-book.jsonl")
# CPU budget of the demo (under 20 minutes on 2 cores): the LLM-prompted gates score a seeded
# sample of the test split, and the RAG loop runs every mode on a smaller one.
EVAL_QUESTIONS = 600
RAG_QUESTIONS = 60


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    argv: Callable[[Path], list[str]]  # the verb's arguments, given the demo folder


def _label_sample(out: Path) -> list[str]:
    # Re-label a small sample to show the step works; the committed labels are reused below.
    sample = out / "labels-sample" / "closed-book.jsonl"
    return [
        *"label --policy closed-book --dataset retrievalqa --limit 24".split(),
        "--out",
        str(sample),
    ]


def _run_dir(out: Path) -> Path:
    return out / "checkpoints" / "minilm-closed-book"


def _export_dir(out: Path) -> Path:
    return out / "export" / "minilm-gate"


def _train(out: Path) -> list[str]:
    config = "configs/experiments/minilm-closed-book.yaml"
    sets = [f"run.output_dir={out / 'checkpoints'}", "run.name=minilm-closed-book"]
    return ["train", "--config", config, "--resume", "--set", *sets]  # a killed demo continues


def _tune(out: Path) -> list[str]:
    objectives = "macro-f1 adaptive-accuracy min-retrieval pareto".split()
    return ["tune", "--gate", "learned", "--labels", CLOSED_BOOK, "--objective", *objectives,
            "--learned-run", str(_run_dir(out)), "--save-objective", "adaptive-accuracy",
            "--storage", str(out / "tune" / "studies.db"), "--out", str(out / "tune")]  # fmt: skip


def _export(out: Path) -> list[str]:
    return ["export", "--run", str(_run_dir(out)), "--name", _export_dir(out).name,
            "--out-dir", str(_export_dir(out).parent), "--variants", "fp32", "int8"]  # fmt: skip


def _evaluate(out: Path) -> list[str]:
    gates = "always never popularity confidence tfidf prompt-vanilla prompt-ta-are learned onnx"
    return ["evaluate", "--labels", CLOSED_BOOK, "--gates", *gates.split(),
            "--learned-run", str(_run_dir(out)), "--onnx", str(_export_dir(out)),
            "--limit", str(EVAL_QUESTIONS), "--out", str(out / "evaluate")]  # fmt: skip


def _rag(out: Path) -> list[str]:
    return ["rag", "--split", "test", "--limit", str(RAG_QUESTIONS), "--seed", "0",
            "--onnx", str(_export_dir(out)), "--learned-run", str(_run_dir(out)),
            "--labels", CLOSED_BOOK, "--oracle-labels", CLOSED_BOOK,
            "--out", str(out / "rag" / "rag.md")]  # fmt: skip


STAGES = [
    Stage("data", "data summary", lambda out: ["data", "summary"]),
    Stage("models", "model preparation", lambda out: ["models", "prepare"]),
    Stage("labels", "labels (committed SmolLM2 labels; re-label a sample)", _label_sample),
    Stage("train", "train the MiniLM gate", _train),
    Stage("tune", "tune its threshold (Optuna)", _tune),
    Stage("export", "export ONNX (+int8)", _export),
    Stage("evaluate", "evaluate against every baseline", _evaluate),
    Stage("rag", "adaptive RAG loop on held-out questions", _rag),
]


def run_demo(out: Path, only: str | None = None, force: bool = False) -> int:
    """Runs the stages in order (or just `only`), reusing finished ones; writes the report."""
    out.mkdir(parents=True, exist_ok=True)
    names = [s.name for s in STAGES]
    if only is not None and only not in names:
        raise ValueError(f"unknown stage {only!r} (--stage); stages: {', '.join(names)}")
    for i, stage in enumerate(STAGES, start=1):
        done = out / f"{stage.name}.done.json"
        if only is not None and stage.name != only:
            continue
        if done.exists() and not force and only is None:
            print(f"== stage {i}/{len(STAGES)}: {stage.title} (reused, {_seconds(done):.0f} s)")
            continue
        argv = stage.argv(out)
        print(
            f"== stage {i}/{len(STAGES)}: {stage.title}\n$ retrieval-gate {' '.join(argv)}",
            flush=True,
        )
        start = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", "retrieval_gate.cli", *argv])
        seconds = time.perf_counter() - start
        if code != 0:
            print(
                f"stage {stage.name} failed (exit {code}); fix it and re-run `make demo` "
                f"(finished stages are reused) or `retrieval-gate demo --stage {stage.name}`"
            )
            return code
        write_text(done, json.dumps({"argv": argv, "seconds": round(seconds, 1)}) + "\n")
    report = write_report(out)
    print(f"\n{headline(out)}\nfull report: {report}")
    return 0


def _seconds(done: Path) -> float:
    return float(json.loads(done.read_text())["seconds"])


def write_report(out: Path) -> Path:
    """One markdown report: stage times, then the reports the stages wrote (evaluation,
    tuning, RAG), each under its own heading."""
    rows = []
    for stage in STAGES:
        done = out / f"{stage.name}.done.json"
        if done.exists():
            info = json.loads(done.read_text())
            rows.append(
                [stage.title, f"`retrieval-gate {' '.join(info['argv'])}`", info["seconds"]]
            )
    header = ["stage", "command", "wall time (s)"]
    lines = ["# retrieval-gate demo report", "", markdown_table(header, rows, digits=1)]
    for title, path in _sections(out):
        if path.exists():
            lines += ["", f"## {title}", "", _demote(path.read_text().strip())]
    report = out / "REPORT.md"
    write_text(report, "\n".join(lines) + "\n")
    return report


def headline(out: Path) -> str:
    """The tables printed at the end: every gate on the test split, and the RAG modes."""
    parts = []
    for title, path in _sections(out):
        table = first_table(path.read_text()) if path.exists() else ""
        if table and title != "Threshold tuning":
            parts += [f"## {title}", "", table, ""]
    return "\n".join(parts)


def first_table(markdown: str) -> str:
    """The first markdown table in a document."""
    lines, table = markdown.splitlines(), []
    for line in lines:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "\n".join(table)


def _demote(markdown: str) -> str:
    # The stage reports start at "#": nest them under this report's "##" headings.
    return "\n".join(
        "##" + line if line.startswith("#") else line for line in markdown.splitlines()
    )


def _sections(out: Path) -> list[tuple[str, Path]]:
    return [
        ("Evaluation: every gate on the test split", out / "evaluate" / "report.md"),
        ("Threshold tuning", out / "tune" / "tune-learned-closed-book.md"),
        ("Adaptive RAG on held-out questions", out / "rag" / "rag.md"),
    ]
