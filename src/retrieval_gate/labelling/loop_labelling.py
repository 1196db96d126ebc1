"""`label --policy strategies`: each question's outcome under every strategy of the RAG loop
(the registry's: the built-ins no retrieval, one retrieval and multi-step, or those of
`--strategies FILE.yaml`), with YOUR generator and retriever, into the strategy label file (`labels/strategy_labels.py`: same rows, same provenance fields).

It lives in labelling/, above both labels/ and rag/, because it runs the loop itself: the
labels are the outcomes of exactly the prompts, documents and steps `rag` and `serve` run
(`strategies_policy.py` registers it as `label --policy strategies`).
Beyond the strategy label file's fields, a row records each strategy's `llm_calls`,
`measures` and, when the generator returns them, `token_logprobs` ({strategy: the answer's
token log-probabilities}, a multi-step answer's from its last step; `labels.logprobs`).

Resumable chunk by chunk: each chunk is one `AdaptiveRAG.run` over its questions once per
strategy (so step s of every question is one engine call), its rows are appended when the
chunk ends, and a rerun skips every id already in the file. A resume with another generator,
retriever, corpus, k, strategy list, multi-step setting, criterion or unanswered treatment is
refused before any engine starts (the generator's weights checksum right after it starts).
A question whose generator call failed (a server that died mid-step) is not written: the
other questions go on, the run ends with an error naming how many failed, and a rerun redoes
only those."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendError, DataError, InputError
from ..fileio import sha256_file
from ..generation.base import Generator
from ..generation.prompts import CLOSED_BOOK_ID, DOC_WORDS, MULTI_STEP_ID, WITH_CONTEXT_ID
from ..labels.closed_book import PREDICTION_CHARS, source_frequent_answers
from ..labels.label_files import LabelFile
from ..labels.lock import single_writer
from ..labels.logprobs import TOKEN_LOGPROBS, rounded
from ..labels.policy_loop import check_failures_ours, pending, provenance, run_chunked
from ..labels.scoring import DEFAULT_CRITERION, correct, judge
from ..labels.strategy_labels import (
    STRATEGY_FILE,
    LearnedPrior,
    Outcome,
    Unanswered,
    parse_strategies,
    parse_unanswered,
    strategy_row,
)
from ..questions import Question
from ..rag.decisions import Decision, FixedStrategy, check_runnable, retrieval_scores
from ..rag.loop import DEFAULT_K, DEFAULT_MAX_NEW_TOKENS, AdaptiveRAG, Answer
from ..rag.multistep import MultiStepConfig
from ..retrieval.base import Retriever
from ..strategies import BUILTIN, MULTI_STEP, PROMPTS, StrategyRegistry, StrategySpec

log = logging.getLogger(__name__)

POLICY = "strategies"
# a spec's prompt (closed-book, with-context, ircot) -> the versioned prompt it runs
PROMPT_IDS = dict(zip(PROMPTS, (CLOSED_BOOK_ID, WITH_CONTEXT_ID, MULTI_STEP_ID), strict=True))
# Provenance a resumed file must share with this run (checked before any engine starts);
# `multi_step` (the registry's name of the built-in) keys the multi-step reasoner's settings.
# The corpus by its checksum, as rag-gain's: its path (`corpus`) and the questions file's
# (`questions_source`) are recorded, not compared, so the same file named by another path (or
# a copy) resumes; the questions themselves are compared row by row (`question_sha`).
RESUME_KEYS = ("policy", "source", "generator", "strategies", "retriever", "corpus_sha256",
               "k", "max_new_tokens", MULTI_STEP, "doc_words", "prompt_ids", "criterion",
               "unanswered", "strategy_specs")  # fmt: skip


@dataclass
class StrategyLabelling:
    """What one `label --policy strategies` run asks for (one field per flag)."""

    questions: Sequence[Question]
    out: Path
    generator: str  # the generator's name (a model folder's name, or the server's model id)
    retriever: str = "bm25"
    corpus: Path | None = None
    k: int = DEFAULT_K
    strategies: Sequence[str] | None = None  # names in cost order (None: every registered one)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    multi_step: MultiStepConfig = field(default_factory=MultiStepConfig)
    criterion: str = DEFAULT_CRITERION
    unanswered: str | None = None
    chunk_size: int = 64
    registry: StrategyRegistry = BUILTIN  # --strategies FILE.yaml
    # the --questions file and --field mappings, recorded for `train` to name
    questions_source: dict[str, Any] | None = None

    def check(self) -> tuple[list[str], Unanswered]:
        """The strategies (cost order) and unanswered treatment; every flag checked, and
        every strategy one this run can run (its retriever, the one generator)."""
        reg = self.registry
        strategies = parse_strategies(self.strategies or list(reg.names))
        reg.check(strategies, "--strategies")
        if not reg.in_cost_order(strategies) or reg[strategies[0]].retrieves:
            raise InputError(f"--strategies {' '.join(strategies)}: list them in cost order, "
                             f"the first without retrieval ({' '.join(reg.names)})")  # fmt: skip
        check_runnable([reg[s] for s in strategies], self.retriever, "--strategies")
        self.multi_step.check()
        for flag, value in (("--k", self.k), ("--max-new-tokens", self.max_new_tokens),
                            ("--chunk-size", self.chunk_size)):  # fmt: skip
            if value < 1:
                raise InputError(f"{flag} must be at least 1, got {value}")
        return strategies, parse_unanswered(self.unanswered, strategies)

    def settings(self, strategies: list[str], treat: Unanswered) -> dict[str, Any]:
        corpus_sha = (
            sha256_file(self.corpus) if self.corpus and Path(self.corpus).is_file() else None
        )
        return {
            "policy": POLICY, "source": "generator", "generator": Path(self.generator).name,
            "strategies": strategies, "retriever": self.retriever,
            "corpus": str(self.corpus) if self.corpus else None, "corpus_sha256": corpus_sha,
            "k": self.k, "max_new_tokens": self.max_new_tokens,
            MULTI_STEP: asdict(self.multi_step.resolved(self.k)), "doc_words": DOC_WORDS,
            "prompt_ids": {s: PROMPT_IDS[self.registry[s].prompt] for s in strategies},
            "criterion": self.criterion, "unanswered": treat.describe(),
            **({} if self.registry.is_builtin else
               {"strategy_specs": self.registry.to_list(strategies)}),
            **({"questions_source": self.questions_source} if self.questions_source else {}),
        }  # fmt: skip


def label_path(labels_dir: Path, generator: str) -> Path:
    """<labels-dir>/<generator>/strategies.jsonl, beside the generator's other label files."""
    return labels_dir / Path(generator).name.lower() / STRATEGY_FILE


