"""Figures from the label files: closed-book accuracy per source and per PopQA popularity
quartile (the Mallen curve), with-retrieval accuracy and helps/hurts/neither shares, label
balance per policy and source, and how much the correctness criterion moves the labels.
`retrieval-gate label --report` prints them."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..data import load_all
from ..errors import DataError
from ..models import SMOLLM2
from ..questions import Question
from ..tables import markdown_table
from .label_files import LABELS_DIR, LabelFile
from .policies import POLICIES, label_path
from .scoring import CRITERIA, DEFAULT_CRITERION, correct


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def _by_source(rows: dict[str, dict], qs: dict[str, Question]) -> list[tuple[str, list[dict]]]:
    """Rows grouped by their question's source, sorted, then "ALL"."""
    by: dict[str, list[dict]] = defaultdict(list)
    for i, r in rows.items():
        if i in qs:
            by[qs[i].source].append(r)
    return sorted(by.items()) + [("ALL", [r for v in by.values() for r in v])]


def accuracy_by_source(rows: dict[str, dict], qs: dict[str, Question]) -> list[list[str]]:
    """Closed-book accuracy per source under every criterion, plus idk and guess shares."""
    out = []
    for source, rs in _by_source(rows, qs):
        accs = [_pct(np.mean([correct(r, c) for r in rs])) for c in CRITERIA]
        extra = [
            _pct(np.mean([bool(r["idk"]) for r in rs])),
            _pct(np.mean([r["guess"] for r in rs])),
        ]
        out.append([source, str(len(rs)), *accs, *extra])
    return out


def popqa_quartiles(rows: dict[str, dict], qs: dict[str, Question]) -> list[list[str]]:
    """PopQA closed-book accuracy per s_pop quartile, and at the long-tail cut s_pop < 100."""
    pop = [(qs[i].s_pop, r) for i, r in rows.items() if i in qs and qs[i].source == "popqa"]
    pop = [(s, r) for s, r in pop if s is not None]
    if not pop:
        return []
    edges = np.quantile([s for s, _ in pop], [0, 0.25, 0.5, 0.75, 1.0])
    bins = [(edges[k], edges[k + 1], k == 3) for k in range(4)]
    out = []
    for lo, hi, last in bins:
        rs = [r for s, r in pop if lo <= s and (s <= hi if last else s < hi)]
        out.append(_acc_row(f"s_pop {lo:.0f}-{hi:.0f}", rs))
    out.append(_acc_row("s_pop < 100", [r for s, r in pop if s < 100]))
    out.append(_acc_row("s_pop >= 100", [r for s, r in pop if s >= 100]))
    return out


def _acc_row(name: str, rs: Sequence[dict]) -> list[str]:
    if not rs:
        return [name, "0", "-", "-"]
    loose = np.mean([correct(r, "loose") for r in rs])
    strict = np.mean([correct(r, DEFAULT_CRITERION) for r in rs])
    return [name, str(len(rs)), _pct(loose), _pct(strict)]


def rag_effects(rows: dict[str, dict], qs: dict[str, Question]) -> list[list[str]]:
    """Closed-book vs with-retrieval accuracy and helps/hurts/neither/both shares per source."""
    out = []
    for source, rs in _by_source(rows, qs):
        eff = Counter(r["effect"] for r in rs)
        closed = np.mean([r["closed_correct"] for r in rs])
        rag = np.mean([r["rag_correct"] for r in rs])
        shares = [_pct(eff[e] / len(rs)) for e in ("helps", "hurts", "neither", "both")]
        out.append([source, str(len(rs)), _pct(closed), _pct(rag), *shares])
    return out


def label_balance(files: dict[str, LabelFile], qs: dict[str, Question]) -> list[list[str]]:
    out = []
    for policy, lf in files.items():
        by: dict[str, list] = defaultdict(list)
        for i, r in lf.rows.items():
            by[qs[i].source if i in qs else "?"].append(r["label"])
        for source, labels in sorted(by.items()):
            kept = [x for x in labels if x is not None]
            pos = _pct(np.mean(kept)) if kept else "    -"
            out.append([policy, source, str(len(labels)), str(len(kept)), pos])
    return out


