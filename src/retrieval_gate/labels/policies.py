"""The built-in label policies, one `PolicySpec` each (`policy_registry.py`), and `label()`,
which runs any registered policy through its spec."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from ..fileio import check_writable, sha256_file
from ..generation.base import WindowedGenerator
from ..generation.prompts import closed_book_prompt
from ..models import SMOLLM2
from ..questions import Question
from .label_files import (
    LABELS_DIR,
    LabelFile,
    check_resume,
    made_for_others,
    meta_path,
    missing,
    other_engine,
    other_weights,
    read_meta,
    require_ours,
    stamped,
)
from .lock import single_writer
from .policy_registry import (
    POLICIES,
    LabelRequest,
    PolicyOption,
    PolicySpec,
    check_options,
    generator_dir_name,
    label_path,
    policy_spec,
    register_policy,
)
from .rag_gain import TOP_K
from .scoring import CRITERIA, DEFAULT_CRITERION
from .selection import labelling_questions

__all__ = ["POLICIES", "LabelRequest", "check_answers", "label", "label_path", "relabel"]

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- options (one flag each)


def _existing(kind: str, fix: str) -> Callable[[Any, str], None]:
    """A check that a given path exists (`kind`: "file", or "path" for a file or folder)."""

    def check(value: Any, flag: str) -> None:
        path = Path(value)
        ok = path.is_file() if kind == "file" else path.exists()
        if not ok:
            what = "a folder, not a file" if path.is_dir() else f"no such {kind}"
            raise InputError(f"{flag}: {what}; {fix}", path)

    return check


CRITERION = PolicyOption(
    "criterion",
    "when an answer counts as correct (docs/label.md)",
    default=DEFAULT_CRITERION,
    choices=CRITERIA,
)
CHUNK_SIZE = PolicyOption(
    "chunk_size",
    "questions per generator call, written when the chunk ends",
    type=int,
    default=512,
    least=1,
)
OUTCOMES = PolicyOption(
    "outcomes",
    "your recorded answers (lm-eval --log_samples samples_*.jsonl, or a file with "
    "id/question + correct or prediction [+ rag_correct/rag_prediction]), or an Adaptive-RAG "
    "release folder (predictions/<split>/; --generator picks its LLM)",
    type=Path,
    metavar="FILE",
    required="your recorded answers",
    check=_existing(
        "file or folder", "pass your recorded answers or an Adaptive-RAG release folder"
    ),  # fmt: skip
)
STRATEGIES = PolicyOption(
    "strategies",
    "outcomes: strategy names in cost order, the cheapest first; the file has "
    "<name>_correct or <name>_prediction (and optionally <name>_cost) columns; also writes "
    "strategies.jsonl (default: none, one-answer outcomes). strategies: which of "
    "no_retrieval one_retrieval multi_step to run (default all three), or a strategies "
    "FILE.yaml (docs/router.md) to run its strategies",
    nargs="+",
)


def _outcome_fields(value: Any, flag: str) -> None:
    from .outcome_columns import parse_outcome_fields

    parse_outcome_fields(value)


OUTCOME_FIELD = PolicyOption(
    "outcome_field",
    "read an outcome field from a column your tool named otherwise, e.g. "
    "prediction=model_answer id=question_id token_logprobs=answer_logprobs (fields: id, "
    "question, correct, prediction, rag_correct, rag_prediction, token_logprobs, "
    "mean_logprob; with --strategies also <name>_correct, _prediction, _cost, "
    "_token_logprobs)",
    nargs="+",
    metavar="FIELD=COLUMN",
    check=_outcome_fields,
)
UNANSWERED = PolicyOption(
    "unanswered",
    "strategy labels: target of questions no strategy answers: prior (default; single-hop "
    "sets -> one retrieval, multi-hop -> multi-step, any other source -> the strategy most "
    "often right on its labelled questions; prior:SOURCE=STRATEGY,... sets sources), "
    "exclude, or a strategy name",
)
RETRIEVER = PolicyOption(
    "retriever",
    "documents for the with-retrieval answers",
    default="bm25",
    choices=("bm25", "dense", "contexts"),
    meta="retriever",
)
CORPUS = PolicyOption(
    "corpus",
    "rows of {id, title, text}: .jsonl, .json, .csv, .tsv or .parquet (default: the documents "
    "the datasets carry)",
    type=Path,
    check=_existing("file", "pass a file of {id, title, text} rows"),
)
K = PolicyOption("k", "documents per question", type=int, default=TOP_K, least=1, meta="top_k")
NEITHER_LABEL = PolicyOption(
    "neither_label",
    "rag-gain: label for 'neither' (default: dropped)",
    type=int,
    choices=(0, 1),
    meta="neither_label",
)
EVALUATOR = PolicyOption(
    "evaluator",
    "rrcp s_i evaluator",
    default="overlap",
    choices=("overlap", "llm", "mean"),
    meta="evaluator",
)
NO_LLM_JUDGE = PolicyOption("no_llm_judge", "rrcp: skip the P(Yes) judge", switch=True)
T_ANS = PolicyOption("t_ans", "rrcp answerability threshold", type=float, default=0.15,
                     least=0.0, most=1.0, meta="t_ans")  # fmt: skip
T_COM = PolicyOption("t_com", "rrcp completeness threshold", type=float, default=0.80,
                     least=0.0, most=1.0, meta="t_com")  # fmt: skip
WITH_DOCUMENTS = (RETRIEVER, CORPUS, K)
CORPUS_SHA = "corpus_sha256"  # the sidecar's record of --corpus (None: the datasets' documents)


# ---------------------------------------------------------------- label()


def label(req: LabelRequest, generator: Any = None, retriever: Any = None) -> dict[str, Any]:
    """Runs one policy over the requested questions, resuming its file. `generator` and
    `retriever` may be passed in (tests reuse one engine); otherwise they are built when the
    policy needs them."""
    spec = policy_spec(req.policy)
    path = req.out or spec.path(req.generator, req.labels_dir)
    validate_request(req)
    return spec.run(req, path, generator, retriever)


def validate_request(req: LabelRequest) -> None:
    """Flag values checked before any question is read or engine started: the shared fields,
    the policy's `options` (each one it reads, within bounds, the required ones there) and the
    policy's own check. (The CLI refuses a policy flag given to a policy that does not read it
    in `policy_registry.request`; in Python the shared fields are ignored where unused.)"""
    if req.limit is not None and req.limit < 1:
        raise InputError(f"--limit must be a positive number of questions, got {req.limit}")
    if req.chunk_size is not None and req.chunk_size < 1:
        raise InputError(f"--chunk-size must be at least 1 question, got {req.chunk_size}")
    if req.eq_sample < 0:
        raise InputError(f"--eq-sample must be 0 or more, got {req.eq_sample}")
    spec = policy_spec(req.policy)
    if req.backend != "auto" and not spec.needs_generator:
        raise InputError(f"--backend picks the in-process generator, and --policy {req.policy} "
                         "runs none: drop it")  # fmt: skip
    check_options(spec, {k: v for k, v in req.options.items() if v is not None and v is not False})
    if spec.check is not None:
        spec.check(req)


def check_answers(questions: Sequence[Question], policy: str) -> None:
    """Judging a generator's answers needs gold answers: say which way works without them."""
    if not policy_spec(policy).needs_generator:
        return
    missing = [q for q in questions if not q.answers]
    if missing:
        raise DataError(
            f"{len(missing)} of {len(questions)} questions have no gold answers (e.g. "
            f"{missing[0].id!r}), so policy {policy!r} cannot judge the generator's answers. "
            "Add an answers column, or record whether each answer was right yourself and use "
            "`--policy outcomes --outcomes FILE` with a correctness column"
        )


