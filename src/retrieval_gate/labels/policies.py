"""The label policies by name and where their files live; `label()` runs one of them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.errors import DataError, InputError
from ..errors import ConfigError
from ..models import SMOLLM2
from ..questions import Question
from .files import LABELS_DIR, LabelFile, check_resume, meta_path
from .lock import single_writer
from .scoring import DEFAULT_CRITERION
from .selection import EQ_SAMPLE, labelling_questions

log = logging.getLogger(__name__)

GENERATOR_FREE = ("retrievalqa", "popularity")
GENERATOR_POLICIES = ("closed-book", "rag-gain", "rrcp", "retrievalqa-style")
OUTCOMES = "outcomes"  # answers recorded elsewhere, imported (labels/outcomes.py)
POLICIES = GENERATOR_FREE + GENERATOR_POLICIES + (OUTCOMES,)
REBUILT = (*GENERATOR_FREE, "retrievalqa-style")  # recomputed whole on every run


@dataclass
class LabelRequest:
    """What `retrieval-gate label` asks for (one field per CLI flag)."""

    policy: str
    datasets: Sequence[str] | None = None
    limit: int | None = None
    generator: str = SMOLLM2
    backend: str = "auto"
    criterion: str = DEFAULT_CRITERION
    chunk_size: int = 512
    eq_sample: int = EQ_SAMPLE
    seed: int = 0
    out: Path | None = None
    labels_dir: Path = LABELS_DIR
    options: dict[str, Any] = field(default_factory=dict)
    questions: Sequence[Question] | None = None  # your own questions (None: the bundled ones)


def generator_dir_name(generator: str) -> str:
    return Path(generator).name.lower()


def label_path(policy: str, generator: str = SMOLLM2, labels_dir: Path = LABELS_DIR) -> Path:
    """data/labels/<policy>.jsonl, or data/labels/<generator>/<policy>.jsonl."""
    if policy not in POLICIES:
        raise ConfigError(f"unknown label policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if policy in GENERATOR_FREE:
        return labels_dir / f"{policy}.jsonl"
    name = "closed-book" if policy == OUTCOMES else policy  # outcomes write a closed-book file
    return labels_dir / generator_dir_name(generator) / f"{name}.jsonl"


def label(req: LabelRequest, generator: Any = None, retriever: Any = None) -> dict[str, Any]:
    """Runs one policy over the requested questions, resuming its file. `generator` and
    `retriever` may be passed in (tests reuse one engine); otherwise they are built when the
    policy needs them."""
    path = req.out or label_path(req.policy, req.generator, req.labels_dir)
    validate_request(req)
    if req.policy == OUTCOMES:
        return _outcomes(req, path)
    # A folder or a user's file is refused before the lock file is made beside it (and read
    # again under the lock: another run may have appended meanwhile).
    LabelFile(path, replacing=req.policy in REBUILT).require_ours()
    with single_writer(path):  # one run (local or Ray) writes a label file at a time
        return _label_file(req, path, generator, retriever)


def _label_file(req: LabelRequest, path: Path, generator: Any, retriever: Any) -> dict[str, Any]:
    rebuilt = req.policy in REBUILT  # rewritten whole: no old row survives to be mixed
    out = LabelFile(path, replacing=rebuilt)
    out.require_ours()  # before any engine starts: refuse a user's file or other settings
    if meta_path(path).exists():
        old = out.meta
        check_resume(path, old, {"policy": req.policy} if rebuilt else _expected_meta(req))
        if not rebuilt:
            _same_generator(path, old, req.generator)
    if req.questions is None:
        questions = labelling_questions(req.datasets, req.eq_sample, req.seed)
    else:
        questions = list(req.questions)
        check_answers(questions, req.policy)
    needs_docs = req.questions is None or req.options.get("retriever") == "contexts"
    if req.policy in ("rag-gain", "rrcp") and needs_docs:  # only where documents exist
        questions = [q for q in questions if q.contexts]
    if req.limit is not None:
        if req.limit > len(questions):
            log.info(f"--limit {req.limit} is more than the {len(questions)} questions "
                     f"available; labelling all {len(questions)}")  # fmt: skip
        questions = questions[: req.limit]
    if req.policy in GENERATOR_FREE:
        stats = _generator_free(req.policy, questions, out)
    elif req.policy == "retrievalqa-style":
        from .retrievalqa_style import label_retrievalqa_style

        closed = LabelFile(label_path("closed-book", req.generator, req.labels_dir))
        stats = label_retrievalqa_style(questions, out, closed, req.criterion)
    else:
        stats = _generator_policy(req, questions, out, generator, retriever)
    return {"path": str(path), "rows": len(out.rows), **stats}


def check_answers(questions: Sequence[Question], policy: str) -> None:
    """Judging a generator's answers needs gold answers: say which way works without them."""
    if policy not in GENERATOR_POLICIES:
        return
    missing = [q for q in questions if not q.answers]
    if missing:
        raise DataError(
            f"{len(missing)} of {len(questions)} questions have no gold answers (e.g. "
            f"{missing[0].id!r}), so policy {policy!r} cannot judge the generator's answers. "
            "Add an answers column, or record whether each answer was right yourself and use "
            "`--policy outcomes --outcomes FILE` with a correctness column"
        )


