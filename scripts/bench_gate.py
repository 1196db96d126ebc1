"""Gate latency/throughput and quality in one run on the same questions (RetrievalQA by
default): PyTorch eager (LearnedGate) vs ONNX fp32 / opt / int8 (OnnxGate), optionally the old
dynamic int8 (`--dynamic-int8`, quantised here from the export's fp32 file the way exports were
before static int8) and the Vanilla prompt gate through vLLM for scale.

    .venv/bin/python scripts/bench_gate.py --run checkpoints/<run> --export export/<name> \
        [--threads 2] [--dynamic-int8] [--prompt-gate] [--out reports/bench_gate.json] \
        [--router-export export/<router>]

With --router-export, a router's export (issue 25) is timed in the same alternating passes
(`route` at its default budget: P(correct | strategy) and the decision), then against the
binary gate's export alternated in blocks of 20 calls (batch 1: --repeat x --passes calls
each) and round by round (batched: --rounds x --passes each), and the ratios of their medians
are printed per variant: the machine's drift falls on both.

Batch-1: one question per call, tokenisation included (what a RAG service pays per request),
p50/p99 over --repeat calls; model-only p50 as well. Batched: --batch questions per call with
dynamic padding, batches are length buckets (questions sorted by token count); questions/s
including tokenisation. AUROC: on the run's test split (up to 1000 questions, the export's
parity set). Batch drift: the largest |score alone - score in a batch| over random mixed
batches of 2-8 questions. The gates are timed in --passes alternating passes (forward, then
backward, ...) so that a change in the machine's load falls on all of them; each figure is the
median over passes. Prints medians; asserts nothing (speed is measured, not tested)."""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
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


def quality(score: Callable[[list[str]], np.ndarray], texts: Sequence[str], args) -> dict:
    """AUROC on the run's test questions and the largest score drift across batch-mates."""
    from sklearn.metrics import roc_auc_score

    test_texts, labels = args.test
    out = {"auroc": float(roc_auc_score(labels, score(list(test_texts))))}
    sample = list(texts[:48])
    alone = np.array([score([t])[0] for t in sample])
    rng, drift = random.Random(0), 0.0
    for _ in range(40):
        idx = rng.sample(range(len(sample)), rng.randint(2, 8))
        drift = max(drift, float(np.abs(score([sample[i] for i in idx]) - alone[idx]).max()))
    return {**out, "batch_drift": drift}


def bench_torch(run: Path, texts: Sequence[str], args: argparse.Namespace, first: bool) -> dict:
    import torch

    from retrieval_gate.gates.learned import LearnedGate

    torch.set_num_threads(args.threads)
    gate = LearnedGate(run, batch_size=args.batch)
    return {
        "name": "PyTorch eager",
        **batch1(gate.score_texts, texts, args.repeat),
        **batched(gate.score_texts, texts, args.rounds),
        **(quality(gate.score_texts, texts, args) if first else {}),
    }


def decision(gate) -> Callable[[list[str]], object]:  # noqa: ANN001
    """What a service pays per batch: a gate's scores, or a router's P(correct | strategy) and
    its routing at the default budget (strategy_proba, not route: route keeps the last batch's
    P, so timing the same texts twice would time nothing)."""
    from retrieval_gate.gates.onnx import OnnxRouter
    from retrieval_gate.pricing import route_indices

    if not isinstance(gate, OnnxRouter):
        return gate.score_texts
    cal = gate.calibration
    return lambda qs: route_indices(gate.strategy_proba(qs), cal.default_price, cal.costs)


