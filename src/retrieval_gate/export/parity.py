"""Parity and quality of each exported variant against the PyTorch checkpoint.

Each variant has its own bar: fp32 must match PyTorch (|diff| <= 1e-4, identical decisions);
`opt` is the same graph after fusions; int8 and fp16 trade accuracy for speed, so they are
judged on what matters downstream: decision agreement and the AUROC drop on the test split."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from ..data.splits import assign_splits, with_splits
from ..data.user_questions import question_set
from ..errors import DataError, first_line
from ..fileio import write_json
from ..gates.base import is_router
from ..gates.learned import load_learned
from ..gates.onnx import open_onnx
from ..gates.onnx_format import VARIANTS
from ..labels.label_files import Stamp, check_made_for, made_for_others
from ..labels.logprobs import with_answer_logprobs
from ..pricing import route_indices
from ..questions import Question
from ..training.checkpoint import read_provenance, read_run_json, run_side_features
from ..training.config import DataConfig, read_run_config
from ..training.datamodule import CALIBRATION_QUESTIONS, needs_retrieval
from ..training.provenance import label_source
from ..training.sources import training_questions
from ..training.tasks import TASKS

# variant -> (max |score diff| vs PyTorch, min decision agreement, max AUROC drop)
BARS: dict[str, tuple[float | None, float, float | None]] = {
    "fp32": (1e-4, 1.0, None),
    "opt": (1e-3, 0.995, 0.002),
    "int8": (None, 0.95, 0.01),
    "fp16": (1e-2, 0.99, 0.005),
}


def parity_set(
    run_dir: Path,
    limit: int | None = 1000,
    seed: int = 0,
    questions: Sequence[Question] | None = None,
    split: str = "test",
) -> tuple[list[str], list[int], np.ndarray | None]:
    """Test-split (or `split`) questions of the run's labels: texts, binary labels and (for a
    gate with side features) their scaled features. From `questions`, else the run's own
    `data.questions` file, else the bundled datasets (canonical split)."""
    provenance = read_provenance(run_dir)
    meta = read_run_json(run_dir / "metadata.json")
    config, old_side = read_run_config(run_dir / "config.yaml")
    task = TASKS[meta["task"]]
    source = (
        label_source(provenance, run_dir, task.labels_sha256) if provenance.get("path") else None
    )
    if source:
        targets = task.read(source)
    else:  # labels given to train() in memory travel in labels.json
        targets = task.from_memory(provenance.get("labels") or {})
    labels, shas = targets.labels, targets.question_shas
    if questions is None and config.data.task_spec.routes and not config.data.questions:
        questions = training_questions(config.data)  # e.g. the release a router learned from
    if questions is None:
        questions = _run_questions(config.data, provenance, run_dir, shas, source)
    else:  # --questions (or a router's release): refused, as evaluate and train refuse them,
        # where the labels' stamps say they are other questions under the same ids
        _check_made_for(shas, questions, source, "the questions given")
    if not all(q.split for q in questions):  # the split training gave them
        questions = with_splits(questions, assign_splits(questions, seed=config.data.split_seed))
    rows = [q for q in questions if q.id in labels and q.split == split]
    if limit and len(rows) > limit:
        rows = random.Random(seed).sample(rows, limit)
    if not rows:
        raise DataError(
            f"no {split}-split questions for the run's labels (pass the questions it was "
            "trained on: export --questions FILE)",
            provenance.get("path") or run_dir,
        )
    side = run_side_features(meta, old_side)
    if getattr(side, "confidence", None) is not None and source:
        # a two-stage gate: its questions with their answers, so both levels are compared
        kept = with_answer_logprobs({q.id: q for q in rows}, Path(source))
        rows = list(kept.values())
    features = side.matrix(rows, strict=False) if side else None
    return [q.text for q in rows], [int(needs_retrieval(labels[q.id])) for q in rows], features


def _run_questions(
    data: DataConfig,
    provenance: dict[str, Any],
    run_dir: Path,
    shas: dict[str, Stamp],
    source: str | None,
) -> Sequence[Question]:
    """The run's `data.questions` (the bundled datasets where unset), found the way
    `label_source` finds its label file: where the run trained, as given (the current folder),
    or under a folder above the run; the first whose questions the labels' stamps accept.
    Read from the current folder alone, another file of that name (the same ids, other texts)
    gave parity and the model card's AUROC on questions the run never saw."""
    given = data.questions
    if not given or given.startswith("hf:"):
        questions = question_set(given, data.fields)
        _check_made_for(shas, questions, source, f"the run's data.questions ({given})")
        return questions
    trained = _trained_in(provenance)  # (an absolute `given` stays itself in each join)
    places = [str(Path(trained) / given)] if trained else []
    places += [given, *(str(folder / given) for folder in Path(run_dir).resolve().parents)]
    found: dict[str, str] = {}  # resolved -> the first place naming it (a file read once)
    for place in places:
        if Path(place).exists():
            found.setdefault(str(Path(place).resolve()), place)
    other: tuple[str, Sequence[Question]] | None = None  # the first found of other questions
    for resolved, place in found.items():
        questions = question_set(place, data.fields)
        if not made_for_others(shas, questions):
            return questions
        other = other or (resolved, questions)
    if other:
        _check_made_for(shas, other[1], source, f"the run's data.questions ({given}) at {other[0]}")
    where = f" ({trained})" if trained else ""
    raise DataError(f"the run's question file (data.questions, from the run's config "
                    f"{run_dir}/config.yaml) is not found here, nor where the run trained{where}, "
                    "nor under a folder above the run: pass the questions it was trained on "
                    "(export --questions FILE), or run this from the folder the run trained in",
                    given)  # fmt: skip


