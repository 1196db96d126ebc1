"""Adds `token_logprobs` to a closed-book label file by teacher forcing: the token
log-probabilities of each row's RECORDED prediction under the generator, given the same
closed-book prompt, from one prefill pass (prompt + prediction tokens, vLLM `prompt_logprobs`),
no decoding.

    nice -n 5 .venv/bin/python scripts/answer_logprobs.py \
        --labels data/labels/smollm2-135m-instruct/closed-book.jsonl --out /tmp/closed-book.jsonl

Why not generate again: CPU vLLM's greedy decoding drifts with the batch's make-up, so a new
run changes about a quarter of the predictions (and so the labels); teacher forcing keeps every
recorded field and reads the log-probabilities of exactly the answers the labels judge, and
is ~3x faster than generating them (no decoding: ~13 rows/s on 2 idle CPU cores, against the
labeller's ~4 questions/s; 13,198 rows took 43 min at 5 rows/s on a busy shared machine).

What is left after the check (13,198 SmolLM2 rows: median |diff| 0.006, 2% over 0.1): answers
the model wrote in a non-canonical tokenisation (" B" + "ah" where the text re-tokenises as
" Bah") and decoding drift; those rows' values are the canonical tokenisation's.

How a row's sequence is rebuilt, as the labeller (`labels/closed_book.py` through
`VLLMGenerator.generate`) fed and generated it: the prompt `closed_book_prompt(question)` as
one user turn through the chat template with the generation prompt (`generation.chat.
chat_token_ids`), then the prediction's tokens (the text tokenised without special tokens:
the labeller stored the decoded text, stripped) and, when those are fewer than
`--max-new-tokens`, the EOS token the generation stopped at (vLLM returns the stop token and its
log-probability with the answer's tokens, so the recorded `mean_logprob` includes it). Where
that EOS is unlikely (p < 0.5), a short greedy continuation checks whether the answer went on
with whitespace tokens that the stored, stripped text lost (`whitespace_stops`). The
written `token_logprobs` are those of the prediction tokens (+ EOS), rounded as label rows keep
them (`labels.logprobs.rounded`); every other field is unchanged. A row with an empty
prediction gets none.

Check before writing: the mean of each row's new `token_logprobs` against its recorded
`mean_logprob` (median, 95th percentile absolute difference, rows off by > 0.1). A median over
`--max-median-diff` means the prompt or tokenisation does not match the labeller's: nothing is
written."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

LOG_HALF = float(np.log(0.5))
DEFAULT_LABELS = "data/labels/smollm2-135m-instruct/closed-book.jsonl"


def read_rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def question_texts(ids: list[str], data_dir: str | None) -> dict[str, str]:
    """id -> question text from the project's loaders, for every dataset the ids come from."""
    from retrieval_gate.data import dataset_names, load_dataset

    wanted = set(ids)
    texts: dict[str, str] = {}
    for name in dataset_names(optional=True):
        if not any(i.startswith(name + "-") for i in wanted):
            continue
        for q in load_dataset(name, data_dir=data_dir):
            if q.id in wanted:
                texts[q.id] = q.text
    missing = sorted(wanted - set(texts))
    if missing:
        sys.exit(f"{len(missing)} label ids have no question in the datasets, e.g. {missing[:3]}")
    return texts


def sequences(
    tokenizer: Any, rows: list[dict[str, Any]], texts: dict[str, str], max_new_tokens: int
) -> list[tuple[list[int], int]]:
    """(prompt + answer token ids, number of answer tokens) per row; 0 answer tokens for an
    empty prediction."""
    from retrieval_gate.generation.chat import chat_token_ids
    from retrieval_gate.generation.prompts import closed_book_prompt

    prompts = chat_token_ids(tokenizer, [closed_book_prompt(texts[r["id"]]) for r in rows])
    eos = tokenizer.eos_token_id
    out = []
    for row, prompt in zip(rows, prompts, strict=True):
        pred = row.get("prediction") or ""
        answer = list(tokenizer(pred, add_special_tokens=False)["input_ids"]) if pred else []
        if answer and len(answer) < max_new_tokens:
            answer.append(eos)  # the generation stopped at EOS, not at the token limit
        out.append((prompt + answer, len(answer)))
    return out


