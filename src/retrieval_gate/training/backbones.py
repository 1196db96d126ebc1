"""The three backbone kinds, each a module (input_ids, attention_mask) -> one vector a question.

- encoder: any `AutoModel` encoder (BERT/MiniLM, RoBERTa, DeBERTa), full fine-tuning or LoRA.
- t5-lora: `T5EncoderModel` + LoRA. Chosen over T5 generating a label word: a pooled head
  gives a calibrated P(retrieve) from one encoder pass, shares the head/metrics/export path
  with the other backbones, and halves the parameters (no decoder); the label-word variant
  needs a decoder step per question and a verbaliser, and adds nothing a head cannot learn
  from the same encoder states, so it is not kept.
- decoder-lora: the generator itself (SmolLM2) + LoRA, pooled at the last real token: its
  last hidden state is what the generator "knows" about the question (UAR / probing).

`from_pretrained=False` builds the same architecture from a saved config (checkpoint reload;
the weights come from the checkpoint's state dict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, T5EncoderModel

from ..errors import ConfigError, DataError
from ..models import MINILM, SMOLLM2, resolve_model
from .config import LoraConfig, ModelConfig

KINDS = ("encoder", "t5-lora", "decoder-lora")
BACKBONE_FIX = (f"set model.name to a folder transformers can load, a Hub name, {MINILM} or "
                f"{SMOLLM2}")  # fmt: skip
DEFAULT_POOLING = {"encoder": "mean", "t5-lora": "mean", "decoder-lora": "last"}


def resolve_backbone(name: str) -> str:
    """`minilm` -> bundled folder; `smollm2-135m-instruct` -> the converted safetensors folder
    (issue 3's `prepare_smollm2`); anything else: a local folder or a hub name."""
    if name == SMOLLM2:
        try:
            from ..generation.model_folders import prepare_smollm2
        except ImportError as e:
            raise ConfigError(
                f"model {name!r} needs retrieval_gate.generation.model_folders.prepare_smollm2 "
                "(`retrieval-gate models prepare`); pass a converted folder instead"
            ) from e
        return str(prepare_smollm2())
    folder = resolve_model(name)
    from ..generation.model_folders import check_model_folder, read_config

    check_model_folder(folder, BACKBONE_FIX)  # a damaged folder: named before anything loads
    read_config(folder, BACKBONE_FIX)
    return folder


def load_tokenizer(name_or_path: str | Path) -> Any:
    """The backbone's tokenizer (one that knows words), padding on the right."""
    from ..generation.model_folders import load_tokenizer_checked

    tok = load_tokenizer_checked(name_or_path)
    tok.padding_side = "right"  # last-token pooling and the ONNX graph assume right padding
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def check_max_length(max_length: int, name: str, folder: str | Path, tokenizer: Any) -> None:
    """data.max_length within what the backbone reads: its tokenizer's `model_max_length` (when
    set), else its position embeddings. Past them, the first longer question stopped training
    with a tensor-size traceback."""
    limits = [getattr(tokenizer, "model_max_length", None)]
    try:
        limits.append(getattr(AutoConfig.from_pretrained(str(folder)), "max_position_embeddings",
                              None))  # fmt: skip
    except (OSError, ValueError):  # no config.json: the model's own load says so
        pass
    known = [int(n) for n in limits if isinstance(n, int) and 0 < n < 1_000_000]  # 1e30: unset
    if known and max_length > min(known):
        most = min(known)
        raise ConfigError(f"data.max_length={max_length}: the backbone {name!r} reads at most "
                          f"{most} tokens; set data.max_length to {most} or less")  # fmt: skip


def _build_model(kind: str, source: str | PretrainedConfig, pretrained: bool) -> nn.Module:
    cls = T5EncoderModel if kind == "t5-lora" else AutoModel
    if pretrained:
        return cls.from_pretrained(source)
    return cls.from_config(source) if cls is AutoModel else cls(source)


def _wrap_lora(model: nn.Module, lora: LoraConfig | None, kind: str) -> nn.Module:
    if lora is None:
        if kind != "encoder":
            raise ConfigError(f"backbone {kind!r} needs a model.lora section (r, alpha, ...)")
        return model
    config = getattr(model, "config", None)
    width = getattr(config, "hidden_size", None) or getattr(config, "d_model", None)
    if isinstance(width, int) and lora.r > width:  # r=100000 was killed for memory before one step
        raise ConfigError(f"model.lora.r={lora.r}: the backbone's layers are {width} wide and a "
                          f"rank above that adds only memory; set model.lora.r to {width} or "
                          "less (8 to 64 is usual)")  # fmt: skip
    import peft

    cfg = peft.LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        # None: peft's default for the model type
        target_modules=list(lora.target_modules) if lora.target_modules else None,
        bias="none",
    )
    return peft.get_peft_model(model, cfg)


class Pooler(nn.Module):
    """mean over real tokens, the first token (cls) or the last real token (right padding)."""

    def __init__(self, how: str):
        super().__init__()
        if how not in ("mean", "cls", "last"):
            raise ConfigError(f"model.pooling must be mean, cls or last, got {how!r}")
        self.how = how

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.how == "cls":
            return hidden[:, 0]
        if self.how == "last":
            idx = mask.long().sum(1) - 1
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class Backbone(nn.Module):
    """A transformer body (optionally LoRA-wrapped) and its pooler."""

    def __init__(self, model_cfg: ModelConfig, hf_config: PretrainedConfig | None = None):
        super().__init__()
        kind = model_cfg.backbone
        if kind not in KINDS:
            raise ConfigError(f"model.backbone must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        if hf_config is None:
            body = _build_model(kind, resolve_backbone(model_cfg.name), pretrained=True)
        else:
            body = _build_model(kind, hf_config, pretrained=False)
        self.hf_config = body.config
        # BERT/RoBERTa's own tanh pooler is unused (our Pooler reads last_hidden_state): frozen,
        # it is no "parameter that was not used in producing the loss" for DDP.
        if isinstance(getattr(body, "pooler", None), nn.Module):
            body.pooler.requires_grad_(False)
        self.body = _wrap_lora(body, model_cfg.lora, kind)
        self.pooler = Pooler(model_cfg.pooling or DEFAULT_POOLING[kind])
        self.hidden_size = int(
            getattr(self.hf_config, "hidden_size", None) or self.hf_config.d_model
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.body(input_ids=input_ids, attention_mask=attention_mask)
        return self.pooler(out.last_hidden_state, attention_mask)

    def merged(self) -> Backbone:
        """LoRA folded into the base weights (for export: one plain graph)."""
        if hasattr(self.body, "merge_and_unload"):
            self.body = self.body.merge_and_unload()
        return self


def saved_config(path: Path) -> PretrainedConfig:
    try:
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep
        raise DataError(f"backbone config unreadable ({e})", path) from None
