"""Shared fixtures.

`vllm_generator` (session scope) starts ONE real vLLM-CPU engine with SmolLM2-135M-Instruct
for the whole test session (about 25-40 s on 2 cores) and every test that asks for it reuses
it. It is built through `retrieval_gate.generation.build_generator(..., backend="vllm")`, so
it is exactly what the CLI runs: chat template inside, `generate(prompts, max_new_tokens,
logprobs)` and `choice_probs(prompts, choices)`, `.tokenizer`, `.llm` (the `vllm.LLM`),
`.name`, `.checksum`. The engine core runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`):
pytest has no `if __name__ == "__main__":` guard for vLLM's spawned processes. A smaller KV
cache (1 GiB) and context (2,048 tokens) keep its memory low beside other test processes.
The model folder is prepared on first use (`retrieval-gate models prepare`, cached)."""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vllm_generator():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # numba (loaded by BM25 and many user programs) used to stop vLLM from starting
    # (generation.vllm_backend._llvmlite_hidden): load it first, so every run checks the fix.
    with contextlib.suppress(ImportError):
        import numba  # noqa: F401
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from retrieval_gate.generation import build_generator

    generator = build_generator("smollm2-135m-instruct", backend="vllm", max_model_len=2048)
    yield generator
    del generator  # frees the engine and its KV cache at session end
    gc.collect()


@pytest.fixture(scope="session")
def minilm_gate_dirs(tmp_path_factory):
    """(run folder, export folder) of a MiniLM gate trained for 2 batches, threshold 0.42:
    shared by the RetrievalGate and install tests (one training per session)."""
    from tiny_backbones import minilm_gate

    return minilm_gate(tmp_path_factory.mktemp("minilm-gate"))


@pytest.fixture(scope="session")
def tiny_onnx_export(tmp_path_factory) -> Path:
    """A tiny randomly initialised RoBERTa gate, trained 3 batches and exported (fp32 and int8)
    by the project's exporter: the folder `OnnxGate` loads."""
    from retrieval_gate.export.onnx import export_gate
    from retrieval_gate.training import train
    from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

    work = tmp_path_factory.mktemp("onnx-gate")
    qs, labels = synthetic_questions()
    label_file = write_label_file(work / "labels.jsonl", labels)
    model = tiny_backbone("roberta", work / "roberta", [q.text for q in qs])
    cfg = tiny_config(label_file, work / "ck", "encoder", str(model), pooling="cls")
    run_dir = train(cfg, questions=qs)
    return export_gate(run_dir, work / "export", variants=("fp32", "int8"))