def _trained_in(provenance: dict[str, Any]) -> str | None:
    """The folder training ran in, where labels.json tells it: its label file's relative path
    as given and where that resolved then (None for an absolute path, `..` or a link)."""
    given, resolved = provenance.get("path"), provenance.get("resolved")
    if not given or not resolved or Path(given).is_absolute() or ".." in Path(given).parts:
        return None
    parts, full = Path(given).parts, Path(resolved).parts
    if len(full) <= len(parts) or full[-len(parts) :] != parts:
        return None
    return str(Path(*full[: -len(parts)]))


def _check_made_for(
    shas: dict[str, Stamp], questions: Sequence[Question], source: str | None, what: str
) -> None:
    """`check_made_for` of the run's label file, saying which questions export read."""
    if not source or not shas:  # labels in memory, or rows written before stamps
        return
    try:
        check_made_for(shas, questions, source)
    except DataError as e:
        raise DataError(f"{e}; these were {what}: parity and the model card's AUROC would be "
                        "computed on them; pass the questions the run trained on "
                        "(export --questions FILE)") from None  # fmt: skip


def calibration_set(
    run_dir: Path, questions: Sequence[Question] | None = None
) -> tuple[list[str], np.ndarray | None]:
    """Dev-split questions for int8 calibration (texts, scaled side features): those the run
    kept when it trained (metadata.json `calibration`), else (runs trained before it kept them)
    its dev split found again in `questions`, by default the run's own question set."""
    path = Path(run_dir) / "metadata.json"
    meta = read_run_json(path)
    if meta.get("calibration"):
        side = run_side_features(meta, read_run_config(Path(run_dir) / "config.yaml")[1])
        return _kept_calibration(meta["calibration"], side.width if side else 0, path)
    texts, _, features = parity_set(
        Path(run_dir), CALIBRATION_QUESTIONS, questions=questions, split="dev"
    )
    return texts, features


