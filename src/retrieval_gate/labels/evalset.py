"""The questions a gate is judged on: the canonical split, a label file, and the labelling
run's recorded answers (closed-book and with-retrieval correctness) for adaptive accuracy."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..data import canonical_questions
from ..data.adaptive_rag import ReleaseSplit
from ..errors import DataError
from ..questions import Question
from ..strict_rows import parse_json
from .label_files import check_made_for, made_for_others, meta_path, read_label_file, stamped
from .labelling_run import DEFAULT_RUN_DIR, STRATEGY_FILE, LabellingRun, Outcomes
from .logprobs import MEAN_LOGPROB, TOKEN_LOGPROBS, with_answer_logprobs
from .strategy_labels import (
    RELEASE_LABELS,
    StrategyLabels,
    is_strategy_source,
    labels_release,
    load_strategy_labels,
)

log = logging.getLogger(__name__)


@cache
def _set_aside_note(costs: tuple[float, ...]) -> None:
    """Said once per price list: the labels' per-question costs are not its unit."""
    log.warning(f"the labels' per-question costs are set aside for the price list {list(costs)} "
                "(--strategies FILE's): every strategy costs each question "
                "its listed price, in the table, tune and the routers' calibration")  # fmt: skip


@dataclass(frozen=True)
class EvalSet:
    """Labelled questions with their label and recorded answer correctness as arrays
    (NaN where the labelling run has no answer for a question)."""

    questions: tuple[Question, ...]
    y: np.ndarray
    closed_correct: np.ndarray
    rag_correct: np.ndarray
    # strategy labels (a router's): names in cost order, each strategy's correctness (n, S)
    # and per-question costs (n, S; NaN rows where the labels carry none)
    strategies: tuple[str, ...] = ()
    correct: np.ndarray | None = None
    paid: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    @property
    def sources(self) -> np.ndarray:
        return np.array([q.source for q in self.questions])

    @property
    def has_outcomes(self) -> bool:
        both = ~np.isnan(self.closed_correct) & ~np.isnan(self.rag_correct)
        return bool(both.any())

    @property
    def has_strategies(self) -> bool:
        return self.correct is not None

    def costs_paid(self, costs: Sequence[float], labels_own: bool = True) -> np.ndarray:
        """(n, S) what each strategy costs each question: its own cost where the labels carry
        one, else `costs`. `labels_own`: whether `costs` are in the labels' unit (their mean
        per-question costs, `labels_costs`, or a trained router's own); where they are not
        (--strategies FILE's), the per-question costs are in another unit and set aside:
        every strategy costs each question its price (said once)."""
        default = np.tile(np.asarray(costs, float), (len(self), 1))
        if self.paid is None:
            return default
        if not labels_own:
            _set_aside_note(tuple(float(c) for c in costs))
            return default
        return np.where(np.isnan(self.paid), default, self.paid)

    def digest(self) -> str:
        """A hash of what a study reads of these questions, by content: each question's key,
        its label, recorded correctness, strategies and costs (a label file's bytes keyed a
        release folder or `adaptive-rag` by nothing, and another path to it as other labels)."""
        h = hashlib.sha256("\n".join(q.key() for q in self.questions).encode())
        h.update("|".join(self.strategies).encode())
        for array in (self.y, self.closed_correct, self.rag_correct, self.correct, self.paid):
            h.update(b"-" if array is None else np.ascontiguousarray(array, float).tobytes())
        return h.hexdigest()[:16]

    def subset(self, mask: np.ndarray) -> EvalSet:
        idx = np.flatnonzero(mask)
        return EvalSet(
            tuple(self.questions[i] for i in idx),
            self.y[idx],
            self.closed_correct[idx],
            self.rag_correct[idx],
            self.strategies,
            None if self.correct is None else self.correct[idx],
            None if self.paid is None else self.paid[idx],
        )

    def where_source(self, sources: Iterable[str]) -> EvalSet:
        return self.subset(np.isin(self.sources, list(sources)))