def bench_onnx(
    export: Path,
    variant: str,
    texts: Sequence[str],
    args: argparse.Namespace,
    first: bool,
    label: str = "",
    batch_size: int | None = None,
) -> dict:
    from retrieval_gate.gates.encoder import pad_right
    from retrieval_gate.gates.onnx import OnnxRouter, open_onnx

    gate = open_onnx(export, variant, threads=args.threads, batch_size=batch_size or args.batch)
    ids = gate.encode(texts)
    it = iter(range(10**9))
    router = isinstance(gate, OnnxRouter)
    # a router pays for what it serves: P(correct | strategy) and the routing at its default
    run = gate._proba_batch if router else gate.run_batch
    call = decision(gate)
    side = gate.side_features  # a stacked router's text features go in beside the ids

    def one() -> np.ndarray:
        i = next(it) % len(ids)
        feats = side.matrix([texts[i]]) if side is not None and side.from_text else None
        return run(*pad_right([ids[i]], gate.pad_id), feats)

    model_only = _timings(one, args.repeat)
    return {
        "name": f"{'router ' if router else ''}ONNX {label or variant} ({gate.provider})",
        **batch1(call, texts, args.repeat),
        "model_only_p50_ms": 1e3 * float(np.median(model_only)),
        **batched(call, texts, args.rounds),
        **(quality(gate.score_texts, texts, args) if first and not router else {}),
    }


def merge_passes(passes: list[dict]) -> dict:
    """One row from a gate's passes: medians of the timings, the quality of the first pass."""
    row = dict(passes[0])
    for key in ("p50_ms", "p99_ms", "model_only_p50_ms", "questions_per_s"):
        if key in row:
            row[key] = float(np.median([p[key] for p in passes]))
    return row