def _kept_calibration(kept: Any, width: int, path: Path) -> tuple[list[str], np.ndarray | None]:
    """The run's kept calibration questions and their `width` side features, checked: a
    hand-edited or damaged one (5, texts that are no strings, features of another shape) was
    an internal error mid-export."""
    texts = kept.get("texts") if isinstance(kept, dict) else None
    if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
        raise DataError("key calibration: not an object with a list of question texts; "
                        "re-train the run (`retrieval-gate train`), or set it to null to "
                        "calibrate on its dev split found again", path)  # fmt: skip
    features = kept.get("features")
    if features is None and not width:
        return texts, None
    try:
        matrix = np.asarray(features, np.float32)
    except (TypeError, ValueError):
        matrix = np.zeros(0)
    if matrix.shape != (len(texts), width) or not np.isfinite(matrix).all():
        want = f"{width} finite numbers a question" if width else "null: the gate reads none"
        raise DataError(f"key calibration: its features are not {want}; re-train the run, "
                        "or set calibration to null", path)  # fmt: skip
    return texts, matrix


def _auroc(labels: Sequence[int] | None, scores: np.ndarray) -> float | None:
    if labels is None or len(set(labels)) < 2:
        return None
    return float(roc_auc_score(labels, scores))


def check_parity(
    run_dir: str | Path,
    export_dir: str | Path,
    texts: Sequence[str],
    labels: Sequence[int] | None = None,
    features: np.ndarray | None = None,
) -> dict[str, Any]:
    """Scores `texts` with PyTorch and every variant present; writes parity.json beside the
    export and returns it. A variant that cannot run here (fp16 on a CPU build without fp16
    kernels) is reported as not runnable instead of failing the export."""
    run_dir, export_dir = Path(run_dir), Path(export_dir)
    reference = load_learned(run_dir)
    ref = reference.score_texts(list(texts), features)
    ref_auroc = _auroc(labels, ref)
    report: dict[str, Any] = {"n": len(texts), "pytorch": {"auroc": ref_auroc}, "variants": {}}
    for variant, filename in VARIANTS.items():
        if not (export_dir / filename).is_file():
            continue
        try:
            gate = open_onnx(export_dir, variant)
            scores = gate.score_texts(list(texts), features)
        except Exception as e:  # noqa: BLE001  (ORT: missing kernels for this provider)
            report["variants"][variant] = {"runnable": False, "error": first_line(e)}
            continue
        report["variants"][variant] = _compare(variant, ref, scores, reference.threshold, labels,
                                               ref_auroc, gate.provider)  # fmt: skip
        if is_router(gate):  # the routing too: P(correct | strategy) and the default routes
            report["variants"][variant]["router"] = _compare_routes(
                reference, gate, texts, features
            )
    write_json(export_dir / "parity.json", report)
    return report


def _compare(
    variant: str,
    ref: np.ndarray,
    scores: np.ndarray,
    threshold: float,
    labels: Sequence[int] | None,
    ref_auroc: float | None,
    provider: str,
) -> dict[str, Any]:
    max_diff, min_agree, max_drop = BARS[variant]
    diff = float(np.abs(scores - ref).max())
    agree = float(((scores >= threshold) == (ref >= threshold)).mean())
    auroc = _auroc(labels, scores)
    drop = None if auroc is None or ref_auroc is None else ref_auroc - auroc
    ok = agree >= min_agree and (max_diff is None or diff <= max_diff)
    ok = ok and (max_drop is None or drop is None or drop <= max_drop)
    return {
        "runnable": True,
        "provider": provider,
        "max_abs_diff": diff,
        "decision_agreement": agree,
        "auroc": auroc,
        "auroc_drop": drop,
        "bar": {"max_abs_diff": max_diff, "min_agreement": min_agree, "max_auroc_drop": max_drop},
        "passed": bool(ok),
    }


def _compare_routes(reference: Any, gate: Any, texts: Sequence[str], features: Any) -> dict:
    """Max |P(correct | strategy)| difference and agreement of the default routes."""
    shape = (len(gate.strategies),)
    ref_p = reference.batched(reference._proba_batch, list(texts), features, shape)
    p = gate.batched(gate._proba_batch, list(texts), features, shape)
    price, costs = gate.calibration.default_price, gate.calibration.costs
    same = route_indices(ref_p, price, costs) == route_indices(p, price, costs)
    return {"strategy_proba_max_abs_diff": float(np.abs(ref_p - p).max()),
            "default_route_agreement": float(same.mean())}  # fmt: skip
