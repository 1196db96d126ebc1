"""Prompting vs the learned gate, in ONE run on the same test questions and the same engine:
closed-book labelling, the prompt-vanilla / prompt-ta-are / confidence gates (vLLM, SmolLM2)
and the exported ONNX gate (fp32, int8), each as questions/s and prompt tokens/s.

    PYTHONPATH=src .venv/bin/python scripts/bench_prompt_gates.py \
        --export runs/demo/export/minilm-gate [--limit 600] [--rounds 3] [--out bench.json]

Every LLM job is one batched call over all questions (what `evaluate` and `label` do), timed
`--rounds` times with vLLM's prefix cache emptied before each call (so a round never reuses
the previous one's prompts); the median is printed. A warm-up call first (LLM jobs: on 8
questions; ONNX: the whole batch), so engine start-up and first-call stalls are not counted
(the warm-up time is printed too).
The ratio line divides ONNX int8 questions/s by each prompt gate's. Prints; asserts nothing."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retrieval_gate.evaluation.gate_comparison import sample_test
from retrieval_gate.gates.confidence import ConfidenceGate
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.gates.prompt import PromptGate
from retrieval_gate.gates.registry import GateContext, LazyGenerator, build_gate
from retrieval_gate.generation.chat import chat_token_ids
from retrieval_gate.generation.prompts import closed_book_prompt
from retrieval_gate.labels.closed_book import MAX_NEW_TOKENS
from retrieval_gate.labels.evalset import DEFAULT_RUN_DIR, load_splits
from retrieval_gate.labels.labelling_run import LabellingRun
from retrieval_gate.questions import Question


def timed_median(
    fn: Callable[[], object],
    rounds: int,
    before: Callable[[], object],
    warmup: Callable[[], object],
) -> tuple[float, float]:
    """(warm-up seconds, median seconds of `fn` over `rounds` calls), `before` run ahead of
    each call."""
    before()
    start = time.perf_counter()
    warmup()
    warm = time.perf_counter() - start
    times = []
    for _ in range(rounds):
        before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return warm, float(np.median(times))


def row(name: str, n: int, tokens: int, warm: float, seconds: float) -> dict:
    return {
        "name": name,
        "questions": n,
        "prompt_tokens": tokens,
        "warmup_s": round(warm, 2),
        "median_s": round(seconds, 3),
        "questions_per_s": n / seconds,
        "prompt_tokens_per_s": tokens / seconds,
    }


def llm_rows(qs: Sequence[Question], ctx: GateContext, rounds: int, date: str) -> list[dict]:
    gen = ctx.generator()
    reset = gen.llm.reset_prefix_cache
    warm_q = list(qs[:8])  # warm-up on a few questions only: it pays the first-call costs

    def count(prompts: list[str]) -> int:
        return sum(map(len, chat_token_ids(gen.tokenizer, prompts)))

    cb = [closed_book_prompt(q.text) for q in qs]
    rows = []
    label = lambda q: gen.generate([closed_book_prompt(x.text) for x in q], MAX_NEW_TOKENS, True)  # noqa: E731
    confidence = ConfidenceGate(None, lambda: gen)
    gates = {
        "prompt-vanilla": PromptGate(lambda: gen, "vanilla"),
        "prompt-ta-are": build_gate("prompt-ta-are", ctx, date=date),
    }
    jobs = [("closed-book labelling", label, count(cb))]
    jobs += [(n, g.scores, count(g.prompts(qs)) + len(qs)) for n, g in gates.items()]  # + "["
    jobs += [("confidence (uncached)", confidence.scores, count(cb))]
    for name, fn, tokens in jobs:
        warm, seconds = timed_median(lambda fn=fn: fn(qs), rounds, reset, lambda fn=fn: fn(warm_q))
        rows.append(row(name, len(qs), tokens, warm, seconds))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def onnx_rows(export: Path, texts: Sequence[str], rounds: int, threads: int) -> list[dict]:
    rows = []
    for variant in ("fp32", "int8"):
        gate = OnnxGate(export, variant, threads=threads)
        tokens = sum(map(len, gate.encode(texts)))

        def batch(g: OnnxGate = gate) -> object:
            return g.score_texts(texts)

        warm, seconds = timed_median(batch, rounds, lambda: None, batch)
        rows.append(row(f"ONNX {variant} ({gate.provider})", len(texts), tokens, warm, seconds))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| job | questions | prompt tokens | median s | questions/s | prompt tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['questions']} | {r['prompt_tokens']} | {r['median_s']:.2f} | "
            f"{r['questions_per_s']:.1f} | {r['prompt_tokens_per_s']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--export", type=Path, required=True, help="exported ONNX gate folder")
    p.add_argument("--limit", type=int, default=600, help="test questions (as evaluate --limit)")
    p.add_argument("--rounds", type=int, default=3, help="timed calls per job (median)")
    p.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads")
    p.add_argument("--date", default="2026-11-23", help="TA-ARE's 'Today is' date")
    p.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = p.parse_args()
    if not list(args.export.glob("*.onnx")):
        p.error(f"--export {args.export}: no exported gate there (run `retrieval-gate export`)")
    labels = DEFAULT_RUN_DIR / "closed-book.jsonl"
    splits = load_splits(labels, DEFAULT_RUN_DIR)
    qs = list(sample_test(splits.test, args.limit).questions)
    ctx = GateContext(
        splits.train, splits.dev, LabellingRun(DEFAULT_RUN_DIR).records(), LazyGenerator()
    )
    rows = onnx_rows(args.export, [q.text for q in qs], args.rounds, args.threads)
    rows = llm_rows(qs, ctx, args.rounds, args.date) + rows
    load = os.getloadavg()
    # the 1-min load average counts this run's own engine threads (about 2 here): only a
    # figure well above the core count means other work shared the CPU
    print(f"\n{len(qs)} test questions, median of {args.rounds} rounds, 1-min load average "
          f"{load[0]:.1f} on {os.cpu_count()} cores, this run included")  # fmt: skip
    print(table(rows))
    by = {r["name"]: r for r in rows}
    int8 = next(r for r in rows if r["name"].startswith("ONNX int8"))
    for name in ("prompt-vanilla", "prompt-ta-are"):
        ratio = int8["questions_per_s"] / by[name]["questions_per_s"]
        print(f"learned gate (ONNX int8) is {ratio:.0f} times cheaper than {name}")
    label_s = by["closed-book labelling"]["median_s"]
    for name in ("prompt-vanilla", "prompt-ta-are", "confidence (uncached)"):
        print(
            f"{name} batch time / closed-book labelling time: {by[name]['median_s'] / label_s:.2f}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "load": load, **vars(args)}, default=str))


if __name__ == "__main__":
    main()
