"""The cascade on recorded outcomes (`evaluate --answer-gate DIR`): every routing policy of a
router or binary gate, then a two-stage gate reading the closed-book answers it kept.

As in `rag`'s cascade mode (rag/cascade.py), the questions a policy answers with the first
strategy (no retrieval) have their closed-book answer read by the answer gate; at or above its
threshold a question is escalated to the next strategy by cost, and pays for both answers (its
cost and LLM calls are the first strategy's plus the next one's). At a budget, escalations
count in it: at most as many as the budget left after the policy's own choices pays for, the
highest scores first. Here the answers are the label file's recorded ones, so the cascade is
scored on every test question, with CIs, beside the policy it starts from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.adaptive_rag import STRATEGIES
from ..errors import ConfigError, DataError
from ..gates.base import Gate
from ..labels.evalset import EvalSet, with_recorded_answers
from ..labels.label_files import LabelFile
from ..labels.logprobs import MEAN_LOGPROB, TOKEN_LOGPROBS, answer_logprobs
from ..labels.strategy_labels import is_strategy_source
from ..rag.cascade import check_answer_gate, escalations

ANSWER_KEYS = {TOKEN_LOGPROBS, MEAN_LOGPROB}
FIRST = 0  # a label file's first strategy is the one without retrieval, the cascade's start
THEN_ANSWER_GATE = "+ answer gate"  # a cascade's policy name: "<gate> + answer gate @ ..."
ALONE = "answer gate alone"  # the cascade from "never": every question answered closed-book


@dataclass(frozen=True)
class AnswerGate:
    """A two-stage gate's scores of the test questions' recorded closed-book answers."""

    name: str
    scores: np.ndarray  # P(needs retrieval) per test question, read from its answer
    threshold: float
    without_answer: int  # test questions with no recorded answer: their question-only score
    dev_scores: np.ndarray | None = None  # the same on the dev questions: thresholds for budgets

    def escalated(
        self, choice: np.ndarray, costs: Sequence[float], budget: float | None
    ) -> np.ndarray:
        """Which questions the cascade escalates from `choice` (the policy's strategy index
        per question) at `budget` (mean cost per question in `costs`' unit; None: no cap)."""
        up = next_strategy(costs)
        kept = np.flatnonzero(choice == FIRST)
        slack = None if budget is None else budget * len(choice) - float(
            np.asarray(costs, float)[choice].sum())  # fmt: skip
        picks = escalations(self.scores[kept], self.threshold, slack, float(costs[up]))
        out = np.zeros(len(choice), bool)
        out[kept[picks]] = True
        return out

    def threshold_line(
        self, correct: np.ndarray, paid: np.ndarray, calls: np.ndarray | None
    ) -> list[tuple[float, float, float]]:
        """(mean cost, mean LLM calls, accuracy) of the answer gate alone (every question
        closed-book first, no cap) at thresholds from escalating none to escalating all: at
        most 41 points of its curve, the first and the last kept."""
        n, up = len(self.scores), next_strategy(paid.mean(axis=0))
        _, escalated, spent, right = alone_curve(self.scores, correct, paid, up)
        kept = np.unique(np.linspace(1, len(escalated) - 1, 40).round().astype(int))
        out = []
        for i in [0, *kept]:
            llm = (calls[FIRST] * n + escalated[i] * calls[up]) / n if calls is not None else np.nan
            out.append((float(spent[i] / n), float(llm), float(right[i] / n)))
        return out

    def threshold_for(
        self, budget: float, dev_paid: np.ndarray, dev_correct: np.ndarray
    ) -> float | None:
        """The threshold at which the answer gate alone is most accurate on dev while spending
        at most `budget` a question there (`dev_paid`, `dev_correct`: each dev question's cost
        and correctness per strategy; the cheaper of equals); None where even escalating none
        costs more, or there are no dev scores."""
        if self.dev_scores is None or not len(self.dev_scores):
            return None
        n, up = len(self.dev_scores), next_strategy(dev_paid.mean(axis=0))
        thresholds, _, spent, right = alone_curve(self.dev_scores, dev_correct, dev_paid, up)
        fits = np.flatnonzero(spent <= budget * n + 1e-9)
        if not len(fits):
            return None
        return float(thresholds[max(fits, key=lambda i: (right[i], -i))])

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "threshold": self.threshold,
                "without_answer": self.without_answer, "n": int(len(self.scores))}  # fmt: skip