def _outcomes(req: LabelRequest, path: Path) -> dict[str, Any]:
    from ..data.adaptive_rag import is_release
    from ..data.user_questions import question_set
    from .outcomes import import_outcomes

    if not req.options.get("outcomes"):
        raise DataError("--policy outcomes needs --outcomes FILE (your recorded answers)")
    if req.options.get("strategies") or is_release(req.options["outcomes"]):
        return _strategy_outcomes(req)
    questions = req.questions if req.questions is not None else question_set()
    return import_outcomes(
        req.options["outcomes"],
        questions,
        path.parent,
        req.generator,
        req.criterion,
        req.options.get("neither_label"),
        out_file=req.out,  # --out FILE: that very file (closed-book outcomes only)
    )


def _strategy_outcomes(req: LabelRequest) -> dict[str, Any]:
    """Outcomes of N strategies (a release folder, or a file with --strategies): closed-book,
    rag-gain and strategies files in one folder."""
    from ..data.adaptive_rag import is_release
    from ..data.user_questions import question_set
    from .strategy_labels import import_release, import_strategy_outcomes, parse_strategies

    opts = req.options
    if req.out is not None:
        raise InputError(
            f"--out {req.out}: outcomes of several strategies write three files (closed-book, "
            "rag-gain, strategies); pass the folder as --labels-dir DIR"
        )
    strategies = parse_strategies(opts["strategies"]) if opts.get("strategies") else None
    if is_release(opts["outcomes"]):  # its own questions and strategies
        if req.questions is not None:
            raise InputError("--questions: a release folder carries its own questions; drop it")
        return import_release(opts["outcomes"], req.labels_dir, opts.get("llm"),
                              opts.get("unanswered"), opts.get("neither_label"), strategies)  # fmt: skip
    questions = req.questions if req.questions is not None else question_set()
    return import_strategy_outcomes(
        opts["outcomes"], questions, strategies or [], req.labels_dir / generator_dir_name(req.generator),
        req.generator, req.criterion, opts.get("unanswered"), opts.get("neither_label"),
    )  # fmt: skip


def validate_request(req: LabelRequest) -> None:
    """Flag values checked before any question is read or engine started."""
    if req.limit is not None and req.limit < 1:
        raise InputError(f"--limit must be a positive number of questions, got {req.limit}")
    if req.chunk_size < 1:
        raise InputError(f"--chunk-size must be at least 1 question, got {req.chunk_size}")
    if req.eq_sample < 0:
        raise InputError(f"--eq-sample must be 0 or more, got {req.eq_sample}")


def _expected_meta(req: LabelRequest) -> dict[str, Any]:
    """The provenance fields of an appending policy comparable before the engine is built (the
    generator is compared by folder name in `_same_generator`, the prompt id at write_meta)."""
    return {"policy": req.policy, "criterion": req.criterion}