# ---------------------------------------------------------------- policies writing one file

FileLabeller = Callable[[LabelRequest, list, LabelFile, Any, Any], dict[str, Any]]


def _one_file(labeller: FileLabeller) -> Callable[..., dict[str, Any]]:
    """A policy that writes one label file: refused if the file is not ours, written under
    its lock, resumed (or rebuilt whole) over the requested questions."""

    def run(req: LabelRequest, path: Path, generator: Any, retriever: Any) -> dict[str, Any]:
        from .policy_loop import check_failures_ours, pending

        spec = policy_spec(req.policy)
        rebuilt, flag = spec.rebuilt, "--out" if req.out else "--labels-dir"
        # A folder or a user's file is refused before the lock file is made beside it (and
        # read again under the lock: another run may have appended meanwhile).
        require_ours(path, flag)
        if spec.needs_generator and not rebuilt:  # the chunked loop's list
            check_failures_ours(path)  # of failed questions beside it: a user's file refused
        check_writable(path)  # a read-only folder: said before the generator's config is read
        before = LabelFile(path, replacing=rebuilt, flag=flag)
        questions = _questions(req)
        todo = questions if rebuilt else pending(questions, before.done_ids())
        if spec.needs_generator and todo:
            generator = generator or _build(req)  # its tokenizer and window: no engine yet
            check_questions_fit(generator, todo)
        if spec.reads_closed_book and todo:  # the closed-book rows it will read
            _check_closed_book(req, todo, None if rebuilt else generator)
        with single_writer(path):  # one run (local or Ray) writes a label file at a time
            # rebuilt: no old row survives to mix
            out = LabelFile(path, replacing=rebuilt, extra_meta=_source_meta(req), flag=flag)
            out.require_ours()  # before any engine starts: a user's file or other settings
            _check_resume(req, out, rebuilt, generator)
            out.resume_over([] if rebuilt else questions)  # rebuilt: every row made anew
            stats = labeller(req, questions, out, generator, retriever)
            return {"path": str(path), "rows": len(out.rows), **stats}

    return run


