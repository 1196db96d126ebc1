"""`label --policy strategies` as a `PolicySpec`: its options (the flags `label` generates),
the checks of a request before any question is read or engine started, and the run, which
hands the questions to the RAG loop's labelling (`loop_labelling.py`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from ..labels.label_files import LABELS_DIR
from ..labels.policies import CHUNK_SIZE, CRITERION, STRATEGIES, UNANSWERED, WITH_DOCUMENTS
from ..labels.policy_registry import LabelRequest, PolicyOption, PolicySpec, register_policy
from ..labels.strategy_labels import STRATEGY_FILE
from ..questions import Question
from ..rag.multistep import DEFAULT_MAX_STEPS, MAX_STEPS_LIMIT, MultiStepConfig
from .loop_labelling import POLICY, StrategyLabelling, label_strategies

MAX_STEPS = PolicyOption(
    "max_steps",
    f"LLM calls per multi-step question, 1-{MAX_STEPS_LIMIT}; the last one asks for the answer",
    type=int,
    default=DEFAULT_MAX_STEPS,
)
MAX_DOCS = PolicyOption(
    "max_docs", "documents a multi-step question holds, newest kept (default: --k)", type=int
)
STEP_K = PolicyOption(
    "step_k", "documents per retrieval after the first (default: k // 2)", type=int
)
# each chunk is one loop pass per strategy, so a chunk is smaller than a one-answer policy's
STRATEGY_CHUNK = replace(CHUNK_SIZE, default=64)


def labelling(req: LabelRequest, out: Path | None = None) -> StrategyLabelling:
    """The run `req` asks for (its questions are read later, after every check)."""
    from ..strategies import BUILTIN, load_strategies, registry_names

    strategies_file, names = registry_names(req.options.get("strategies"))  # names or a YAML
    registry = load_strategies(strategies_file) if strategies_file else BUILTIN
    opts = req.options
    multi = MultiStepConfig(req.value("max_steps"), opts.get("max_docs"), opts.get("step_k"))
    return StrategyLabelling(
        [], out or Path(), req.generator, req.value("retriever"), opts.get("corpus"),
        req.value("k"), names, multi_step=multi, criterion=req.value("criterion"),
        unanswered=opts.get("unanswered"), chunk_size=req.value("chunk_size"), registry=registry,
        questions_source=req.questions_source,
    )  # fmt: skip


def check(req: LabelRequest) -> None:
    """Every flag and file together (strategies in cost order and runnable with --retriever,
    the multi-step limits), before questions are read, the corpus loaded or an engine started."""
    if req.out is not None and req.labels_dir != LABELS_DIR:
        raise InputError(f"--out with --labels-dir does not go with --policy {POLICY} (it "
                         "writes one file: pass one of them)")  # fmt: skip
    labelling(req).check()


def run(req: LabelRequest, path: Path, generator: Any, retriever: Any) -> dict[str, Any]:
    """Labels the questions not yet in `path`; the generator and retriever start only when
    there is something to label (a finished file starts no engine)."""
    job = labelling(req, path)
    job.questions = questions(req)

    def gen() -> Any:
        from ..generation.cache import lazy_generator

        return generator if generator is not None else lazy_generator(req.generator, req.backend)

    def ret() -> Any:
        from ..rag.backends import open_retriever

        if retriever is not None:
            return retriever
        corpus = req.options.get("corpus")
        return open_retriever(req.value("retriever"), str(corpus) if corpus else None)

    return label_strategies(job, gen, ret)


def questions(req: LabelRequest) -> list[Question]:
    """The bundled questions with gold answers (and, with --retriever contexts, their own
    documents), or the user's, which must all have gold answers; at most --limit."""
    from ..labels.selection import labelling_questions

    qs = list(req.questions) if req.questions is not None else None
    if qs is None:
        qs = [q for q in labelling_questions(req.datasets, req.eq_sample, req.seed) if q.answers]
        if req.value("retriever") == "contexts":  # only questions that carry their documents
            qs = [q for q in qs if q.contexts]
    missing = [q for q in qs if not q.answers]
    if missing:
        raise DataError(f"{len(missing)} questions have no gold answers (e.g. {missing[0].id!r}) "
                        "to judge the strategies' answers against; add an answers column")  # fmt: skip
    return qs[: req.limit] if req.limit else qs


STRATEGIES_POLICY = register_policy(
    PolicySpec(
        POLICY,
        "your generator's outcome under every strategy of the RAG loop (no retrieval, one "
        "retrieval, multi-step, or a strategies FILE.yaml's), docs/label.md",
        run,
        needs_generator=True,
        needs_retriever=True,
        needs_rag_loop=True,
        file=STRATEGY_FILE.removesuffix(".jsonl"),
        check=check,
        options=(
            CRITERION,
            STRATEGY_CHUNK,
            *WITH_DOCUMENTS,
            STRATEGIES,
            UNANSWERED,
            MAX_STEPS,
            MAX_DOCS,
            STEP_K,
        ),  # fmt: skip
    )
)
