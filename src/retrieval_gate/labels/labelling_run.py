"""A labelling run's folder (`data/labels/<generator>/`): one generator's label files and the
answers recorded with them, read here and nowhere else.

    closed-book.jsonl   closed-book answers: `match`, `mean_logprob`, `idk` (+ label), and
                        `token_logprobs` where recorded (`labels.logprobs.answer_logprobs`)
    rag-gain.jsonl      with-retrieval answers: `closed_correct`, `rag_correct` (+ label)
    strategies.jsonl    each strategy's correctness, for routers (`strategy_labels` reads it)

Adaptive accuracy, the confidence gate, TA-ARE's demonstrations and tuning's content
identity all come from these two files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import not_a_file, sha256_file
from .label_files import LABELS_DIR, LabelFile, Stamp, stamped
from .logprobs import AnswerLogprobs, answer_logprobs

CLOSED_BOOK = "closed-book.jsonl"
RAG_GAIN = "rag-gain.jsonl"
STRATEGY_FILE = "strategies.jsonl"
DEFAULT_RUN_DIR = LABELS_DIR / "smollm2-135m-instruct"  # the committed SmolLM2 run


def holds_answers(path: Path) -> bool:
    """A labelling run's answer file is there (False where nothing is); a folder, pipe or
    link to nothing in its place is refused, never read as a run without answers."""
    kind = not_a_file(Path(path))
    if kind:
        raise InputError(f"is {kind}, where a labelling run keeps its recorded answers: move "
                         "it away, or pass another run's folder (--run-dir)", path)  # fmt: skip
    return Path(path).is_file()


@dataclass(frozen=True)
class Outcomes:
    """Per question id: was the closed-book answer correct, was the with-retrieval one."""

    closed: dict[str, bool]
    rag: dict[str, bool]

    @classmethod
    def empty(cls) -> Outcomes:
        return cls({}, {})


@dataclass(frozen=True)
class LabellingRun:
    """The folder; a missing file reads as no rows (a run may have labelled closed-book only)."""

    folder: Path = DEFAULT_RUN_DIR

    @property
    def closed_book(self) -> Path:
        return Path(self.folder) / CLOSED_BOOK

    @property
    def rag_gain(self) -> Path:
        return Path(self.folder) / RAG_GAIN

    def records(self) -> dict[str, dict[str, Any]]:
        """The closed-book rows by question id (the confidence gate's recorded answers,
        TA-ARE's demonstrations); {} without the file."""
        return LabelFile(self.closed_book).rows if holds_answers(self.closed_book) else {}

    def outcomes(self) -> Outcomes:
        """closed-book `match` and rag-gain `closed_correct`/`rag_correct` (rag-gain wins where
        both record a closed-book answer: it is the row that also has the with-retrieval
        answer)."""
        return self.answered()[0]

    def answered(self) -> tuple[Outcomes, dict[str, Stamp]]:
        """`outcomes`, and id -> the stamp of its answer rows (`label_files.stamped`),
        rag-gain's over closed-book's: each file read once for both."""
        closed_rows = self.records()
        rag_rows = LabelFile(self.rag_gain).rows if holds_answers(self.rag_gain) else {}
        closed = {i: bool(r["match"]) for i, r in closed_rows.items() if r.get("match") is not None}
        rag: dict[str, bool] = {}
        for i, row in rag_rows.items():
            if row.get("rag_correct") is not None:
                rag[i] = bool(row["rag_correct"])
            if row.get("closed_correct") is not None:
                closed[i] = bool(row["closed_correct"])
        return Outcomes(closed, rag), stamped(closed_rows) | stamped(rag_rows)

    def answer_logprobs(self) -> dict[str, AnswerLogprobs]:
        """The closed-book answers' recorded log-probabilities by question id (tokens, or the
        mean only); {} without the file."""
        return answer_logprobs(self.closed_book) if holds_answers(self.closed_book) else {}

    def checksums(self) -> list[str | None]:
        """sha256 of the two answer files (None where missing): what results computed from
        the recorded answers are keyed by."""
        paths = (self.closed_book, self.rag_gain)
        return [sha256_file(p) if holds_answers(p) else None for p in paths]


def run_dir_for(labels: str | Path, run_dir: str | Path | None = None) -> Path:
    """The labelling run whose answers go with a label file: `run_dir` when given, else the
    label file's own folder when it is one (`label` writes <labels-dir>/<generator>/ with
    closed-book.jsonl and rag-gain.jsonl side by side), else the committed SmolLM2 run."""
    if run_dir is not None:
        return Path(run_dir)
    folder = Path(labels).parent
    if holds_answers(folder / CLOSED_BOOK) or holds_answers(folder / RAG_GAIN):
        return folder
    return DEFAULT_RUN_DIR
