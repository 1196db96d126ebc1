"""`OnnxGate`: an exported gate run by ONNX Runtime. Needs only onnxruntime, tokenizers and
numpy (no torch, no Lightning), so a RAG service can ship it alone."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from ..artifacts import (
    EXPORT_METADATA,
    EXPORT_TOKENIZER,
    MANIFEST,
    TASK_OF,
    Artifact,
    open_artifact,
)
from ..data.gate_features import features_from_dict
from ..errors import BackendError, DataError, InputError, clipped, first_line
from ..pricing import Calibration
from ..strict_rows import parse_json
from .base import Questions
from .encoder import EncoderGate
from .onnx_format import READABLE_FORMATS, REQUIRED, ROUTER_OUTPUT, VARIANTS
from .strategy_routers import RoutingMixin

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
ORT_WHEELS = ("onnxruntime", "onnxruntime-gpu")


def installed_onnxruntime_wheels() -> list[str]:
    """Which ONNX Runtime distributions are installed. Both write the same `onnxruntime`
    package, so having both means whichever was installed last decides whether CUDA exists."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for wheel in ORT_WHEELS:
        try:
            version(wheel)
            found.append(wheel)
        except PackageNotFoundError:
            pass
    return found


def select_providers(available: Sequence[str], prefer: str | None = None) -> list[str]:
    """CUDA when onnxruntime-gpu sees a GPU, else CPU; `prefer` forces one (e.g. "cpu")."""
    if prefer is not None and not isinstance(prefer, str):  # 1, True: a raw AttributeError
        raise InputError(f"unknown device {prefer!r}: choose cpu or cuda")
    if prefer:
        wanted = {"cpu": CPU, "cuda": CUDA}.get(prefer.lower(), prefer)
        if wanted not in available:
            fix = "install onnxruntime-gpu for CUDA"
            if len(installed_onnxruntime_wheels()) == 2:
                fix = ("both onnxruntime and onnxruntime-gpu are installed and overwrite each "
                       "other: `pip uninstall -y onnxruntime onnxruntime-gpu && pip install "
                       "onnxruntime-gpu`")  # fmt: skip
            raise BackendError(
                f"execution provider {wanted!r} is not available (have: {', '.join(available)}); "
                + fix
            )
        return [wanted] if wanted == CPU else [wanted, CPU]
    return [CUDA, CPU] if CUDA in available else [CPU]


def check_metadata(meta: dict[str, str], path: Path) -> dict[str, str]:
    """Refuses an ONNX file without the gate metadata the exporter writes."""
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise DataError(
            f"ONNX file lacks the gate metadata {', '.join(missing)}: it was not written by "
            "`retrieval-gate export` (re-export the checkpoint)",
            path,
        )
    if meta["format"] not in READABLE_FORMATS:
        raise DataError(f"unsupported gate format {meta['format']!r} (this version reads "
                        f"{', '.join(READABLE_FORMATS)}; upgrade retrieval-gate)", path)  # fmt: skip
    parse_metadata(meta, path)
    return meta


def parse_metadata(meta: dict[str, str], path: Path) -> dict[str, Any]:
    """The typed values a gate uses from the ONNX metadata, each checked with a clear error
    (a hand-edited `threshold="abc"` names the key, not a Python traceback)."""

    def bad(key: str, want: str) -> DataError:
        return DataError(f"ONNX metadata {key}={meta[key]!r} is not {want}; re-export", path)

    try:
        threshold = float(meta["threshold"])
    except ValueError:
        raise bad("threshold", "a number") from None
    if not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise bad("threshold", "a number in [0, 1]")
    ints = {}
    for key in ("max_length", "pad_token_id"):
        try:
            ints[key] = int(meta[key])
        except ValueError:
            raise bad(key, "an integer") from None
    if ints["max_length"] < 1:
        raise bad("max_length", "a positive integer")
    try:
        classes = parse_json(meta["classes"])
    except json.JSONDecodeError:
        raise bad("classes", "a JSON list") from None
    if not (
        isinstance(classes, list) and len(classes) >= 2 and all(isinstance(c, str) for c in classes)
    ):
        raise bad("classes", "a JSON list of at least two class names")
    return {"threshold": threshold, "classes": classes, **ints}


