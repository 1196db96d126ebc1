"""A trained gate (any backbone, LoRA merged) -> one ONNX graph + tokenizer + metadata, and the
optimised variants: `opt` (ORT graph optimisation / transformer fusions), `int8` (static
quantisation, CPU) and `fp16` (GPU).

int8 is static: weights per output channel, their inputs with scales fixed at export, measured
on dev-split questions of the run (`calibration`). A question's int8 score then does not depend
on its batch-mates (dynamic quantisation computed the scales over the whole batch tensor, so a
score moved by up to 0.06 with the questions beside it), and padding cannot change a row: a
padded key gets an attention weight of exactly 0 (float32 softmax), so it adds nothing.

An export folder is written whole: everything goes into a staging folder beside it, renamed
into place at the end (`fileio.staged_folder`), so a crash or a kill mid-export leaves the
previous export (or none), never half of one."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from .. import __version__
from ..artifacts import (
    EXPORT_FILES,
    EXPORT_TOKENIZER,
    TOKENIZER_FILES,
    export_manifest,
)
from ..errors import DataError
from ..fileio import refuse_link, sha256_file, staged_folder, write_json
from ..gates.onnx_format import FORMAT, ROUTER_OUTPUT, VARIANTS
from ..training.checkpoint import load_run, read_provenance
from .parity import calibration_set

log = logging.getLogger(__name__)

OPSET = 17
# Encoders the ORT transformer optimiser knows how to fuse (attention, layer norm, GELU).
FUSABLE = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert"}


class GateGraph(nn.Module):
    """(input_ids, attention_mask[, features]) -> (scores = P(needs retrieval), probs over
    classes); for a router the second output is P(correct | strategy), one sigmoid head a
    strategy. The trained module's own forward, LoRA merged into the body."""

    def __init__(self, module: nn.Module):
        super().__init__()
        module.backbone = module.backbone.merged()
        self.module = module
        self.routes = module.task.routes  # a router: its second output is P(correct | strategy)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.module(input_ids, attention_mask, features)
        probs = self.module.probabilities(logits)
        return 1.0 - probs[:, 0], probs


def gate_metadata(
    run_dir: Path, meta: dict[str, Any], tokenizer: Any, side_features: dict | None = None
) -> dict[str, str]:
    labels = read_provenance(run_dir)
    return {
        "format": FORMAT,
        "classes": json.dumps(meta["classes"]),
        "score": meta["score"],
        "threshold": repr(float(meta.get("threshold", 0.5))),
        "threshold_objective": str(meta.get("objective", "default 0.5 (not tuned)")),
        "max_length": str(meta["max_length"]),
        "pad_token_id": str(tokenizer.pad_token_id),
        "backbone": meta["backbone"],
        "model_name": str(meta["model_name"]),
        # in-memory labels stay in the run's labels.json: the ONNX files carry their checksum
        "label_provenance": json.dumps(
            {k: v for k, v in labels.items() if k != "labels"}, sort_keys=True
        ),
        "package_version": __version__,
        "run": run_dir.name,
        "task": meta["task"],
        "side_features": json.dumps(side_features),
        # a router's strategies, costs and budget calibration (format /2; absent for gates)
        **({"router": json.dumps(meta["router"])} if "router" in meta else {}),
    }


def set_metadata(path: Path, props: dict[str, str]) -> None:
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(path))


class Progress:
    """`note: export: <step> [elapsed]` before each step: an export takes tens of seconds."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def step(self, what: str) -> None:
        log.info(f"export: {what} [{time.perf_counter() - self.start:.0f} s]")


@contextmanager
def library_warnings_hidden() -> Iterator[None]:
    """The tracer's and the quantiser's warnings speak of their internals, not of the user's
    gate (the parity check tells whether the export is right): hidden, unless -v. ONNX
    Runtime's quantiser warns through the root logger, whose first use would also install a
    root handler (logging.basicConfig) that prints every later note twice: a NullHandler
    stands in for the duration."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    root = logging.getLogger()
    stand_in, level = logging.NullHandler(), root.level
    root.addHandler(stand_in)
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)
        root.removeHandler(stand_in)