def build_evalset(
    questions: Sequence[Question],
    labels: dict[str, int],
    outcomes: Outcomes | None = None,
    strategy_labels: StrategyLabels | None = None,
) -> EvalSet:
    """The questions that have a label, in the given order, with their outcomes (and, from
    strategy labels, each strategy's correctness and per-question costs)."""
    outcomes = outcomes or Outcomes.empty()
    kept = tuple(q for q in questions if q.id in labels)

    def column(d: dict[str, bool]) -> np.ndarray:
        return np.array([float(d[q.id]) if q.id in d else np.nan for q in kept])

    y = np.array([labels[q.id] for q in kept], dtype=int)
    if strategy_labels is None:
        return EvalSet(kept, y, column(outcomes.closed), column(outcomes.rag))
    sl, ids = strategy_labels, [q.id for q in kept]
    correct = sl.correct(ids).reshape(len(ids), len(sl.strategies))
    paid = np.array([[r["cost"][s] for s in sl.strategies] if r.get("cost") else
                     [np.nan] * len(sl.strategies) for r in (sl.rows[i] for i in ids)],
                    float).reshape(len(ids), len(sl.strategies))  # fmt: skip
    # the recorded answers of the first two strategies are the binary view's outcomes
    return EvalSet(kept, y, correct[:, 0].copy(), correct[:, 1].copy(), sl.strategies, correct,
                   paid if not np.isnan(paid).all() else None)  # fmt: skip


@dataclass(frozen=True)
class Splits:
    train: EvalSet
    dev: EvalSet
    test: EvalSet


def split_evalsets(
    questions: Sequence[Question],
    labels: dict[str, int],
    outcomes: Outcomes | None = None,
    strategy_labels: StrategyLabels | None = None,
) -> Splits:
    """Train / dev / test EvalSets from questions that carry their split."""
    parts = {
        s: build_evalset(
            [q for q in questions if q.split == s], labels, outcomes, strategy_labels
        )  # fmt: skip
        for s in ("train", "dev", "test")
    }
    if not len(parts["test"]):  # three causes, told apart by the counts
        matched = sum(len(p) for p in parts.values())
        tests = sum(q.split == "test" for q in questions)
        why = ("the questions are too few for the split to give the test part any: label more, "
               "or give the questions a `split` column with test rows" if matched
               else "no labelled id is one of the questions: do the label file's ids match the "
               "data (--questions)?")  # fmt: skip
        if tests and matched:  # the test rows are there, their labels are not (null or none)
            why = (f"none of the {tests} test questions has a label (a null label is left "
                   "out): label them, or give other rows the test split")  # fmt: skip
        counts = f"train {len(parts['train'])}, dev {len(parts['dev'])}, test 0"
        raise DataError(f"no labelled test questions ({len(labels)} labels; {counts}): {why}")
    return Splits(**parts)


def load_splits(
    label_path: str | Path,
    run_dir: str | Path | None = DEFAULT_RUN_DIR,
    questions: Sequence[Question] | None = None,
) -> Splits:
    """A label file over `questions` (default: the bundled ones, canonical split), with the
    labelling run's outcomes if available."""
    strategy_labels = None
    if is_strategy_source(label_path):  # a router's labels: every strategy's outcome
        strategy_labels = load_strategy_labels(label_path)
        rows = strategy_labels.rows
        labels = {i: int(r["label"]) for i, r in rows.items()}
        outcomes = Outcomes.empty()  # the labels carry the outcomes themselves
        meta = strategy_labels.meta
        if questions is None and (release := labels_release(label_path)) is not None:
            questions = release_question_set(release)  # the release's own questions, as train
        elif questions is None and meta.get("outcomes_format") == "adaptive-rag-release":
            questions = release_question_set(meta["outcomes_file"])  # `adaptive-rag`'s release
    else:
        label_file = read_label_file(label_path)
        labels, rows = label_file.labels(), label_file.rows
        outcomes = Outcomes.empty()
    qs = questions if questions is not None else canonical_questions()
    if run_dir and strategy_labels is None:
        outcomes = answers_for(LabellingRun(Path(run_dir)), qs, questions is not None)
    if not any(q.id in labels for q in qs):
        raise DataError(
            "no label id is a question id of the questions given"
            + (
                ids_hint(qs, labels)
                if questions is not None
                else " (the bundled datasets): pass --questions SPEC"
            ),  # fmt: skip
            label_path,
        )
    check_made_for(stamped(rows), qs, label_path)  # (a release's rows carry no stamp)
    # the user's questions: labels of a part of them, or of others too; the bundled ones:
    # labels of a part of them is the rule, label ids of none were left out unsaid
    say_unmatched(label_path, qs, labels, unlabelled=questions is not None)
    return split_evalsets(qs, labels, outcomes, strategy_labels)