def label_strategies(
    req: StrategyLabelling,
    generator: Callable[[], Generator] | Generator,
    retriever: Callable[[], Retriever] | Retriever,
) -> dict[str, Any]:
    """Labels the questions not yet in `req.out`. `generator` / `retriever`: built ones, or
    factories called only when there is something to label (after every check)."""
    strategies, treat = req.check()
    if not req.questions:
        raise InputError("no questions to label")
    settings = req.settings(strategies, treat)
    LabelFile(req.out).require_ours()  # a folder or a user's file: refused before the lock file
    check_failures_ours(req.out)  # so is a user's file where its failed questions go
    with single_writer(req.out):
        out = LabelFile(req.out)  # read under the lock: another run may have appended meanwhile
        out.require_ours()
        _check_resume(out, settings)
        out.resume_over(req.questions)
        todo = pending(req.questions, out.done_ids())
        if not todo:
            return _summary(out, strategies, {"questions": 0, "seconds": 0.0}, 0)
        # the retriever first: a corpus file is read (a bad one refused) before the generator
        ret = retriever if isinstance(retriever, Retriever) else retriever()
        gen = generator if isinstance(generator, Generator) else generator()
        fields = {k: v for k, v in settings.items() if k != "policy"}
        meta = provenance(POLICY, **fields, generator_checksum=gen.checksum,
                          backend=getattr(gen, "backend", "?"), retriever_name=ret.name,
                          **getattr(gen, "provenance", {}))  # fmt: skip
        out.write_meta(meta)  # before the first row (refused for other weights: check_resume)
        reg = req.registry
        rag = AdaptiveRAG(FixedStrategy(strategies[0], registry=reg), ret, gen, k=req.k,
                          max_new_tokens=req.max_new_tokens, multi_step=req.multi_step,
                          strategies=reg, logprobs=True)  # fmt: skip
        chunk = _Chunk(rag, strategies, treat, req.criterion, source_frequent_answers(todo),
                       _learned(out, strategies))  # fmt: skip
        stats = run_chunked(todo, out, chunk, req.chunk_size, desc="strategies")
        now = getattr(gen, "provenance", {})  # a server's: how its answers were asked
        out.write_meta({**meta, **now, "last_run": stats, "rows": len(out.rows)})
    if chunk.failed:
        raise BackendError(
            f"{len(chunk.failed)} of {len(todo)} questions were not labelled because the "
            f"generator failed (e.g. {chunk.failed[0][0]!r}: {chunk.failed[0][1]}); the "
            f"{stats['questions'] - len(chunk.failed)} others are in {req.out}: run the same "
            "command again to label only the missing ones"
        )
    return _summary(out, strategies, stats, len(chunk.failed))


