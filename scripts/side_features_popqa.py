"""Text only vs side features only vs both, on the PopQA questions of the canonical split
(closed-book labels of SmolLM2-135M; side feature: s_pop), at a CPU budget.

    python scripts/side_features_popqa.py --out reports/side-features [--train-examples 3000]
        [--learned-run RUN ...]

Fine-tuning MiniLM twice did not fit this machine's budget (2 shared cores), so each variant is
a class-balanced logistic regression on the same inputs the learned gate's head sees: frozen
MiniLM mean-pooled text embeddings (text), the scaled side features of data/features.py (value
+ missing flag; features), or both concatenated (both); plus Mallen's per-relation s_pop
threshold fitted on dev, for reference. `--learned-run` adds fine-tuned gates (e.g. trained with
`--set "data.datasets=[popqa]"`, with and without `"data.features=[s_pop]"`). AUROC and adaptive accuracy with bootstrap 95% CIs on
the PopQA test questions (adaptive accuracy where both recorded answers exist)."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from retrieval_gate.data import canonical_questions
from retrieval_gate.data.features import SideFeatures
from retrieval_gate.evaluation.evaluate import evaluate_gate
from retrieval_gate.gates.learned import LearnedGate
from retrieval_gate.gates.registry import GateContext, build_gate
from retrieval_gate.labels.evalset import DEFAULT_RUN_DIR, load_splits
from retrieval_gate.retrieval.dense import MiniLMEncoder
from retrieval_gate.tables import markdown_table

LABELS = DEFAULT_RUN_DIR / "closed-book.jsonl"


class ProbeGate:
    """A logistic regression on precomputed inputs (question id -> row)."""

    def __init__(self, name: str, inputs: dict[str, np.ndarray], train_ids, y):
        self.name, self.threshold, self.inputs = name, 0.5, inputs
        x = np.stack([inputs[i] for i in train_ids])
        self.model = LogisticRegression(class_weight="balanced", max_iter=2000).fit(x, y)

    def scores(self, questions) -> np.ndarray:
        x = np.stack([self.inputs[q.id] for q in questions])
        return self.model.predict_proba(x)[:, 1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("reports/side-features"))
    p.add_argument("--train-examples", type=int, default=3000)
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--learned-run", type=Path, nargs="*", default=[], help="fine-tuned runs")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    popqa = [q for q in canonical_questions() if q.source == "popqa"]
    sp = load_splits(LABELS, DEFAULT_RUN_DIR, popqa)
    picked = sorted(
        random.Random(0).sample(range(len(sp.train)), min(args.train_examples, len(sp.train)))
    )
    train_qs = [sp.train.questions[i] for i in picked]
    y = sp.train.y[picked]
    used = [*train_qs, *sp.test.questions]
    side = SideFeatures.fit(train_qs, ["s_pop"])
    feats = dict(zip([q.id for q in used], side.matrix(used, strict=False), strict=True))
    emb = MiniLMEncoder(max_length=64).encode([q.text for q in used])
    text = dict(zip([q.id for q in used], emb, strict=True))
    both = {i: np.concatenate([text[i], feats[i]]) for i in text}
    ids = [q.id for q in train_qs]
    gates = [
        ProbeGate("text (MiniLM probe)", text, ids, y),
        ProbeGate("features (s_pop)", feats, ids, y),
        ProbeGate("text + s_pop", both, ids, y),
        build_gate("popularity", GateContext(sp.train, sp.dev)),
        *(LearnedGate(run) for run in args.learned_run),
    ]
    rows, results = [], {}
    for gate in gates:
        r = evaluate_gate(gate, sp.test, args.resamples)
        m, ci = r.metrics, r.cis
        results[gate.name] = {"metrics": m, "ci95": ci}
        rows.append([gate.name, f"{m['auroc']:.3f} [{ci['auroc'][0]:.3f}, {ci['auroc'][1]:.3f}]",
                     f"{m['adaptive_accuracy']:.3f} [{ci['adaptive_accuracy'][0]:.3f}, "
                     f"{ci['adaptive_accuracy'][1]:.3f}]", f"{m['retrieval_rate']:.2f}"])  # fmt: skip
    answered = int((~np.isnan(sp.test.closed_correct) & ~np.isnan(sp.test.rag_correct)).sum())
    md = (f"PopQA questions of the canonical split, closed-book labels (SmolLM2-135M): train "
          f"{len(train_qs)} (seeded sample of {len(sp.train)}), test {len(sp.test)} (adaptive "
          f"accuracy on the {answered} with both recorded answers).\n\n"
          + markdown_table(["gate", "AUROC [95% CI]", "adaptive acc. [95% CI]", "retrieval rate"], rows))  # fmt: skip
    (args.out / "side-features.md").write_text(md + "\n")
    (args.out / "side-features.json").write_text(json.dumps(results, indent=1, default=str))
    print(md)


if __name__ == "__main__":
    main()