def answers_for(run: LabellingRun, questions: Sequence[Question], users: bool) -> Outcomes:
    """The run's recorded outcomes of these very questions: a row stamped for another text or
    other gold answers under the same id is left out, and so, for the user's questions
    (`users`), is a row of the committed SmolLM2 run (unstamped) whose bundled question under
    that id is another; said. Another run's answers to other questions made the adaptive
    accuracy of a hand-written label file, unsaid."""
    outcomes, stamps = run.answered()  # each answer file read once
    answered = outcomes.closed.keys() | outcomes.rag.keys()
    asked = [q for q in questions if q.id in answered]
    other = set(made_for_others(stamps, asked))
    if users and asked and Path(run.folder).resolve() == DEFAULT_RUN_DIR.resolve():
        bundled = {q.id: q for q in canonical_questions()}
        other |= {q.id for q in asked if q.id not in bundled or bundled[q.id].text != q.text}
    if not other:
        return outcomes
    log.warning(f"{len(other):,} of the {len(asked):,} recorded answers in {run.folder} for "
                f"these question ids were given to other questions under those ids (e.g. "
                f"{sorted(other)[0]!r}): left out; pass --run-dir with the labelling run that "
                "answered these questions")  # fmt: skip
    return Outcomes({i: v for i, v in outcomes.closed.items() if i not in other},
                    {i: v for i, v in outcomes.rag.items() if i not in other})  # fmt: skip


def say_unmatched(
    path: str | Path,
    questions: Sequence[Question],
    labels: Mapping[str, Any],
    unlabelled: bool = True,
) -> None:
    """Says (once a process) the label ids that are no question of these and (`unlabelled`)
    the questions without a label, both left out: evaluate, tune and transfer left them out
    unsaid."""
    known = {q.id for q in questions}
    missing = [i for i in labels if i not in known]
    without = [q.id for q in questions if q.id not in labels] if unlabelled else []
    parts = ([f"{len(missing):,} of {len(labels):,} label ids are no question of these data "
              f"(e.g. {missing[0]!r})"] if missing else []) + (
             [f"{len(without):,} of {len(questions):,} questions have no label (e.g. "
              f"{without[0]!r})"] if without else [])  # fmt: skip
    note = f"{path}: {'; '.join(parts)}: left out"
    if parts and note not in _SAID:
        _SAID.add(note)
        log.warning(note)


_SAID: set[str] = set()


def ids_hint(
    questions: Sequence[Question], labels: Mapping[str, Any], flag: str = "--field id={}"
) -> str:
    """Both sides' ids, and the question file's column that holds the label ids, if one does
    (a file whose id column is named otherwise gets ids made from the text), with the `flag`
    that names it."""
    said = (f" (label ids read like {next(iter(labels))!r}, question ids like "
            f"{questions[0].id!r})" if labels and questions else "")  # fmt: skip
    best, hits = None, 0
    for column in dict.fromkeys(k for q in questions[:50] for k in q.extra):
        values = {str(q.extra[column]) for q in questions if q.extra.get(column) is not None}
        found = len(values & labels.keys())
        # most of one side matches: 4 of 40 view counts equal to label ids named `views`,
        # and following the hint gave 4 questions other questions' labels
        if found > hits and found >= 0.5 * min(len(values), len(labels)):
            best, hits = column, found
    if best is not None:
        return f"{said}: the labels' ids are in column {best!r}: pass {flag.format(best)}"
    return f"{said}: is this the questions file the labels were made from?"


