"""Gate latency/throughput in one run on the same questions (RetrievalQA by default):
PyTorch eager (LearnedGate) vs ONNX fp32 / opt / int8 (OnnxGate), and optionally the Vanilla
prompt gate through vLLM for scale.

    .venv/bin/python scripts/bench_gate.py --run checkpoints/<run> --export export/<name> \
        [--threads 2] [--prompt-gate] [--out reports/bench_gate.json]

Batch-1: one question per call, tokenisation included (what a RAG service pays per request),
p50/p99 over --repeat calls; model-only p50 as well. Batched: --batch questions per call with
dynamic padding, batches are length buckets (questions sorted by token count); questions/s
including tokenisation. Prints medians; asserts nothing (speed is measured, not tested)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def _timings(fn: Callable[[], object], repeat: int, warmup: int = 10) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(repeat)
    for i in range(repeat):
        start = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - start
    return out


def batch1(score: Callable[[list[str]], object], texts: Sequence[str], repeat: int) -> dict:
    it = iter(range(10**9))
    t = _timings(lambda: score([texts[next(it) % len(texts)]]), repeat)
    return {"p50_ms": 1e3 * float(np.median(t)), "p99_ms": 1e3 * float(np.percentile(t, 99))}


def batched(score: Callable[[list[str]], object], texts: Sequence[str], rounds: int) -> dict:
    t = _timings(lambda: score(list(texts)), rounds, warmup=1)
    return {"questions_per_s": len(texts) / float(np.median(t))}


def bench_torch(run: Path, texts: Sequence[str], args: argparse.Namespace) -> dict:
    import torch

    from retrieval_gate.gates.learned import LearnedGate

    torch.set_num_threads(args.threads)
    gate = LearnedGate(run, batch_size=args.batch)
    return {
        "name": "PyTorch eager",
        **batch1(gate.score_texts, texts, args.repeat),
        **batched(gate.score_texts, texts, args.rounds),
    }


def bench_onnx(export: Path, variant: str, texts: Sequence[str], args: argparse.Namespace) -> dict:
    from retrieval_gate.gates.onnx import OnnxGate

    gate = OnnxGate(export, variant, threads=args.threads, batch_size=args.batch)
    ids = gate.encode(texts)
    it = iter(range(10**9))
    model_only = _timings(lambda: gate.run_ids([ids[next(it) % len(ids)]]), args.repeat)
    return {
        "name": f"ONNX {variant} ({gate.provider})",
        **batch1(gate.score_texts, texts, args.repeat),
        "model_only_p50_ms": 1e3 * float(np.median(model_only)),
        **batched(gate.score_texts, texts, args.rounds),
    }


def bench_prompt_gate(texts: Sequence[str], args: argparse.Namespace) -> dict:
    """The Vanilla prompt gate (P([Yes]) from SmolLM2 via vLLM), batched in one call."""
    from retrieval_gate.gates.prompt import PromptGate
    from retrieval_gate.generation import build_generator
    from retrieval_gate.questions import Question

    generator = build_generator("smollm2-135m-instruct")
    gate = PromptGate(lambda: generator)
    qs = [Question(id=str(i), text=t, answers=(), source="bench") for i, t in enumerate(texts)]
    one = _timings(lambda: gate.scores(qs[:1]), max(args.repeat // 10, 5), warmup=2)
    start = time.perf_counter()
    gate.scores(qs)
    return {
        "name": "prompt gate (vLLM, SmolLM2)",
        "p50_ms": 1e3 * float(np.median(one)),
        "p99_ms": 1e3 * float(np.percentile(one, 99)),
        "questions_per_s": len(qs) / (time.perf_counter() - start),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| gate | batch-1 p50 ms | batch-1 p99 ms | model-only p50 ms | batched q/s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.get("p50_ms"), r.get("p99_ms"), r.get("model_only_p50_ms")]
        cells = [f"{c:.2f}" if c is not None else "-" for c in cells]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {r['questions_per_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", type=Path, required=True, help="training run (PyTorch eager)")
    p.add_argument("--export", type=Path, required=True, help="export folder (ONNX variants)")
    p.add_argument("--dataset", default="retrievalqa", help="questions to time (default 250)")
    p.add_argument("--variants", nargs="+", default=["fp32", "opt", "int8"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeat", type=int, default=300, help="batch-1 calls per gate")
    p.add_argument("--rounds", type=int, default=5, help="passes over all questions, batched")
    p.add_argument("--prompt-gate", action="store_true", help="also time the vLLM prompt gate")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    args = p.parse_args()

    from retrieval_gate.data import load_dataset

    texts = [q.text for q in load_dataset(args.dataset)]
    jobs = [lambda: bench_torch(args.run, texts, args)]
    jobs += [lambda v=v: bench_onnx(args.export, v, texts, args) for v in args.variants]
    if args.prompt_gate:
        jobs.append(lambda: bench_prompt_gate(texts, args))
    rows = []
    for job in jobs:
        rows.append(job())
        print(json.dumps(rows[-1]), flush=True)  # partial results survive an interrupted run
    load = os.getloadavg()
    print(f"{len(texts)} {args.dataset} questions, {args.threads} threads, batch {args.batch}, "
          f"load average {load[0]:.1f} (other processes share this CPU)")  # fmt: skip
    print(table(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "load": load, **vars(args)}, default=str))


if __name__ == "__main__":
    main()
