"""Generators (vLLM, transformers), the paper prompts and model preparation.

`build_generator("smollm2-135m-instruct")` prepares the bundled model on first use and returns
a vLLM generator when vLLM imports, else a transformers one; any local folder or hub name
works in its place."""

from __future__ import annotations

import importlib.util
from typing import Any

from ..errors import ConfigError
from .base import Generation, Generator
from .model_folders import generator_name, prepare_smollm2, resolve_generator_model

BACKENDS = ("auto", "vllm", "transformers")


def build_generator(name_or_path: str, backend: str = "auto", **kwargs: Any) -> Generator:
    """A `Generator` for a model name or folder. `backend="auto"` picks vLLM when it is
    installed (one batched engine call per method), else transformers."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown generator backend {backend!r}; choose one of {BACKENDS}")
    model = resolve_generator_model(name_or_path)
    name = generator_name(name_or_path, model)
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") else "transformers"
    if backend == "vllm":
        from .vllm_backend import VLLMGenerator

        return VLLMGenerator(model, name=name, **kwargs)
    from .hf_backend import TransformersGenerator

    return TransformersGenerator(model, name=name, **kwargs)


__all__ = ["BACKENDS", "Generation", "Generator", "build_generator", "prepare_smollm2"]