def _check_resume(req: LabelRequest, out: LabelFile, rebuilt: bool, generator: Any) -> None:
    if not out.meta_binds():
        return
    old = out.meta
    expected = {"policy": req.policy} if rebuilt else _expected_meta(req, out.extra_meta, generator)
    check_resume(out.path, old, expected)
    if not rebuilt:
        _same_generator(out.path, old, req.generator)


def _backend(req: LabelRequest, generator: Any) -> str | None:
    """The backend this run answers with, known before any engine starts: the given
    generator's, else --backend with auto resolved as the engine is built (None: unknown)."""
    import importlib.util

    if generator is not None:
        return getattr(generator, "backend", None)
    if req.backend != "auto":
        return req.backend
    return "vllm" if importlib.util.find_spec("vllm") else "transformers"


def _check_closed_book(req: LabelRequest, questions: list[Question], generator: Any) -> None:
    """The closed-book rows a policy reads (rag-gain, rrcp, retrievalqa-style) must be of
    these very questions, as a resume's own rows (`resume_over`), and, where `generator`
    answers the rest, made by its weights and engine: else the labels compared answers to
    other questions, or two engines' answers, under this run's provenance."""
    closed = LabelFile(label_path("closed-book", req.generator, req.labels_dir))
    if not closed.rows:
        return
    fix = ("label closed-book again into another --labels-dir (or pass one without a "
           "closed-book file: the closed-book answers are then generated here)")  # fmt: skip
    if changed := made_for_others(stamped(closed.rows), questions, exact=True):
        raise DataError(f"{len(changed)} closed-book rows here were made for other questions "
                        f"under the same id (id {changed[0]!r}: its text or gold answers "
                        f"changed since), and --policy {req.policy} would read them as these "
                        f"questions' answers: {fix}, or pass the questions it was made "
                        "for", closed.path)  # fmt: skip
    if generator is None or not meta_path(closed.path).is_file():
        return
    meta, backend = closed.meta, _backend(req, generator)
    if other_engine(meta.get("backend"), backend):
        raise DataError(f"this closed-book file was made with backend={meta['backend']!r}, "
                        f"and this run answers with {backend!r}: --policy {req.policy} would "
                        "compare two engines' answers; pass the --backend that made it, or "
                        f"{fix}", closed.path)  # fmt: skip
    if other_weights(meta.get("generator_checksum"), getattr(generator, "checksum", None)):
        raise DataError(f"this closed-book file was made with other weights of its generator "
                        f"than this run's: --policy {req.policy} would compare two models' "
                        f"answers; {fix}", closed.path)  # fmt: skip