def export_fp32(module: nn.Module, tokenizer: Any, path: Path, max_length: int) -> None:
    graph = GateGraph(module).eval()
    sample = tokenizer(
        ["Who wrote Hamlet?", "What is the capital city of a country with a long name?"],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    dynamic = {0: "batch", 1: "sequence"}
    args = (sample["input_ids"], sample["attention_mask"])
    names = ["input_ids", "attention_mask"]
    second = ROUTER_OUTPUT if graph.routes else "probs"
    axes = {"input_ids": dynamic, "attention_mask": dynamic, "scores": {0: "batch"},
            second: {0: "batch"}}  # fmt: skip
    if module.n_side:  # side features: (batch, 2 * n_features) float32, scaled as in metadata
        args = (*args, torch.zeros(2, module.n_side))
        names.append("features")
        axes["features"] = {0: "batch"}
    with torch.inference_mode():
        torch.onnx.export(
            graph,
            args,
            str(path),
            input_names=names,
            output_names=["scores", second],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def optimise(src: Path, dst: Path, hf_config: Any) -> None:
    """Transformer fusions for BERT-like encoders; ORT's extended graph optimisation (constant
    folding, redundant-node elimination) for the rest."""
    model_type = FUSABLE.get(getattr(hf_config, "model_type", ""))
    if model_type:
        from onnxruntime.transformers.optimizer import optimize_model

        optimized = optimize_model(
            str(src),
            model_type=model_type,
            num_heads=int(hf_config.num_attention_heads),
            hidden_size=int(hf_config.hidden_size),
            opt_level=1,
        )
        optimized.save_model_to_file(str(dst))
        return
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])


def calibration_feeds(
    tokenizer: Any, texts: Sequence[str], features: np.ndarray | None, max_length: int
) -> Iterator[dict[str, np.ndarray]]:
    """One unpadded question per feed (batch 1): the ranges are those of real tokens."""
    for i, text in enumerate(texts):
        enc = tokenizer([text], truncation=True, max_length=max_length, return_tensors="np")
        feed = {"input_ids": enc["input_ids"].astype(np.int64),
                "attention_mask": enc["attention_mask"].astype(np.int64)}  # fmt: skip
        if features is not None:
            feed["features"] = np.asarray(features[i : i + 1], dtype=np.float32)
        yield feed


def kept_float(model: onnx.ModelProto) -> list[str]:
    """Nodes int8 leaves in float32: MatMuls with no weight among their inputs (attention's
    query x key and probabilities x value), and the head's (a few thousand multiply-adds,
    where quantising adds a quantise/dequantise pair per layer and moved routes)."""
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    return [n.name for n in model.graph.node
            if "/head/" in n.name
            or (n.op_type == "MatMul" and not any(i in constants for i in n.input))]  # fmt: skip


def quantise_int8(src: Path, dst: Path, feeds: Iterator[dict[str, np.ndarray]]) -> None:
    """Static QDQ int8 of the plain fp32 graph: every MatMul/Gemm with a weight in the body
    (projections, feed-forward); weights per output channel, uint8 inputs with min-max ranges
    from `feeds`. The attention products of two activations, LayerNorm, softmax, GELU, the
    head and the embedding tables stay float32 (quantising the attention products too cost
    ~15% speed, no accuracy; an int8 embedding table cut the file by 35 MB, not its time, and
    moved the shipped router's AUROC by 0.012, past the int8 bar)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul", "Gemm"],
        per_channel=True,
        activation_type=QuantType.QUInt8,  # u8 x s8: the fast integer GEMM on x86 and ARM
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        nodes_to_exclude=kept_float(onnx.load(str(src))),
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def to_fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))


def check_export_target(out_dir: Path, variants: Sequence[str]) -> None:
    """Refuses unknown variants, a symbolic link (the export would replace the link, after all
    its work) and a non-empty folder that is not an export."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise DataError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    refuse_link(out_dir, "export folder")
    if (
        out_dir.is_dir()
        and any(out_dir.iterdir())
        and not (out_dir / "gate_metadata.json").is_file()
    ):
        raise DataError(
            "is a non-empty folder that is not an export (no gate_metadata.json); refusing to "
            "write into it: pass another --name or --out-dir",
            out_dir,
        )


