"""Labelling throughput on Ray (`label --engine ray`) by actor count, steady state only.

Against the fake OpenAI-compatible server (started here on loopback unless --url is given;
a fixed latency a request, 200 ms by default) the job is latency-bound, so questions/s should
grow with the actors: this measures Ray's scheduling, not the CPU. Against a real server
(`vllm serve`), `--local` adds `label`'s local engine on the same questions: the in-process
vLLM engine (`--backend vllm`) and the same server through `--generator-url` without Ray.

    python scripts/bench_label_scale.py                       # fake server, actors 1 2 4 8
    python scripts/bench_label_scale.py --url http://127.0.0.1:8000/v1 --actors 1 2 4 \\
        --in-flight 4 --local

One line per count: `actors N: X questions/s (engine=ray)`; the steady state runs from the
moment the last actor finished its first request to the moment the first actor ran out of
work (labels/ray_engine.py), so actor start-up is not in it."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import FakeServer  # noqa: E402


def cli(argv: list[str]) -> dict:
    """Runs `retrieval-gate` in this process (Ray started once is reused); its JSON summary."""
    from retrieval_gate.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    if code:
        raise SystemExit(f"retrieval-gate {' '.join(argv)} exited {code}")
    text = buf.getvalue()  # engines may print before the summary: read the last JSON object
    return json.loads(text[text.rindex("\n{") + 1 if "\n{" in text else 0 :])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", help="OpenAI-compatible server (default: the fake one, started here)")
    p.add_argument("--latency", type=float, default=0.2, help="fake server: seconds a request")
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--in-flight", type=int, default=1, help="requests in flight per actor")
    p.add_argument("--rows-per-actor", type=int, default=60, help="questions per actor (>= 50)")
    p.add_argument("--dataset", default="retrievalqa")
    p.add_argument("--local", action="store_true", help="also time label's local engine")
    args = p.parse_args()
    import ray

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(FakeServer(args.latency))
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rg-bench-scale-")))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=256 * 1024 * 1024)  # fmt: skip
        base = ["label", "--policy", "closed-book", "--dataset", args.dataset]
        rates = {}
        for n in args.actors:
            limit = n * args.rows_per_actor
            out = cli([*base, "--limit", str(limit), "--out", str(work / f"ray-{n}.jsonl"),
                       "--generator-url", url, "--engine", "ray", "--actors", str(n),
                       "--in-flight", str(args.in_flight)])  # fmt: skip
            steady = out.get("steady_state") or {}
            rates[n] = steady.get("requests_per_second", 0.0)
            print(f"actors {n}: {rates[n]:.2f} questions/s (engine=ray; {limit} questions, "
                  f"in flight {args.in_flight}/actor, steady state {steady.get('seconds')} s "
                  f"over {steady.get('requests')} requests; whole run {out['seconds']} s)",
                  flush=True)  # fmt: skip
        ray.shutdown()
        one = rates[args.actors[0]] / args.actors[0]
        for n in args.actors:
            print(f"actors {n}: {rates[n] / (n * one):.0%} of linear", flush=True)
        if args.local:
            limit = max(args.actors) * args.rows_per_actor
            served = cli([*base, "--limit", str(limit), "--out", str(work / "local-url.jsonl"),
                          "--generator-url", url])  # fmt: skip
            print(
                f"local --generator-url: {served['questions_per_second']:.2f} questions/s "
                f"({limit} questions, 32 requests in flight)",
                flush=True,
            )
            engine = cli([*base, "--limit", str(limit), "--out", str(work / "local-vllm.jsonl"),
                          "--backend", "vllm"])  # fmt: skip
            print(
                f"local in-process vLLM engine: {engine['questions_per_second']:.2f} "
                f"questions/s ({limit} questions)",
                flush=True,
            )


if __name__ == "__main__":
    main()
