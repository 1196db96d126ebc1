"""A run folder `checkpoints/<run>/` holds everything needed to use or ship a gate:

    config.yaml        the resolved training config (`TrainConfig.to_dict()`)
    labels.json        label-file provenance (path, sha256, counts, the label file's .meta.json;
                       labels given in memory: their sha256 and the labels themselves)
    backbone/          the backbone's Hugging Face config (architecture without weights)
    tokenizer/         the tokenizer
    gate.pt            the best module's state dict (LoRA unmerged)
    metrics.json       dev/test metrics, throughput, wall time, peak RSS
    metadata.json      task, class names, threshold + the objective that chose it, and what
                       training derived: the side features' names and scaling (`side_features`)
    manifest.json      kind, task, signals, a router's strategies and calibration
                       (`artifacts.Manifest`, rewritten whenever metadata.json's router is)

`save_threshold` lets tuning record a tuned threshold; `LearnedGate` and the exporter read it.
A tuned threshold is for the weights it was tuned on: `save_run` drops it once gate.pt's
weights change (a resume that trained on), back to the config's.
Every file and folder is written atomically (a temporary one beside it, renamed into place) and
gate.pt last: a run killed while saving has no gate.pt (`load_run` calls it incomplete) or all of
them, never a half-written one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import yaml

from .. import __version__
from ..artifacts import (
    FIX,
    MANIFEST,
    RUN_BACKBONE,
    RUN_TOKENIZER,
    recorded_checksums,
    run_manifest,
    verified_sha256,
)
from ..data.gate_features import GateFeatures, features_from_dict
from ..errors import DataError, clipped, first_line
from ..fileio import atomic_path, read_json, sha256_file, staged_folder, write_json, write_text
from ..pricing import Calibration
from ..questions import Question
from ..run_folder import RunFolder
from ..yaml_files import read_yaml
from .backbones import load_tokenizer, saved_config
from .config import TASKS, TrainConfig, read_run_config
from .module import RetrievalGateModule
from .provenance import text_digest

log = logging.getLogger(__name__)

REQUIRED = RunFolder.REQUIRED
BINARY_SCORE = "P(needs retrieval) = 1 - P(no_retrieval); retrieve iff score >= threshold"
ROUTER_SCORE = ("P(needs retrieval) = 1 - P(correct | no_retrieval); strategy_proba = "
                "P(correct | strategy); route = argmax P - price x cost")  # fmt: skip


def read_run_json(path: Path) -> dict[str, Any]:
    """One JSON file of a run folder: an object (anything else is a damaged file)."""
    value = read_json(path, missing="missing file; is this a training run folder?")
    if not isinstance(value, dict):
        raise DataError(f"holds a JSON {type(value).__name__}, not the object training writes: "
                        "the file is damaged; re-train the run", path)  # fmt: skip
    return value


def save_run(
    run_dir: Path,
    config: TrainConfig,
    module: RetrievalGateModule,
    tokenizer: Any,
    labels: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
    router: Calibration | None = None,
) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
    write_json(run_dir / "labels.json", labels)
    with staged_folder(run_dir / "backbone") as stage:
        module.backbone.hf_config.save_pretrained(stage)
    with staged_folder(run_dir / "tokenizer") as stage:
        tokenizer.save_pretrained(stage)
    meta_file = run_dir / "metadata.json"
    meta = read_run_json(meta_file) if meta_file.is_file() else {}
    state = module.state_dict()
    _forget_tuning(meta, run_dir / RunFolder.WEIGHTS, state)
    side = module.side_features
    meta.update(
        {
            "task": config.data.task,
            "classes": list(router.strategies if router else TASKS[config.data.task].classes),
            "score": ROUTER_SCORE if router else BINARY_SCORE,
            "backbone": config.model.backbone,
            "model_name": config.model.name,
            "max_length": config.data.max_length,
            "side_features": side.to_dict() if side else None,
            "calibration": calibration,  # dev questions for int8 (export/parity.py)
            "package_version": __version__,
            "manifest": MANIFEST,  # this folder has one (an export inherits the key): one gone
        }  # is damage, not a folder from before manifests (`artifacts.open_artifact`)
    )
    if router is not None:  # strategies, costs, the dev calibration and the default budget
        meta["router"] = router.to_dict()
    meta.setdefault("threshold", config.model.threshold)
    meta.setdefault("objective", UNTUNED)
    write_json(meta_file, meta)
    if metrics is not None:
        write_json(run_dir / "metrics.json", metrics)
    with atomic_path(run_dir / RunFolder.WEIGHTS) as tmp:  # last: it says the run is whole
        torch.save(state, tmp)
        # loading checks the weights and the tokenizer's files against these
        sums = {RunFolder.WEIGHTS: sha256_file(tmp),
                RunFolder.CONFIG: sha256_file(run_dir / RunFolder.CONFIG),
                **_folder_sums(run_dir, RUN_TOKENIZER),
                **_folder_sums(run_dir, RUN_BACKBONE)}  # fmt: skip
        run_manifest(meta, run_dir, sums).write(run_dir)  # before gate.pt appears


UNTUNED = "default 0.5 (not tuned)"
TUNING_KEYS = ("threshold", "objective", "dev_figures", "tuned_at")  # `save_threshold`'s


def _forget_tuning(meta: dict[str, Any], weights: Path, state: dict[str, Any]) -> None:
    """Drops the tuned threshold (and what chose it) from `meta` when `state` is not the
    weights in `weights` it was tuned on: a resume that trained on kept a threshold tuned for
    the earlier weights, and the export carried it. An untuned one is the config's anyway."""
    tuned = "tuned_at" in meta or meta.get("objective", UNTUNED) != UNTUNED
    if not tuned or _same_weights(weights, state):
        return
    for key in TUNING_KEYS:
        meta.pop(key, None)
    what = "router's tuned calibration" if "router" in meta else "tuned threshold"
    log.warning(f"{weights.parent}: the {what} was for the earlier weights: re-run tune "
                "(the new weights have the default threshold until then)")  # fmt: skip


