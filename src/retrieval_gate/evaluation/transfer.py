"""`retrieval-gate transfer`: leave-one-source-out. For each source S, a gate is fitted on the
train (and dev) questions of every OTHER source and tested on S's test questions; beside it,
the in-domain figure (fitted on all sources' train) on the same S test questions. The sources
are those of the questions (their `source` field): the bundled datasets, or the values of a
user's `source` column.

Cells where the held-out source has one label only (retrievalqa-style labels make ToolQA,
FreshQA, RetrievalQA all "needs retrieval") get AUROC n/a with that reason; accuracy and
retrieval rate are still defined there. Decisions use each gate's default threshold (0.5)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import metrics as M
from ..errors import ConfigError, InputError, MissingInputError
from ..gates.base import Gate, is_router
from ..gates.registry import GateContext, GateOptions, build_gate
from ..gates.strategy_routers import paid_at
from ..labels.evalset import DEFAULT_RUN_DIR, EvalSet, Splits, load_splits, policy_name
from ..outputs import write_owned
from ..pricing import outcome, route_indices
from ..questions import Question, feature_value
from ..tables import markdown_table
from . import plots

log = logging.getLogger(__name__)

# What a gate raises when it cannot be fitted on a cell's data (one label only, no s_pop): the
# cell says so and the matrix goes on; any other error stops it.
CANNOT_FIT = MissingInputError
WRITES = ("transfer.json", "transfer.md", "transfer-*.png")  # checked when the command starts


def sources_of(sp: Splits) -> list[str]:
    """The questions' sources, in order of first appearance (train, dev, then test)."""
    seen = [q.source for part in (sp.train, sp.dev, sp.test) for q in part.questions]
    return list(dict.fromkeys(seen))


def loso(sp: Splits, held_out: str) -> Splits:
    """Train/dev without the held-out source; test = the held-out source's test questions."""
    return Splits(
        sp.train.subset(sp.train.sources != held_out),
        sp.dev.subset(sp.dev.sources != held_out),
        sp.test.where_source([held_out]),
    )


@dataclass
class Cell:
    gate: str
    policy: str
    setting: str  # in-domain | held-out
    source: str
    n: int
    positive_rate: float
    auroc: float | None
    note: str
    macro_f1: float
    accuracy: float
    retrieval_rate: float
    # a router on strategy labels: accuracy, mean cost and LLM calls routed at its default budget
    routed_accuracy: float | None = None
    routed_cost: float | None = None
    routed_llm_calls: float | None = None


def _routed(cell: Cell, gate: Gate, test: EvalSet) -> Cell:
    """A router's cell also says what its routing achieves on the held-out questions."""
    if is_router(gate) and test.has_strategies:
        cal = gate.calibration  # type: ignore[attr-defined]
        choice = route_indices(gate.strategy_proba(test.questions), cal.default_price, cal.costs)  # type: ignore[attr-defined]
        ok, cost = outcome(choice, test.correct, paid_at(gate, test))
        cell.routed_accuracy, cell.routed_cost = float(ok.mean()), float(cost.mean())
        calls = cal.llm_calls()  # each strategy's, from the router's specs
        if calls is not None:
            cell.routed_llm_calls = float(np.asarray(calls, float)[choice].mean())
    return cell


def _cell(
    gate: str, policy: str, setting: str, test: EvalSet, scores: np.ndarray, t: float
) -> Cell:
    d = scores >= t
    auc = M.auroc(test.y, scores)
    note = "" if auc is not None else f"AUROC n/a: test source has only label {int(test.y[0])}"
    return Cell(gate, policy, setting, test.questions[0].source, len(test), float(test.y.mean()),
                auc, note, M.macro_f1(test.y, d), M.accuracy(test.y, d), M.retrieval_rate(d))  # fmt: skip


def _na(gate: str, policy: str, setting: str, test: EvalSet, reason: str) -> Cell:
    src = test.questions[0].source
    return Cell(gate, policy, setting, src, len(test), float(test.y.mean()), None, reason,
                float("nan"), float("nan"), float("nan"))  # fmt: skip


# gate name -> fit(train/dev Splits without test use, policy, held-out source) -> Gate
Fitter = Callable[[Splits, str, str], Gate]


def registry_fitter(name: str, options: GateOptions | None = None) -> Fitter:
    def fit(sp: Splits, policy: str, held_out: str) -> Gate:
        return build_gate(name, GateContext(sp.train, sp.dev), options)

    return fit


