"""vLLM-CPU engine settings on the demo's generator work: which `LLM(...)` settings help on a
CPU, above all one without native bf16 (AVX2 only), where vLLM runs in fp32.

    PYTHONPATH=src .venv/bin/python scripts/bench_vllm_cpu.py [--limit 60] [--rounds 2] \
        [--variants default mbt8k mbt2k kv4 block128] [--avx2]

Each variant runs in its own process (one engine each): it starts the engine (timed), then
times the demo's two kinds of generator work on the same `--limit` RetrievalQA questions:
with-context prompts (the question's five documents, ~600 tokens, 24 new tokens: the RAG
stage's bulk) and closed-book prompts (~90 tokens, 24 new tokens), each `--rounds` times with
the prefix cache emptied before each call; medians are printed. `transformers` runs the same
prompts through the project's transformers backend instead of vLLM. `--avx2` forces the AVX2 code
paths on an AVX-512 machine (`ATEN_CPU_CAPABILITY=avx2`, `ONEDNN_MAX_CPU_ISA=AVX2`,
`MKL_ENABLE_INSTRUCTIONS=AVX2`: no native bf16, so the engine runs fp32, and torch's fp32
matmuls, which MKL does, take MKL's AVX2 kernels; `scripts/avx2_site` on PYTHONPATH makes vLLM
load its AVX2 kernels), an approximation of an AVX2-only CPU. Variants alternate round by
round so that load on a shared machine falls on all of them. Prints; asserts nothing."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# LLM(...) keyword settings (beyond the project's CPU defaults) and environment per variant
VARIANTS: dict[str, tuple[dict, dict]] = {
    "default": ({}, {}),
    "mbt2k": ({"max_num_batched_tokens": 2048}, {}),
    "mbt8k": ({"max_num_batched_tokens": 8192}, {}),
    "mbt16k": ({"max_num_batched_tokens": 16384}, {}),
    "kv4": ({}, {"VLLM_CPU_KVCACHE_SPACE": "4"}),
    "block128": ({"block_size": 128}, {}),
    "seqs16": ({"max_num_seqs": 16}, {}),
    "transformers": ({}, {}),  # the transformers backend (fp32 on a CPU), not vLLM
}
AVX2_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def avx2_env() -> dict[str, str]:
    """AVX2_ENV, and avx2_site/ ahead on PYTHONPATH: torch then reports no AVX-512, so vLLM-CPU
    loads its AVX2 kernels (`_C_AVX2`) as on an AVX2-only CPU."""
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "avx2_site")
    path = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)
    return {**AVX2_ENV, "PYTHONPATH": path}


def prompts(limit: int) -> tuple[list[str], list[str]]:
    from retrieval_gate.data.dataset_registry import load_dataset
    from retrieval_gate.generation.prompts import (
        DOC_WORDS,
        closed_book_prompt,
        with_context_prompt,
    )

    qs = [q for q in load_dataset("retrievalqa") if q.contexts][:limit]
    docs = [[" ".join(c.get("text", "").split()[:DOC_WORDS]) for c in q.contexts[:5]] for q in qs]
    return [with_context_prompt(q.text, d) for q, d in zip(qs, docs, strict=True)], [
        closed_book_prompt(q.text) for q in qs
    ]


def one(variant: str, limit: int, rounds: int) -> dict:
    """Runs in the variant's own process: engine start, then the timed rounds."""
    from retrieval_gate.generation.model_folders import resolve_generator_model
    from retrieval_gate.generation.vllm_backend import VLLMGenerator

    kwargs, _ = VARIANTS[variant]
    rag, closed = prompts(limit)
    start = time.perf_counter()
    model = resolve_generator_model("smollm2-135m-instruct")
    if variant == "transformers":
        from retrieval_gate.generation.hf_backend import TransformersGenerator

        gen = TransformersGenerator(model)
    else:
        gen = VLLMGenerator(model, **kwargs)
    started = time.perf_counter() - start
    times: dict[str, list[float]] = {"rag": [], "closed": []}
    tokens = {}
    for _ in range(rounds):
        for kind, batch in (("rag", rag), ("closed", closed)):
            if variant != "transformers":
                gen.llm.reset_prefix_cache()
            t = time.perf_counter()
            out = gen.generate(batch, max_new_tokens=24)
            times[kind].append(time.perf_counter() - t)
            tokens[kind] = sum(o.prompt_tokens for o in out), sum(o.completion_tokens for o in out)
    dtype = "float32" if variant == "transformers" else gen.settings["dtype"]
    return {"variant": variant, "dtype": dtype, "start_s": started,
            "times": times, "tokens": tokens}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=60)
    p.add_argument("--rounds", type=int, default=2, help="timed calls per engine and kind")
    p.add_argument("--passes", type=int, default=1, help="engines per variant (alternated)")
    p.add_argument("--variants", nargs="+", default=["default", "mbt8k", "mbt2k", "kv4"],
                   choices=sorted(VARIANTS))  # fmt: skip
    p.add_argument("--avx2", action="store_true", help="force AVX2 code paths (fp32 engine)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.limit, args.rounds)), flush=True)
        return
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    for _ in range(args.passes):
        for v in args.variants:
            env = {**os.environ, **VARIANTS[v][1], **(avx2_env() if args.avx2 else {})}
            cmd = [sys.executable, __file__, "--one", v, "--limit", str(args.limit),
                   "--rounds", str(args.rounds)]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
            results[v].append(json.loads(line[len("RESULT ") :]))
            r = results[v][-1]
            print(f"{v}: start {r['start_s']:.1f} s, rag {r['times']['rag']}, "
                  f"closed {r['times']['closed']}", file=sys.stderr, flush=True)  # fmt: skip
    print(f"| variant | dtype | engine start s | with-context {args.limit} q, s | "
          f"closed-book {args.limit} q, s | vs default (with-context) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    base = statistics.median(t for r in results[args.variants[0]] for t in r["times"]["rag"])
    for v, rs in results.items():
        rag = statistics.median(t for r in rs for t in r["times"]["rag"])
        closed = statistics.median(t for r in rs for t in r["times"]["closed"])
        start = statistics.median(r["start_s"] for r in rs)
        print(f"| {v} | {rs[0]['dtype']} | {start:.1f} | {rag:.2f} | {closed:.2f} | "
              f"{rag / base:.2f} |")  # fmt: skip
    tokens = results[args.variants[0]][0]["tokens"]
    print(f"\nprompt / completion tokens per call: with-context {tokens['rag']}, "
          f"closed-book {tokens['closed']}")  # fmt: skip


if __name__ == "__main__":
    main()