def _same_weights(path: Path, state: dict[str, Any]) -> bool:
    """Whether gate.pt at `path` holds `state`'s tensors (its bytes differ at each save)."""
    try:
        old = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001  (none yet, or damaged: not the same weights)
        return False
    return old.keys() == state.keys() and all(
        torch.equal(old[k], state[k].detach().cpu()) for k in state
    )


def _folder_sums(run_dir: Path, prefix: str) -> dict[str, str]:
    """sha256 of each file of the run's tokenizer/ (a flipped byte inside a vocabulary entry
    still parses, and the gate would tokenize questions otherwise than it was trained to) or
    backbone/ (an edited activation loads the same weights and scores otherwise)."""
    folder = run_dir / prefix.rstrip("/")
    return {f"{prefix}{p.name}": sha256_file(p) for p in sorted(folder.iterdir())
            if p.is_file()}  # fmt: skip


# What loading a run and exporting it read from metadata.json (save_run writes them all);
# their types where present are checked when the folder is opened (artifacts.py).
RUN_KEYS = ("task", "classes", "max_length", "score", "backbone", "model_name")
RUN_TEXTS = ("score", "backbone", "model_name")  # written into the export's card and metadata


def read_metadata(run_dir: str | Path) -> dict[str, Any]:
    """A run's metadata.json with the keys it is loaded and exported by: one gone (a hand
    edit, a damaged file) was a KeyError, an internal error, mid-export."""
    path = Path(run_dir) / "metadata.json"
    meta = read_run_json(path)
    for key in RUN_KEYS:
        if key not in meta:
            raise DataError(f"missing field {key!r}: the file is damaged; re-train the run "
                            "(`retrieval-gate train`)", path)  # fmt: skip
    for key in RUN_TEXTS:
        if not isinstance(meta[key], str):
            raise DataError(f"field {key!r} = {clipped(repr(meta[key]))} is not a string: the "
                            "file is damaged; re-train the run (`retrieval-gate train`)", path)  # fmt: skip
    _check_against_config(meta, path)
    return meta


# metadata.json key -> where config.yaml holds the same value (save_run writes both from it)
CONFIG_KEYS = {"task": ("data", "task"), "max_length": ("data", "max_length"),
               "backbone": ("model", "backbone"), "model_name": ("model", "name")}  # fmt: skip


