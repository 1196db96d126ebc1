"""Old vs new prompt-gate scoring on the same test questions, before the fast path replaced
whole-continuation scoring (docs/prompt-gates.md):

    PYTHONPATH=src .venv/bin/python scripts/compare_choice_scoring.py --limit 300 \
        [--templates vanilla ta-are] [--out reports/compare_choice_scoring.json]

Per template: P([Yes]) from whole-continuation scoring ("[Yes]" and "[No]" as two sequences,
`prompt_logprobs`) and from the next-token fast path (one sequence per question ending in
"[", `logprob_token_ids` for Yes/No); AUROC of each against the closed-book labels, Spearman
between the two, the largest absolute difference, and the wall time of each."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from retrieval_gate.evaluation.gate_comparison import sample_test
from retrieval_gate.gates.prompt import CHOICES
from retrieval_gate.gates.registry import GateContext, LazyGenerator, build_gate
from retrieval_gate.generation.chat import chat_token_ids, choice_token_ids
from retrieval_gate.labels.evalset import DEFAULT_RUN_DIR, load_splits
from retrieval_gate.labels.labelling_run import LabellingRun

LABELS = DEFAULT_RUN_DIR / "closed-book.jsonl"


def timed(fn):  # noqa: ANN001, ANN201 - (result, seconds)
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def compare(template: str, ctx: GateContext, test, date: str) -> dict:  # noqa: ANN001
    gate = build_gate(f"prompt-{template}", ctx, date=date)
    gen = ctx.generator()
    prompts = gate.prompts(test.questions)
    heads = chat_token_ids(gen.tokenizer, prompts)
    tails = choice_token_ids(gen.tokenizer, CHOICES)
    new, new_s = timed(lambda: gen.choice_probs(prompts, CHOICES)[:, 0])
    old, old_s = timed(lambda: gen.continuation_probs(heads, tails)[:, 0])
    return {
        "template": template,
        "n": len(test),
        "auroc_whole_continuation": float(roc_auc_score(test.y, old)),
        "auroc_next_token": float(roc_auc_score(test.y, new)),
        "spearman": float(spearmanr(old, new).statistic),
        "max_abs_diff": float(np.max(np.abs(old - new))),
        "seconds_whole_continuation": round(old_s, 1),
        "seconds_next_token": round(new_s, 1),
        "prompt_tokens": int(sum(map(len, heads))),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=300, help="test questions (as evaluate --limit)")
    p.add_argument("--templates", nargs="+", default=["vanilla", "ta-are"])
    p.add_argument("--date", default="2026-11-23", help="TA-ARE's 'Today is' date")
    p.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    splits = load_splits(LABELS, DEFAULT_RUN_DIR)
    test = sample_test(splits.test, args.limit)
    ctx = GateContext(
        splits.train, splits.dev, LabellingRun(DEFAULT_RUN_DIR).records(), LazyGenerator()
    )
    rows = []
    for template in args.templates:
        rows.append(compare(template, ctx, test, args.date))
        print(json.dumps(rows[-1]), flush=True)
    print(
        "\n| template | n | AUROC whole | AUROC next-token | Spearman | max abs diff | s whole | s next-token |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['template']} | {r['n']} | {r['auroc_whole_continuation']:.4f} | "
            f"{r['auroc_next_token']:.4f} | {r['spearman']:.4f} | {r['max_abs_diff']:.4f} | "
            f"{r['seconds_whole_continuation']} | {r['seconds_next_token']} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
