"""Questions + labels (a label file, or a mapping id -> label in memory) + the canonical split,
tokenised with dynamic padding."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, WeightedRandomSampler

from ..data import DataError, assign_splits, load_all
from ..data.features import GateFeatures, SideFeatures
from ..data.splits import with_splits
from ..labels import LabelFile
from ..labels.strategy_labels import load_strategy_labels, strategy_labels_sha256
from ..questions import Question
from .config import TASKS, DataConfig
from .provenance import label_provenance

# Class index -> meaning, per task (also written into checkpoints and ONNX metadata).
CLASS_NAMES = {name: list(task.classes) for name, task in TASKS.items()}


def _class_index(qid: str, value: object, task: str, where: Path | str | None) -> int:
    field, n_classes = TASKS[task].label_field, len(TASKS[task].classes)
    if value not in range(n_classes) or isinstance(value, bool):
        raise DataError(f"row {qid!r}: {field}={value!r} is not a class 0..{n_classes - 1}", where)
    return int(value)


def task_labels(path: Path, task: str) -> dict[str, Any]:
    """id -> class index for a task (a router's task: id -> each strategy's correctness as
    floats); a clear error for rows that do not fit it."""
    if TASKS[task].multilabel:
        return strategy_targets(path).labels
    if not path.is_file():
        raise DataError(
            "label file not found; run `retrieval-gate label` or fix data.label_file", path
        )
    rows = LabelFile(path).rows
    field = TASKS[task].label_field
    out: dict[str, int] = {}
    for qid, row in rows.items():
        if field not in row:
            raise DataError(
                f"row {qid!r} has no {field!r} field: task {task!r} needs label files with it "
                "(`retrieval-gate label --policy ...` writes them)",
                path,
            )
        if row[field] is not None:
            out[qid] = _class_index(qid, row[field], task, path)
    if not out:
        raise DataError("label file has no labelled rows", path)
    return out


@dataclass(frozen=True)
class StrategyTargets:
    """A router's training targets: strategies in cost order, id -> each strategy's
    correctness (0/1 floats), and per-question costs where the labels carry them."""

    strategies: tuple[str, ...]
    labels: dict[str, tuple[float, ...]]
    costs: dict[str, tuple[float, ...]]
    provenance: dict[str, Any]


def strategy_targets(source: str | Path) -> StrategyTargets:
    """From a strategy label file, a release folder or `adaptive-rag` (labels.strategy_labels)."""
    lab = load_strategy_labels(source)
    labels = {i: tuple(float(r["correct"][s]) for s in lab.strategies) for i, r in lab.rows.items()}
    costs = {i: tuple(float(r["cost"][s]) for s in lab.strategies)
             for i, r in lab.rows.items() if r.get("cost")}  # fmt: skip
    provenance = {"path": str(source), "sha256": strategy_labels_sha256(lab),
                  "rows_in_file": len(lab.rows), "meta": lab.meta}  # fmt: skip
    return StrategyTargets(lab.strategies, labels, costs, provenance)


def memory_labels(labels: Mapping[str, Any], task: str) -> dict[str, Any]:
    """`train(..., labels=...)`'s mapping id -> class index, checked like a label file's rows
    (None = unlabelled; True/False count as 1/0 for the binary task; a router's task: id ->
    a sequence of 0/1, one per strategy)."""
    if not isinstance(labels, Mapping):
        raise DataError(
            f"labels must be a mapping question id -> label, got {type(labels).__name__}"
        )
    out = {}
    for qid, value in labels.items():
        if value is None:
            continue
        if TASKS[task].multilabel:
            out[str(qid)] = _correctness(str(qid), value)
            continue
        value = int(value) if isinstance(value, bool) and task == "binary" else value
        out[str(qid)] = _class_index(str(qid), value, task, "labels")
    if not out:
        raise DataError("labels: no labelled question (the mapping is empty or all None)")
    return out


def _correctness(qid: str, value: Any) -> tuple[float, ...]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) < 2
        or any(v not in (0, 1) for v in value)
    ):
        raise DataError(f"labels[{qid!r}]={value!r}: a router's label is one 0/1 correctness "
                        "per strategy, in cost order", "labels")  # fmt: skip
    return tuple(float(v) for v in value)


def memory_provenance(labels: Mapping[str, Any]) -> dict[str, Any]:
    """labels.json for labels given in memory: their checksum and the labels themselves (the
    run then carries what an export's parity check needs)."""
    text = json.dumps(labels, sort_keys=True)
    return {"path": None, "source": "in memory (train(..., labels=...))",
            "sha256": hashlib.sha256(text.encode()).hexdigest(), "rows_in_file": len(labels),
            "meta": None, "labels": dict(sorted(labels.items()))}  # fmt: skip


def labelled_splits(
    questions: Sequence[Question], labels: dict[str, int], split_seed: int, path: Path | None
) -> dict[str, list[tuple[str, str, int]]]:
    """split -> [(id, text, label)]. Questions that carry their split (a question file's own,
    or the canonical one) keep it; otherwise the split is `assign_splits` over ALL questions,
    so every label file shares one train/dev/test assignment."""
    known = {q.id: q for q in questions}
    missing = [i for i in labels if i not in known]
    if len(missing) == len(labels):
        raise DataError(
            f"none of the {len(labels)} label ids is a known question id (e.g. {missing[0]!r}): "
            "the label file belongs to other data",
            path,
        )
    if all(q.split for q in questions):
        splits = {q.id: str(q.split) for q in questions}
    else:
        splits = assign_splits(questions, seed=split_seed)
    out: dict[str, list[tuple[str, str, int]]] = {"train": [], "dev": [], "test": []}
    for qid in sorted(labels):
        if qid in known:
            out[splits[qid]].append((qid, known[qid].text, labels[qid]))
    return out


def config_questions(data: DataConfig) -> Sequence[Question]:
    """`data.questions` (with `data.fields`) when set, else the bundled `data.datasets`."""
    if data.questions:
        from ..data.user_questions import question_set

        return question_set(data.questions, data.fields)
    return load_all(list(data.datasets) if data.datasets else None)


def training_questions(data: DataConfig) -> list[Question]:
    """The questions a run trained on with the split training gave them: their own split, else
    `assign_splits` over them (as `labelled_splits` does)."""
    qs = list(config_questions(data))
    if all(q.split for q in qs):
        return qs
    return with_splits(qs, assign_splits(qs, seed=data.split_seed))


CALIBRATION_QUESTIONS = 256  # dev questions int8's activation ranges are measured on


def _subsample(rows: list, n: int | None, seed: int) -> list:
    if n is None or n >= len(rows):
        return rows
    return sorted(random.Random(seed).sample(rows, n))


def needs_retrieval(y: Any) -> bool:
    """The binary view of a label: a class > 0, or the first strategy wrong."""
    return bool(y[0] == 0) if isinstance(y, tuple) else bool(y > 0)


class Collate:
    """Tokenises a batch and pads it to its own longest row (dynamic padding, right side)."""

    def __init__(self, tokenizer: Any, max_length: int, multilabel: bool = False):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.dtype = torch.float32 if multilabel else torch.long  # correctness per strategy

    def __call__(self, batch: list[tuple]) -> dict[str, torch.Tensor]:
        """Rows are (id, text, label) or, with side features, (id, text, features, label)."""
        enc = self.tokenizer(
            [row[1] for row in batch],
            truncation=True,
            max_length=self.max_length,
            padding=True,
            return_tensors="pt",
        )
        out = {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": torch.tensor([y for *_, y in batch], dtype=self.dtype),
        }
        if len(batch[0]) == 4:
            out["features"] = torch.tensor(np.stack([row[2] for row in batch]))
        return out


class GateDataModule(pl.LightningDataModule):
    """Labelled questions on the canonical split. `questions` defaults to `data.questions` (a
    question file, its own split) or else every bundled dataset; `labels` (id -> class index)
    to the label file `data.label_file`."""

    def __init__(
        self,
        tokenizer: Any,
        data: DataConfig,
        seed: int = 0,
        questions: Sequence[Question] | None = None,
        labels: Mapping[str, int] | None = None,
    ):
        super().__init__()
        self.cfg = data
        self.seed = seed
        self.tokenizer = tokenizer
        task = TASKS[data.task]
        self.multilabel = task.multilabel
        self.collate = Collate(tokenizer, data.max_length, task.multilabel)
        self.strategies: tuple[str, ...] = task.classes if task.multilabel else ()
        self.question_costs: dict[str, tuple[float, ...]] = {}  # per question, where given
        if labels is not None:
            self.path = None
            labels = memory_labels(labels, data.task)
            self.provenance = memory_provenance(labels)
        elif not data.label_file:
            raise DataError("no labels: set data.label_file or pass labels=")
        elif task.multilabel:  # a strategy label file, a release folder or `adaptive-rag`
            self.path = Path(data.label_file)
            targets = strategy_targets(data.label_file)
            labels, self.strategies = targets.labels, targets.strategies
            self.question_costs, self.provenance = targets.costs, targets.provenance
        else:
            self.path = Path(data.label_file)
            labels = task_labels(self.path, data.task)
            # Provenance is taken when the labels are read: a label file still being written
            # by a labelling run may have grown by the time training ends.
            self.provenance = label_provenance(self.path)
        if task.multilabel:
            widths = {len(v) for v in labels.values()}
            if widths != {len(self.strategies)}:
                raise DataError(f"router labels give {sorted(widths)} correctness values a "
                                f"question for {len(self.strategies)} strategies "
                                f"({', '.join(self.strategies)})", self.path or "labels")  # fmt: skip
        self.num_classes = len(self.strategies) if task.multilabel else len(task.classes)
        qs = questions if questions is not None else config_questions(data)
        rows = labelled_splits(qs, labels, data.split_seed, self.path)
        self.rows = {
            "train": _subsample(rows["train"], data.max_train_examples, seed),
            "dev": _subsample(rows["dev"], data.max_eval_examples, seed),
            "test": _subsample(rows["test"], data.max_eval_examples, seed),
        }
        for split, part in self.rows.items():
            if not part:
                raise DataError(f"the {split} split has no labelled questions", self.path)
        self.questions = {q.id: q for q in qs}
        self.side_features: GateFeatures | None = None
        if data.features:  # the scaling is fitted on the train split
            train = [self.questions[r[0]] for r in self.rows["train"]]
            self.attach_features(SideFeatures.fit(train, list(data.features)))

    def attach_features(self, features: GateFeatures) -> None:
        """Puts each row's features (side features, or a stacked router's text features)
        beside its text: rows become (id, text, features, label)."""
        self.side_features = features
        for split, rows in self.rows.items():
            feats = features.matrix([self.questions[r[0]] for r in rows], strict=False)
            self.rows[split] = [(r[0], r[1], f, r[-1]) for r, f in zip(rows, feats, strict=True)]

    def calibration_sample(self, n: int = CALIBRATION_QUESTIONS) -> dict[str, Any]:
        """Up to `n` dev questions (texts and scaled side features), kept in the run for int8
        calibration at export: the dev split of questions handed in memory is found nowhere
        else later."""
        rows = _subsample(self.rows["dev"], n, self.seed)
        features = [row[2].tolist() for row in rows] if self.side_features else None
        return {"split": "dev", "texts": [row[1] for row in rows], "features": features}

    def class_counts(self) -> list[int]:
        if self.multilabel:  # questions each strategy answers
            return [int(sum(y[c] for *_, y in self.rows["train"])) for c in range(self.num_classes)]
        counts = Counter(y for *_, y in self.rows["train"])
        return [counts.get(c, 0) for c in range(self.num_classes)]

    def class_weights(self) -> torch.Tensor | None:
        """n / (C * n_c) on the train split: each class weighs the same in the loss (not for
        a router: its heads estimate P(correct | strategy), which weighting would bias)."""
        if self.cfg.balance != "class_weights" or self.multilabel:
            return None
        counts = torch.tensor(self.class_counts(), dtype=torch.float).clamp(min=1)
        return counts.sum() / (len(counts) * counts)

    def summary(self) -> dict[str, Any]:
        return {split: {"n": len(r), "positives": sum(needs_retrieval(y) for *_, y in r)}
                for split, r in self.rows.items()}  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        rows = self.rows["train"]
        sampler = None
        if self.cfg.balance == "sampler" and not self.multilabel:
            counts = self.class_counts()
            weights = [1.0 / max(counts[y], 1) for *_, y in rows]
            gen = torch.Generator().manual_seed(self.seed)
            sampler = WeightedRandomSampler(weights, len(rows), replacement=True, generator=gen)
        return DataLoader(
            rows,
            batch_size=self.cfg.batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            collate_fn=self.collate,
            num_workers=self.cfg.num_workers,
        )

    def _eval_loader(self, split: str) -> DataLoader:
        return DataLoader(
            self.rows[split],
            batch_size=self.cfg.eval_batch_size,
            collate_fn=self.collate,
            num_workers=self.cfg.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")