def _same_generator(path: Path, old: dict[str, Any], generator: str) -> None:
    recorded = old.get("generator") or old.get("reference")
    if recorded and generator_dir_name(recorded) != generator_dir_name(generator):
        raise InputError(
            f"this label file was made with generator {recorded!r}, not {generator!r}; "
            "pass another --out (or move the file) to label with another generator",
            path,
        )


def _generator_free(policy: str, questions: list, out: LabelFile) -> dict[str, Any]:
    """Rewritten whole each time: reading a field costs nothing, so there is nothing to resume."""
    from .policy_loop import provenance
    from .simple import LONG_TAIL_S_POP, popularity_rows, retrievalqa_rows

    rows = retrievalqa_rows(questions) if policy == "retrievalqa" else popularity_rows(questions)
    extra = {"long_tail_s_pop": LONG_TAIL_S_POP} if policy == "popularity" else {}
    out.write_meta(provenance(policy, generator=None, rows=len(rows), **extra))  # first, as
    out.rewrite(rows)  # every labeller does; temp file + rename keeps the old file until then
    return {"questions": len(rows)}


def _generator_policy(
    req: LabelRequest, questions: list, out: LabelFile, generator: Any, retriever: Any
) -> dict[str, Any]:
    from .policy_loop import pending

    if not pending(questions, out.done_ids()):  # all done: reuse the file, start no engine
        return {"questions": 0, "seconds": 0.0, "questions_per_second": 0.0}
    gen = generator or _build(req)
    if req.policy == "closed-book":
        from .closed_book import label_closed_book

        return label_closed_book(gen, questions, out, req.criterion, req.chunk_size)
    closed = LabelFile(label_path("closed-book", req.generator, req.labels_dir))
    opts = {k: v for k, v in req.options.items() if v is not None}
    ret = retriever or _retriever(opts.pop("retriever", "bm25"), opts.pop("corpus", None))
    opts.pop("retriever", None)
    opts.pop("corpus", None)
    args = (gen, ret, questions, out, closed, req.criterion, req.chunk_size)
    if req.policy == "rag-gain":
        from .rag_gain import label_rag_gain

        return label_rag_gain(*args, **opts)
    from .rrcp import label_rrcp

    return label_rrcp(*args, **opts)


def _build(req: LabelRequest) -> Any:
    from ..generation.cache import lazy_generator

    return lazy_generator(req.generator, req.backend)


def _retriever(name: str, corpus: Path | None) -> Any:
    from ..retrieval import build_retriever, load_corpus

    return build_retriever(name, None if name == "contexts" else load_corpus(corpus))


def relabel(
    policy: str,
    criterion: str,
    generator: str = SMOLLM2,
    labels_dir: Path = LABELS_DIR,
    neither_label: int | None = None,
) -> dict[str, Any]:
    """Recomputes a generator policy's labels under `criterion` from the measures its rows
    keep (no generation) and records the criterion in the provenance."""
    from .rag_gain import judge_gain
    from .rrcp import rrcp_label3
    from .scoring import correct

    out = LabelFile(label_path(policy, generator, labels_dir), replacing=True)
    closed = LabelFile(label_path("closed-book", generator, labels_dir))
    if policy == "closed-book":
        rows = [{**r, "label": int(not correct(r, criterion))} for r in out.rows.values()]
    elif policy == "rag-gain":
        rows = [
            judge_gain(r, closed.rows[i], criterion, neither_label) for i, r in out.rows.items()
        ]
    elif policy == "rrcp":
        rows = []
        for i, r in out.rows.items():
            l3 = rrcp_label3(correct(closed.rows[i], criterion), r["ans"], r["complex"])
            rows.append({**r, "label3": l3, "label": None if l3 is None else int(l3 > 0)})
    else:
        raise DataError(f"--relabel works on closed-book, rag-gain and rrcp, not {policy!r}")
    before = out.labels()
    out.rewrite(rows)
    meta = {**out.meta, "criterion": criterion}
    if policy == "rag-gain":
        meta["neither_label"] = neither_label
    out.write_meta(meta)
    after = out.labels()
    changed = sum(before.get(i) != after.get(i) for i in set(before) | set(after))
    return {"path": str(out.path), "rows": len(rows), "labels_changed": changed}