def teacher_forced(
    llm: Any,
    seqs: list[tuple[list[int], int]],
    ids: list[str],
    batch_size: int,
    cuda: bool,
    partial: Path,
) -> list[list[float] | None]:
    """Log-probabilities of each sequence's last `n` tokens given what precedes them: one
    prefill per sequence (`prompt_logprobs=0`, one throwaway decoded token), in batches. Each
    batch is appended to `partial` (id, token_logprobs) as it finishes; a rerun skips the ids
    found there, so an interrupted run loses at most one batch."""
    from vllm import SamplingParams

    from retrieval_gate.generation.vllm_backend import _eager_sampler

    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
    out: list[list[float] | None] = [None] * len(seqs)
    done = {}
    if partial.exists():
        done = {r["id"]: r["token_logprobs"] for r in read_rows(partial)}
    todo = []
    for i, (_, n) in enumerate(seqs):
        if n and ids[i] in done:
            out[i] = done[ids[i]]
        elif n:
            todo.append(i)
    bar = tqdm(total=len(todo), desc="teacher forcing", unit="row")
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        with _eager_sampler(cuda):
            results = llm.generate(
                [{"prompt_token_ids": seqs[i][0]} for i in batch], params, use_tqdm=False
            )
        for i, res in zip(batch, results, strict=True):
            seq, n = seqs[i]
            plps = res.prompt_logprobs
            out[i] = [plps[j][seq[j]].logprob for j in range(len(seq) - n, len(seq))]
        with open(partial, "a", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": ids[i], "token_logprobs": out[i]}) + "\n" for i in batch)
        bar.update(len(batch))
    bar.close()
    return out


def whitespace_stops(
    llm: Any,
    tokenizer: Any,
    seqs: list[tuple[list[int], int]],
    new: list[list[float] | None],
    max_new_tokens: int,
    cuda: bool,
) -> dict[str, int]:
    """Repairs the appended EOS where the answer did not stop there: the labeller stored the
    text stripped, so an answer that went on with whitespace tokens (up to the token limit, or
    then EOS) lost them. For rows whose EOS has probability < 0.5 (so maybe not the greedy
    choice), one batched greedy continuation of prompt + answer: while it yields whitespace
    tokens they (and a closing EOS) replace the EOS; if it yields EOS first, or text the
    prediction does not hold (decoding drift), the EOS stays. Changes `new` in place."""
    from vllm import SamplingParams

    from retrieval_gate.generation.vllm_backend import _eager_sampler

    eos = tokenizer.eos_token_id
    rows = [i for i, (seq, n) in enumerate(seqs)
            if n and seq[-1] == eos and new[i] and new[i][-1] < LOG_HALF]  # fmt: skip
    stats = {"eos_checked": len(rows), "eos_greedy": 0, "whitespace_tail": 0, "eos_kept": 0}
    if not rows:
        return stats
    requests = [{"prompt_token_ids": seqs[i][0][:-1]} for i in rows]
    params = [SamplingParams(temperature=0.0, max_tokens=max_new_tokens - seqs[i][1] + 1,
                             logprobs=0, detokenize=False) for i in rows]  # fmt: skip
    with _eager_sampler(cuda):
        outputs = llm.generate(requests, params, use_tqdm=False)
    for i, res in zip(rows, outputs, strict=True):
        comp = res.outputs[0]
        tail = []
        for step, tok in zip(comp.logprobs, comp.token_ids, strict=True):
            if tok != eos and tokenizer.decode([tok]).strip():
                tail = None  # text the recorded prediction does not have: keep the EOS
                break
            tail.append(step[tok].logprob)
            if tok == eos:
                break
        if comp.token_ids and comp.token_ids[0] == eos:
            stats["eos_greedy"] += 1
        elif tail:
            new[i] = new[i][:-1] + tail
            stats["whitespace_tail"] += 1
        else:
            stats["eos_kept"] += 1
    return stats


def agreement(rows: list[dict[str, Any]], new: list[list[float] | None]) -> dict[str, Any]:
    """The new token log-probabilities' mean against each row's recorded `mean_logprob`."""
    diffs = np.array(
        [abs(float(np.mean(t)) - r["mean_logprob"])
         for r, t in zip(rows, new, strict=True) if t and r.get("mean_logprob") is not None]
    )  # fmt: skip
    if not len(diffs):
        return {"rows_compared": 0}
    return {
        "rows_compared": len(diffs),
        "median_abs_diff": round(float(np.median(diffs)), 4),
        "p95_abs_diff": round(float(np.percentile(diffs, 95)), 4),
        "max_abs_diff": round(float(diffs.max()), 4),
        "rows_over_0.1": int((diffs > 0.1).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--labels", default=DEFAULT_LABELS, help="closed-book label file to read")
    ap.add_argument("--out", required=True, help="label file to write (with token_logprobs)")
    ap.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    ap.add_argument("--fresh", action="store_true", help="ignore OUT.partial (else resumed)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="the labelling generator")
    ap.add_argument("--data-dir", default=None, help="datasets folder (default: ../shared)")
    ap.add_argument(
        "--limit", type=int, default=None, help="N evenly spaced rows only (a timing run)"
    )
    ap.add_argument("--batch-size", type=int, default=256, help="sequences per vLLM call")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="the labeller's token limit")
    ap.add_argument("--dtype", default=None, help="engine dtype (default: the backend's)")
    ap.add_argument("--max-median-diff", type=float, default=0.05,
                    help="refuse to write when the median |mean - mean_logprob| is above")  # fmt: skip
    ap.add_argument("--report", default=None, help="write the agreement figures as JSON here")
    args = ap.parse_args()

    labels, out = Path(args.labels), Path(args.out)
    if out.exists() and not args.force:
        sys.exit(f"{out} exists; pass --force to overwrite it")
    if out.resolve() == labels.resolve():
        sys.exit("--out must differ from --labels (write elsewhere, then copy)")
    if args.fresh:
        out.with_name(out.name + ".partial").unlink(missing_ok=True)
    rows = read_rows(labels)
    if args.limit:  # evenly spaced, so a timing run sees every source
        rows = rows[:: max(1, len(rows) // args.limit)][: args.limit]
    texts = question_texts([r["id"] for r in rows], args.data_dir)

    from retrieval_gate.generation import build_generator
    from retrieval_gate.labels.logprobs import TOKEN_LOGPROBS, rounded

    t0 = time.perf_counter()
    kw = {"dtype": args.dtype} if args.dtype else {}
    gen = build_generator(args.model, backend="vllm", **kw)
    started = time.perf_counter() - t0
    seqs = sequences(gen.tokenizer, rows, texts, args.max_new_tokens)
    t1 = time.perf_counter()
    partial = out.with_name(out.name + ".partial")
    ids = [r["id"] for r in rows]
    resumed = len(set(ids) & {r["id"] for r in read_rows(partial)}) if partial.exists() else 0
    new = teacher_forced(gen.llm, seqs, ids, args.batch_size, gen.cuda, partial)
    stops = whitespace_stops(gen.llm, gen.tokenizer, seqs, new, args.max_new_tokens, gen.cuda)
    seconds = time.perf_counter() - t1

    import vllm

    report = {
        "rows": len(rows),
        "rows_with_tokens": sum(1 for t in new if t),
        "at_token_limit": sum(1 for _, n in seqs if n >= args.max_new_tokens),
        **stops,
        **agreement(rows, new),
        "engine_start_seconds": round(started, 1),
        "seconds": round(seconds, 1),
        "rows_resumed": resumed,
        "rows_per_second": round((len(rows) - resumed) / seconds, 2) if seconds else None,
        "vllm": vllm.__version__,
        "dtype": str(gen.settings.get("dtype")),
        "model": gen.name,
        "generator_checksum": gen.checksum,
    }
    print(json.dumps(report, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    median = report.get("median_abs_diff")
    if median is not None and median > args.max_median_diff:
        sys.exit(f"median |mean - mean_logprob| {median} > {args.max_median_diff}: not written")

    lines = []
    for row, tokens in zip(rows, new, strict=True):
        row = {k: v for k, v in row.items() if k != TOKEN_LOGPROBS}
        if tokens:
            row[TOKEN_LOGPROBS] = rounded(tokens)
        lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(out)
    partial.unlink(missing_ok=True)
    print(f"wrote {len(lines)} rows to {out} ({out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
