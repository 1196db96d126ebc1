"""Questions + labels (a label file, or a mapping id -> label in memory) + the canonical split,
tokenised with dynamic padding."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, WeightedRandomSampler
from tqdm import tqdm

from ..data.features import SideFeatures
from ..data.gate_features import GateFeatures
from ..questions import Question
from .config import TASKS, DataConfig
from .provenance import text_digest
from .sources import check_splits, labelled_questions

# Class index -> meaning, per task (also written into checkpoints and ONNX metadata).
CLASS_NAMES = {name: list(task.classes) for name, task in TASKS.items()}
CALIBRATION_QUESTIONS = 256  # dev questions int8's activation ranges are measured on


def _subsample(rows: list, n: int | None, seed: int) -> list:
    if n is None or n >= len(rows):
        return rows
    return sorted(random.Random(seed).sample(rows, n))


def needs_retrieval(y: Any) -> bool:
    """The binary view of a label: a class > 0, or the first strategy wrong."""
    return bool(y[0] == 0) if isinstance(y, tuple) else bool(y > 0)


class Collate:
    """Tokenises a batch and pads it to its own longest row (dynamic padding, right side);
    labels as `dtype` (the task's: class indices, or each strategy's correctness)."""

    def __init__(self, tokenizer: Any, max_length: int, dtype: torch.dtype = torch.long):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.dtype = dtype

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
        self.task = task = TASKS[data.task]
        self.collate = Collate(tokenizer, data.max_length, task.label_dtype)
        targets, rows, qs = labelled_questions(data, questions, labels)
        self.path = Path(data.label_file) if labels is None else None
        self.provenance = targets.provenance
        self.strategies: tuple[str, ...] = targets.strategies  # a router's heads (else empty)
        self.question_costs = targets.costs  # per question, where the labels give them
        self.outputs = task.outputs(targets)
        self.num_classes = len(self.outputs)
        self.rows = {
            "train": _subsample(rows["train"], data.max_train_examples, seed),
            "dev": _subsample(rows["dev"], data.max_eval_examples, seed),
            "test": _subsample(rows["test"], data.max_eval_examples, seed),
        }
        check_splits(self.rows, self.path)
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

    def fitted_digests(self) -> list[str]:
        """Short hashes of the texts of the questions fitted on (train) and chosen on (dev),
        kept in the run's labels.json: evaluate says where its test questions are among them
        (another split of the same questions scored training questions as test, unsaid)."""
        texts = {row[1] for split in ("train", "dev") for row in self.rows[split]}
        return sorted(text_digest(t) for t in texts)

    def class_counts(self) -> list[int]:
        """Train questions a class (a router: questions each strategy answers)."""
        return self.task.class_counts([y for *_, y in self.rows["train"]], self.num_classes)

    def class_weights(self) -> torch.Tensor | None:
        """n / (C * n_c) on the train split: each class weighs the same in the loss (not for
        a router: its heads estimate P(correct | strategy), which weighting would bias)."""
        if self.cfg.balance != "class_weights" or not self.task.weighs_classes:
            return None
        counts = torch.tensor(self.class_counts(), dtype=torch.float).clamp(min=1)
        return counts.sum() / (len(counts) * counts)

    def summary(self) -> dict[str, Any]:
        return {split: {"n": len(r), "positives": sum(needs_retrieval(y) for *_, y in r)}
                for split, r in self.rows.items()}  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        rows = self.rows["train"]
        sampler = None
        if self.cfg.balance == "sampler" and self.task.weighs_classes:
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

    def _loader(self, rows: list) -> DataLoader:
        return DataLoader(
            rows,
            batch_size=self.cfg.eval_batch_size,
            collate_fn=self.collate,
            num_workers=self.cfg.num_workers,
        )

    def by_length(self, split: str) -> tuple[DataLoader, np.ndarray]:
        """`split`'s rows shortest first, and where each row's output goes back to: a batch
        pads to its longest question, so in length order the frozen body reads about half the
        tokens of the split's own order (the demo's 9,189 questions: 128,752 for 236,528)."""
        rows = self.rows[split]
        c = self.collate  # token counts, not characters: a batch pads to its most tokens
        ids = c.tokenizer([r[1] for r in rows], truncation=True, max_length=c.max_length)
        order = np.argsort([len(i) for i in ids["input_ids"]], kind="stable")
        return self._loader([rows[i] for i in order]), np.argsort(order, kind="stable")

    def in_row_order(
        self, split: str, fn: Callable[[dict[str, Any]], np.ndarray], desc: str | None = None
    ) -> np.ndarray:
        """`fn` of each batch of `split` read in length order (`by_length`), concatenated in
        the split's row order; with `desc`, a progress bar in questions (minutes on a CPU for
        tens of thousands)."""
        batches, back = self.by_length(split)
        out = []
        with tqdm(total=len(back), desc=desc, unit="q", disable=desc is None) as bar:
            for batch in batches:
                out.append(fn(batch))
                bar.update(len(out[-1]))
        return np.concatenate(out)[back]

    # validation and test metrics do not depend on the rows' order: read in length order
    def val_dataloader(self) -> DataLoader:
        return self.by_length("dev")[0]

    def test_dataloader(self) -> DataLoader:
        return self.by_length("test")[0]