class OnnxGate(EncoderGate):
    """A `Gate` from `export/<name>/`: `variant` picks model.onnx / .opt / .int8 / .fp16.
    Scores strings or `Question`s (`gates.encoder.EncoderGate`, shared with `LearnedGate`)."""

    def __init__(
        self,
        export_dir: str | Path,
        variant: str = "fp32",
        provider: str | None = None,
        threads: int | None = None,
        batch_size: int = 64,
        name: str | None = None,
    ):
        self.export_dir = Path(export_dir)
        if variant not in VARIANTS:
            raise DataError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        # a missing folder: the error says how to make one
        self.artifact = artifact = open_artifact(self.export_dir, "export")
        self.path = path = artifact.model_file(variant)
        # checked before ONNX Runtime reads it; cached scores are keyed by it, not the name
        self.checksum = artifact.verified_sha256(path.name)
        self.session = self._session(path, provider, threads)
        self.metadata = check_metadata(dict(self.session.get_modelmeta().custom_metadata_map), path)
        outputs = [o.name for o in self.session.get_outputs()]
        check_agrees(artifact, self.metadata, outputs, path)
        values = parse_metadata(self.metadata, path)
        check_copy_agrees(artifact, values, path)
        self.classes = values["classes"]
        self.threshold = values["threshold"]
        self.max_length = values["max_length"]
        self.pad_id = values["pad_token_id"]
        self.batch_size = batch_size
        self.name = name or f"onnx:{self.export_dir.name}:{variant}"
        self.tokenizer = self._tokenizer(artifact)
        self.provider = self.session.get_providers()[0]
        # Side features (names + scaling) when the gate was trained with them; older exports
        # have no such key and take text only.
        self.side_features = features_from_dict(
            json.loads(self.metadata.get("side_features", "null"))
        )

    def _tokenizer(self, artifact: Artifact) -> Tokenizer:
        path = self.export_dir / EXPORT_TOKENIZER
        if not path.is_file():
            raise DataError("export has no tokenizer.json (re-export the checkpoint)", path)
        artifact.verified_sha256(EXPORT_TOKENIZER)  # another model's tokenizer: refused
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001  (tokenizers raises a bare Exception)
            raise DataError(f"not a readable tokenizer file ({first_line(e)}); "
                            "re-export the run (`retrieval-gate export --run RUN`)", path) from None  # fmt: skip
        tok.enable_truncation(self.max_length)
        tok.no_padding()  # padding is done per length bucket (EncoderGate.score_texts)
        return tok

    def _session(self, path: Path, provider: str | None, threads: int | None) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # One request at a time is the serving pattern: sequential execution, a fixed pool.
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        providers = select_providers(ort.get_available_providers(), provider)
        try:
            return ort.InferenceSession(str(path), options, providers=providers)
        except Exception as e:  # noqa: BLE001  (ORT raises its own types for damaged files)
            raise DataError(f"not a loadable ONNX file ({first_line(e)})", path) from None

    @property
    def device(self) -> str:
        """The execution provider actually used (see `OnDevice`)."""
        return self.provider

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        # cut first: the tokenizer reads a whole text before it truncates (`EncoderGate.clip`)
        return [e.ids for e in self.tokenizer.encode_batch(self.clip(texts))]

    def run_batch(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None,
        output: str = "scores",
    ) -> np.ndarray:  # fmt: skip
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if self.side_features is not None:
            feeds["features"] = features
        return self.session.run([output], feeds)[0].astype(np.float32)