class _Chunk:
    """The rows of one chunk: every question under every strategy in one loop pass."""

    def __init__(self, rag: AdaptiveRAG, strategies: list[str], treat: Unanswered,
                 criterion: str, frequent: dict,
                 seen: list[tuple[str | None, dict[str, bool]]] | None = None) -> None:  # fmt: skip
        self.rag, self.strategies, self.treat = rag, strategies, treat
        self.criterion, self.frequent = criterion, frequent
        self.failed: list[tuple[str, str]] = []
        self.seen = list(seen or [])  # (source, correct) of every labelled question so far

    def __call__(self, questions: list[Question]) -> list[dict[str, Any]]:
        expanded = [q for q in questions for _ in self.strategies]
        names = [s for _ in questions for s in self.strategies]
        decision = Decision(names, retrieval_scores(names, self.rag.registry))
        try:
            answers = self.rag.run(expanded, decision=decision).answers
        except BackendError as e:  # every prompt of the chunk failed: the engine is down
            log.warning("a chunk of %d questions failed: %s", len(questions), e)
            self.failed.extend((q.id, str(e)) for q in questions)
            return []
        width = len(self.strategies)
        judged = []
        for n, q in enumerate(questions):
            mine = answers[n * width : (n + 1) * width]
            broken = next((a for a in mine if a.retryable or a.refused), None)
            if broken is not None:
                self.failed.append((q.id, broken.error or "the generator failed"))
                continue
            judged.append((q, mine, self._judged(q, mine)))
        # the prior of a source without one is learned from every question labelled so far
        self.seen += [(q.source, {s: correct(j[s], self.criterion) for s in j})
                      for q, _, j in judged]  # fmt: skip
        learned = LearnedPrior.count(self.seen, self.strategies)
        return [self._row(q, mine, j, learned) for q, mine, j in judged]

    def _judged(self, q: Question, answers: list[Answer]) -> dict[str, dict[str, Any]]:
        judged = {}
        for s, a in zip(self.strategies, answers, strict=True):
            j = judge(a.answer, q, self.frequent)
            # a frequent answer read from documents is not a chance guess (as rag-gain counts)
            judged[s] = {**j, "guess": j["guess"] and not self.rag.registry[s].retrieves}
        return judged

    def _row(self, q: Question, answers: list[Answer], judged: dict[str, dict[str, Any]],
             learned: LearnedPrior) -> dict[str, Any]:  # fmt: skip
        ok = {s: correct(judged[s], self.criterion) for s in self.strategies}
        preds = {s: a.answer for s, a in zip(self.strategies, answers, strict=True)}
        cost = {s: _cost(self.rag.registry[s], a)
                for s, a in zip(self.strategies, answers, strict=True)}  # fmt: skip
        row = strategy_row(Outcome(q, ok, preds, cost), self.strategies, self.treat, learned)
        row["llm_calls"] = {s: a.llm_calls for s, a in zip(self.strategies, answers, strict=True)}
        row["measures"] = {s: {k: judged[s][k] for k in ("match", "em", "f1", "guess")}
                           for s in self.strategies}  # fmt: skip
        lps = {s: rounded(a.token_logprobs) or None
               for s, a in zip(self.strategies, answers, strict=True)}  # fmt: skip
        if any(lps.values()):  # the answers' token log-probabilities (labels.logprobs)
            row[TOKEN_LOGPROBS] = lps
        errors = {s: a.error for s, a in zip(self.strategies, answers, strict=True) if a.error}
        if errors:  # e.g. a prompt over the context window: wrong, and said why
            row["errors"] = {s: e[:PREDICTION_CHARS] for s, e in errors.items()}
        return row


def _check_resume(out: LabelFile, settings: dict[str, Any]) -> None:
    if not out.meta_binds():
        return
    old = out.meta
    if old.get("source") != "generator" or old.get("policy") != POLICY:
        raise DataError(
            f"this strategy label file was not made by `label --policy {POLICY}` (source "
            f"{old.get('source')!r}); pick another --labels-dir / --out", out.path)  # fmt: skip
    for key in RESUME_KEYS:
        if key in old and old[key] != settings[key]:
            raise DataError(
                f"this label file was made with {key}={old[key]!r}, not {settings[key]!r}; "
                "resuming would mix rows under one provenance: pass another --out (or "
                "--labels-dir), or rerun with the file's settings", out.path)  # fmt: skip


def _learned(out: LabelFile, strategies: list[str]) -> list[tuple[str | None, dict[str, bool]]]:
    """(source, correct) of the rows a resumed file holds already."""
    return [(r.get("source"), r["correct"]) for r in out.rows.values() if "correct" in r]


def _cost(spec: StrategySpec, answer: Answer) -> float:
    """A question's cost under a strategy: the spec's cost for a one-call strategy; for a
    multi-step one the retrievals it made (the built-in's 3.35 is their mean on the release)."""
    return float(answer.retrievals) if spec.multi_step else spec.cost


def _summary(out: LabelFile, strategies: list[str], stats: dict, failed: int) -> dict[str, Any]:
    rows = list(out.rows.values())
    return {
        "path": str(out.path),
        "rows": len(rows),
        **stats,
        "failed": failed,
        "correct": {s: sum(bool(r["correct"][s]) for r in rows) for s in strategies},
        "cheapest": {s: sum(r["cheapest"] == s for r in rows) for s in [*strategies, None]},
    }
