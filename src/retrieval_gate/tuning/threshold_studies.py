"""Threshold studies of one gate: build it from train/dev only, score dev (cached), tune each
objective and the Pareto front. Nothing here sees the test split (`run_tuning` applies the
chosen thresholds to test afterwards, through `tuning.tuned_report`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MissingInputError
from ..fileio import arrays_bytes, content_id, read_arrays, sha256_file
from ..gates.base import Gate, gate_checksum
from ..gates.registry import GateContext, GateOptions, LazyGenerator, build_gate
from ..labels.evalset import EvalSet
from ..labels.labelling_run import LabellingRun
from ..outputs import refuse_unrecorded, write_cache
from .objectives import DevData, objective, retrieved_at_every_threshold
from .studies import require_no_test, study_name
from .threshold import pareto_front, plot_pareto, tune_threshold


def tuning_identity(
    sets: Iterable[EvalSet],
    run_dir: Path,
    gate: Gate | None = None,
    options: GateOptions | None = None,
) -> str:
    """What threshold studies and dev scores depend on, by content: the questions and labels
    studied (`EvalSet.digest`: the train split a gate fits on, the dev split it scores), the
    labelling run's recorded answers, (when it has one) the gate's weights checksum, and the
    options its spec reads (a popularity gate has no weights: its s_pop dev scores were
    reused for --feature o_pop; a file option by its content)."""
    sums = LabellingRun(run_dir).checksums()
    read = _options_read(gate.name, options) if gate is not None and options else ""
    return content_id(*(s.digest() for s in sets), *sums, gate_checksum(gate) if gate else None,
                      read)  # fmt: skip


def _options_read(name: str, options: GateOptions) -> str:
    """The values of the options gate `name` reads, files by their sha256 (folders are keyed
    by the gate's weights checksum)."""
    from ..gates.registry import GATES

    spec = GATES.get(name)
    values = {}
    for field in spec.options if spec else ():
        value = getattr(options, field, None)
        is_file = isinstance(value, str | Path) and Path(value).is_file()
        values[field] = sha256_file(Path(value)) if is_file else value
    return json.dumps(values, sort_keys=True, default=str)


def dev_scores(
    gate: Gate, dev: EvalSet, cache: Path | None = None, identity: str = ""
) -> np.ndarray:
    """The gate's dev scores, cached (prompt gates cost minutes of LLM time) and reused only
    for the same question ids and the same `identity` (see `tuning_identity`)."""
    require_no_test(dev)
    if cache is not None:  # a file of the user's by its name: refused before scoring
        refuse_unrecorded(cache)
    stored = read_arrays(cache) if cache is not None else None  # damaged: scored again
    if stored is not None and {"identity", "ids", "scores"} <= stored.keys():
        same = str(stored["identity"]) == identity and list(stored["ids"]) == dev.ids
        if same and stored["scores"].shape == (len(dev.ids),):
            return stored["scores"]
    scores = np.asarray(gate.scores(dev.questions), float)
    if cache is not None:
        raw = arrays_bytes(ids=np.array(dev.ids), scores=scores, identity=np.array(identity))
        write_cache(cache, raw)
    return scores


def tune_gate_thresholds(
    gate: Gate,
    train: EvalSet,
    dev: EvalSet,
    policy: str,
    objectives: list[str],
    storage: Path,
    out_dir: Path,
    n_trials: int = 100,
    target: float = 0.95,
    seed: int = 0,
    identity: str = "",
    workers: int = 1,
    llm_calls: tuple[float, float] | None = (1.0, 1.0),
    plot_name: str | None = None,
) -> dict[str, Any]:
    """The best threshold per objective (and the Pareto front study if `pareto` is asked) on
    dev scores; the Pareto study and the score cache are keyed by `identity` (see
    `tuning_identity`). `llm_calls`: a question's LLM calls without and with retrieval (the
    binary pair's specs), reported beside the retrieval rate. `plot_name`: the Pareto
    figure's file name in `out_dir` (default pareto-<gate name>-<policy>.png)."""
    require_no_test(train, "gate fitting")
    cache = out_dir / f"{gate.name}-{policy}.dev-scores.npz"
    scores = dev_scores(gate, dev, cache, identity)
    data = DevData(dev.y, scores, dev.closed_correct, dev.rag_correct, llm_calls)
    out: dict[str, Any] = {"gate": gate.name, "policy": policy, "thresholds": {}, "skipped": {},
                           "llm_calls": llm_calls}  # fmt: skip
    # dev questions no threshold in [0, 1] keeps from retrieval (the report says so)
    out["dev_retrieved_at_every_threshold"] = retrieved_at_every_threshold(scores)
    for name in objectives:
        if name == "pareto":
            continue
        obj = objective(name, target)
        try:
            res = tune_threshold(obj, data)
        except MissingInputError as e:  # e.g. no recorded answers for adaptive accuracy
            out["skipped"][obj.name] = str(e)
            continue
        out["thresholds"][obj.name] = asdict(res)
    if "pareto" in objectives:
        try:
            front, trials = pareto_front(
                data,
                study_name(gate.name, policy, "pareto", identity),
                storage,
                n_trials,
                seed,
                workers,
            )
        except MissingInputError as e:
            out["skipped"]["pareto"] = str(e)
        else:
            known = ~np.isnan(data.closed) & ~np.isnan(data.rag)
            plot = out_dir / (plot_name or f"pareto-{gate.name}-{policy}.png")
            png = plot_pareto(front, trials, float(data.rag[known].mean()), float(data.closed[known].mean()),
                              plot, f"{gate.name}, labels {policy} (dev)")  # fmt: skip
            out["pareto"] = {"front": front, "n_trials": len(trials), "plot": png.name}
    return out


def build_for_tuning(
    name: str,
    train: EvalSet,
    dev: EvalSet,
    records: dict,
    options: GateOptions | None = None,
    costs: tuple[float, ...] | None = None,
    generator: LazyGenerator | None = None,
) -> Gate:
    """A gate fitted on train/dev only (the context never holds test questions); `costs`:
    --strategies' prices of a router fitted here; `generator`: the one its gate asks and keys
    its cached scores by, the labelling one (default SmolLM2, the bundled labels')."""
    require_no_test(train, "gate fitting")
    require_no_test(dev)
    generator = generator if generator is not None else LazyGenerator()
    return build_gate(name, GateContext(train, dev, records, generator, costs=costs), options)