def keep_users_files(old: Path, stage: Path) -> None:
    """Carries what the user put into an older export folder (not an export's own file) into
    the new one, so replacing the folder removes only what an export wrote: a symbolic link as
    the same link (never a copy of what it points to, which may be on another disk), a file as
    a hard link, or a copy where the file system refuses one. What cannot be carried is a
    DataError naming it, the old export left as it was."""
    if old.is_symlink() or not old.is_dir():
        return
    for entry in old.iterdir():
        if entry.name in EXPORT_FILES or entry.name in TOKENIZER_FILES:
            continue
        dest = stage / entry.name
        if os.path.lexists(dest):
            continue
        try:
            if entry.is_symlink():  # copytree would copy the folder it points to
                os.symlink(os.readlink(entry), dest)
            elif entry.is_dir():
                shutil.copytree(entry, dest, symlinks=True, copy_function=_link_or_copy)
            else:
                _link_or_copy(entry, dest)
        except OSError as e:  # shutil.Error (copytree's list of failures) is one too
            said = (f"cannot carry this file of yours into the new export ({_why(e)}); "
                    f"move it out of {old}, then export again")  # fmt: skip
            raise DataError(said, entry) from None


def _link_or_copy(src: str | Path, dst: str | Path) -> str | Path:
    """A hard link (instant, no space); a copy where the file system refuses one (another
    device mounted inside the folder, another user's file under protected_hardlinks)."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


def _why(error: OSError) -> str:
    """An OSError's reason in a few words: copytree's shutil.Error holds a list of
    (source, destination, reason) for every file that failed: the first one's."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        src, _, why = error.args[0][0]
        return f"{src}: {why}"
    return error.strerror or str(error) or type(error).__name__


def write_export(
    run_dir: Path,
    out_dir: Path,
    variants: Sequence[str],
    calibration: tuple[Sequence[str], np.ndarray | None] | None = None,
    progress: Progress | None = None,
) -> None:
    """The ONNX files, tokenizer and metadata into the (empty, staging) folder `out_dir`.
    `calibration` = (texts, side features) of dev questions for int8 (default: the run's)."""
    progress = progress or Progress()
    progress.step(f"loading the run {run_dir}")
    module, tokenizer, meta = load_run(run_dir)
    hf_config = module.backbone.hf_config
    if hf_config.model_type in FUSABLE:
        # ORT's attention fusion recognises the eager (matmul-softmax-matmul) pattern, not the
        # SDPA export; same maths, and the parity check below holds it to 1e-4.
        hf_config._attn_implementation = "eager"
    paths = {v: out_dir / VARIANTS[v] for v in VARIANTS}
    tokenizer.save_pretrained(out_dir)
    if not (out_dir / "tokenizer.json").is_file():
        raise DataError("the tokenizer has no fast (tokenizer.json) version to export", run_dir)
    # the run's metadata without its calibration questions (they stay in the run folder)
    write_json(
        out_dir / "gate_metadata.json", {k: v for k, v in meta.items() if k != "calibration"}
    )
    side = module.side_features
    props = gate_metadata(run_dir, meta, tokenizer, side.to_dict() if side else None)
    with library_warnings_hidden():
        progress.step("fp32 ONNX graph (tracing the model)")
        export_fp32(module, tokenizer, paths["fp32"], int(meta["max_length"]))
        if "opt" in variants:
            progress.step("opt (ONNX Runtime fusions)")
            optimise(paths["fp32"], paths["opt"], hf_config)
        if "int8" in variants:
            texts, features = calibration or calibration_set(run_dir)
            progress.step(f"int8 (static, scales calibrated on {len(texts)} dev questions)")
            feeds = calibration_feeds(tokenizer, texts, features, int(meta["max_length"]))
            quantise_int8(paths["fp32"], paths["int8"], feeds)
        if "fp16" in variants:
            progress.step("fp16")
            to_fp16(paths["fp32"], paths["fp16"])
    written = tuple(v for v, path in paths.items() if path.is_file())
    for variant in written:
        set_metadata(paths[variant], {**props, "variant": variant})
    checked = [paths[v] for v in written] + [out_dir / EXPORT_TOKENIZER]
    sums = {path.name: sha256_file(path) for path in checked}  # loading checks them
    export_manifest(meta, out_dir, written, sums).write(out_dir)  # what `open_artifact` reads


def export_gate(
    run_dir: str | Path,
    out_dir: str | Path,
    variants: Sequence[str] = ("fp32", "opt", "int8"),
    calibration: tuple[Sequence[str], np.ndarray | None] | None = None,
) -> Path:
    """Writes `out_dir/{model*.onnx, tokenizer files}` whole (an older export there is
    replaced, the user's own files in it kept); returns out_dir. fp32 is always made (it is the
    reference the other variants are checked against)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_export_target(out_dir, variants)
    with staged_folder(out_dir) as stage:
        write_export(run_dir, stage, variants, calibration)
        keep_users_files(out_dir, stage)
    return out_dir