def _questions(req: LabelRequest) -> list[Question]:
    """The bundled questions (or the user's), only those with documents where a policy
    reads them, at most --limit."""
    if req.questions is None:
        questions = labelling_questions(req.datasets, req.eq_sample, req.seed)
    else:
        questions = list(req.questions)
        check_answers(questions, req.policy)
    # only where documents exist: the questions' own (contexts), or the bundled datasets'
    # documents without --corpus (bm25 / dense over --corpus retrieve for every question)
    contexts = req.options.get("retriever") == "contexts"
    needs_docs = contexts or (req.questions is None and not req.options.get("corpus"))
    if policy_spec(req.policy).needs_retriever and needs_docs:
        questions = _carrying_documents(req, questions, contexts)
    if req.limit is not None:
        if req.limit > len(questions):
            log.info(f"--limit {req.limit} is more than the {len(questions)} questions "
                     f"available; labelling all {len(questions)}")  # fmt: skip
        questions = questions[: req.limit]
    return questions


def _carrying_documents(
    req: LabelRequest, questions: list[Question], contexts: bool
) -> list[Question]:
    """The questions that carry documents of their own (`contexts`). None did: a run labelled
    nothing and ended 0; so it is refused, and a part left out said."""
    kept = [q for q in questions if q.contexts]
    if len(kept) == len(questions):
        return kept
    if contexts:
        why = "--retriever contexts reads the documents each question carries"
    else:
        name = req.options.get("retriever") or RETRIEVER.default
        why = (f"--retriever {name} without --corpus retrieves from the documents the "
               "datasets carry, for their questions only")  # fmt: skip
    fix = "retrieve from your documents with --retriever bm25 --corpus FILE (or dense)"
    if not kept:
        mine = req.questions is not None
        which, none = ("your", "a question file's columns") if mine else ("the", "FreshQA, ToolQA")
        raise InputError(f"{why}, and none of {which} {len(questions)} questions carries any "
                         f"({none} give none): {fix}")  # fmt: skip
    log.warning(f"{len(questions) - len(kept)} of {len(questions)} questions carry no "
                f"documents and are left out ({why}); to label them, {fix}")  # fmt: skip
    return kept


def _expected_meta(req: LabelRequest, source: dict[str, Any], generator: Any = None) -> dict:
    """The provenance fields of an appending policy comparable before the engine is built (the
    generator is compared by folder name in `_same_generator`, the prompt id at write_meta):
    its options recorded in the sidecar (`PolicyOption.meta`), the corpus's checksum of
    `source` (`_source_meta`; its questions file may differ: more questions labelled later)
    and the backend answering (`_backend`)."""
    spec = policy_spec(req.policy)
    recorded = {o.meta: req.value(o.name) for o in spec.options if o.meta}
    corpus = {k: v for k, v in source.items() if k == CORPUS_SHA}
    backend = _backend(req, generator) if spec.needs_generator else None
    engine = {"backend": backend} if backend else {}
    return {"policy": req.policy, "criterion": req.value("criterion"), **recorded, **corpus,
            **engine}  # fmt: skip


def _same_generator(path: Path, old: dict[str, Any], generator: str) -> None:
    recorded = old.get("generator") or old.get("reference")
    if recorded and generator_dir_name(recorded) != generator_dir_name(generator):
        raise InputError(
            f"this label file was made with generator {recorded!r}, not {generator!r}; "
            "pass another --out (or move the file) to label with another generator",
            path,
        )


