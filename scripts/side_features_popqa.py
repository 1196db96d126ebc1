"""Text only vs side features only vs both, on the PopQA questions of the canonical split
(closed-book labels of SmolLM2-135M; side feature: s_pop). A CPU budget by default.

    python scripts/side_features_popqa.py --out reports/side-features [--train-examples 3000]

text: MiniLM on the question text; both: the same with `data.features=[s_pop]`; features:
a logistic regression on the same scaled features (value + missing flag), and Mallen's
per-relation popularity threshold (fitted on dev) for reference. AUROC and adaptive accuracy
with bootstrap 95% CIs on the PopQA test questions."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from retrieval_gate.data import canonical_questions
from retrieval_gate.data.features import SideFeatures
from retrieval_gate.evaluation.evaluate import evaluate_gate
from retrieval_gate.evaluation.report import table
from retrieval_gate.gates.learned import LearnedGate
from retrieval_gate.gates.registry import GateContext, build_gate
from retrieval_gate.labels.evalset import DEFAULT_RUN_DIR, load_splits
from retrieval_gate.training import load_config, train

LABELS = DEFAULT_RUN_DIR / "closed-book.jsonl"


class FeatureOnlyGate:
    """A logistic regression on the scaled side features alone (class-balanced)."""

    def __init__(self, side: SideFeatures, train_questions, y):
        self.side, self.name, self.threshold = side, "features only (logistic)", 0.5
        self.model = LogisticRegression(class_weight="balanced").fit(
            side.matrix(train_questions, strict=False), y
        )

    def scores(self, questions) -> np.ndarray:
        return self.model.predict_proba(self.side.matrix(questions, strict=False))[:, 1]


def learned(name: str, popqa, args, features: list[str]) -> LearnedGate:
    cfg = load_config(
        "configs/backbones/minilm.yaml",
        [f"data.label_file={LABELS}", f"run.output_dir={args.out / 'runs'}", f"run.name={name}",
         f"data.max_train_examples={args.train_examples}", "data.max_eval_examples=1000",
         "trainer.max_epochs=1", "trainer.enable_progress_bar=false",
         f"data.features={json.dumps(features)}"],
    )  # fmt: skip
    if not (args.out / "runs" / name / "gate.pt").is_file():
        train(cfg, popqa)
    return LearnedGate(args.out / "runs" / name, name=name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("reports/side-features"))
    p.add_argument("--train-examples", type=int, default=3000)
    p.add_argument("--resamples", type=int, default=1000)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    popqa = [q for q in canonical_questions() if q.source == "popqa"]
    sp = load_splits(LABELS, DEFAULT_RUN_DIR, popqa)
    side = SideFeatures.fit(sp.train.questions, ["s_pop"])
    gates = [
        learned("text", popqa, args, []),
        FeatureOnlyGate(side, sp.train.questions, sp.train.y),
        learned("text+s_pop", popqa, args, ["s_pop"]),
        build_gate("popularity", GateContext(sp.train, sp.dev)),
    ]
    rows, results = [], {}
    for gate in gates:
        start = time.perf_counter()
        r = evaluate_gate(gate, sp.test, args.resamples)
        m, ci = r.metrics, r.cis
        results[gate.name] = {"metrics": m, "ci95": ci, "seconds": time.perf_counter() - start}
        rows.append([gate.name, f"{m['auroc']:.3f} [{ci['auroc'][0]:.3f}, {ci['auroc'][1]:.3f}]",
                     f"{m['adaptive_accuracy']:.3f} [{ci['adaptive_accuracy'][0]:.3f}, "
                     f"{ci['adaptive_accuracy'][1]:.3f}]", f"{m['retrieval_rate']:.2f}"])  # fmt: skip
    n_answered = int((~np.isnan(sp.test.closed_correct) & ~np.isnan(sp.test.rag_correct)).sum())
    md = (f"PopQA test questions of the canonical split: {len(sp.test)} (adaptive accuracy on "
          f"the {n_answered} with both recorded answers); train {len(sp.train)} "
          f"(subsampled to {args.train_examples}), 1 epoch.\n\n"
          + table(["gate", "AUROC [95% CI]", "adaptive acc. [95% CI]", "retrieval rate"], rows))  # fmt: skip
    (args.out / "side-features.md").write_text(md + "\n")
    (args.out / "side-features.json").write_text(json.dumps(results, indent=1, default=str))
    print(md)


if __name__ == "__main__":
    main()