class OnnxRouter(RoutingMixin, OnnxGate):
    """A router's export: `strategy_proba` is the graph's second output, the calibration
    (strategies, costs, budget -> price) its `router` metadata (`gates.strategy_routers.RoutingMixin`)."""

    def __init__(self, export_dir: str | Path, variant: str = "fp32", **kw: Any):
        super().__init__(export_dir, variant, **kw)
        if "router" not in self.metadata:
            raise DataError("this ONNX file has no `router` metadata: not a router export "
                            "(re-export the router run)", self.path)  # fmt: skip
        try:
            self.calibration = Calibration.from_dict(parse_json(self.metadata["router"]))
        except (json.JSONDecodeError, InputError) as e:
            raise DataError(
                f"ONNX metadata router is unreadable ({e}); re-export", self.path
            ) from None
        self.strategies = self.calibration.strategies
        check_calibration_agrees(self.artifact, self.calibration, self.path)

    def _proba_batch(
        self, input_ids: np.ndarray, mask: np.ndarray, features: np.ndarray | None
    ) -> np.ndarray:
        return self.run_batch(input_ids, mask, features, ROUTER_OUTPUT)

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        texts, features = self.features_of(questions)
        return self.batched(self._proba_batch, texts, features, (len(self.strategies),))


def check_agrees(artifact: Artifact, meta: dict[str, str], outputs: Sequence[str], path: Path) -> None:  # fmt: skip
    """The ONNX file against its folder's manifest: a router's file has the `router` key and
    the strategy_proba output, a gate's neither; the task the same. A file copied in from
    another export is refused, never read as the other kind."""
    task = TASK_OF.get(meta.get("task", ""), artifact.task)  # exports before /2 lack `task`
    has = {"router": "router" in meta, ROUTER_OUTPUT: ROUTER_OUTPUT in outputs}
    wrong = [f"metadata {k}" if k == "router" else f"output {k}" for k, there in has.items()
             if there != artifact.is_router]  # fmt: skip
    if task != artifact.task or wrong:
        what = "lacks" if artifact.is_router else "has"
        detail = f"{what} the router's {' and '.join(wrong)}" if wrong else f"its task is {task}"
        raise DataError(f"{artifact.source.name} says task {artifact.task!r}, but this ONNX file "
                        f"{detail}; re-export (`retrieval-gate export --run RUN`)", path)  # fmt: skip


def check_copy_agrees(artifact: Artifact, values: dict[str, Any], path: Path) -> None:
    """The export's JSON copy of the metadata against the ONNX file's parsed `values`: a hand
    edit of the copy alone (a threshold of 0.9) was silently ignored."""
    for key in ("threshold", "max_length", "classes"):
        said = artifact.metadata.get(key, values[key])
        if said != values[key]:
            fix = (
                "for another threshold set it when scoring (gate.threshold = ..., or "
                "--threshold of score, serve, rag) or tune the run and re-export it"
                if key == "threshold"
                else "re-export it (`retrieval-gate export --run RUN`)"
            )
            raise DataError(f"{EXPORT_METADATA} says {key} {clipped(repr(said))}, but this ONNX "
                            f"file's metadata says {values[key]!r}, which scoring uses: the "
                            f"folder was edited; {fix}", path)  # fmt: skip


def check_calibration_agrees(artifact: Artifact, calibration: Calibration, path: Path) -> None:
    """A router's calibration in the folder's JSON files (manifest.json, which must match
    gate_metadata.json) against the ONNX file's, which routing uses: costs or a default budget
    edited in both files were silently ignored."""
    copy = artifact.router
    if copy is None:
        return
    for key in ("strategies", "costs", "default_budget", "default_price", "objective"):
        ours, theirs = getattr(copy, key), getattr(calibration, key)
        if ours != theirs:
            raise DataError(f"{MANIFEST} says the router's {key} {clipped(repr(ours))}, but this "
                            f"ONNX file's metadata says {clipped(repr(theirs))}, which routing "
                            "uses: the folder was edited; for another operating point pass a "
                            "budget (route(budget=...), --budget), or tune the run and "
                            "re-export it", path)  # fmt: skip


def open_onnx(export_dir: str | Path, variant: str = "fp32", **kw: Any) -> OnnxGate:
    """The gate of an export folder: an `OnnxRouter` for a router export (its manifest's
    task), else an `OnnxGate`."""
    cls = OnnxRouter if open_artifact(export_dir, "export").is_router else OnnxGate
    return cls(export_dir, variant, **kw)