def transfer_cells(
    sp: Splits, policy: str, fitters: dict[str, Fitter], sources: Sequence[str] | None = None
) -> list[Cell]:
    """Every gate in-domain and held-out on each source (default: the questions' sources)."""
    sources = sources_of(sp) if sources is None else list(sources)
    if len(sources) < 2:
        raise InputError(_one_source(sources))
    sources = _held_out(sp, sources)
    cells = []
    for name, fit in fitters.items():
        try:
            in_domain = fit(
                Splits(sp.train, sp.dev, sp.test.subset(np.zeros(len(sp.test), bool))), policy, ""
            )
        except CANNOT_FIT as e:
            in_domain, why = None, str(e)
        for src in tqdm(sources, desc=f"{name} / {policy}"):
            part = loso(sp, src)
            if in_domain is None:
                cells.append(_na(name, policy, "in-domain", part.test, f"cannot fit: {why}"))
            else:
                s = np.asarray(in_domain.scores(part.test.questions), float)
                cell = _cell(name, policy, "in-domain", part.test, s, in_domain.threshold)
                cells.append(_routed(cell, in_domain, part.test))
            try:
                gate = fit(part, policy, src)
            except CANNOT_FIT as e:  # e.g. popularity: no s_pop outside PopQA
                cells.append(
                    _na(name, policy, "held-out", part.test, f"cannot fit without {src}: {e}")
                )
                continue
            s = np.asarray(gate.scores(part.test.questions), float)
            cells.append(_routed(_cell(name, policy, "held-out", part.test, s, gate.threshold),
                                 gate, part.test))  # fmt: skip
    return cells


def _one_source(sources: list[str]) -> str:
    """Why a matrix needs two sources, and how to get them (a file whose `source` column held
    one value was told to add the column it had)."""
    if not sources:
        return "leave-one-source-out needs questions from at least two sources; these have none"
    return (f"leave-one-source-out needs questions from at least two sources, and every "
            f"labelled question here has source {sources[0]!r}: give --questions a `source` "
            "column with two or more values (or --field source=COLUMN naming one; without "
            "such a column a file's questions all take its name), or label questions of a "
            "second source")  # fmt: skip


def _held_out(sp: Splits, sources: list[str]) -> list[str]:
    """The sources with test questions, which can be held out; the others are said (they
    were left out of the matrix unsaid), and fewer than two is refused (one column, its
    held-out cell unfittable)."""
    tested = set(sp.test.sources.tolist())
    kept, left = [s for s in sources if s in tested], [s for s in sources if s not in tested]
    if len(kept) < 2:
        raise InputError(f"leave-one-source-out needs test questions from at least two sources; "
                         f"{', '.join(map(repr, kept)) or 'none'} has them ({len(left)} without: "
                         f"{', '.join(map(repr, left[:5]))}): label more of each source's "
                         "questions, or give them a split column with test rows")  # fmt: skip
    if left:
        log.warning(f"{len(left)} sources have no test questions and are not held out (they "
                    f"stay in training): {', '.join(map(repr, left[:10]))}")  # fmt: skip
    return kept


