"""The questions a training config reads, and how its labels fall on their train/dev/test
split. Torch-free: `train` checks a label file against them in seconds, before Lightning,
transformers and the model code load (a label file of other data, or one whose questions are
all in one split, is refused there rather than after the imports)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

from ..data import DataError, assign_splits, load_all
from ..data.dataset_registry import OPTIONAL
from ..data.splits import canonical_questions, with_splits
from ..errors import ConfigError
from ..labels.label_files import check_made_for
from ..questions import Question
from .config import DataConfig, TrainConfig
from .tasks import Targets

log = logging.getLogger(__name__)
_SAID: set[str] = set()


def labelled_questions(
    data: DataConfig,
    questions: Sequence[Question] | None = None,
    labels: Mapping[str, Any] | None = None,
) -> tuple[Targets, dict[str, list[tuple]], Sequence[Question]]:
    """The task's targets (`labels` handed in memory, else `data.label_file`), laid on their
    questions' split (`questions`, else the config's): (targets, split -> rows, questions).
    `train` checks a label file with it before anything heavy loads; the data module builds
    its rows from it."""
    task = data.task_spec
    if labels is not None:
        targets = task.from_memory(labels)
    elif not data.label_file:
        raise DataError("no labels: set data.label_file or pass labels=")
    else:
        targets = task.read(data.label_file)
    path = Path(data.label_file) if labels is None else None
    qs = questions if questions is not None else config_questions(data)
    meta = targets.provenance.get("meta")
    fix = _release_fix(meta)
    if questions is None and not any(q.id in targets.labels for q in qs):  # other questions
        if data.questions:  # the user's file, its id column named otherwise?
            from ..labels.evalset import ids_hint

            fix += ids_hint(qs, targets.labels, '--set "data.fields={{id: {}}}"')
        elif not fix:
            fix += _questions_fix(data, targets.labels, meta)
    if path is not None:  # rows labelled for other questions under the same ids
        check_made_for(targets.question_shas, qs, path)
    # questions handed in are a subset chosen on purpose (transfer leaves a source out)
    rows = labelled_splits(qs, targets.labels, data.split_seed, path, fix, questions is None)
    return targets, rows, qs


def _questions_fix(data: DataConfig, labels: Mapping[str, Any], meta: Any = None) -> str:
    """Labels of none of the config's bundled questions (`data.datasets`): the questions file
    they were made from (their sidecar's `questions_source`), else the bundled datasets that
    hold them, else the flag for the user's own questions file."""
    named = f"data.datasets {list(data.datasets)}" if data.datasets else "the bundled datasets"
    source = meta.get("questions_source") if isinstance(meta, dict) else None
    if isinstance(source, dict) and source.get("questions"):
        fields = source.get("fields") or {}
        mapped = ", ".join(f"{k}: {v}" for k, v in fields.items())
        flags = f"data.questions={source['questions']}" + (
            f' "data.fields={{{mapped}}}"' if mapped else "")  # fmt: skip
        return (f"; the config reads {named}, and these labels were made from the questions of "
                f"{source['questions']}: --set {flags}")  # fmt: skip
    holding = sorted({q.source for q in canonical_questions() if q.id in labels})
    if holding:
        return (f"; the config reads {named}, but these are questions of {', '.join(holding)}: "
                f"--set \"data.datasets=[{', '.join(holding)}]\"")  # fmt: skip
    return (f"; the config reads {named}: train on your own questions with --set "
            "data.questions=FILE (the questions file the labels were made from; "
            "data.fields={id: COLUMN} where its id column is named otherwise)")  # fmt: skip


def _release_fix(meta: Any) -> str:
    """For labels imported from an Adaptive-RAG release: how to train on that release's own
    questions (the `adaptive-rag` dataset is the bundled release unless told otherwise)."""
    if not isinstance(meta, dict) or meta.get("outcomes_format") != "adaptive-rag-release":
        return ""
    return (f"; these labels come from the Adaptive-RAG release {meta.get('outcomes_file')}: "
            "set $RETRIEVAL_GATE_ADAPTIVE_RAG to that folder so that the adaptive-rag dataset "
            "is its questions")  # fmt: skip


def labelled_splits(
    questions: Sequence[Question],
    labels: dict[str, int],
    split_seed: int,
    path: Path | None,
    fix: str = "",
    say_missing: bool = True,
) -> dict[str, list[tuple[str, str, int]]]:
    """split -> [(id, text, label)]. Questions that carry their split (a question file's own,
    or the canonical one) keep it; otherwise the split is `assign_splits` over ALL questions,
    so every label file shares one train/dev/test assignment. Labels of questions the data do
    not hold are left out, and said (`fix`: what to do about it, where known)."""
    known = {q.id: q for q in questions}
    missing = [i for i in labels if i not in known]
    if len(missing) == len(labels):
        raise DataError(
            f"none of the {len(labels)} label ids is a known question id (e.g. {missing[0]!r}): "
            f"the label file belongs to other data{fix}",
            path,
        )
    if missing and say_missing:  # a subset of the data labelled, or labels of other questions
        note = (f"{path or 'labels'}: {len(missing):,} of {len(labels):,} label ids are not "
                f"questions of these data (e.g. {missing[0]!r}), left out{fix}")  # fmt: skip
        if note not in _SAID:  # train reads the labels twice: checked early, then loaded
            _SAID.add(note)
            log.warning(note)
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
    """`data.questions` (with `data.fields`) when set, else the bundled `data.datasets`. A
    bundled subset keeps the split its questions have among all bundled questions (at
    `data.split_seed`): split again on its own, a test question of the full split could train
    a gate that is then evaluated on it."""
    if data.questions:
        from ..data.user_questions import question_set

        return question_set(data.questions, data.fields)
    if (release := _labels_release(data)) is not None:
        return release
    if not data.datasets:
        return _bundle_with_splits(data.split_seed)
    wanted = load_all(list(data.datasets))
    if OPTIONAL.intersection(data.datasets):
        # a dataset read only when named (the Adaptive-RAG release) has no question in the
        # bundle's split: reading every bundled dataset to find that out took ~2 s a process
        return wanted
    known = {q.id: q for q in _bundle_with_splits(data.split_seed)}
    if all(q.id in known for q in wanted):
        return [known[q.id] for q in wanted]
    return wanted  # datasets outside the bundle's split: split among themselves


def _labels_release(data: DataConfig) -> Sequence[Question] | None:
    """A router on the `adaptive-rag` dataset whose labels come from a release (the folder as
    data.label_file, or a label file imported from one): that release's questions, split as
    evaluate and tune split them. Resolved as they resolve it (`labels_release`): an imported
    release no longer there, or $RETRIEVAL_GATE_ADAPTIVE_RAG naming another, is refused, also
    beside other datasets. None where the labels name no release: the adaptive-rag dataset is
    then the variable's release, else the bundle's."""
    from ..data.adaptive_rag import DATASET_NAME
    from ..labels.evalset import release_question_set
    from ..labels.strategy_labels import labels_release

    if DATASET_NAME not in (data.datasets or ()) or not data.label_file:
        return None
    release = labels_release(data.label_file)
    if release is None or list(data.datasets) != [DATASET_NAME]:
        return None
    return release_question_set(release, data.split_seed)


def _bundle_with_splits(seed: int) -> Sequence[Question]:
    if seed == 0:
        return canonical_questions()  # loaded once per process
    questions = load_all()
    return with_splits(questions, assign_splits(questions, seed=seed))


def training_questions(data: DataConfig) -> list[Question]:
    """The questions a run trained on with the split training gave them: their own split, else
    `assign_splits` over them (as `labelled_splits` does)."""
    qs = list(config_questions(data))
    if all(q.split for q in qs):
        return qs
    return with_splits(qs, assign_splits(qs, seed=data.split_seed))


def check_splits(rows: dict[str, list], path: Path | None) -> None:
    """Every split needs labelled questions: training fits on train, picks its epoch on dev
    and reports on test. A gate's train split needs two classes at least: on one it learns a
    constant and reports an AUROC of 0 (a router's correctness rows may be constant)."""
    for split, part in rows.items():
        if not part:
            counts = ", ".join(f"{s} {len(p)}" for s, p in rows.items())
            raise DataError(
                f"the {split} split has no labelled questions (labelled: {counts}): label "
                "questions of every split: a question file's own `split` column, else the "
                "seeded 70/15/15 split of its questions, which needs about 20 questions or more "
                "for each split to get some",
                path,
            )
    classes = {int(row[-1]) for row in rows["train"] if isinstance(row[-1], Integral)}
    if len(classes) == 1:
        raise DataError(
            f"every training question has label {classes.pop()}: a gate needs both kinds "
            "(questions that need retrieval and questions that do not); label more questions",
            path,
        )


# Monitors a dev split of one class leaves undefined: torchmetrics logs AUROC 0.0 and AP a
# constant, so no epoch improved on the first and early stopping kept it.
NEEDS_BOTH_CLASSES = ("val/auroc", "val/ap")


def check_monitor(rows: dict[str, list], config: TrainConfig, path: Path | None) -> None:
    """Early stopping and the kept checkpoint follow `early_stopping.monitor` on dev: AUROC or
    AP there needs dev questions of both kinds (a stacked head, fitted in closed form, reads
    no monitor; a router's rows, vectors of correctness, are not checked here)."""
    monitor = config.early_stopping.monitor
    if config.model.head == "stacked" or monitor not in NEEDS_BOTH_CLASSES:
        return
    kinds = {int(row[-1]) > 0 for row in rows["dev"] if isinstance(row[-1], Integral)}
    if len(kinds) != 1:
        return
    which = "need retrieval" if kinds.pop() else "do not need retrieval"
    raise ConfigError(
        f"the dev split's {len(rows['dev'])} labelled questions all {which}, "
        f"and early stopping and the kept epoch follow early_stopping.monitor={monitor}, "
        "undefined on one class (logged as 0.0: the first epoch would be kept whatever came "
        "after); label dev questions of both kinds (a questions file's `split` column says "
        "which are dev), or --set early_stopping.monitor=val/loss early_stopping.mode=min",
        path,
    )


def check_answer_logprobs(data: DataConfig) -> None:
    """The answers' log-probabilities the label file recorded (`token_logprobs`,
    `mean_logprob`), each row's checked naming its line and id, before any model loads: a
    two-stage gate reads them once its frozen body has run, and a question-only gate's note
    counts them (a binary gate's or a router's file; a release folder records none)."""
    from ..labels.logprobs import answer_logprobs

    path = data.label_file
    if data.task in ("binary", "strategies") and path and Path(path).is_file():
        answer_logprobs(path)