def _generator_free(req: LabelRequest, questions: list, out: LabelFile, *_: Any) -> dict[str, Any]:
    """Rewritten whole each time: reading a field costs nothing, so there is nothing to resume."""
    from .policy_loop import provenance
    from .simple import LONG_TAIL_S_POP, popularity_rows, retrievalqa_rows

    policy = req.policy
    rows = retrievalqa_rows(questions) if policy == "retrievalqa" else popularity_rows(questions)
    extra = {"long_tail_s_pop": LONG_TAIL_S_POP} if policy == "popularity" else {}
    out.write_meta(provenance(policy, generator=None, rows=len(rows), **extra))  # first, as
    out.rewrite(rows)  # every labeller does; temp file + rename keeps the old file until then
    return {"questions": len(rows)}


def _retrievalqa_style(req: LabelRequest, questions: list, out: LabelFile, *_: Any) -> dict:
    from .retrievalqa_style import label_retrievalqa_style

    closed = LabelFile(label_path("closed-book", req.generator, req.labels_dir))
    out.made_for(questions)  # its rows stamped: a train over questions edited since refused
    return label_retrievalqa_style(questions, out, closed, req.value("criterion"))


def _generating(labeller: FileLabeller) -> FileLabeller:
    """A labeller that asks the generator: with nothing left to label it starts no engine."""

    def run(req: LabelRequest, questions: list, out: LabelFile, generator: Any,
            retriever: Any) -> dict[str, Any]:  # fmt: skip
        from .policy_loop import pending

        if not pending(questions, out.done_ids()):  # all done: reuse the file
            return {"questions": 0, "seconds": 0.0, "questions_per_second": 0.0}
        if retriever is None and policy_spec(req.policy).needs_retriever:
            # first: a corpus file is read (and a bad one refused) before the generator loads
            retriever = _retriever(req.value("retriever"), req.options.get("corpus"))
        return labeller(req, questions, out, generator or _build(req), retriever)

    return run


def check_questions_fit(generator: Any, questions: Sequence[Question]) -> None:
    """Every question's closed-book prompt (the least any policy sends) fits the generator's
    context window with room for its answer: one that does not failed the engine's whole
    batch (a traceback, after the engine had started)."""
    from .closed_book import MAX_NEW_TOKENS

    if not isinstance(generator, WindowedGenerator) or not generator.context_window:
        return  # a server that counts no tokens fits (or refuses) each prompt itself
    window = generator.context_window
    lengths = generator.prompt_lengths([closed_book_prompt(q.text) for q in questions])
    over = [(q, n) for q, n in zip(questions, lengths, strict=True) if n > window - MAX_NEW_TOKENS]
    if over:
        q, n = over[0]
        raise DataError(f"{len(over)} of {len(questions)} questions do not fit {generator.name}'s "
                        f"context window of {window} tokens with {MAX_NEW_TOKENS} for the "
                        f"answer: question {q.id!r} makes a {n}-token prompt; shorten those "
                        "questions or leave them out")  # fmt: skip


def _closed_book(req: LabelRequest, questions: list, out: LabelFile, gen: Any, _: Any) -> dict:
    from .closed_book import label_closed_book

    return label_closed_book(gen, questions, out, req.value("criterion"), req.value("chunk_size"))


def _with_documents(req: LabelRequest, questions: list, out: LabelFile, gen: Any,
                    retriever: Any) -> tuple:  # fmt: skip
    """The arguments rag-gain and rrcp share: generator, retriever, the closed-book file."""
    closed = LabelFile(label_path("closed-book", req.generator, req.labels_dir))
    ret = retriever or _retriever(req.value("retriever"), req.options.get("corpus"))
    return gen, ret, questions, out, closed, req.value("criterion"), req.value("chunk_size")


def _rag_gain(req: LabelRequest, *args: Any) -> dict[str, Any]:
    from .rag_gain import label_rag_gain

    neither = req.options.get("neither_label")
    return label_rag_gain(*_with_documents(req, *args), k=req.value("k"), neither_label=neither)