def criterion_moves(rows: dict[str, dict], qs: dict[str, Question]) -> list[list[str]]:
    """Share of closed-book labels that change when another criterion replaces the default."""
    by: dict[str, list[dict]] = defaultdict(list)
    for i, r in rows.items():
        if i in qs:
            by[qs[i].source].append(r)
    out = []
    for source, rs in sorted(by.items()) + [("ALL", [r for v in by.values() for r in v])]:
        moved = [
            _pct(np.mean([correct(r, c) != correct(r, DEFAULT_CRITERION) for r in rs]))
            for c in CRITERIA
            if c != DEFAULT_CRITERION
        ]
        out.append([source, str(len(rs)), *moved])
    return out


def _table(title: str, header: list[str], rows: list[list[str]]) -> str:
    return "\n".join([f"## {title}", "", markdown_table(header, rows, pad=True), ""])


def report(
    generator: str = SMOLLM2,
    labels_dir: Path = LABELS_DIR,
    questions: Sequence[Question] | None = None,
) -> str:
    """The whole report as markdown (columns aligned for a terminal), of `generator`'s label
    files in `labels_dir` over `questions` (default: the bundled datasets')."""
    qs = {q.id: q for q in (load_all() if questions is None else questions)}
    files = _label_files(generator, labels_dir)
    if not any(i in qs for f in files.values() for i in f.rows):  # every figure was NaN
        raise DataError(f"none of the labelled ids is a question of "
                        f"{'--questions' if questions is not None else 'the bundled datasets'}: "
                        "pass --questions FILE, the questions these labels are of",
                        labels_dir)  # fmt: skip
    parts = []
    closed = files.get("closed-book")
    if closed:
        others = [c for c in CRITERIA if c != DEFAULT_CRITERION]
        parts.append(
            _table(
                "closed-book accuracy % per source (criteria), idk %, guess %",
                ["source", "n", *CRITERIA, "idk", "guess"],
                accuracy_by_source(closed.rows, qs),
            )
        )
        parts.append(
            _table(
                "PopQA closed-book accuracy % by s_pop quartile",
                ["bin", "n", "loose", DEFAULT_CRITERION],
                popqa_quartiles(closed.rows, qs),
            )
        )
        parts.append(
            _table(
                f"closed-book labels changed % vs {DEFAULT_CRITERION}",
                ["source", "n", *others],
                criterion_moves(closed.rows, qs),
            )
        )
    if "rag-gain" in files:
        parts.append(
            _table(
                "with retrieval: accuracy % and effect shares %",
                ["source", "n", "closed", "rag", "helps", "hurts", "neither", "both"],
                rag_effects(files["rag-gain"].rows, qs),
            )
        )
    parts.append(
        _table(
            "label balance (rows, kept, % label 1)",
            ["policy", "source", "rows", "kept", "pos%"],
            label_balance(files, qs),
        )
    )
    return "\n".join(parts)


def _label_files(generator: str, labels_dir: Path) -> dict[str, LabelFile]:
    """policy -> its label file of `generator` with rows, each file once (an outcomes import
    writes closed-book.jsonl: it was reported twice); none is an error naming the folder. The
    one-answer policies' only: a strategy label file is a router's (docs/router.md)."""
    files: dict[str, LabelFile] = {}
    seen: set[Path] = set()
    for policy, spec in POLICIES.items():
        path = label_path(policy, generator, labels_dir)
        if not spec.needs_rag_loop and path not in seen and (found := LabelFile(path)).rows:
            files[policy] = found
        seen.add(path)
    if not files:
        raise DataError(f"no label file of generator {generator!r} here: label first, or pass "
                        "the --labels-dir and --generator it was labelled with",
                        labels_dir)  # fmt: skip
    return files


def print_report(
    generator: str = SMOLLM2,
    labels_dir: Path | None = None,
    questions: Sequence[Question] | None = None,
) -> None:
    print(report(generator, labels_dir or LABELS_DIR, questions))
