"""A trained gate (any backbone, LoRA merged) -> one ONNX graph + tokenizer + metadata, and the
optimised variants: `opt` (ORT graph optimisation / transformer fusions), `int8` (dynamic
quantisation, CPU) and `fp16` (GPU).

An export folder is written whole: everything goes into a staging folder beside it, renamed
into place at the end (`fileio.staged_folder`), so a crash or a kill mid-export leaves the
previous export (or none), never half of one."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from .. import __version__
from ..data.errors import DataError
from ..fileio import staged_folder, write_bytes
from ..gates.onnx_format import FORMAT, VARIANTS
from ..training.checkpoint import load_run, read_run_json

OPSET = 17
# Encoders the ORT transformer optimiser knows how to fuse (attention, layer norm, GELU).
FUSABLE = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "distilbert": "bert"}


class GateGraph(nn.Module):
    """(input_ids, attention_mask) -> (scores = P(needs retrieval), probs over classes)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.backbone = module.backbone.merged()
        self.head = module.head

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = self.backbone(input_ids, attention_mask).float()
        if features is not None:  # side features: the graph's third input
            pooled = torch.cat([pooled, features], dim=-1)
        probs = self.head(pooled).softmax(-1)
        return 1.0 - probs[:, 0], probs


def gate_metadata(
    run_dir: Path, meta: dict[str, Any], tokenizer: Any, side_features: dict | None = None
) -> dict[str, str]:
    labels = read_run_json(run_dir / "labels.json")
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
    }


def set_metadata(path: Path, props: dict[str, str]) -> None:
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(path))


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
    axes = {"input_ids": dynamic, "attention_mask": dynamic, "scores": {0: "batch"},
            "probs": {0: "batch"}}  # fmt: skip
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
            output_names=["scores", "probs"],
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


def quantise_int8(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The fused graph holds contrib ops ONNX shape inference cannot type; they are float32.
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def to_fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))


# What an export writes besides the tokenizer's own files; anything else found in an older export
# folder is the user's and is carried into the new one.
EXPORT_FILES = (*VARIANTS.values(), "gate_metadata.json", "parity.json", "README.md")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                   "chat_template.jinja")  # fmt: skip


def check_export_target(out_dir: Path, variants: Sequence[str]) -> None:
    """Refuses unknown variants and a non-empty folder that is not an export."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise DataError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
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
    """Links what the user put into an older export folder (not an export's own file) into the
    new one, so replacing the folder removes only what an export wrote."""
    if not old.is_dir():
        return
    for entry in old.iterdir():
        if entry.name in EXPORT_FILES or entry.name in TOKENIZER_FILES:
            continue
        if (stage / entry.name).exists():
            continue
        if entry.is_dir():
            shutil.copytree(entry, stage / entry.name, copy_function=os.link, symlinks=True)
        else:
            os.link(entry, stage / entry.name, follow_symlinks=False)


def write_export(run_dir: Path, out_dir: Path, variants: Sequence[str]) -> None:
    """The ONNX files, tokenizer and metadata into the (empty, staging) folder `out_dir`."""
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
    # a new file (umask mode), not shutil.copy, which would carry the run file's mode along
    write_bytes(out_dir / "gate_metadata.json", (run_dir / "metadata.json").read_bytes())
    side = module.side_features
    props = gate_metadata(run_dir, meta, tokenizer, side.to_dict() if side else None)
    export_fp32(module, tokenizer, paths["fp32"], int(meta["max_length"]))
    if "opt" in variants or "int8" in variants:
        optimise(paths["fp32"], paths["opt"], hf_config)
    if "int8" in variants:
        quantise_int8(paths["opt"], paths["int8"])
    if "fp16" in variants:
        to_fp16(paths["fp32"], paths["fp16"])
    for variant, path in paths.items():
        if path.is_file():
            set_metadata(path, {**props, "variant": variant})


def export_gate(
    run_dir: str | Path,
    out_dir: str | Path,
    variants: Sequence[str] = ("fp32", "opt", "int8"),
) -> Path:
    """Writes `out_dir/{model*.onnx, tokenizer files}` whole (an older export there is
    replaced, the user's own files in it kept); returns out_dir. fp32 is always made (it is the
    reference the other variants are checked against)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    check_export_target(out_dir, variants)
    with staged_folder(out_dir) as stage:
        write_export(run_dir, stage, variants)
        keep_users_files(out_dir, stage)
    return out_dir