def _rrcp(req: LabelRequest, *args: Any) -> dict[str, Any]:
    from .rrcp import label_rrcp

    # unset thresholds and evaluator: the labeller's own defaults
    opts = {n: req.options[n] for n in ("evaluator", "t_ans", "t_com") if n in req.options}
    if req.options.get("no_llm_judge"):
        opts["llm_judge"] = False
    return label_rrcp(*_with_documents(req, *args), k=req.value("k"), **opts)


def _build(req: LabelRequest) -> Any:
    from ..generation.cache import lazy_generator

    return lazy_generator(req.generator, req.backend)


def _retriever(name: str, corpus: Path | None) -> Any:
    from ..retrieval import build_retriever, load_corpus

    return build_retriever(name, None if name == "contexts" else load_corpus(corpus))


# ---------------------------------------------------------------- outcomes (no generation)


def _outcomes(req: LabelRequest, path: Path, *_: Any) -> dict[str, Any]:
    from ..data.adaptive_rag import is_release
    from ..data.user_questions import question_set
    from .outcome_columns import parse_outcome_fields
    from .outcomes import import_outcomes

    if req.options.get("strategies") or is_release(req.options["outcomes"]):
        return _strategy_outcomes(req)
    _unnamed_llm(req, path.parent)
    questions = req.questions if req.questions is not None else question_set()
    return import_outcomes(
        req.options["outcomes"],
        questions,
        path.parent,
        req.generator,
        req.value("criterion"),
        req.options.get("neither_label"),
        out_file=req.out,  # --out FILE: that very file (closed-book outcomes only)
        fields=parse_outcome_fields(req.options.get("outcome_field")),
        extra_meta=_source_meta(req),
    )


def _strategy_outcomes(req: LabelRequest) -> dict[str, Any]:
    """Outcomes of N strategies (a release folder, or a file with --strategies): closed-book,
    rag-gain and strategies files in one folder."""
    from ..data.adaptive_rag import is_release
    from ..data.user_questions import question_set
    from ..strategies import registry_names
    from .outcome_columns import parse_outcome_fields
    from .strategy_labels import import_release, import_strategy_outcomes, parse_strategies

    opts = req.options
    if req.out is not None:
        raise InputError(
            f"--out {req.out}: outcomes of several strategies write three files (closed-book, "
            "rag-gain, strategies); pass the folder as --labels-dir DIR"
        )
    names = _strategy_names(opts.get("strategies"))
    strategies = parse_strategies(names) if names else None
    if is_release(opts["outcomes"]):  # its own questions and strategies
        if req.questions is not None:
            raise InputError("--questions: a release folder carries its own questions; drop it")
        if opts.get("outcome_field"):
            raise InputError("--outcome-field maps the columns of an outcomes file; a release "
                             "folder's files have their own, fixed ones: drop it")  # fmt: skip
        return import_release(opts["outcomes"], req.labels_dir, req.llm,
                              opts.get("unanswered"), opts.get("neither_label"), strategies)  # fmt: skip
    folder = req.labels_dir / generator_dir_name(req.generator)
    _unnamed_llm(req, folder)
    questions = req.questions if req.questions is not None else question_set()
    return import_strategy_outcomes(
        opts["outcomes"], questions, strategies or [], folder,
        req.generator, req.value("criterion"), opts.get("unanswered"), opts.get("neither_label"),
        fields=parse_outcome_fields(opts.get("outcome_field")), extra_meta=_source_meta(req),
        strategies_file=registry_names(opts.get("strategies"))[0],  # its costs price the rows
    )  # fmt: skip


def _source_meta(req: LabelRequest) -> dict[str, Any]:
    """The sidecar's `questions_source`: the questions file the labels are about (training
    on them names it when the config reads other questions); a policy reading documents, the
    checksum of its --corpus (None: the datasets' own documents)."""
    out = {"questions_source": req.questions_source} if req.questions_source else {}
    if policy_spec(req.policy).needs_retriever:
        corpus = req.options.get("corpus")
        out[CORPUS_SHA] = sha256_file(corpus) if corpus else None
    return out


