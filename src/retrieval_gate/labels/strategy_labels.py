"""Strategy labels: each question's outcome under N named strategies (in cost order, the first
the cheapest, e.g. no_retrieval, one_retrieval, multi_step), written to `strategies.jsonl`
beside the closed-book and rag-gain files of the same outcomes.

Row schema (one JSON object a line, keyed by question id; `.meta.json` sidecar):

    id           question id
    label        1 = the first strategy is wrong (needs retrieval), 0 = it is right: the
                 binary view every gate and `read_labels` already use
    correct      {strategy: true/false} for every strategy of the file
    cheapest     the cheapest strategy that answers, null when none does
    target       the strategy a router is trained toward: `cheapest`, or for questions no
                 strategy answers the `--unanswered` treatment's pick (null: excluded)
    target_from  "cheapest" | "prior" | "learned" | "fixed" | "excluded"
    source       the question's source (what a learned prior is counted by)
    cost         {strategy: cost} for this question (only when the outcomes carry costs, or
                 --strategies names a FILE.yaml: its `cost:` entries, sidecar `costs_from_file`)
    prediction   {strategy: answer} for the strategies whose correctness was judged here from
                 their answer (absent when every correctness was recorded)
    token_logprobs  {strategy: the answer's token log-probabilities or null} (only when the
                 outcomes carry them: `<strategy>_token_logprobs` columns, labels/logprobs.py);
                 the first strategy's also go to closed-book.jsonl, for a two-stage gate

The sidecar records `strategies` (cost order), `unanswered` (treatment and prior map),
`criterion`, the outcomes file or release folder with its sha256, and counts.

Questions no strategy answers (`--unanswered`):
- `prior` (default; Adaptive-RAG's choice): the source's prior strategy. Given ones first
  (`prior:SOURCE=STRATEGY,...`); then, when the strategies are registered ones
  (`retrieval_gate.strategies`), Adaptive-RAG's for the release's six sets: single-hop (nq,
  squad, trivia) -> the one-call retrieval strategy (the registry's `binary_pair`), multi-hop
  (hotpotqa, 2wikimultihopqa, musique) -> the cheapest multi-step strategy (neither listed: no
  Adaptive-RAG prior for those sets). Every other source (every other bundled dataset, your
  own questions) gets the prior LEARNED from the labelled questions (`LearnedPrior`): the
  strategy with the most correct answers among that source's labelled questions; none of them
  answered: the one with the most correct answers over all labelled questions; none at all:
  the cheapest. Ties go to the cheaper strategy. Such rows say `target_from: learned`, and
  the reader re-counts them over the whole file (a resumed labelling run adds questions).
- `exclude`: no target (the row stays, with its correctness, for evaluation).
- a strategy name: always that strategy (e.g. `no_retrieval`: nothing helps, pay nothing)."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from ..data.adaptive_rag import ENV_VAR, MULTI_HOP, SINGLE_HOP, ReleaseSplit, load_release
from ..data.user_questions import read_rows
from ..errors import DataError, InputError
from ..fileio import sha256_file
from ..outputs import record_owned
from ..questions import Question
from ..strategies import BUILTIN, MAX_COST, NAME, StrategyRegistry, is_cost
from .closed_book import PREDICTION_CHARS, source_frequent_answers
from .label_files import LabelFile, meta_path, missing
from .labelling_run import STRATEGY_FILE
from .logprobs import MEAN_LOGPROB, TOKEN_LOGPROBS, parse_token_logprobs, rounded
from .outcome_columns import (
    ID,
    LOGPROBS,
    QUESTION,
    STRATEGY_SUFFIXES,
    answer_text,
    note_unread,
    renamed,
    source_names,
)
from .outcomes import import_lock, import_outcomes, match_rows, parse_bool, replaceable
from .policy_loop import provenance
from .scoring import DEFAULT_CRITERION, correct, judge

TARGET_FROM = ("cheapest", "prior", "learned", "fixed", "excluded")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unanswered:
    """What a question no strategy answers is trained toward (see the module docstring)."""

    treatment: str = "prior"  # "prior" | "exclude" | "fixed"
    strategy: str | None = None  # the fixed strategy
    prior: dict[str, str] = field(default_factory=dict)  # source -> strategy (added to defaults)

    def describe(self) -> dict[str, Any]:
        return {"treatment": self.treatment, "strategy": self.strategy, "prior": self.prior}


def parse_unanswered(spec: str | None, strategies: Sequence[str]) -> Unanswered:
    """`prior`, `prior:SOURCE=STRATEGY,...`, `exclude` or a strategy name (--unanswered)."""
    spec = (spec or "prior").strip()
    if spec == "exclude":
        return Unanswered("exclude")
    if spec in strategies:
        return Unanswered("fixed", strategy=spec)
    head, _, items = spec.partition(":")
    if head != "prior":
        raise InputError(
            f"--unanswered {spec!r}: expected prior, prior:SOURCE=STRATEGY,..., exclude or one "
            f"of the strategies ({', '.join(strategies)})"
        )
    prior: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in items.split(","))):
        source, sep, strategy = item.partition("=")
        if not sep or strategy.strip() not in strategies:
            raise InputError(
                f"--unanswered {spec!r}: {item!r} is not SOURCE=STRATEGY with STRATEGY one of "
                f"{', '.join(strategies)}"
            )
        prior[source.strip()] = strategy.strip()
    return Unanswered("prior", prior=prior)


def default_prior(
    strategies: Sequence[str], registry: StrategyRegistry = BUILTIN
) -> dict[str, str]:
    """Adaptive-RAG's, read from the specs: single-hop sets -> the one-call retrieval strategy,
    multi-hop sets -> the cheapest multi-step one; nothing for names the registry lacks (a
    generic outcomes file's own names) or sets whose strategy is not listed."""
    if len(strategies) < 2 or any(s not in registry for s in strategies):
        return {}
    out: dict[str, str] = {}
    try:
        out.update(dict.fromkeys(SINGLE_HOP, registry.binary_pair(strategies)[1]))
    except InputError:
        pass
    multi = next((s for s in strategies if registry[s].multi_step), None)
    if multi is not None:
        out.update(dict.fromkeys(MULTI_HOP, multi))
    return out


@dataclass(frozen=True)
class LearnedPrior:
    """The prior of a source without a given or Adaptive-RAG one, learned from labelled
    questions: its strategy with the most correct answers; none: the one with the most
    overall; none at all: the cheapest (ties: the cheaper, strategies being in cost order)."""

    strategies: tuple[str, ...]
    counts: dict[str, tuple[int, ...]] = field(
        default_factory=dict
    )  # source -> correct per strategy

    @classmethod
    def count(
        cls, rows: Iterable[tuple[str | None, Mapping[str, bool]]], strategies: Sequence[str]
    ) -> LearnedPrior:
        """From (source, {strategy: correct}) of the labelled questions."""
        counts: dict[str, list[int]] = {}
        for source, ok in rows:
            c = counts.setdefault(str(source), [0] * len(strategies))
            for k, s in enumerate(strategies):
                c[k] += bool(ok.get(s))
        return cls(tuple(strategies), {src: tuple(c) for src, c in counts.items()})

    def pick(self, source: str) -> str:
        own = self.counts.get(source)
        if own and max(own) > 0:
            return self.strategies[own.index(max(own))]
        overall = [sum(c[k] for c in self.counts.values()) for k in range(len(self.strategies))]
        if max(overall, default=0) > 0:
            return self.strategies[overall.index(max(overall))]
        return self.strategies[0]

    def describe(self) -> dict[str, str]:
        return {src: self.pick(src) for src in sorted(self.counts)}


def parse_strategies(items: Sequence[str] | None) -> list[str]:
    """`--strategies a b c` or `--strategies a,b,c`: names in cost order, at least two."""
    names = [n.strip() for item in items or () for n in item.split(",") if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise InputError(
            f"--strategies {' '.join(items or [])!r}: name two or more distinct strategies in "
            "cost order, the cheapest first (e.g. --strategies no_retrieval one_retrieval "
            "multi_step)"
        )
    plain = next((n for n in names if not NAME.fullmatch(n)), None)
    if plain is not None:  # no strategies file could declare it: its router ran nowhere
        raise InputError(f"--strategies: {plain!r} is not a plain name: use letters, digits, "
                         "'_', '-' and '.', starting with a letter, digit or '_' (a strategy "
                         "is named so in strategies files, --modes and NAME_correct columns)")  # fmt: skip
    known = [n for n in names if n in BUILTIN]  # their costs are known: their order too
    _refuse_unordered(known, BUILTIN.costs(known), "built-in costs")
    return names


def _refuse_unordered(names: Sequence[str], costs: Sequence[float], whose: str) -> None:
    """Strategies are given cheapest first: the first's answers make closed-book.jsonl and
    "never retrieve" is priced as it. Given the other way (multi_step no_retrieval), never
    retrieving cost 3.35 and the closed-book labels were the multi-step answers."""
    for (a, ca), (b, cb) in pairwise(zip(names, costs, strict=True)):
        if ca > cb:
            raise InputError(f"--strategies: {a} is given before {b}, but costs more "
                             f"({ca:g} > {cb:g}, {whose}): list them in cost order, the "
                             "cheapest first")  # fmt: skip


@dataclass
class Outcome:
    """One question's outcome under every strategy."""

    question: Question
    correct: dict[str, bool]
    prediction: dict[str, str] | None = None
    cost: dict[str, float] | None = None
    logprobs: dict[str, list[float] | None] | None = None


def strategy_row(
    o: Outcome,
    strategies: Sequence[str],
    unanswered: Unanswered,
    learned: LearnedPrior | None = None,
) -> dict[str, Any]:
    """One row; `learned`: the prior learned from the labelled questions (default: from this
    question alone, the reader re-counts it over the file)."""
    cheapest = next((s for s in strategies if o.correct[s]), None)
    target, target_from = cheapest, "cheapest"
    if cheapest is None:
        learned = learned or LearnedPrior.count([(o.question.source, o.correct)], strategies)
        target, target_from = _unanswered_target(o.question, strategies, unanswered, learned)
    row: dict[str, Any] = {
        "id": o.question.id,
        "label": int(not o.correct[strategies[0]]),
        "correct": {s: bool(o.correct[s]) for s in strategies},
        "cheapest": cheapest,
        "target": target,
        "target_from": target_from,
        "source": o.question.source,
    }
    if o.cost is not None:
        row["cost"] = {s: o.cost[s] for s in strategies}
    if o.prediction:
        row["prediction"] = {s: p[:PREDICTION_CHARS] for s, p in o.prediction.items()}
    if o.logprobs:
        row[TOKEN_LOGPROBS] = {s: o.logprobs.get(s) for s in strategies}
    return row


def _unanswered_target(
    q: Question, strategies: Sequence[str], unanswered: Unanswered, learned: LearnedPrior
) -> tuple[str | None, str]:
    if unanswered.treatment == "exclude":
        return None, "excluded"
    if unanswered.treatment == "fixed":
        return unanswered.strategy, "fixed"
    prior = {**default_prior(strategies), **unanswered.prior}
    if q.source not in prior:
        return learned.pick(q.source), "learned"
    return prior[q.source], "prior"


def learned_of(outcomes: Sequence[Outcome], strategies: Sequence[str]) -> LearnedPrior:
    return LearnedPrior.count(((o.question.source, o.correct) for o in outcomes), strategies)


# ---------------------------------------------------------------- importers


def import_release(
    folder: str | Path,
    out_dir: Path,
    llm: str | None = None,
    unanswered: str | None = None,
    neither_label: int | None = None,
    strategies: Sequence[str] | None = None,
) -> dict[str, Any]:
    """An Adaptive-RAG release split folder -> closed-book, rag-gain and strategies files in
    out_dir/<llm>/ (correctness as the release's own exact-match evaluation counted it)."""
    from ..data.adaptive_rag import STRATEGIES, find_release

    if strategies and list(strategies) != list(STRATEGIES):
        raise InputError(
            f"--strategies {' '.join(strategies)}: a release folder has the strategies "
            f"{' '.join(STRATEGIES)} (in that order); drop --strategies or name those"
        )
    release = find_release(folder, llm=llm)
    treat = parse_unanswered(unanswered, STRATEGIES)
    records = load_release(release.path, llm=release.llm)
    outcomes = [Outcome(r.question, {s: o.correct for s, o in r.outcomes.items()}) for r in records]
    meta = {"outcomes_file": str(release.path), "outcomes_sha256": release.checksum(),
            "outcomes_format": "adaptive-rag-release", "release_split": release.split,
            "criterion": "em (the release's own evaluation)"}  # fmt: skip
    # unstamped: a release's questions are read from its own files, however a config names them
    return _write_all(outcomes, STRATEGIES, treat, out_dir / release.llm.lower(), release.llm,
                      meta, neither_label, unmatched=0, stamp=False)  # fmt: skip


def import_strategy_outcomes(
    path: str | Path,
    questions: Sequence[Question],
    strategies: Sequence[str],
    out_dir: Path,
    generator: str,
    criterion: str = DEFAULT_CRITERION,
    unanswered: str | None = None,
    neither_label: int | None = None,
    fields: dict[str, str] | None = None,
    extra_meta: dict[str, Any] | None = None,
    strategies_file: str | Path | None = None,
) -> dict[str, Any]:
    """A generic file with `<strategy>_correct` or `<strategy>_prediction` (and optionally
    `<strategy>_cost` and `<strategy>_token_logprobs`) columns per strategy -> the three label
    files in out_dir. `fields`: field -> the file's column it is read from (`--outcome-field`);
    `extra_meta`: more for the sidecars (where the questions came from); `strategies_file`:
    the --strategies FILE.yaml the names came from, whose costs price the rows without cost
    columns (`_priced`)."""
    strategies = list(strategies)
    treat = parse_unanswered(unanswered, strategies)
    rows = renamed(path, list(read_rows(str(path))), fields or {})
    if not rows:
        raise DataError("the outcomes file has no rows", path)
    check_columns(path, rows, strategies)
    note_unread(
        path, rows, [*ID, *QUESTION, *(s + x for s in strategies for x in STRATEGY_SUFFIXES)]
    )
    matched, unmatched = match_rows(path, rows, questions, "generic")
    frequent = source_frequent_answers([q for q, _ in matched.values()])
    outcomes = [
        _outcome(q, row, strategies, frequent, criterion, path) for q, row in matched.values()
    ]
    _refuse_costless(outcomes, [row["_line"] for _, row in matched.values()], path)
    outcomes, priced = _priced(outcomes, strategies, strategies_file)
    _refuse_unordered(strategies, _mean_costs(outcomes, strategies),
                      f"their mean cost columns in {Path(path).name}")  # fmt: skip
    meta = {"outcomes_file": str(path), "outcomes_format": "generic-strategies",
            "outcomes_sha256": sha256_file(Path(path)) if Path(path).is_file() else None,
            "criterion": criterion, **priced, **(extra_meta or {})}  # fmt: skip
    return _write_all(outcomes, strategies, treat, out_dir, generator, meta, neither_label,
                      unmatched, stamp=True)  # fmt: skip


def _refuse_costless(outcomes: Sequence[Outcome], lines: Sequence[int], path) -> None:
    """A row without costs in a file whose other rows have them: its questions were priced
    at no strategy's cost (train then refused naming no row, and dev and test rows took the
    router's costs unsaid)."""
    costed = sum(o.cost is not None for o in outcomes)
    if 0 < costed < len(outcomes):
        n, o = next((n, o) for n, o in zip(lines, outcomes, strict=True) if o.cost is None)
        raise DataError(f"row of {o.question.id!r} has no <strategy>_cost values, while "
                        f"{costed} other rows have them: give every row its costs, or drop "
                        f"the cost columns ({len(outcomes) - costed} rows lack them)", path, n)  # fmt: skip


def _priced(
    outcomes: list[Outcome], strategies: Sequence[str], strategies_file: str | Path | None
) -> tuple[list[Outcome], dict[str, Any]]:
    """Outcomes without cost columns priced at the --strategies FILE's costs (each row's
    `cost`, as `label --policy strategies` records a spec's), and the sidecar's record of
    it; recorded per-question costs are kept. No file: as they are."""
    if strategies_file is None:
        return outcomes, {}
    from ..strategies import load_strategies

    costs = dict(zip(strategies, load_strategies(strategies_file).costs(strategies), strict=True))
    if any(o.cost is not None for o in outcomes):
        return outcomes, {"strategies_spec_file": str(strategies_file)}
    priced = [Outcome(o.question, o.correct, o.prediction, dict(costs), o.logprobs)
              for o in outcomes]  # fmt: skip
    return priced, {"strategies_spec_file": str(strategies_file), "costs_from_file": costs}


def _mean_costs(outcomes: Sequence[Outcome], strategies: Sequence[str]) -> list[float]:
    """Each strategy's mean recorded cost (0 where none is recorded: no order to check)."""
    costed = [o.cost for o in outcomes if o.cost]
    if not costed:
        return [0.0] * len(strategies)
    return [float(np.mean([c[s] for c in costed if s in c] or [0.0])) for s in strategies]


def check_columns(path: str | Path, rows: list, strategies: Sequence[str]) -> None:
    """Every strategy has a correctness or prediction column, and every such column is one of
    the strategies (a misspelt or forgotten --strategies name is caught here)."""
    columns = {c for _, row in rows for c in row}
    whose = [c for c in (*LOGPROBS, MEAN_LOGPROB) if c in columns]
    if whose:  # one answer's confidence among several answers: whose is it?
        raise DataError(
            f"column {whose[0]!r}: in outcomes of several strategies, name the strategy whose "
            f"answer it is: {strategies[0]}_token_logprobs (e.g. --outcome-field "
            f"{strategies[0]}_token_logprobs={whose[0]})",
            path,
        )
    found = {c.rsplit("_", 1)[0] for c in columns if c.endswith(("_correct", "_prediction"))}
    missing = [s for s in strategies if s not in found]
    extra = sorted(found - set(strategies) - {"rag", "closed", "is"})
    if missing or extra:
        raise DataError(
            f"--strategies {' '.join(strategies)} does not match the columns: "
            + (
                f"no {', '.join(f'{s}_correct/{s}_prediction' for s in missing)} column; "
                if missing
                else ""
            )  # fmt: skip
            + (f"columns for strategies not listed: {', '.join(extra)}; " if extra else "")
            + f"strategy columns found: {', '.join(sorted(found)) or 'none'}",
            path,
        )


def _outcome(q, row, strategies, frequent, criterion, path) -> Outcome:
    n = row["_line"]
    ok: dict[str, bool] = {}
    judged: dict[str, str] = {}
    for s in strategies:
        recorded = parse_bool(row.get(f"{s}_correct"), path, n, f"{s}_correct")
        prediction = row.get(f"{s}_prediction")
        if recorded is None and prediction in (None, ""):
            raise DataError(f"no {s}_correct and no {s}_prediction value for {q.id!r}", path, n)
        if recorded is None:
            judged[s] = prediction = answer_text(prediction, f"{s}_prediction", path, n)
            if not q.answers:
                raise DataError(
                    f"question {q.id!r} has no gold answers to judge {s}_prediction against; "
                    f"record correctness in a {s}_correct column instead",
                    path,
                    n,
                )
            recorded = correct(judge(prediction, q, frequent), criterion)
        elif isinstance(prediction, str) and prediction.strip():  # kept beside the recorded
            judged[s] = prediction.strip()
        ok[s] = recorded
    logprobs = {s: _logprobs(row, s, path, n) for s in strategies}
    return Outcome(q, ok, judged or None, _costs(row, strategies, path, n),
                   logprobs if any(v is not None for v in logprobs.values()) else None)  # fmt: skip


def _logprobs(row: dict, strategy: str, path, n: int) -> list[float] | None:
    """`<strategy>_token_logprobs`: its answer's log-probabilities (None: not recorded)."""
    field = f"{strategy}_{TOKEN_LOGPROBS}"
    column = source_names(row).get(field, field)  # the file's own name (--outcome-field)
    tokens = parse_token_logprobs(row.get(field), path, n, column)
    if tokens == [] and row.get(f"{strategy}_prediction") not in (None, ""):
        raise DataError(f"column {column!r} is an empty list, but the row has an answer: "
                        "record its tokens' log-probabilities, or leave the cell empty", path, n)  # fmt: skip
    return rounded(tokens) or None


def _costs(row: dict, strategies: Sequence[str], path, n: int) -> dict[str, float] | None:
    given = [s for s in strategies if row.get(f"{s}_cost") not in (None, "")]
    if not given:
        return None
    if len(given) != len(strategies):
        lacking = ", ".join(f"{s}_cost" for s in strategies if s not in given)
        raise DataError(f"row has some strategy costs but not {lacking}: give every strategy "
                        "its cost in this row (0 for a free one)", path, n)  # fmt: skip
    out = {}
    for s in strategies:
        try:
            value = float(row[f"{s}_cost"])
        except (TypeError, ValueError):
            raise DataError(f"{s}_cost {row[f'{s}_cost']!r} is not a number", path, n) from None
        if not is_cost(value):
            raise DataError(f"{s}_cost {value} is negative, not finite or past {MAX_COST:g}; "
                            f"a cost is from 0 to {MAX_COST:g}", path, n)  # fmt: skip
        out[s] = value
    return out


def _say_one_sided(
    outcomes: Sequence[Outcome], strategies: Sequence[str], rows: Sequence[dict[str, Any]]
) -> None:
    """A strategy right on none (or all) of the questions: a router learns nothing of when it
    works, and unanswered questions may still be sent there by the prior; said, not found
    out from the routes."""
    n = len(outcomes)
    for s in strategies:
        right = sum(bool(o.correct[s]) for o in outcomes)
        if n > 1 and right in (0, n):
            sent = sum(r["target"] == s for r in rows)
            log.warning(f"strategy {s} is {'right' if right else 'wrong'} on all {n} questions: "
                        f"a router learns nothing of when it works ({sent} rows target it); "
                        "are its outcome columns the right ones?")  # fmt: skip


def _write_all(
    outcomes: list[Outcome],
    strategies: Sequence[str],
    treat: Unanswered,
    out_dir: Path,
    generator: str,
    meta: dict[str, Any],
    neither_label: int | None,
    unmatched: int,
    stamp: bool,
) -> dict[str, Any]:
    """closed-book.jsonl and rag-gain.jsonl (first vs second strategy, through the outcomes
    importer) and strategies.jsonl, all checked before the first is written; with `stamp`,
    every row records its question's `question_sha`."""
    learned = learned_of(outcomes, strategies)
    rows = [strategy_row(o, strategies, treat, learned) for o in outcomes]
    _say_one_sided(outcomes, strategies, rows)
    target = out_dir / STRATEGY_FILE
    first, second = strategies[0], strategies[1]
    binary = [(i, {"id": o.question.id, "correct": o.correct[first], "rag_correct": o.correct[second],
                   TOKEN_LOGPROBS: (o.logprobs or {}).get(first)})
              for i, o in enumerate(outcomes, start=1)]  # fmt: skip
    questions = [o.question for o in outcomes]
    counts = Counter(r["target_from"] for r in rows)
    cheapest = Counter(r["cheapest"] or "none" for r in rows)
    full_meta = provenance(
        "strategies", generator=generator, generator_checksum=None, source="outcomes",
        strategies=list(strategies), unanswered={**treat.describe(), "learned": learned.describe()},
        rows=len(rows),
        unmatched_rows=unmatched, cheapest_counts=dict(cheapest), target_from_counts=dict(counts),
        closed_book_file="closed-book.jsonl", **meta,
    )  # fmt: skip
    with import_lock(out_dir):  # the three files of one import together
        replaceable(target)  # before import_outcomes checks and writes its two
        result = import_outcomes(meta["outcomes_file"], questions, out_dir, generator,
                                 neither_label=neither_label, rows=binary, locked=True,
                                 writes_too=[STRATEGY_FILE],
                                 extra_meta={**meta, "strategies_file": STRATEGY_FILE},
                                 stamp=stamp, dropped=unmatched)  # fmt: skip
        out = LabelFile(target, replacing=True)
        out.write_meta(full_meta)
        out.made_for(questions if stamp else [])
        out.rewrite(rows)
        record_owned(target)
    return {**result, "format": meta["outcomes_format"], "strategies_file": str(target),
            "strategies": list(strategies),
            "cheapest": dict(cheapest), "targets": dict(counts)}  # fmt: skip


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class StrategyLabels:
    """A strategy label file in memory: strategies in cost order and rows by id."""

    path: Path
    strategies: tuple[str, ...]
    rows: dict[str, dict[str, Any]]
    meta: dict[str, Any]

    def correct(self, ids: Sequence[str]) -> np.ndarray:
        """(n, n_strategies) 0/1 array of each strategy's correctness."""
        return np.array([[self.rows[i]["correct"][s] for s in self.strategies] for i in ids], float)

    def targets(self, ids: Sequence[str]) -> np.ndarray:
        """Index of each question's target strategy, -1 where excluded."""
        index = {s: k for k, s in enumerate(self.strategies)}
        return np.array([index.get(self.rows[i]["target"], -1) for i in ids])

    def costs(self, ids: Sequence[str], default: Sequence[float]) -> np.ndarray:
        """(n, n_strategies) per-question costs, `default` where a row has none."""
        if len(default) != len(self.strategies) or min(default) < 0:
            raise InputError(
                f"costs {list(default)}: give one cost of 0 or more per strategy "
                f"({', '.join(self.strategies)})"
            )
        rows = (self.rows[i].get("cost") for i in ids)
        return np.array([[r[s] for s in self.strategies] if r else list(default) for r in rows])


# how to make a strategy label file, for a path that names none
MAKE_THEM = ("run `retrieval-gate label --policy outcomes ... --strategies ...` or pass a "
             "release folder")  # fmt: skip


def read_strategy_labels(path: str | Path) -> StrategyLabels:
    """The rows and strategies of a strategies.jsonl file, each row checked against them."""
    path = Path(path)
    if not path.is_file():
        raise DataError(missing(path, "strategy label file", MAKE_THEM), path)
    lf = LabelFile(path)
    strategies = tuple(lf.meta.get("strategies") or ())
    if len(strategies) < 2:
        raise DataError(f"{meta_path(path).name} names no strategies: not a strategy label file",
                        path)  # fmt: skip
    for n, (qid, row) in enumerate(lf.rows.items(), start=1):
        ok = row.get("correct")
        if not isinstance(ok, dict) or set(ok) != set(strategies):
            raise DataError(f"row of {qid!r}: 'correct' must name exactly the strategies "
                            f"{', '.join(strategies)}", path, n)  # fmt: skip
        if any(not isinstance(v, bool) for v in ok.values()):
            raise DataError(f"row of {qid!r}: correctness values must be true/false", path, n)
        if row.get("target") is not None and row["target"] not in strategies:
            raise DataError(f"row of {qid!r}: target {row['target']!r} is not a strategy", path, n)
        if why := _contradiction(row, strategies):
            raise DataError(f"row of {qid!r}: {why}: the row was edited by hand; re-import the "
                            "outcomes (or correct every field alike)", path, n)  # fmt: skip
    if not lf.rows:
        raise DataError("strategy label file has no rows", path)
    return StrategyLabels(path, strategies, relearned(lf.rows, strategies), lf.meta)


def _contradiction(row: dict[str, Any], strategies: Sequence[str]) -> str | None:
    """What in a row disagrees with its `correct` (each field is derived from it, and figures
    read one or the other: a report's accuracy and its oracle then disagreed)."""
    ok = row["correct"]
    cheapest = next((s for s in strategies if ok[s]), None)
    if "cheapest" in row and row["cheapest"] != cheapest:
        return f"cheapest is {row['cheapest']!r}, but its correct makes it {cheapest!r}"
    if "label" in row and row["label"] != int(not ok[strategies[0]]):
        return (f"label is {row['label']!r}, but {strategies[0]} is "
                f"{'right' if ok[strategies[0]] else 'wrong'} in its correct")  # fmt: skip
    if row.get("target_from") == "cheapest" and row.get("target") != cheapest:
        return f"target is {row.get('target')!r}, from the cheapest right one, {cheapest!r}"
    return None


def relearned(
    rows: dict[str, dict[str, Any]], strategies: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Rows whose target is a learned prior, re-picked from every row of the file (rows of a
    run that was resumed were written knowing fewer questions)."""
    if not any(r.get("target_from") == "learned" for r in rows.values()):
        return rows
    learned = LearnedPrior.count(((r.get("source"), r["correct"]) for r in rows.values()),
                                 strategies)  # fmt: skip
    return {i: {**r, "target": learned.pick(str(r.get("source")))}
            if r.get("target_from") == "learned" else r for i, r in rows.items()}  # fmt: skip


# `data.label_file` / `--labels` value that names the Adaptive-RAG release at its default place
# ($RETRIEVAL_GATE_ADAPTIVE_RAG, else the bundle in the data folder): no `label` run needed.
RELEASE_LABELS = "adaptive-rag"


def labels_release(source: str | Path) -> ReleaseSplit | None:
    """The Adaptive-RAG release strategy labels are about, whose questions (and split) train,
    tune and evaluate all read: the release folder given as labels, or the one a label file
    imported (its sidecar names it). None for `adaptive-rag` (the release at its default
    place) and labels of no release: there $RETRIEVAL_GATE_ADAPTIVE_RAG names the release.
    Refused: an imported release no longer where the sidecar says, one changed since the
    import (its rows may no longer be these questions), and $RETRIEVAL_GATE_ADAPTIVE_RAG
    naming another release (train read its questions, evaluate the labels')."""
    from ..data.adaptive_rag import find_release, is_release

    path = Path(source)
    if str(source) == RELEASE_LABELS:
        return None
    if path.is_dir():
        release = find_release(path) if is_release(path) else None
    else:
        release = _imported_release(path)
    if release is not None:
        _refuse_other_env_release(release, path)
    return release


def _imported_release(path: Path) -> ReleaseSplit | None:
    """The release a label file's sidecar says it was imported from (None: not an import of
    a release), found as it was then: its split, its LLM, its checksum."""
    from ..data.adaptive_rag import find_release

    if not (path.is_file() and meta_path(path).is_file()):
        return None
    meta = LabelFile(path).meta
    if meta.get("outcomes_format") != "adaptive-rag-release":
        return None
    folder = str(meta.get("outcomes_file"))
    if not Path(folder).is_dir():  # read as "no release", train split the bundled one
        raise DataError(f"these labels were imported from the Adaptive-RAG release {folder} "
                        "(their sidecar's outcomes_file), which is no longer there: their "
                        "questions and split are that release's; put the folder back, or "
                        "import it again from where it is now with `retrieval-gate label "
                        "--policy outcomes --outcomes FOLDER`", path)  # fmt: skip
    release = find_release(folder, meta.get("release_split"), meta.get("generator"))
    if release.checksum() != meta.get("outcomes_sha256"):
        raise DataError(f"the release {folder} changed since these labels were imported from "
                        "it (its checksum differs from the sidecar's outcomes_sha256): import "
                        "it again with `retrieval-gate label --policy outcomes --outcomes "
                        f"{folder}`", path)  # fmt: skip
    return release


def _refuse_other_env_release(release: ReleaseSplit, path: Path) -> None:
    """$RETRIEVAL_GATE_ADAPTIVE_RAG naming another release than the labels': train followed
    the variable and evaluate the labels, so the two split different questions. The same
    release (its folder, root or predictions/, or a copy of its files) is no conflict."""
    from ..data.adaptive_rag import find_release

    env = os.environ.get(ENV_VAR)
    if not env:
        return
    try:
        named = find_release(env, llm=release.llm)
    except DataError:  # no release there, or none of this LLM: not the labels' release
        named = None
    if named is not None and (named.path.resolve() == release.path.resolve()
                              or named.checksum() == release.checksum()):  # fmt: skip
        return
    raise DataError(f"${ENV_VAR} names the Adaptive-RAG release {env}, but these labels come "
                    f"from the release {release.path} ({release.llm}): train, tune and "
                    "evaluate read the questions and split of the labels' own release; unset "
                    f"${ENV_VAR}, or label from the release it names (`retrieval-gate label "
                    f"--policy outcomes --outcomes {env}`) and use those labels", path)  # fmt: skip


def is_strategy_source(path: str | Path) -> bool:
    """Whether `path` holds strategy labels: `adaptive-rag`, a release folder, or a label file
    whose sidecar names strategies."""
    from ..data.adaptive_rag import is_release

    if str(path) == RELEASE_LABELS:
        return True
    path = Path(path)
    if path.is_dir():
        return is_release(path)
    mp = meta_path(path)
    if not (path.is_file() and mp.is_file()):
        return False
    return bool(LabelFile(path).meta.get("strategies"))


def load_strategy_labels(source: str | Path, unanswered: str | None = None) -> StrategyLabels:
    """Strategy labels from a strategies.jsonl file, or straight from an Adaptive-RAG release
    folder (or `adaptive-rag`: the release at its default place), built in memory as `label
    --policy outcomes` would write them."""
    from ..data.adaptive_rag import STRATEGIES, find_release

    if str(source) != RELEASE_LABELS and not Path(source).is_dir():
        return read_strategy_labels(source)
    release = find_release(None if str(source) == RELEASE_LABELS else source)
    treat = parse_unanswered(unanswered, STRATEGIES)
    records = load_release(release.path, llm=release.llm)
    rows = {}
    outcomes = [Outcome(r.question, {s: x.correct for s, x in r.outcomes.items()}) for r in records]
    learned = learned_of(outcomes, STRATEGIES)
    for o in outcomes:
        rows[o.question.id] = strategy_row(o, STRATEGIES, treat, learned)
    meta = {"policy": "strategies", "source": "outcomes", "generator": release.llm,
            "strategies": list(STRATEGIES), "unanswered": treat.describe(),
            "outcomes_file": str(release.path), "outcomes_sha256": release.checksum(),
            "outcomes_format": "adaptive-rag-release", "release_split": release.split,
            "criterion": "em (the release's own evaluation)", "rows": len(rows)}  # fmt: skip
    return StrategyLabels(release.path, STRATEGIES, rows, meta)


def strategy_labels_sha256(labels: StrategyLabels) -> str:
    """The labels' identity: the file's bytes, or the release's checksum."""
    if labels.path.is_file():
        return sha256_file(labels.path)
    return str(labels.meta["outcomes_sha256"])