def write_transfer_report(cells: list[Cell], out_dir: Path, command: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_owned(out_dir / "transfer.json", json.dumps([asdict(c) for c in cells], indent=2))
    lines = ["# Cross-dataset transfer (leave one source out)", "", f"`{command}`", "",
             "Held-out: fitted on the other sources' train/dev questions, tested on the "
             "source's test questions. In-domain: fitted on all sources' train questions, "
             "tested on the same questions. Threshold 0.5. The popularity gate scores only "
             "questions with s_pop (PopQA's); on others it gives its constant fallback score.",
             ""]  # fmt: skip
    for policy in dict.fromkeys(c.policy for c in cells):
        pc = [c for c in cells if c.policy == policy]
        rows_keys = list(dict.fromkeys((c.gate, c.setting) for c in pc))
        sources = list(dict.fromkeys(c.source for c in pc))
        grid = np.full((len(rows_keys), len(sources)), np.nan)
        body = []
        for i, (g, setting) in enumerate(rows_keys):
            row = [f"{g} ({setting})"]
            for j, s in enumerate(sources):
                c = next((c for c in pc if (c.gate, c.setting, c.source) == (g, setting, s)), None)
                if c is None:
                    row.append("")
                    continue
                grid[i, j] = np.nan if c.auroc is None else c.auroc
                if np.isnan(c.accuracy):
                    row.append("n/a (cannot fit, see below)")
                    continue
                auc = f"{c.auroc:.3f}" if c.auroc is not None else "n/a"
                text = f"{auc} / {c.macro_f1:.3f} / {c.accuracy:.3f} / {c.retrieval_rate:.2f}"
                if c.routed_accuracy is not None:  # a router: its routing at the default budget
                    text += f"; routed {c.routed_accuracy:.3f} at cost {c.routed_cost:.2f}"
                    if c.routed_llm_calls is not None:
                        text += f", {c.routed_llm_calls:.2f} LLM calls/q"
                row.append(text)
            body.append(row)
        header = ["gate (setting)"] + [f"{s} (n={next(c.n for c in pc if c.source == s)}, "
                                       f"{next(c.positive_rate for c in pc if c.source == s):.0%} need)" for s in sources]  # fmt: skip
        png = plots.heatmap(grid, [f"{g} ({s})" for g, s in rows_keys], sources,
                            f"AUROC, labels {policy}", out_dir / f"transfer-{policy}.png")  # fmt: skip
        lines += [f"## Labels: {policy}", "", "Cells: AUROC / macro-F1 / accuracy / retrieval rate (a router: also its routing at the default budget, accuracy at mean cost and LLM calls/q)", "",
                  markdown_table(header, body), ""]  # fmt: skip
        notes = sorted({c.note for c in pc if c.note})
        lines += [f"- {n}" for n in notes] + ["", f"![transfer]({png.name})", ""]
    path = out_dir / "transfer.md"
    write_owned(path, "\n".join(lines))
    return path


def named_label_files(label_files: Sequence[str | Path]) -> dict[str, Path]:
    """Each label file by its policy name (`closed-book`), which names its report section,
    figure, cells and learned runs. Two files of one name are refused: the second's cells were
    filed under the first's section, its figures dropped, and --learned trained on one only;
    names that differ only in case too (their figures are one file where case is ignored)."""
    named: dict[str, Path] = {}
    folded: dict[str, str] = {}  # casefolded -> as named
    for path in map(Path, label_files):
        name = policy_name(path)
        if name in named:
            raise ConfigError(f"--labels {named[name]} and {path} share the name {name!r}, "
                              "which names a transfer report's section, figure and cells: "
                              "one file's results would be filed as the other's. Run transfer "
                              "once per file (each with its own --out), or rename one of them "
                              "(and its .meta.json beside it)")  # fmt: skip
        other = folded.get(name.casefold())
        if other is not None:  # transfer-A.png, transfer-a.png: one file where case is ignored
            raise ConfigError(f"--labels {named[other]} and {path} have names ({other!r}, "
                              f"{name!r}) that differ only in letter case, and the name names "
                              f"the report's figure (transfer-{name}.png) and learned runs: on "
                              "a file system that ignores case (macOS, Windows) one file's "
                              "would overwrite the other's. Rename one of them (and its "
                              ".meta.json beside it), or run transfer once per file (each with "
                              "its own --out)")  # fmt: skip
        named[name], folded[name.casefold()] = path, name
    return named


def run_transfer(
    label_files: Sequence[Path],
    gates: Sequence[str],
    out_dir: Path,
    run_dir: Path | Mapping[Path, Path] | None = DEFAULT_RUN_DIR,  # a map: each file's own run
    extra_fitters: dict[str, Fitter] | None = None,
    command: str = "",
    questions: Sequence[Question] | None = None,
    options: GateOptions | None = None,
) -> Path:
    """The matrix over `questions` (default: the bundled datasets), one held-out source a cell;
    `options`: the gates' flags (`feature` for the popularity gates)."""
    cells = []
    for name, path in named_label_files(label_files).items():
        own = run_dir.get(path) if isinstance(run_dir, Mapping) else run_dir
        sp = load_splits(path, own, questions)
        fitters: dict[str, Any] = {g: registry_fitter(g, options) for g in gates}
        fitters |= extra_fitters or {}
        found = transfer_cells(sp, name, fitters)
        if found and all(c.auroc is None and c.note.startswith("cannot fit") for c in found):
            # a matrix of "n/a" cells, exit 0 (router gates on binary labels): said, as
            # evaluate says it, before any report is written
            raise ConfigError(f"no gate could be fitted on {name} ("
                              f"{found[0].note.removeprefix('cannot fit: ')})")  # fmt: skip
        cells += found
    return write_transfer_report(cells, out_dir, command)


def _fittable(pool: Sequence[Question], held_out: str, config: Any = None) -> None:
    """A cell whose questions carry their splits has each of them left without `held_out`
    (all of a split's questions its own: training refused it after the other cells had
    trained, and no report was written). With the cell's training `config`, its train (and a
    monitored dev) split must hold both labels, as training requires: one label left was an
    error that stopped the matrix (exit 2, no report), where a registry gate's cell said it."""
    if pool and all(q.split for q in pool):
        have = {q.split for q in pool}
        missing = [s for s in ("train", "dev", "test") if s not in have]
        if missing:
            raise CANNOT_FIT(f"without {held_out!r} no {' or '.join(missing)} questions are "
                             f"left (all of them are {held_out!r}'s)")  # fmt: skip
    if config is None or not pool:
        return
    from ..training.sources import check_monitor, check_splits, labelled_questions

    _, rows, _ = labelled_questions(config.data, pool)  # the rows training would fit on
    try:
        check_splits(rows, None)
        check_monitor(rows, config, None)
    except (InputError, ConfigError) as e:
        left = f"without {held_out!r}" if held_out else "with every source"
        raise CANNOT_FIT(f"{left}: {e}") from None


def cell_key(config: Any, questions: Sequence[Question]) -> str:
    """12 hex digits of what a transfer cell's run depends on: the whole resolved config (its
    length too), the labels' sha256 and the training questions' ids, texts, splits and values
    of `data.features` (changed values reused a run trained on the old ones)."""
    features = list(config.data.features or ())
    rows = [(q.id, q.text, q.split, *[feature_value(q, f) for f in features]) for q in questions]
    labels = config.data.task_spec.labels_sha256(config.data.label_file)  # as training's
    parts = [config.to_dict(), labels, rows]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def folder_part(source: str) -> str:
    """A source as part of a run folder's name: itself when plain (letters, digits, `._-`, no
    leading `.`), else a slug of it and 8 hex digits of its sha256 (`../esc` -> `esc-<hash>`):
    any source value names a folder of its own (`../esc` was refused as a run.name, after the
    in-domain cell had trained)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", source).strip(".-")[:40]
    if slug == source:
        return source
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else digest


def learned_fitter(
    label_files: dict[str, Path],
    config: str | None,
    overrides: Sequence[str],
    output_dir: Path,
    questions: Sequence[Question] | None = None,
) -> Fitter:
    """Trains the learned gate (training API) without the held-out source, once per cell: a
    run folder that already has its weights is reused, so an interrupted matrix resumes. Its
    name ends in a key of what the run depends on (the resolved config, the labels' sha256, the
    training questions and their side features), so other labels or settings train their own
    cell, never reuse this one. The questions are `questions`, else the ones the labels were
    split over (a release's own for strategy labels); a router config trains a router (routed
    figures in its cells)."""

    @cache
    def labelled(policy: str) -> list[Question]:  # every split: training splits them itself
        sp = load_splits(label_files[policy], None)
        return [*sp.train.questions, *sp.dev.questions, *sp.test.questions]

    def fit(sp: Splits, policy: str, held_out: str) -> Gate:
        from ..training.config import load_config

        # quoted: a value is read as YAML, where ` #` cut a path and `: ` made a mapping
        sets = [
            *overrides,
            f"data.label_file={json.dumps(str(label_files[policy]))}",
            f"run.output_dir={json.dumps(str(output_dir))}",
        ]
        pool = questions if questions is not None else labelled(policy)
        pool = [q for q in pool if q.source != held_out]
        resolved = load_config(config, sets)
        _fittable(pool, held_out, resolved)
        from ..gates.learned import load_learned  # torch and Lightning: a cell that fits
        from ..training.trainer import train

        key = cell_key(resolved, pool)
        name = f"transfer-{policy}-without-{folder_part(held_out) or 'nothing'}-{key}"
        run = output_dir / name
        if not (run / "gate.pt").is_file():
            train(load_config(config, [*sets, f"run.name={json.dumps(name)}"]), pool,
                  resume=run.is_dir())  # fmt: skip
        return load_learned(run, name="learned")

    return fit