def _unnamed_llm(req: LabelRequest, folder: Path) -> None:
    """Outcomes are some LLM's answers: without --generator they are filed under the default
    generator's name, which a later `--labels` by that name would read as SmolLM2's."""
    if req.llm is None and req.generator == SMOLLM2:  # a Python caller may name it alone
        log.warning("no --generator: these outcomes are filed as %s's, in %s; name the LLM "
                    "whose answers they are with --generator NAME", req.generator,
                    req.out or folder)  # fmt: skip


def _strategy_names(value: Sequence[str] | None) -> list[str] | None:
    """--strategies as names: given ones, or a strategies FILE.yaml's (cost order)."""
    from ..strategies import load_strategies, registry_names

    strategies_file, names = registry_names(value)
    return list(load_strategies(strategies_file).names) if strategies_file else names


# ---------------------------------------------------------------- the built-ins

for _spec in (
    PolicySpec("retrievalqa", "RetrievalQA's own field (1 - param_knowledge_answerable)",
               _one_file(_generator_free), rebuilt=True, per_generator=False),
    PolicySpec("popularity", "PopQA popularity (s_pop < 100 -> needs retrieval)",
               _one_file(_generator_free), rebuilt=True, per_generator=False),
    PolicySpec("closed-book", "the generator answers closed-book; needs retrieval = not "
               "correct", _one_file(_generating(_closed_book)), needs_generator=True, ray=True,
               relabel=True, options=(CRITERION, CHUNK_SIZE)),
    PolicySpec("rag-gain", "also answered with retrieved documents: helps / hurts / neither "
               "/ both", _one_file(_generating(_rag_gain)), needs_generator=True,
               needs_retriever=True, ray=True, relabel=True, reads_closed_book=True,
               options=(CRITERION, CHUNK_SIZE, *WITH_DOCUMENTS, NEITHER_LABEL)),
    PolicySpec("rrcp", "RRCP answerability / completeness over the top-k documents",
               _one_file(_generating(_rrcp)), needs_generator=True, needs_retriever=True,
               relabel=True, reads_closed_book=True,
               options=(CRITERION, CHUNK_SIZE, *WITH_DOCUMENTS, EVALUATOR, NO_LLM_JUDGE, T_ANS,
                        T_COM)),
    # reads the generator's closed-book file (--generator / --generator-url name it)
    PolicySpec("retrievalqa-style", "RetrievalQA's recipe over the closed-book labels",
               _one_file(_retrievalqa_style), needs_generator=True, rebuilt=True,
               reads_closed_book=True, options=(CRITERION,)),
    PolicySpec("outcomes", "answers you recorded elsewhere (lm-eval logs, a file, an "
               "Adaptive-RAG release), no generation", _outcomes, file="closed-book", selects=False,
               options=(CRITERION, OUTCOMES, OUTCOME_FIELD, STRATEGIES, UNANSWERED,
                        NEITHER_LABEL)),
):  # fmt: skip
    register_policy(_spec)


