"""What a gate learns (`data.task`). A `Task` owns its targets (reading and checking its
labels), its loss, its probabilities and the binary view its metrics take, so the data
module, the Lightning module, the trainer and the exporter ask the task instead of branching
on which one it is.

- `ClassTask`: one class index a question (class 0 = no retrieval): the binary gate
  (`label`) and RRCP's 3-way (`label3`); softmax over the classes, cross-entropy weighted as
  `data.balance` says.
- `StrategyTask`: a router (issue 25), one independent head a strategy, P(correct | strategy):
  sigmoid, binary cross-entropy on each strategy's recorded correctness; labels from a
  strategy label file, a release folder or `adaptive-rag`; after the fit the trainer
  calibrates its price (`routes`: training/calibrate_router.py). Its binary view: is the
  no-retrieval answer wrong.

Extending: a new task is one instance in `TASKS` (a new kind of target: one subclass)."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..errors import DataError
from ..labels import LabelFile
from ..labels.label_files import Stamp, missing, stamped
from ..labels.strategy_labels import (
    MAKE_THEM,
    RELEASE_LABELS,
    is_strategy_source,
    load_strategy_labels,
    strategy_labels_sha256,
)
from ..strategies import BUILTIN, NO_RETRIEVAL
from .provenance import label_provenance, resolved


@dataclass(frozen=True)
class Targets:
    """A task's labels: id -> target (a class index, or each strategy's correctness), the
    strategies a router's heads are (empty for a class task), per-question costs where the
    labels carry them, and where the labels came from (labels.json)."""

    labels: dict[str, Any]
    strategies: tuple[str, ...]
    costs: dict[str, tuple[float, ...]]
    provenance: dict[str, Any]
    # id -> the stamp its row recorded (label_files.stamped): what the rows were made for
    question_shas: dict[str, Stamp] = field(default_factory=dict)


def memory_provenance(labels: Mapping[str, Any]) -> dict[str, Any]:
    """labels.json for labels given in memory: their checksum and the labels themselves (the
    run then carries what an export's parity check needs)."""
    text = json.dumps(labels, sort_keys=True)
    return {"path": None, "source": "in memory (train(..., labels=...))",
            "sha256": hashlib.sha256(text.encode()).hexdigest(), "rows_in_file": len(labels),
            "meta": None, "labels": dict(sorted(labels.items()))}  # fmt: skip


@dataclass(frozen=True)
class Task(ABC):
    """The interface; `label_field` is the label-file field it learns from, `classes` its
    outputs (class 0 is always "no retrieval"; a gate's score is 1 - P(class 0))."""

    label_field: str
    classes: tuple[str, ...]
    routes: ClassVar[bool] = False  # a router: strategies, costs and a budget
    label_dtype: ClassVar[torch.dtype] = torch.long

    # ---------------------------------------------------------------- targets
    @abstractmethod
    def check_source(self, label_file: str) -> None:
        """Refuses a `data.label_file` this task cannot read, before anything loads."""
        ...

    @abstractmethod
    def read(self, label_file: str) -> Targets:
        """The labels of `data.label_file`, checked."""

    def from_memory(self, labels: Mapping[str, Any]) -> Targets:
        """`train(..., labels=...)`'s mapping, checked like a label file's rows (None =
        unlabelled)."""
        if not isinstance(labels, Mapping):
            raise DataError(
                f"labels must be a mapping question id -> label, got {type(labels).__name__}"
            )
        out = {str(k): self._memory_target(str(k), v) for k, v in labels.items() if v is not None}
        if not out:
            raise DataError("labels: no labelled question (the mapping is empty or all None)")
        return self._targets(out, memory_provenance(out), "labels")

    @abstractmethod
    def _memory_target(self, qid: str, value: Any) -> Any: ...

    def _targets(self, labels: dict[str, Any], provenance: dict[str, Any], where: Any) -> Targets:
        return Targets(labels, (), {}, provenance)

    def labels_sha256(self, label_file: str) -> str:
        return label_provenance(Path(label_file))["sha256"]

    # ---------------------------------------------------------------- the model
    def outputs(self, targets: Targets) -> tuple[str, ...]:
        """What the model's outputs (and a stacked head's heads) are."""
        return self.classes

    @abstractmethod
    def loss(self, class_weights: torch.Tensor | None) -> nn.Module: ...

    @abstractmethod
    def probabilities(self, logits: torch.Tensor) -> torch.Tensor: ...

    def binary_view(self, labels: torch.Tensor) -> torch.Tensor:
        """The labels its metrics take: a class index (classes > 0 need retrieval)."""
        return labels

    def metric_classes(self, outputs: int) -> int:
        return outputs

    def decisions(self, logits: torch.Tensor, p: torch.Tensor, threshold: float) -> torch.Tensor:
        """Hard decisions: retrieve at the threshold for two classes, else the argmax."""
        if logits.shape[-1] == 2:
            return (p >= threshold).long()
        return logits.argmax(-1)

    # ---------------------------------------------------------------- class balance
    weighs_classes: ClassVar[bool] = True  # `data.balance` applies: class weights, sampler

    def class_counts(self, targets: Sequence[Any], outputs: int) -> list[int]:
        counts = Counter(targets)
        return [counts.get(c, 0) for c in range(outputs)]

    # ---------------------------------------------------------------- the run
    def hashed_model_keys(self, model: dict[str, Any]) -> dict[str, Any]:
        """The `model` config keys that make a run of this task the same run."""
        return model


@dataclass(frozen=True)
class ClassTask(Task):
    """One class index a question: softmax, cross-entropy."""

    def check_source(self, label_file: str) -> None:
        if not Path(label_file).is_file():
            raise DataError(missing(Path(label_file)), label_file)

    def read(self, label_file: str) -> Targets:
        """id -> class index; a clear error for rows that do not fit the task."""
        self.check_source(label_file)
        path = Path(label_file)
        # Provenance is taken when the labels are read: a label file still being written by a
        # labelling run may have grown by the time training ends.
        provenance = label_provenance(path)
        out: dict[str, int] = {}
        rows = LabelFile(path).rows
        for qid, row in rows.items():
            if self.label_field not in row:
                raise DataError(
                    f"row {qid!r} has no {self.label_field!r} field: this task needs label "
                    "files with it (`retrieval-gate label --policy ...` writes them)",
                    path,
                )
            if row[self.label_field] is not None:
                out[qid] = self.class_index(qid, row[self.label_field], path)
        if not out:
            raise DataError("label file has no labelled rows", path)
        return Targets(out, (), {}, provenance, stamped(rows))

    def class_index(self, qid: str, value: object, where: Path | str | None) -> int:
        n = len(self.classes)
        if value not in range(n) or isinstance(value, bool):
            raise DataError(
                f"row {qid!r}: {self.label_field}={value!r} is not a class 0..{n - 1}", where
            )
        return int(value)

    def _memory_target(self, qid: str, value: Any) -> int:
        # True/False count as 1/0 for the binary task
        value = int(value) if isinstance(value, bool) and len(self.classes) == 2 else value
        return self.class_index(qid, value, "labels")

    def loss(self, class_weights: torch.Tensor | None) -> nn.Module:
        return nn.CrossEntropyLoss(weight=class_weights)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(-1)

    def hashed_model_keys(self, model: dict[str, Any]) -> dict[str, Any]:
        # router keys: runs trained before they existed still --resume
        return {k: v for k, v in model.items() if k not in ("costs", "budget")}


@dataclass(frozen=True)
class StrategyTask(Task):
    """A router: one sigmoid head a strategy, P(correct | strategy)."""

    routes: ClassVar[bool] = True
    label_dtype: ClassVar[torch.dtype] = torch.float32  # correctness per strategy
    weighs_classes: ClassVar[bool] = False  # weighting would bias P(correct | strategy)

    def check_source(self, label_file: str) -> None:
        path = Path(label_file)
        if label_file != RELEASE_LABELS and not (path.is_file() or path.is_dir()):  # a release
            raise DataError(missing(path, "strategy label file", MAKE_THEM), path)
        if not is_strategy_source(label_file):
            raise DataError(
                "data.task=strategies needs strategy labels in data.label_file: a "
                "strategies.jsonl (`retrieval-gate label --policy outcomes ...`), an "
                f"Adaptive-RAG release folder or {RELEASE_LABELS!r} (the bundled release)",
                Path(label_file),
            )

    def read(self, label_file: str) -> Targets:
        """From a strategy label file, a release folder or `adaptive-rag`."""
        self.check_source(label_file)
        lab = load_strategy_labels(label_file)
        labels = {i: tuple(float(r["correct"][s]) for s in lab.strategies)
                  for i, r in lab.rows.items()}  # fmt: skip
        costs = {i: tuple(float(r["cost"][s]) for s in lab.strategies)
                 for i, r in lab.rows.items() if r.get("cost")}  # fmt: skip
        provenance = {"path": str(label_file), **resolved(label_file),
                      "sha256": strategy_labels_sha256(lab),
                      "rows_in_file": len(lab.rows), "meta": lab.meta}  # fmt: skip
        return self._checked(Targets(labels, lab.strategies, costs, provenance, stamped(lab.rows)),
                             label_file)  # fmt: skip

    def _memory_target(self, qid: str, value: Any) -> tuple[float, ...]:
        if (
            not isinstance(value, Sequence)
            or isinstance(value, str)
            or len(value) < 2
            or any(v not in (0, 1) for v in value)
        ):
            raise DataError(f"labels[{qid!r}]={value!r}: a router's label is one 0/1 "
                            "correctness per strategy, in cost order", "labels")  # fmt: skip
        return tuple(float(v) for v in value)

    def _targets(self, labels: dict[str, Any], provenance: dict[str, Any], where: Any) -> Targets:
        return self._checked(Targets(labels, self.classes, {}, provenance), where)

    def _checked(self, targets: Targets, where: Any) -> Targets:
        widths = {len(v) for v in targets.labels.values()}
        if widths != {len(targets.strategies)}:
            raise DataError(f"router labels give {sorted(widths)} correctness values a "
                            f"question for {len(targets.strategies)} strategies "
                            f"({', '.join(targets.strategies)})", where)  # fmt: skip
        return targets

    def labels_sha256(self, label_file: str) -> str:
        return self.read(label_file).provenance["sha256"]

    def outputs(self, targets: Targets) -> tuple[str, ...]:
        return targets.strategies

    def loss(self, class_weights: torch.Tensor | None) -> nn.Module:
        return nn.BCEWithLogitsLoss()

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.sigmoid()

    def binary_view(self, labels: torch.Tensor) -> torch.Tensor:
        return (labels[:, 0] < 0.5).long()  # the no-retrieval answer is wrong

    def metric_classes(self, outputs: int) -> int:
        return 2

    def decisions(self, logits: torch.Tensor, p: torch.Tensor, threshold: float) -> torch.Tensor:
        return (p >= threshold).long()

    def class_counts(self, targets: Sequence[Any], outputs: int) -> list[int]:
        """Questions each strategy answers."""
        return [int(sum(y[c] for y in targets)) for c in range(outputs)]


TASKS: dict[str, Task] = {
    "binary": ClassTask("label", (NO_RETRIEVAL, "retrieval")),
    "3way": ClassTask("label3", (NO_RETRIEVAL, "retrieval", "retrieval_complex")),  # RRCP
    "strategies": StrategyTask("correct", BUILTIN.names),
}