def dynamic_int8_export(export: Path, run: Path, folder: Path) -> Path:
    """A copy of the export whose int8 file is the old recipe: ORT's transformer fusions, then
    dynamic quantisation (activation scales computed per call over the whole batch)."""
    import shutil

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from retrieval_gate.export.onnx_export import optimise, set_metadata
    from retrieval_gate.training import load_run

    shutil.copytree(export, folder, dirs_exist_ok=True)
    opt = folder / "model.opt.onnx"
    if not opt.is_file():
        optimise(folder / "model.onnx", opt, load_run(run)[0].backbone.hf_config)
    quantize_dynamic(str(opt), str(folder / "model.int8.onnx"), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fmt: skip
    props = {p.key: p.value for p in onnx.load(str(folder / "model.onnx")).metadata_props}
    set_metadata(folder / "model.int8.onnx", {**props, "variant": "int8"})
    return folder


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
        "| gate | batch-1 p50 ms | batch-1 p99 ms | model-only p50 ms | batched q/s | AUROC "
        "| batch drift |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.get("p50_ms"), r.get("p99_ms"), r.get("model_only_p50_ms")]
        cells = [f"{c:.2f}" if c is not None else "-" for c in cells]
        cells.append(f"{r['questions_per_s']:.0f}")
        cells.append(f"{r['auroc']:.4f}" if "auroc" in r else "-")
        cells.append(f"{r['batch_drift']:.1e}" if "batch_drift" in r else "-")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCK = 20  # batch-1 calls of one model before the other's


def router_paired(args: argparse.Namespace, texts: Sequence[str]) -> str:
    """Router / binary gate per variant, the two alternated in blocks of BLOCK questions (batch
    1; the same questions for both) and round by round (batched), so a change in the machine's
    speed falls on both: a shared 2-core VM drifts by 1.5x over seconds, more than the
    difference measured. (Alternating every call would time memory instead: each model's
    weights would be evicted from the cache by the other's before every call.)"""
    from retrieval_gate.gates.onnx import open_onnx

    lines = ["| variant | batch-1 p50 ms, gate / router | ratio (median of the block pairs') | "
             "batched q/s, gate / router | ratio (median of the round pairs') | within 1.1x |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for v in args.variants:
        calls = [decision(open_onnx(path, v, threads=args.threads, batch_size=args.batch))
                 for path in (args.export, args.router_export)]  # fmt: skip
        one: list[list[float]] = [[], []]
        pairs = []  # router / gate of each pair of neighbouring blocks (their medians)
        for b in range(0, args.repeat * args.passes, BLOCK):
            block = [texts[i % len(texts)] for i in range(b, b + BLOCK)]
            medians = [0.0, 0.0]
            for k in (0, 1) if b % (2 * BLOCK) == 0 else (1, 0):
                calls[k](block[:1])  # its weights back in the cache: not timed
                times = []
                for text in block:
                    start = time.perf_counter()
                    calls[k]([text])
                    times.append(time.perf_counter() - start)
                one[k] += times
                medians[k] = float(np.median(times))
            pairs.append(medians[1] / medians[0])
        full = [[], []]
        for r in range(args.rounds * args.passes):
            for k in (0, 1) if r % 2 == 0 else (1, 0):
                start = time.perf_counter()
                calls[k](list(texts))
                full[k].append(len(texts) / (time.perf_counter() - start))
        p50 = [1e3 * float(np.median(t)) for t in one]
        qps = [float(np.median(q)) for q in full]
        ratio_p50 = float(np.median(pairs))
        ratio_qps = float(np.median([g / r for g, r in zip(*full, strict=True)]))
        lines.append(f"| {v} | {p50[0]:.2f} / {p50[1]:.2f} | {ratio_p50:.3f} | {qps[0]:.0f} / "
                     f"{qps[1]:.0f} | {ratio_qps:.3f} | {max(ratio_p50, ratio_qps) <= 1.1} |")  # fmt: skip
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
    p.add_argument("--rounds", type=int, default=3, help="batched runs over all questions a pass")
    p.add_argument("--passes", type=int, default=3, help="alternating passes over the gates")
    p.add_argument("--dynamic-int8", action="store_true",
                   help="also time the old dynamic int8 (quantised here from the export)")  # fmt: skip
    p.add_argument("--prompt-gate", action="store_true", help="also time the vLLM prompt gate")
    p.add_argument("--router-export", type=Path,
                   help="a router export (issue 25): its variants timed in the same passes, "
                   "`route` at its default budget, and its ratio to the gate's printed")  # fmt: skip
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    args = p.parse_args()

    from retrieval_gate.data import load_dataset
    from retrieval_gate.export.parity import parity_set

    texts = [q.text for q in load_dataset(args.dataset)]
    test_texts, labels, _ = parity_set(args.run, 1000)
    args.test = (test_texts, labels)
    jobs = [lambda first: bench_torch(args.run, texts, args, first)]
    jobs += [lambda first, v=v: bench_onnx(args.export, v, texts, args, first)
             for v in args.variants]  # fmt: skip
    if args.router_export:
        jobs += [lambda first, v=v: bench_onnx(args.router_export, v, texts, args, first)
                 for v in args.variants]  # fmt: skip
    scratch = tempfile.TemporaryDirectory(prefix="bench-dynamic-int8-")
    if args.dynamic_int8:
        old = dynamic_int8_export(args.export, args.run, Path(scratch.name) / args.export.name)
        jobs.append(lambda first: bench_onnx(old, "int8", texts, args, first,
                                             "int8 dynamic (before)"))  # fmt: skip
        # the same file one question per call: no batch-mates, so no drift either
        jobs.append(lambda first: bench_onnx(old, "int8", texts, args, first,
                                             "int8 dynamic, one question per call", 1))  # fmt: skip
    passes: list[list[dict]] = [[] for _ in jobs]
    for n in range(args.passes):
        order = range(len(jobs)) if n % 2 == 0 else reversed(range(len(jobs)))
        for i in order:
            passes[i].append(jobs[i](n == 0))
            print(json.dumps(passes[i][-1]), flush=True)  # partial results survive a stop
    rows = [merge_passes(p) for p in passes]
    if args.prompt_gate:
        rows.append(bench_prompt_gate(texts, args))
    load = os.getloadavg()
    print(f"{len(texts)} {args.dataset} questions, {args.threads} threads, batch {args.batch}, "
          f"{args.passes} alternating passes, AUROC on {len(labels)} test questions of the run, "
          f"load average {load[0]:.1f} (other processes share this CPU)")  # fmt: skip
    print(table(rows))
    if args.router_export:
        print(f"router vs binary gate, alternated every {BLOCK} calls (batch 1) and every round:")
        print(router_paired(args, texts))
    scratch.cleanup()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        saved = {k: v for k, v in vars(args).items() if k != "test"}
        args.out.write_text(json.dumps({"rows": rows, "load": load, **saved}, default=str))


if __name__ == "__main__":
    main()
