"""`retrieval-gate evaluate`: every gate on the canonical test split of each label file, one
table, plots and a JSON of all figures in reports/<name>/."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..data.splits import sample_order
from ..errors import ConfigError, DataError, MissingInputError
from ..fileio import content_id, write_text
from ..gates.base import Gate, gate_checksum, reads_answers
from ..gates.popularity import mallen_protocol
from ..gates.pretrained import RetrievalGate
from ..gates.registry import (
    GATES,
    GateContext,
    GateOptions,
    GateSpec,
    LazyGenerator,
    RecordedGenerator,
    asks_generator,
    build_gate,
    check_options,
    check_recorded_answers,
    labelling_generator,
    refuse_prompting,
)
from ..labels.evalset import (
    DEFAULT_RUN_DIR,
    EvalSet,
    Splits,
    label_file_names,
    load_splits,
    with_recorded_answers,
    without_answers,
)
from ..labels.label_files import LabelFile
from ..labels.labelling_run import LabellingRun
from ..outputs import write_owned
from ..pricing import answer_read_calls, binary_llm_calls
from ..questions import Question, feature_value
from ..rag.cascade import check_answer_gate_folder
from ..strategies import StrategyRegistry
from ..strict_rows import parse_json
from . import plots
from .answer_gate import answer_gate_scores, check_answer_labels
from .bootstrap import min_resamples
from .evaluate import GateResult, cost_per_question, evaluate_gate, result_json
from .gate_tables import comparison_table, per_source_table
from .routing_policies import check_axis, registry_costs, routing_markdown, routing_report

log = logging.getLogger(__name__)
LOCAL_COPY = "--generator MODEL (a local copy of it)"  # the fix where no copy is known
# the shapes of the names the report folder gets (`<label file>-roc-pr.png`...): a file of the
# user's with one of them there is refused when the command starts (outputs.refuse_foreign_in)
WRITES = ("report.md", "results.json", "*-roc-pr.png", "*-reliability.png", "*-mallen.png",
          "*-accuracy-cost.png")  # fmt: skip


@dataclass
class EvaluationConfig:
    gates: Sequence[str]
    label_files: Sequence[Path]
    out_dir: Path
    run_dir: Path | None = DEFAULT_RUN_DIR  # labelling run: closed-book/rag-gain answers
    # each label file's own labelling run (`run_dir_for`); a file not in it: `run_dir`
    run_dirs: Mapping[Path, Path | None] = field(default_factory=dict)
    gate_options: GateOptions = field(default_factory=GateOptions)
    generator_options: dict[str, Any] = field(default_factory=dict)
    n_resamples: int = 1000
    cost_questions: int = 30
    measure_cost: bool = True
    limit: int | None = None  # evaluate on the first N test questions (a quick look)
    command: str = ""
    questions: Sequence[Question] | None = None  # None: the bundled datasets, canonical split
    strategies: StrategyRegistry | None = None  # --strategies: prices routing tables' strategies
    cost_axis: str = "retrievals"  # the accuracy-vs-cost figure's x: retrievals, llm_calls, both
    answer_gate: Path | None = None  # --answer-gate: a two-stage gate export, for the cascade


def sample_test(test: EvalSet, limit: int | None) -> EvalSet:
    """`limit` test questions spread evenly over sources (by id hash, so stable across runs);
    all of them when `limit` is None or not smaller than the split."""
    if limit is not None and limit < 1:
        raise DataError(f"--limit must be a positive number of test questions, got {limit}")
    if limit is not None and limit > len(test):
        log.info(f"--limit {limit} is more than the {len(test)} test questions; "
                 f"evaluating all {len(test)}")  # fmt: skip
    if limit is None or limit >= len(test):
        return test
    # An even spread over sources, not the first source only.
    mask = np.zeros(len(test), bool)
    mask[sample_order([q.id for q in test.questions])[:limit]] = True
    return test.subset(mask)


def _with_answers(gate: Gate, test: EvalSet, label_file: Path) -> EvalSet | None:
    """For a two-stage gate: the test questions with their recorded closed-book answers'
    log-probabilities; None for other gates."""
    return with_recorded_answers(test, label_file) if reads_answers(gate) else None


def source_counts(test: EvalSet) -> dict[str, dict[str, float]]:
    out = {}
    for s in sorted(set(test.sources.tolist())):
        y = test.y[test.sources == s]
        out[s] = {"n": int(len(y)), "positive": float(y.mean())}
    return out


def run_evaluation(cfg: EvaluationConfig) -> Path:
    check_axis(cfg.cost_axis)  # before any label file is read or gate built
    if cfg.answer_gate is not None:
        check_answer_labels(cfg.label_files)
        check_answer_gate_folder(cfg.answer_gate)
    skipped: dict[str, str] = {}
    # each gate's flags and paths before the labels are read (7 s for SmolLM2's): a bad one is
    # refused first; a gate without its flag is skipped, with the reason
    gates = _gates_with_options(cfg, skipped)
    generator, named_by = _generator(cfg, gates)  # one engine for every gate
    _check_generator_runs(cfg, gates, generator)  # before the labels are read
    files = label_file_names(cfg.label_files)  # unique names: two generators' closed-book
    # each file with its own labelling run's answers: a second generator's labels were scored
    # with the first's (adaptive accuracy, popularity fit, confidence records)
    runs = {name: cfg.run_dirs.get(Path(p), cfg.run_dir) for name, p in files.items()}
    splits = {name: load_splits(p, runs[name], cfg.questions) for name, p in files.items()}
    tests = {k: sample_test(s.test, cfg.limit) for k, s in splits.items()}
    _check_gate_questions(gates, cfg.gate_options, tests)
    # the questions alone, though a questions file may carry its answers' log-probabilities:
    # what the label-free scores and a two-stage gate's question-only row are computed on
    bare = {k: without_answers(t) for k, t in tests.items()}
    records = _records(gates, tests, runs, generator)
    costs: dict[str, float] = {}
    report: dict[str, Any] = {
        "label_files": [str(p) for p in cfg.label_files],
        "policies": {},
        "skipped": skipped,
    }
    if asks_generator(gates):  # which model the gates asked, and their costs were timed with
        report["generator"] = {"name": generator.name, "chosen": named_by}
    answer_gate = (
        None if cfg.answer_gate is None else RetrievalGate.from_pretrained(cfg.answer_gate)
    )
    cfg.out_dir.mkdir(parents=True, exist_ok=True)  # once the inputs read: no empty folder
    for policy, sp in splits.items():
        # the routers fitted here are priced as the table is: --strategies' costs
        priced = (
            registry_costs(cfg.strategies, sp.test.strategies) if sp.test.has_strategies else None
        )
        ctx = GateContext(sp.train, sp.dev, records[runs[policy]], generator, costs=priced)
        same_run = {k: t for k, t in bare.items() if runs[k] == runs[policy]}  # same records
        results, built = [], {}
        calls = binary_llm_calls(sp.test.strategies, cfg.strategies)  # LLM calls/q of a decision
        for name in tqdm(gates, desc=f"gates on {policy}"):
            spec = GATES[name]
            try:
                gate = build_gate(name, ctx, cfg.gate_options)
            except MissingInputError as e:  # one gate's missing input: report it, go on
                skipped[f"{name} ({policy})"] = str(e)
                continue
            scores = (
                _label_free_scores(
                    spec, gate, policy, same_run, cfg.out_dir / "scores", cfg.gate_options
                )
                if spec.label_free
                else None
            )
            _say_fitted(gate, tests[policy], "test")
            answered = _with_answers(gate, tests[policy], files[policy])
            if answered is not None:  # a two-stage gate: its question-only score beside it
                alone = evaluate_gate(gate, bare[policy], cfg.n_resamples, scores, calls)
                alone.name = f"{gate.name} (question only)"
                results.append(alone)
                scores = None  # the stored label-free scores are the question-only ones
            test = answered or tests[policy]
            paid = calls if answered is None else answer_read_calls(calls)
            result = evaluate_gate(gate, test, cfg.n_resamples, scores, paid)
            if cfg.measure_cost and name not in costs:
                llm = "generator" in spec.needs  # an LLM call per question: fewer timed
                n = timed_questions(cfg.cost_questions, llm)
                try:
                    costs[name] = cost_per_question(gate, test.questions, n)
                except MissingInputError as e:  # e.g. no generator here: say so, keep the rest
                    result.notes.append(f"cost not measured: {e}")
            result.cost_ms = costs.get(name)
            results.append(result)
            built[name] = gate
        if not results:  # every gate lacked an input: nothing to report, say why
            reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items())
            raise ConfigError(f"no gate could be evaluated on {policy} ({reasons})")
        report["policies"][policy] = _policy_report(
            policy, sp, tests[policy], results, cfg.out_dir, _feature(cfg)
        )
        if sp.test.has_strategies:  # strategy labels: every routing policy (evaluation.routing)
            answer = None if answer_gate is None else answer_gate_scores(
                answer_gate, tests[policy], sp.dev, files[policy])  # fmt: skip
            report["policies"][policy]["routing"] = routing_report(
                tests[policy], sp.dev, built, cfg.out_dir, policy.replace("/", "-"), cfg.n_resamples,
                priced, cfg.strategies, cfg.cost_axis, answer, files[policy])  # fmt: skip
        report["policies"][policy]["label_file"] = _provenance(files[policy])
        report["policies"][policy]["llm_calls_without_with_retrieval"] = calls
    if any(g.startswith("popularity") for g in cfg.gates):
        report["mallen_protocol"] = {p: _mallen(sp, _feature(cfg)) for p, sp in splits.items()}
    write_owned(cfg.out_dir / "results.json", json.dumps(report, indent=2, default=float))
    return write_owned(cfg.out_dir / "report.md", _markdown(report, cfg))


def timed_questions(cost_questions: int, asks_llm: bool) -> int:
    """Questions timed for a gate's cost (--cost-questions N): N; a gate that asks the
    generator (an LLM call a question, seconds each on a CPU) a third of them, at least 5 and
    never more than N."""
    return min(cost_questions, max(5, cost_questions // 3)) if asks_llm else cost_questions


def _feature(cfg: EvaluationConfig) -> str:
    """The signal the popularity gates threshold (--feature; s_pop by default)."""
    return cfg.gate_options.feature or "s_pop"


def _records(
    gates: Sequence[str],
    tests: dict[str, EvalSet],
    runs: Mapping[str, Path | None],
    generator: LazyGenerator,
) -> dict[Path | None, dict]:
    """Each labelling run's closed-book records, checked against the test questions of the
    label files it goes with."""
    out = {}
    for run_dir in dict.fromkeys(runs.values()):
        run = LabellingRun(run_dir or DEFAULT_RUN_DIR)
        out[run_dir] = run.records()
        mine = {k: t for k, t in tests.items() if runs[k] == run_dir}
        _check_recorded_answers(gates, mine, out[run_dir], generator, run.closed_book)
    return out


def _say_fitted(gate: Gate, questions: EvalSet, split: str) -> None:
    """Warns where a learned run was fitted or chosen on some of the questions it is scored
    on here (a questions file that splits the run's questions otherwise: its training
    questions scored as test, AUROC 1.000 where the run's own test said 0.906)."""
    among = getattr(gate, "fitted_among", None)
    n = among(questions.questions) if among is not None else 0
    if n:
        log.warning(f"{gate.name}: {n:,} of the {len(questions):,} {split} questions are ones "
                    "it was trained or chosen on (its train and dev splits), so its figures "
                    "here flatter it: evaluate on questions it never saw (the split it was "
                    "trained with)")  # fmt: skip


def _generator(cfg: EvaluationConfig, gates: Sequence[str]) -> tuple[LazyGenerator, str]:
    """--generator's model, else the labelling generator (the one the labels' provenance
    names), and how it was chosen; said in the log where a gate asks it."""
    if cfg.generator_options:
        generator, named_by = LazyGenerator(**cfg.generator_options), "--generator"
    else:
        generator, named_by = labelling_generator(
            cfg.label_files[0], cfg.run_dir or DEFAULT_RUN_DIR
        )
    asked = asks_generator(gates)
    if asked:
        log.info(f"generator for {' / '.join(asked)}: {generator.name} ({named_by})")
    return generator, named_by


def _check_generator_runs(
    cfg: EvaluationConfig, gates: Sequence[str], generator: LazyGenerator
) -> None:
    """A labelling generator with no local copy (labels made through a server, or imported)
    lends only its identity: a gate that asks it for every question, or timing a gate that
    asks it, is refused here, before any label file is read or engine starts."""
    if not isinstance(generator, RecordedGenerator):
        return
    refuse_prompting(generator, gates, f"pass {LOCAL_COPY}, or drop the gate")
    asked = asks_generator(gates)
    if asked and cfg.measure_cost:
        raise ConfigError(f"{generator.unavailable()}; timing the {' / '.join(asked)} gate's "
                          "cost runs it (a deployed gate asks it for each answer): pass "
                          f"{LOCAL_COPY}, or --no-cost")  # fmt: skip


def _check_recorded_answers(
    gates: Sequence[str],
    tests: dict[str, EvalSet],
    records: dict[str, dict],
    generator: LazyGenerator,
    answers: Path,
) -> None:
    """With a `RecordedGenerator`, a gate that reads the recorded closed-book answers needs
    one for every test question: the rest would ask a generator there is no copy of."""
    scored = {f"test questions of {policy}": test for policy, test in tests.items()}
    check_recorded_answers(gates, scored, records, generator, answers, f"pass {LOCAL_COPY}")


def _check_gate_questions(gates: Sequence[str], options: GateOptions,
                          tests: dict[str, EvalSet]) -> None:  # fmt: skip
    """A gate that looks its decisions up (a recorded file) must have one for every test
    question: refused here, before the generator starts or any gate is built and scored."""
    for name in gates:
        check = GATES[name].check_questions
        for test in tests.values() if check is not None else ():
            check(options, test.questions, test.strategies if test.has_strategies else ())


def _gates_with_options(cfg: EvaluationConfig, skipped: dict[str, str]) -> list[str]:
    """The requested gates whose flags are given (a gate without its flag is skipped, with
    the reason; a flag pointing at a wrong path is an error, before anything runs)."""
    kept = []
    for name in cfg.gates:
        try:
            check_options([name], cfg.gate_options)
            kept.append(name)
        except MissingInputError as e:
            skipped[name] = str(e)
    return kept


# Questions per gate call in `_label_free_scores`: a prompt gate over 10,000 questions runs for
# an hour on a 2-core CPU, and a killed evaluate keeps every batch scored before it.
SCORE_CHUNK = 512


def score_cache_key(spec: GateSpec, gate: Gate, options: GateOptions) -> str:
    """Cache file stem of a label-free gate: its name and, by content, what its scores depend
    on: the gate's `checksum` (weights, model file, generator, demonstrations) where it has
    one, else the options it reads."""
    used = {k: str(getattr(options, k)) for k in spec.options if getattr(options, k) is not None}
    # a two-stage gate's are its question-only scores, under a name of their own: older files
    # held scores that had read the answers' log-probabilities a questions file carried
    alone = "-question-only" if reads_answers(gate) else ""
    return f"{spec.name}{alone}-{content_id(gate_checksum(gate) or json.dumps(used))}"


def _label_free_scores(
    spec: GateSpec,
    gate: Gate,
    policy: str,
    tests: dict[str, EvalSet],
    cache_dir: Path,
    options: GateOptions,
) -> np.ndarray:
    """Scores on the union of every policy's test questions, computed in batches of
    SCORE_CHUNK and kept in `cache_dir` by question (`question_key`) after each: a rerun (an
    interrupted one, or one on a later, larger label file) scores only new questions."""
    path = cache_dir / f"{score_cache_key(spec, gate, options)}.json"
    known = _cached_scores(path)
    union = {question_key(q): q for t in tests.values() for q in t.questions}
    todo = [(k, q) for k, q in union.items() if k not in known]
    if todo:
        path.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(total=len(todo), desc=f"scoring {spec.name}", unit="q", leave=False,
              disable=len(todo) <= SCORE_CHUNK) as bar:  # fmt: skip
        for i in range(0, len(todo), SCORE_CHUNK):
            part = todo[i : i + SCORE_CHUNK]
            scores = map(float, gate.scores([q for _, q in part]))
            known |= dict(zip((k for k, _ in part), scores, strict=True))
            write_text(path, json.dumps(known))
            bar.update(len(part))
    return np.array([known[question_key(q)] for q in tests[policy].questions])


def question_key(q: Question) -> str:
    """A question's entry in a score cache: its id and a hash of all a gate reads of it (the
    text, its fields and columns; not its gold answers). By id alone, a questions file whose
    texts were edited under the same ids (or another file numbering its rows 1, 2, ...) was
    given the old scores."""
    return q.key(leave_out=("answers", "split"))


def _cached_scores(path: Path) -> dict[str, float]:
    """What an earlier run scored; a damaged cache (cut short, edited, not this map) is
    scored again, with a warning, rather than read as something else or stopping evaluate."""
    if not path.is_file():
        return {}
    try:
        known = parse_json(path.read_bytes())
    except (OSError, ValueError):  # ValueError: bad JSON or UTF-8
        known = None
    if isinstance(known, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in known.values()
    ):
        return known
    log.warning(f"{path}: a damaged cache of scores; scoring again")
    return {}


def _provenance(path: Path) -> dict[str, Any]:
    if not path.is_file():  # strategy labels read from a release folder
        return {"path": str(path)}
    lf = LabelFile(path)
    try:
        meta = lf.meta
    except DataError:
        meta = {}
    keep = ("policy", "generator", "generator_checksum", "criterion", "date", "prompt_id")
    return {"path": str(path), "rows": len(lf.rows), **{k: meta[k] for k in keep if k in meta}}


def _mallen(sp: Splits, feature: str) -> dict[str, Any]:
    """Mallen's own protocol on every labelled question of one label file with a `feature`
    value (PopQA's s_pop by default) and both recorded answers (all splits: the paper fits on
    random 75% and tests on 25%, 100 times)."""
    every = EvalSet(
        sp.train.questions + sp.dev.questions + sp.test.questions,
        np.r_[sp.train.y, sp.dev.y, sp.test.y],
        np.r_[sp.train.closed_correct, sp.dev.closed_correct, sp.test.closed_correct],
        np.r_[sp.train.rag_correct, sp.dev.rag_correct, sp.test.rag_correct],
    )
    out = {}
    for per_relation in (True, False):
        try:
            out["per-relation" if per_relation else "global"] = mallen_protocol(
                every.questions, every.y, every.closed_correct, every.rag_correct,
                n_splits=100, per_relation=per_relation, feature=feature,
            )  # fmt: skip
        except MissingInputError as e:
            out["per-relation" if per_relation else "global"] = {"n/a": str(e)}
    return out


def _policy_report(policy: str, sp: Splits, test: EvalSet, results: list[GateResult], out: Path,
                   feature: str = "s_pop"):  # fmt: skip
    scores = {r.name: r.scores for r in results}
    stem = policy.replace("/", "-")  # figure files of `<generator>/<policy>`
    figs = {
        "roc_pr": plots.roc_pr(test.y, scores, policy, out / f"{stem}-roc-pr.png").name,
        "reliability": plots.reliability(
            test.y, scores, f"reliability: {policy}", out / f"{stem}-reliability.png"
        ).name,
    }
    values = [feature_value(q, feature) for q in test.questions]  # the popularity gate's
    pop = np.array([v is not None for v in values])
    known = pop & ~np.isnan(test.closed_correct) & ~np.isnan(test.rag_correct)
    if known.sum() >= 20:
        s_pop = np.array([v or 0 for v in values], float)[known]
        decisions = {
            r.name: (r.scores >= r.threshold)[known]
            for r in results
            if r.name not in ("always", "never")
        }
        figs["mallen"] = plots.mallen(
            s_pop,
            test.closed_correct[known],
            test.rag_correct[known],
            decisions,
            out / f"{stem}-mallen.png",
            feature=feature,
        ).name
    return {
        "n_train": len(sp.train),
        "n_dev": len(sp.dev),
        "n_test": len(test),
        "test_positive_rate": float(test.y.mean()),
        "n_test_answered": int(
            np.sum(~np.isnan(test.closed_correct) & ~np.isnan(test.rag_correct))
        ),
        "sources": source_counts(test),
        "gates": [result_json(r) for r in results],
        "figures": figs,
    }


def _markdown(report: dict[str, Any], cfg: EvaluationConfig) -> str:
    lines = ["# Gate comparison", "", f"`{cfg.command}`", ""]
    split = (
        "Canonical split `assign_splits(load_all(), seed=0)`"
        if cfg.questions is None
        else "Your question file's split (its `split` column, else seeded by entity/text)"
    )
    lines.append(
        f"{split}; every gate on the same test "
        f"questions of each label file. {_ci_note(cfg.n_resamples)} Cost: median ms of one "
        "decision on one question "
        "(batch 1, after a warm-up), measured once per gate in this run. Retrieval rate: "
        "retrievals per question (one for each question a gate sends to retrieval); LLM calls/q: "
        "the answering strategies' LLM calls per question, from their specs (a gate that asks "
        f"the generator to decide, {', '.join(asks_generator(cfg.gates)) or 'none here'}, also "
        "makes one call a question, in its cost ms)."
    )
    if "generator" in report:  # which model answered them, and so was timed
        gen = report["generator"]
        timed = " (their cost ms are its)" if cfg.measure_cost else ""
        lines += ["", f"The generator those gates ask{timed}: `{gen['name']}` ({gen['chosen']})."]
    for policy, pr in report["policies"].items():
        lines += [
            "",
            f"## Labels: {policy}",
            "",
            f"train {pr['n_train']}, dev {pr['n_dev']}, test {pr['n_test']} questions; "
            f"{pr['test_positive_rate']:.1%} of test questions need retrieval.",
            "",
            comparison_table(pr["gates"]),
            "",
            "Per source (AUROC / macro-F1 / retrieval rate):",
            "",
            per_source_table(pr["gates"], pr["sources"]),
            "",
        ]
        if "routing" in pr:
            lines += [routing_markdown(pr["routing"]), ""]
        lines += [f"![{k}]({v})" for k, v in pr["figures"].items()]
    lines += [f"- skipped {k}: {v}" for k, v in report["skipped"].items()]
    if "mallen_protocol" in report:
        lines += _mallen_markdown(report["mallen_protocol"], _feature(cfg))
    return "\n".join(lines) + "\n"


def _ci_note(n_resamples: int) -> str:
    """How the CIs were made, or why there are none (too few resamples for their tails)."""
    if n_resamples < min_resamples():
        return (f"No 95% CIs: {n_resamples} bootstrap resamples (--resamples) are fewer than "
                f"the {min_resamples()} a percentile interval needs.")  # fmt: skip
    return f"95% CIs: percentile bootstrap, {n_resamples} resamples."


def _mallen_markdown(protocol: dict[str, dict[str, Any]], feature: str) -> list[str]:
    """The Mallen-protocol section: per label file, on the signal the popularity gate reads."""
    without = "(every source but PopQA)" if feature == "s_pop" else f"(--feature {feature})"
    lines = ["", "## Popularity gate: Mallen et al.'s protocol", "",
             f"Thresholds on `{feature}` fitted by brute force on a random 75% of each label "
             f"file's labelled questions with a `{feature}` value and both recorded answers "
             "(its own labelling run's), adaptive accuracy on the other 25%, mean (std) over "
             "100 random splits. In the tables above the popularity gate is fitted on the dev "
             f"split instead; questions without `{feature}` {without} get a constant score, "
             f"the share of dev questions without `{feature}` that need retrieval, so the gate "
             "takes their majority label; a relation unseen in fitting (or with fewer than 5 "
             "questions) uses the global threshold.", ""]  # fmt: skip
    for policy, kinds in protocol.items():
        for kind, m in kinds.items():
            if "n/a" in m:
                lines.append(f"- {policy}, {kind}: n/a ({m['n/a']})")
                continue
            lines.append(f"- {policy}, {kind} thresholds: adaptive accuracy "
                         f"{m['adaptive_accuracy_mean']:.3f} ({m['adaptive_accuracy_std']:.3f}), "
                         f"retrieval rate {m['retrieval_rate_mean']:.3f}; closed-book "
                         f"{m['closed_book_accuracy']:.3f}, always retrieve "
                         f"{m['always_retrieve_accuracy']:.3f}; {m['n_questions']} questions")  # fmt: skip
    return lines