def _check_against_config(meta: dict[str, Any], path: Path) -> None:
    """metadata.json says what config.yaml says (checksummed; metadata.json is not: tuning
    rewrites it): one edited or copied from another run (max_length 24 -> 4) exported and
    scored every question cut to its length, silently. Only the keys both files hold."""
    config_file = path.parent / RunFolder.CONFIG
    try:
        config = read_yaml(config_file) if config_file.is_file() else None
    except yaml.YAMLError:
        return  # read_run_config names a damaged config.yaml
    if not isinstance(config, dict):
        return
    for key, (section, field) in CONFIG_KEYS.items():
        part = config.get(section)
        if not isinstance(part, dict) or field not in part or key not in meta:
            continue
        if meta[key] != part[field]:
            raise DataError(f"field {key!r} = {clipped(repr(meta[key]))}, but the run's "
                            f"{RunFolder.CONFIG} (checksummed) has {section}.{field} = "
                            f"{clipped(repr(part[field]))}: the file was edited or copied from "
                            f"another run; set {key!r} back to {clipped(repr(part[field]))}, or "
                            "re-train the run (`retrieval-gate train`)", path)  # fmt: skip


# labels.json: each key training writes and its types (path null: labels given in memory)
PROVENANCE_KEYS: dict[str, tuple[type, ...]] = {
    "path": (str, type(None)), "sha256": (str,), "resolved": (str,),
    "meta": (dict, type(None)), "counts": (dict,), "labels": (dict,), "fitted": (list,),
}  # fmt: skip
PROVENANCE_REQUIRED = ("path", "sha256")
DESCRIBED = {str: "a string", dict: "an object"}


def read_provenance(run_dir: str | Path) -> dict[str, Any]:
    """A run's labels.json, each key of the type training writes: a hand-edited or damaged
    one (path 7, meta 3, no sha256) was a TypeError or KeyError mid-export."""
    path = Path(run_dir) / RunFolder.LABELS
    value = read_run_json(path)
    for key, types in PROVENANCE_KEYS.items():
        if key not in value and key not in PROVENANCE_REQUIRED:
            continue
        if not isinstance(value.get(key, ...), types):
            want = " or ".join("null" if t is type(None) else DESCRIBED[t] for t in types)
            said = f"= {clipped(repr(value[key]))} is not {want}" if key in value else (
                f"({want}) is missing")  # fmt: skip
            raise DataError(f"field {key!r} {said}: the file is damaged; re-train the run "
                            "(`retrieval-gate train`)", path)  # fmt: skip
    return value


def fitted_among(run_dir: str | Path, questions: Sequence[Question]) -> int:
    """How many of `questions` the run fitted on or chose on (its train and dev texts, kept
    in labels.json by runs trained since; 0 for older runs)."""
    fitted = set(read_provenance(run_dir).get("fitted") or ())
    return sum(text_digest(q.text) in fitted for q in questions)


def read_metrics(run_dir: str | Path) -> dict[str, Any]:
    """A run's metrics.json, its dev and test figures numbers (or null where undefined): a
    hand-edited one ("x") was a ValueError mid-export, in the model card."""
    path = Path(run_dir) / RunFolder.METRICS
    value = read_run_json(path)
    for split in ("dev", "test"):
        figures = value.get(split, {})
        if not isinstance(figures, dict) or not all(
            v is None or (isinstance(v, int | float) and not isinstance(v, bool))
            for v in figures.values()
        ):
            raise DataError(f"field {split!r} is not an object of numbers: the file is damaged; "
                            "re-train the run (`retrieval-gate train`)", path)  # fmt: skip
    return value


def run_side_features(meta: dict[str, Any], from_config: dict | None = None) -> GateFeatures | None:
    """The side features a run was trained with: metadata.json's, or (runs trained before they
    moved there) config.yaml's `model.side_features`."""
    return features_from_dict(meta.get("side_features") or from_config)


