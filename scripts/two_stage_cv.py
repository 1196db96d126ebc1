"""The two-stage gate against the question-only gate and the answer's confidence alone, on a
label file's canonical split: in-domain (trained on every source, scored on the test split)
and leave-one-source-out (trained without a source, scored on that source's test questions).

    .venv/bin/python scripts/two_stage_cv.py [--labels data/labels/smollm2-135m-instruct/closed-book.jsonl] \
        [--config cascade-closed-book] [--hold-out entityquestions popqa toolqa triviaqa] \
        [--out reports/two-stage-cv.json]

Each setting trains `--config` through `retrieval_gate.training.train` (the questions carry
their canonical split and their answer's log-probabilities, as the label file recorded them)
and scores the test questions with the run, as a user would: with the answers (two-stage),
without (the same run's question-only score) and by the `confidence` baseline (1 - the
geometric mean token probability; an "I don't know" answer scores 1). AUROC of "the
closed-book answer is wrong" with a 95% bootstrap CI. Prints a row per setting; asserts
nothing."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SOURCES = ("entityquestions", "popqa", "toolqa", "triviaqa")


def _auroc_ci(y: np.ndarray, s: np.ndarray) -> list[float | None]:
    from retrieval_gate import metrics as M
    from retrieval_gate.evaluation.bootstrap import bootstrap_ci

    ci = bootstrap_ci(lambda i: M.auroc(y[i], s[i]), len(y))
    return [M.auroc(y, s), *(ci or (None, None))]


def setting(cfg: object, questions: list, labels: dict, rows: dict, held_out: str | None) -> dict:
    from retrieval_gate.gates.confidence import confidence_score
    from retrieval_gate.gates.learned import LearnedGate
    from retrieval_gate.training import train

    fit = [q for q in questions if q.source != held_out]
    test = [q for q in questions if q.split == "test" and (held_out in (None, q.source))]
    name = held_out or "in-domain"
    run = train(cfg.override(f"run.name=two-stage-{name}"), questions=fit,
                labels={q.id: labels[q.id] for q in fit})  # fmt: skip
    gate = LearnedGate(run.path, device="cpu")
    y = np.array([labels[q.id] for q in test])
    bare = [replace(q, extra={}) for q in test]
    conf = [confidence_score(rows[q.id].get("mean_logprob"), bool(rows[q.id].get("idk")))
            for q in test]  # fmt: skip
    return {"setting": name, "n_test": len(test), "wrong": float(y.mean()),
            "two-stage": _auroc_ci(y, np.asarray(gate.scores(test))),
            "question-only": _auroc_ci(y, np.asarray(gate.scores(bare))),
            "confidence": _auroc_ci(y, np.asarray(conf))}  # fmt: skip


def main() -> None:
    from retrieval_gate.data.splits import assign_splits, with_splits
    from retrieval_gate.labels.label_files import LabelFile
    from retrieval_gate.training import load_config
    from retrieval_gate.training.sources import config_questions

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--labels", default="data/labels/smollm2-135m-instruct/closed-book.jsonl")
    p.add_argument("--config", default="cascade-closed-book")
    p.add_argument("--hold-out", nargs="*", default=list(SOURCES), help="sources, one run each")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = p.parse_args()
    rows = LabelFile(args.labels).rows
    labels = {qid: int(r["label"]) for qid, r in rows.items()}
    with tempfile.TemporaryDirectory(prefix="two-stage-") as work:
        cfg = load_config(args.config, [f"run.output_dir={work}", "data.label_file=null"])
        every = config_questions(cfg.data)
        every = with_splits(every, assign_splits(every, seed=cfg.data.split_seed))
        # each question carries its answer's log-probabilities as the label file records them
        # (token_logprobs where present, else the mean), as training reads them
        answer = ("mean_logprob", "token_logprobs")
        questions = [
            replace(q, extra={**q.extra, **{k: rows[q.id][k] for k in answer if rows[q.id].get(k)}})
            for q in every
            if q.id in labels
        ]
        out = []
        for held_out in [None, *args.hold_out]:
            start = time.perf_counter()
            out.append(setting(cfg, questions, labels, rows, held_out))
            out[-1]["seconds"] = round(time.perf_counter() - start, 1)
            print(json.dumps(out[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"labels": args.labels, "config": args.config,
                                        "rows": out}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
