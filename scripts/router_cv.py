"""The shipped router config over several seeded splits of the bundle: what one test split of
450 questions cannot say (its accuracy CI is +-0.04), the mean over splits can.

    .venv/bin/python scripts/router_cv.py --seeds 10 [--config PATH] [--set KEY=VALUE ...] \
        [--out reports/router-cv.json]

Each seed k trains the config with `data.split_seed=k` (a different grouped, stratified 70/15/15
split of the 3,000 questions) through `retrieval_gate.training.train`, then routes that split's
test questions (never fitted or calibrated on) at budgets 1.0 and 1.67 through `route(budget=)`,
as a user would. Prints each seed's row and the mean with its standard error; asserts nothing."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

BUDGETS = (1.0, 1.67)


def one_split(config: str, overrides: list[str], seed: int, work: Path) -> dict[str, float]:
    from retrieval_gate import metrics as M
    from retrieval_gate.gates.learned import load_learned
    from retrieval_gate.labels.evalset import load_splits, release_question_set
    from retrieval_gate.labels.strategy_labels import RELEASE_LABELS
    from retrieval_gate.pricing import outcome
    from retrieval_gate.training import load_config, train

    cfg = load_config(config, [*overrides, f"data.split_seed={seed}", f"run.output_dir={work}",
                               f"run.name=cv{seed}"])  # fmt: skip
    run = train(cfg)
    router = load_learned(run.path, device="cpu")
    test = load_splits(RELEASE_LABELS, None, release_question_set(RELEASE_LABELS, seed)).test
    P = router.strategy_proba(test.questions)
    row = {"seed": seed, "n_test": len(test), "auroc": M.auroc(1 - test.correct[:, 0], 1 - P[:, 0])}
    paid = test.costs_paid(router.calibration.costs)
    for budget in BUDGETS:
        choice = np.array(
            [router.strategies.index(s) for s in router.route(test.questions, budget)]
        )
        ok, cost = outcome(choice, test.correct, paid)
        row[f"acc@{budget:g}"], row[f"cost@{budget:g}"] = float(ok.mean()), float(cost.mean())
    for i, name in enumerate(router.strategies):
        row[f"always {name}"] = float(test.correct[:, i].mean())
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/experiments/router-adaptive-rag-llama8b.yaml")
    p.add_argument("--seeds", type=int, default=10, help="splits: data.split_seed 0 .. N-1")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--out", type=Path, help="write the rows and the means as JSON here")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="router-cv-") as work:
        for seed in range(args.seeds):
            start = time.perf_counter()
            rows.append(one_split(args.config, args.set, seed, Path(work)))
            print(json.dumps({**rows[-1], "seconds": round(time.perf_counter() - start, 1)}),
                  flush=True)  # fmt: skip
    keys = [k for k in rows[0] if k not in ("seed", "n_test")]
    means = {k: (float(np.mean([r[k] for r in rows])),
                 float(np.std([r[k] for r in rows], ddof=1) / np.sqrt(len(rows))) if len(rows) > 1
                 else 0.0) for k in keys}  # fmt: skip
    print(f"{len(rows)} splits of {args.config}; mean (standard error):")
    for k, (m, se) in means.items():
        print(f"  {k:28s} {m:.4f} ({se:.4f})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows, "means": means, "config": args.config,
                                        "overrides": args.set}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
