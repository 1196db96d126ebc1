"""The prefill probe (the `probe` gate: a logistic head on the generator's hidden state at the
end of the closed-book prompt) on a label file's canonical split: in-domain (trained on every
source, scored on the test split) and leave-one-source-out (trained without a source, scored
on that source's test questions), beside two anchors on the same test questions: the TF-IDF
gate fitted on the same training sample and the `confidence` baseline (the recorded answer's
mean log-probability, as the label file holds it).

    .venv/bin/python scripts/probe_cv.py [--labels data/labels/smollm2-135m-instruct/closed-book.jsonl] \\
        [--model smollm2-135m-instruct] [--per-source 400] [--test-limit N] [--layers auto] \\
        [--hold-out entityquestions popqa toolqa triviaqa] [--threads N] [--out reports/probe-cv.json]

Training: up to --per-source questions of each source's train split (a stable id-hash sample);
the layer (among --layers, default about ten spread over the model) and C are chosen by AUROC
on the whole dev split (without the held-out source when one is), the head fitted on train.
AUROC of "the closed-book answer is wrong" with a 95% bootstrap CI. One prefill per question
gives every candidate layer; states go through the generation cache (set
RETRIEVAL_GATE_NO_CACHE=1 to compute them all). The prefill's cost is timed apart, never from
the cache: --time-questions test questions batched (ms/question) and 30 one at a time (p50),
the whole prompt through every block against the gate as it ships (the template's prefix
prefilled once, only the blocks up to its layer), and the gate's own scoring one question at a
time (as `evaluate`'s cost column). Prints a row per setting; asserts nothing."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

SOURCES = ("entityquestions", "popqa", "toolqa", "triviaqa")


def _auroc_ci(y: np.ndarray, s: np.ndarray) -> list[float | None]:
    from retrieval_gate import metrics as M
    from retrieval_gate.evaluation.bootstrap import bootstrap_ci

    ci = bootstrap_ci(lambda i: M.auroc(y[i], s[i]), len(y))
    return [M.auroc(y, s), *(ci or (None, None))]


def _splits(labels: dict[str, int], per_source: int, test_limit: int | None) -> dict[str, list]:
    """train (a sample per source), dev and test (or a sample spread over sources)."""
    from retrieval_gate.data.splits import canonical_questions, sample_order

    by: dict[str, list] = defaultdict(list)
    for q in canonical_questions():
        if q.id in labels:
            by[q.split].append(q)
    train = []
    for source in sorted({q.source for q in by["train"]}):
        pool = [q for q in by["train"] if q.source == source]
        train += [pool[i] for i in sample_order([q.id for q in pool])[:per_source]]
    test = by["test"]
    if test_limit is not None:
        test = [test[i] for i in sorted(sample_order([q.id for q in test])[:test_limit])]
    return {"train": train, "dev": by["dev"], "test": test}


def _timed(reader: object, layer: int, prompts: list[str]) -> dict:
    """ms per question of `reader`'s prefill for `layer`: batched, and one prompt at a time
    (p50 over 30), never from the cache."""
    from retrieval_gate.generation.cache import computing

    with computing():
        reader.states(prompts[:16], [layer])  # warm-up: weights, the shared prefix
        start = time.perf_counter()
        reader.states(prompts, [layer])
        batched = (time.perf_counter() - start) * 1000 / len(prompts)
        one = []
        for p in prompts[:30]:
            start = time.perf_counter()
            reader.states([p], [layer])
            one.append((time.perf_counter() - start) * 1000)
    return {"batched_ms": round(batched, 1), "one_at_a_time_p50_ms": round(np.median(one), 1)}


def _prefill_cost(model: str, gate: object, questions: list, n: int) -> dict:
    """What a question costs: the whole prompt through every block (no shared prefix), against
    the gate as it ships (the template's prefix prefilled once, blocks up to its layer), and
    the gate scoring one question at a time as `evaluate`'s cost column times it."""
    from retrieval_gate.evaluation.evaluate import cost_per_question
    from retrieval_gate.gates.probe import closed_book_prompts
    from retrieval_gate.generation.hidden_states import HiddenStateReader

    prompts = closed_book_prompts(questions[:n])
    plain = HiddenStateReader(model, store=None)
    gate.reader.unload()  # fitted on every layer: now only as deep as its own
    return {"questions": len(prompts), "batch_size": plain.batch_size,
            "prompt_tokens": round(float(np.mean([len(x) for x in plain.prompt_ids(prompts)])), 1),
            "own_tokens": round(float(np.mean([len(x) - len(gate.reader.prefix)
                                               for x in plain.prompt_ids(prompts)])), 1),
            "full_prefill_all_blocks": _timed(plain, plain.num_layers, prompts),
            "gate_prefill": _timed(gate.reader, gate.layer, prompts),
            "gate_scores_one_at_a_time_p50_ms": round(cost_per_question(gate, questions, 30), 1)}  # fmt: skip


def _setting(name, held_out, parts, x, labels, rows, layers):
    """One row: the probe (layer and C re-chosen on dev), TF-IDF and confidence on the test
    questions of `held_out` (all of them when None)."""
    from retrieval_gate.gates.confidence import confidence_score
    from retrieval_gate.gates.probe import select_layer
    from retrieval_gate.gates.tfidf import TfidfGate

    keep = {k: np.array([q.source != held_out for q in parts[k]]) for k in ("train", "dev")}
    test = np.array([held_out in (None, q.source) for q in parts["test"]])
    y = {k: np.array([labels[q.id] for q in v]) for k, v in parts.items()}
    pick = select_layer({L: x["train"][L][keep["train"]] for L in layers}, y["train"][keep["train"]],
                        {L: x["dev"][L][keep["dev"]] for L in layers}, y["dev"][keep["dev"]])  # fmt: skip
    probe = pick.head.predict_proba(x["test"][pick.layer][test])[:, 1]
    fit = [q for q, k in zip(parts["train"], keep["train"], strict=True) if k]
    tfidf = TfidfGate.fit(fit, y["train"][keep["train"]])
    tq = [q for q, k in zip(parts["test"], test, strict=True) if k]
    conf = [confidence_score(rows[q.id].get("mean_logprob"), bool(rows[q.id].get("idk")))
            for q in tq]  # fmt: skip
    yt = y["test"][test]
    return {"setting": name, "n_train": int(keep["train"].sum()), "n_test": len(tq),
            "wrong": round(float(yt.mean()), 3), "layer": pick.layer, "C": pick.c,
            "dev_auroc_by_layer": {L: round(a, 3) if a else a for L, a in pick.dev_auroc.items()},
            "probe": _auroc_ci(yt, probe), "tfidf_same_sample": _auroc_ci(yt, tfidf.scores(tq)),
            "confidence": _auroc_ci(yt, np.asarray(conf))}, pick  # fmt: skip


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    from retrieval_gate import work
    from retrieval_gate.gates.probe import (
        ProbeGate,
        check_probe_options,
        closed_book_prompts,
        probe_reader,
    )
    from retrieval_gate.labels.label_files import LabelFile

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--labels", default="data/labels/smollm2-135m-instruct/closed-book.jsonl")
    p.add_argument("--model", default="smollm2-135m-instruct", help="whose states (a folder)")
    p.add_argument("--layers", default="auto", help="candidate layers: auto, 12 or 6,12,18")
    p.add_argument("--per-source", type=int, default=400, help="training questions per source")
    p.add_argument("--test-limit", type=int, help="test questions (default: the whole split)")
    p.add_argument("--hold-out", nargs="*", default=list(SOURCES), help="sources, one row each")
    p.add_argument("--time-questions", type=int, default=256, help="timed batched prefill")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    layers = check_probe_options(args.model, args.layers)  # before any weights load
    rows = LabelFile(args.labels).rows
    labels = {qid: int(r["label"]) for qid, r in rows.items()}
    parts = _splits(labels, args.per_source, args.test_limit)
    reader = probe_reader(args.model)
    start = time.perf_counter()
    x = {k: reader.states(closed_book_prompts(v), layers) for k, v in parts.items()}
    states_s = time.perf_counter() - start
    out = []
    for held_out in [None, *args.hold_out]:
        row, pick = _setting(held_out or "in-domain", held_out, parts, x, labels, rows, layers)
        out.append(row)
        print(json.dumps(row), flush=True)
        if held_out is None:
            gate = ProbeGate(reader, pick.layer, pick.head, dev_auroc=pick.dev_auroc, c=pick.c)
    cost = _prefill_cost(args.model, gate, parts["test"], args.time_questions)
    summary = {"states_seconds": round(states_s, 1), "work": work.summary(), "cost": cost,
               "cpu": work.cpu_description(), "threads": torch_threads(),
               "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
               "questions": {k: len(v) for k, v in parts.items()}}  # fmt: skip
    print(json.dumps(summary), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"labels": args.labels, "model": args.model,
                                        "layers": layers, **summary, "rows": out}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