def relabel(
    policy: str,
    criterion: str,
    generator: str = SMOLLM2,
    labels_dir: Path = LABELS_DIR,
    neither_label: int | None = None,
    out: Path | None = None,
) -> dict[str, Any]:
    """Recomputes a generator policy's labels under `criterion` from the measures its rows
    keep (no generation) and records the criterion in the provenance. The file is `out`, else
    `<labels_dir>/<generator>/<policy>.jsonl`, as `label` resolves where it writes; rag-gain
    and rrcp rows without their own closed-book measures read them from `labels_dir`. Refused
    while another run holds the file's writer lock."""
    if policy not in POLICIES or not policy_spec(policy).relabel:
        raise DataError(f"--relabel works on closed-book, rag-gain and rrcp, not {policy!r}")
    path = Path(out) if out is not None else label_path(policy, generator, labels_dir)
    flag = "--out" if out is not None else "--labels-dir"  # the flag that named the file
    _relabelled_meta(path, policy, flag)  # refused before a lock file is made beside it
    # the writer lock `label` takes: a run appending meanwhile would lose its rows to the rewrite
    with single_writer(path, RELABEL_BUSY):
        meta = _relabelled_meta(path, policy, flag)  # as it is now that no other run writes it
        out_file = LabelFile(path, replacing=True, flag=flag)
        closed_path = label_path("closed-book", generator, labels_dir)
        rows = _relabelled_rows(out_file, policy, criterion, closed_path, neither_label)
        before = out_file.labels()
        out_file.rewrite(rows)
        meta["criterion"] = criterion
        if policy == "rag-gain":
            meta["neither_label"] = neither_label
        out_file.write_meta(meta)
        after = out_file.labels()
    changed = sum(before.get(i) != after.get(i) for i in set(before) | set(after))
    return {"path": str(path), "rows": len(rows), "labels_changed": changed}


RELABEL_BUSY = (
    "another labelling run (pid {pid}, local or --engine ray) is writing this label file now, "
    "and --relabel rewrites it whole: wait for that run to finish, then relabel"
)


def _relabelled_rows(
    out_file: LabelFile,
    policy: str,
    criterion: str,
    closed_path: Path,
    neither_label: int | None,
) -> list[dict[str, Any]]:
    """`out_file`'s rows with their labels recomputed under `criterion`."""
    from .rag_gain import judge_gain
    from .rrcp import rrcp_label3
    from .scoring import correct

    if policy == "closed-book":
        return [{**r, "label": int(not correct(r, criterion))} for r in out_file.rows.values()]
    closed = _closed_measures(out_file, closed_path)
    rows = []
    for i, r in out_file.rows.items():
        if policy == "rag-gain":
            rows.append(judge_gain(r, closed[i], criterion, neither_label))
            continue
        l3 = rrcp_label3(correct(closed[i], criterion), r["ans"], r["complex"])
        rows.append({**r, "label3": l3, "label": None if l3 is None else int(l3 > 0)})
    return rows


def _relabelled_meta(path: Path, policy: str, flag: str = "--out") -> dict[str, Any]:
    """The provenance of the label file --relabel rewrites, refused (nothing created) unless
    `label` wrote that file under `policy`: its rows keep the measures relabelling reads."""
    named = f"name a {policy} file that `label` wrote with --out FILE or --labels-dir DIR"
    if not path.is_file():
        fix = f"--relabel rewrites an existing label file: {named}, or label it first"
        raise DataError(missing(path, fix=fix), path)
    require_ours(path, flag)  # a user's file (rows, no provenance) or a folder
    mp = meta_path(path)
    if not mp.is_file():
        raise DataError(f"label file has no provenance file {mp.name} beside it: {named}", path)
    meta = read_meta(mp)
    if meta.get("policy") != policy:
        raise DataError(f"this label file was made by --policy {meta.get('policy')}, not "
                        f"{policy}: pass --policy {meta.get('policy')}, or {named}",
                        path)  # fmt: skip
    return meta


def _closed_measures(out: LabelFile, closed_path: Path) -> dict[str, dict[str, Any]]:
    """Each row's closed-book measures: its own copy (`closed`), else the closed-book file's
    row (rows written before the copy), refused by id where neither has them."""
    own = {i: r["closed"] for i, r in out.rows.items() if isinstance(r.get("closed"), dict)}
    if len(own) == len(out.rows):
        return own
    closed = {**LabelFile(closed_path).rows, **own}
    if lacking := [i for i in out.rows if i not in closed]:
        raise DataError(f"row {lacking[0]!r} of {out.path} keeps no closed-book measures and "
                        f"the closed-book file has no row for it: pass the --labels-dir that "
                        "holds the closed-book file it was labelled from", closed_path)  # fmt: skip
    return closed