def alone_curve(
    scores: np.ndarray, correct: np.ndarray, paid: np.ndarray, up: int
) -> tuple[np.ndarray, ...]:
    """The answer gate alone at each of its thresholds, from none escalated (threshold inf)
    to all: (threshold, questions escalated, total cost, questions right), one entry per
    distinct score (ties escalate together); `correct`, `paid`: per question and strategy."""
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    # escalating the k highest scores (the surest-wrong answers) first
    spent = paid[:, FIRST].sum() + np.concatenate([[0.0], np.cumsum(paid[order, up])])
    gain = correct[order, up] - correct[order, FIRST]
    right = correct[:, FIRST].sum() + np.concatenate([[0.0], np.cumsum(gain)])
    # k may stop only between two different scores
    last = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True)) if len(ranked) else []
    ends = np.concatenate([[0], np.asarray(last, int) + 1])
    thresholds = np.concatenate([[np.inf], ranked[ends[1:] - 1]])
    return thresholds, ends, spent[ends], right[ends]


def answer_gate_alone(gate: AnswerGate) -> str:
    """The name of the policy that answers every question closed-book first."""
    return f"{ALONE} (every question closed-book first) @ threshold {gate.threshold:.3g}"


def answer_gate_caption(report: Mapping[str, Any]) -> str:
    """What the routing table's cascade rows are (`report`: a routing report)."""
    gate = report["answer_gate"]
    up = report["strategies"][next_strategy(report["costs"])]
    missing = (f" {gate['without_answer']} of the {gate['n']} test questions have no recorded "
               "answer: their question-only score decides." if gate["without_answer"] else "")  # fmt: skip
    return (f"`{THEN_ANSWER_GATE}` rows: the policy, then the two-stage gate `{gate['name']}` "
            f"(threshold {gate['threshold']:.3g}) reads the recorded closed-book answers of the "
            f"questions the policy answers with {report['strategies'][FIRST]} and escalates "
            f"those at or above its threshold to {up}, which pays for both answers (cost and "
            f"LLM calls); at a budget, the escalations count in it. `{ALONE}`: every question "
            f"answered with {report['strategies'][FIRST]} first.{missing}")  # fmt: skip


def next_strategy(costs: Sequence[float]) -> int:
    """The strategy escalated questions run: the cheapest after the first (ties: the first
    listed), as the live cascade picks it."""
    rest = [i for i in range(len(costs)) if i != FIRST]
    return min(rest, key=lambda i: (costs[i], i))


def check_answer_labels(label_files: Sequence[Path]) -> None:
    """`--answer-gate` reads each label file's recorded closed-book answers: every label file
    must be strategy labels that recorded the first strategy's token log-probabilities
    (checked before any gate is built)."""
    for path in label_files:
        if not is_strategy_source(path):
            raise ConfigError(
                f"--answer-gate: --labels {path} holds no strategy labels; the cascade is "
                "scored in the routing report of strategy labels (`label --policy outcomes` "
                "writes strategies.jsonl), where each question's closed-book answer is recorded"
            )
        if not (Path(path).is_file() and answer_logprobs(path)):  # a release records none
            raise DataError(
                "--answer-gate: no question's closed-book answer has recorded log-probabilities "
                "here, and the answer gate reads them; import your outcomes with a "
                f"`{_first_strategy(path)}_token_logprobs` column (`label --policy outcomes`, "
                "docs/label.md)",
                path,
            )


def _first_strategy(path: Path) -> str:
    """The strategy the cascade starts with: the label file's first."""
    named = LabelFile(path).meta.get("strategies") if Path(path).is_file() else None
    return str(named[0]) if named else STRATEGIES[FIRST]


def answer_gate_scores(gate: Gate, test: EvalSet, dev: EvalSet, label_file: Path) -> AnswerGate:
    """`gate` (a two-stage gate) on the test and dev questions with their recorded answers."""
    check_answer_gate(gate)
    answered = with_recorded_answers(test, label_file)
    missing = sum(1 for q in answered.questions if not ANSWER_KEYS & q.extra.keys())
    scores = np.asarray(gate.scores(answered.questions), float)
    on_dev = np.asarray(gate.scores(with_recorded_answers(dev, label_file).questions), float)
    return AnswerGate(gate.name, scores, float(gate.threshold), missing, on_dev)