def release_question_set(source: str | Path | ReleaseSplit, seed: int = 0) -> tuple[Question, ...]:
    """A release's questions (a folder, `adaptive-rag`, or one LLM's split found already) with
    the split a router trains on: `assign_splits` over them (grouped by normalised text,
    stratified by dataset), as training does."""
    from ..data.adaptive_rag import release_questions
    from ..data.splits import assign_splits, with_splits

    if isinstance(source, ReleaseSplit):
        qs = release_questions(source.path, source.split, source.llm)
    else:
        qs = release_questions(None if str(source) == RELEASE_LABELS else source)
    return tuple(with_splits(qs, assign_splits(qs, seed=seed)))


def label_file_names(paths: Sequence[str | Path]) -> dict[str, Path]:
    """One unique name per label file, for the sections of one report: `<generator>/<policy>`
    from its provenance (`smollm2-135m-instruct/closed-book`), the policy alone where the
    provenance names no generator (no provenance: the file's stem). Names two files would
    share become `<folder>/<stem>`, then get a number: no file's results replace another's.
    Names are compared in any case: `closed-book` and `Closed-Book` name one figure file on a
    file system that ignores case (macOS, Windows), where one overwrote the other's."""
    paths = [Path(p) for p in paths]
    first = [_label_name(p) for p in paths]
    folded = [n.casefold() for n in first]
    names = [n if folded.count(n.casefold()) == 1 else f"{p.parent.name}/{p.stem}"
             for n, p in zip(first, paths, strict=True)]  # fmt: skip
    out: dict[str, Path] = {}
    for name, path in zip(names, paths, strict=True):
        unique, i = name, 1
        while unique.casefold() in {k.casefold() for k in out}:
            i += 1
            unique = f"{name}-{i}"
        out[unique] = path
    return out


def _label_name(path: Path) -> str:
    if path.is_dir():  # a release folder: named as its import is, by the release's LLM
        return _release_name(path)
    try:
        meta = parse_json(meta_path(path).read_bytes())
    except (OSError, ValueError):  # no or unreadable provenance: the file's own name
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    policy = str(meta.get("policy") or path.stem)
    generator = meta.get("generator")
    return f"{Path(str(generator)).name.lower()}/{policy}" if generator else policy


def _release_name(folder: Path) -> str:
    """`<llm>/strategies` for a release folder (`relA` named no LLM); the folder's own name
    where no one LLM's release is found there (`load_splits` then says why)."""
    from ..data.adaptive_rag import find_release, is_release

    try:
        llm = find_release(folder).llm if is_release(folder) else None
    except DataError:
        llm = None
    return f"{llm.lower()}/{Path(STRATEGY_FILE).stem}" if llm else folder.name


def policy_name(label_path: str | Path) -> str:
    """`closed-book` from data/labels/<generator>/closed-book.jsonl."""
    return Path(label_path).name.removesuffix(".jsonl")


def with_recorded_answers(s: EvalSet, label_file: str | Path) -> EvalSet:
    """`s` with each question's closed-book answer's log-probabilities, as the label file
    recorded them, in `Question.extra` (what a two-stage gate reads beside the question)."""
    qs = with_answer_logprobs({q.id: q for q in s.questions}, label_file)
    return replace(s, questions=tuple(qs[q.id] for q in s.questions))


def without_answers(s: EvalSet) -> EvalSet:
    """`s` with no answer's log-probabilities in `Question.extra`: what a two-stage gate
    scores from the question alone (a questions file may carry the answers' own column)."""
    qs = tuple(replace(q, extra={k: v for k, v in q.extra.items()
                                 if k not in (TOKEN_LOGPROBS, MEAN_LOGPROB)})
               for q in s.questions)  # fmt: skip
    return replace(s, questions=qs)