def save_threshold(
    run_dir: str | Path, threshold: float, objective: str, dev_figures: dict[str, Any]
) -> None:
    """Records a tuned threshold (and the objective and dev figures that chose it) in the run's
    metadata.json; LearnedGate and the ONNX exporter use it from then on."""
    if not 0.0 <= float(threshold) <= 1.0:
        raise DataError(f"threshold must be in [0, 1], got {threshold}")
    path = Path(run_dir) / "metadata.json"
    meta = read_run_json(path)
    meta.update(
        threshold=float(threshold),
        objective=objective,
        dev_figures=dev_figures,
        tuned_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write_json(path, meta)


def load_run(run_dir: str | Path) -> tuple[RetrievalGateModule, Any, dict[str, Any]]:
    """(module in eval mode, tokenizer, metadata) from a run folder, with clear errors for a
    missing, corrupt or mismatched checkpoint."""
    run_dir = Path(run_dir)
    missing = [name for name in REQUIRED if not (run_dir / name).exists()]
    if missing:
        raise DataError(
            f"not a complete training run: missing {', '.join(missing)} "
            "(train with `retrieval-gate train`)",
            run_dir,
        )
    config, side = read_run_config(run_dir / "config.yaml")  # checked against the manifest
    meta = read_metadata(run_dir)
    recorded = recorded_checksums(run_dir)
    for name in (n for n in recorded if n.startswith(RUN_BACKBONE)):
        _check_run_file(run_dir, name)
        verified_sha256(run_dir, name, recorded, "run")
    module = RetrievalGateModule(
        config.model,
        len(meta["classes"]),
        hf_config=saved_config(run_dir / "backbone"),
        side_features=run_side_features(meta, side),
        task=TASKS[meta["task"]],
    )
    _check_run_file(run_dir, RunFolder.WEIGHTS)
    sha = verified_sha256(run_dir, RunFolder.WEIGHTS, recorded, "run")
    try:
        state = torch.load(run_dir / "gate.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated/garbled files
        raise DataError(f"checkpoint gate.pt is corrupt or unreadable ({e})", run_dir) from None
    state = {k: v for k, v in state.items() if not k.startswith("loss.")}
    try:
        module.load_state_dict(state, strict=False)
        _check_keys(module, state, run_dir)
    except RuntimeError as e:
        raise DataError(
            f"gate.pt does not match config.yaml/backbone ({first_line(e)})", run_dir
        ) from None
    module.threshold = float(meta.get("threshold", 0.5))
    module.weights_sha256 = sha  # hashed to check it: the gate's checksum, not hashed again
    return module.eval(), _run_tokenizer(run_dir, recorded), meta


def _check_run_file(run_dir: Path, name: str) -> None:
    """`name` in the run folder is a regular file, or a DataError says what is there instead:
    hashing it was a raw FileNotFoundError or IsADirectoryError (and a pipe never ends)."""
    path = run_dir / name
    if path.is_file():
        return
    folder, _, file = name.rpartition("/")
    if path.exists():
        what = "a folder" if path.is_dir() else "a device, pipe or socket"
        said = f"the run's {name} is {what}, not a file"
    elif folder:  # the wording of the tokenizer's (`_run_tokenizer`)
        said = f"the run's {folder}/ lacks {file}, which its manifest records"
    else:
        said = f"the run lacks {name}"
    raise DataError(f"{said}; {FIX['run']}", run_dir)


def _run_tokenizer(run_dir: Path, recorded: dict[str, str]) -> Any:
    """The tokenizer the run saved, its files checked against the manifest's checksums;
    damaged files are named, not a JSON traceback."""
    for name in (n for n in recorded if n.startswith(RUN_TOKENIZER)):
        if not (run_dir / name).is_file():
            raise DataError(f"the run's tokenizer/ lacks {name.removeprefix(RUN_TOKENIZER)}, "
                            f"which its manifest records; {FIX['run']}", run_dir)  # fmt: skip
        verified_sha256(run_dir, name, recorded, "run")
    try:
        return load_tokenizer(run_dir / "tokenizer")
    except Exception as e:  # noqa: BLE001  (cut short: JSONDecodeError; emptied: KeyError; ...)
        raise DataError(f"the run's tokenizer/ is damaged or incomplete ({first_line(e)}"
                        "); re-train the run (`retrieval-gate train`)", run_dir) from None  # fmt: skip


def _check_keys(module: RetrievalGateModule, state: dict[str, Any], run_dir: Path) -> None:
    expected = {k for k in module.state_dict() if not k.startswith("loss.")}
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise DataError(
            f"gate.pt does not match config.yaml/backbone: {len(missing)} missing weights "
            f"(e.g. {sorted(missing)[:2]}), {len(unexpected)} unexpected "
            f"(e.g. {sorted(unexpected)[:2]})",
            run_dir,
        )


def save_router(run_dir: str | Path, calibration: Calibration) -> None:
    """Records a router's calibration (a tuned default budget, or one calibrated on a user's
    traffic) in the run's metadata.json; the router and the exporter use it from then on."""
    path = Path(run_dir) / "metadata.json"
    meta = read_run_json(path)
    if "router" not in meta:
        raise DataError("not a router run (no `router` in metadata.json): train with "
                        "data.task=strategies", run_dir)  # fmt: skip
    meta.update(router=calibration.to_dict(),
                tuned_at=datetime.now(UTC).isoformat(timespec="seconds"))  # fmt: skip
    write_json(path, meta)
    run_manifest(meta, Path(run_dir)).write(Path(run_dir))  # its calibration, as metadata's
