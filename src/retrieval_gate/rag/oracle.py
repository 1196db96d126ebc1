"""The oracles: retrieve exactly when a label file says the question needs retrieval
(`OracleGate`), or run exactly the cheapest strategy that answered (`OracleRouter`).

They are the ceiling of the adaptive modes in the RAG comparison (with rag-gain labels:
retrieve exactly where retrieval turns a wrong closed-book answer right)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..gates.base import Questions, as_questions
from ..labels.label_files import LabelFile, read_labels
from ..questions import Question
from ..strategies import BUILTIN, StrategyRegistry


class OracleGate:
    """A `Gate` whose score is the label itself (1.0 = retrieve, 0.0 = do not)."""

    threshold = 0.5

    def __init__(self, labels: Mapping[str, int], name: str = "oracle", source: str = ""):
        self.labels = dict(labels)
        self.name = name
        self.source = source  # where the labels came from, for error messages

    @classmethod
    def from_file(cls, path: str | Path, null_as: int = 0) -> OracleGate:
        """Every row of a label file. A null label is a question the policy found no reason
        to retrieve for (rag-gain: retrieval changes nothing, the answer is wrong either way),
        so by default the oracle takes the cheaper path and does not retrieve."""
        read_labels(path)  # clear errors for a missing or empty file
        rows = LabelFile(path).rows
        labels = {i: null_as if r["label"] is None else int(r["label"]) for i, r in rows.items()}
        return cls(labels, source=str(path))

    def covers(self, questions: Sequence[Question]) -> list[Question]:
        """The questions this oracle has a label for (modes compare on the same questions)."""
        return [q for q in questions if q.id in self.labels]

    def scores(self, questions: Questions) -> np.ndarray:
        questions = as_questions(questions)
        missing = [q.id for q in questions if q.id not in self.labels]
        if missing:
            raise DataError(
                f"the oracle has no label for {len(missing)} question(s), e.g. {missing[0]!r}; "
                "label them first (`retrieval-gate label`) or restrict the questions to the "
                "labelled ones",
                self.source or None,
            )
        return np.array([float(self.labels[q.id]) for q in questions])


class OracleRouter:
    """A `Router` that sends each question down a known strategy (id -> strategy): built from
    a run's answers under every strategy, the cheapest one that was right."""

    threshold = 0.5

    def __init__(self, picks: Mapping[str, str], name: str = "oracle", source: str = "",
                 strategies: StrategyRegistry = BUILTIN):  # fmt: skip
        self.picks = dict(picks)
        self.name, self.source = name, source
        self.registry = strategies
        self.strategies = strategies.names
        strategies.check(sorted(set(self.picks.values())), f"oracle {name!r}")

    def strategy_registry(self) -> StrategyRegistry:
        return self.registry

    def route(self, questions: Questions, budget: float | None = None) -> list[str]:
        questions = as_questions(questions)
        missing = [q.id for q in questions if q.id not in self.picks]
        if missing:
            raise DataError(f"the oracle has no strategy for {len(missing)} question(s), e.g. "
                            f"{missing[0]!r}", self.source or None)  # fmt: skip
        return [self.picks[q.id] for q in questions]

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        routed = self.route(questions)
        out = np.zeros((len(routed), len(self.strategies)))
        out[np.arange(len(routed)), [self.strategies.index(s) for s in routed]] = 1.0
        return out

    def scores(self, questions: Questions) -> np.ndarray:
        return np.array([float(self.registry[s].retrieves) for s in self.route(questions)])
