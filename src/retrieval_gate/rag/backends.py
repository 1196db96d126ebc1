"""The generator and retriever a RAG run or the service uses, from command-line choices.

Scale-out uses vLLM's own knobs: tensor / data parallelism are passed to the in-process engine,
and `--generator-url` points at an OpenAI-compatible server (`vllm serve ...`) instead."""

from __future__ import annotations

from typing import Any

from ..generation.base import Generator
from ..retrieval.base import Retriever
from .loop import DEFAULT_K, DEFAULT_MAX_NEW_TOKENS, AdaptiveRAG
from .modes import ModeOptions, build_mode_gates

RETRIEVERS = ("context", "bm25", "dense")


def open_generator(
    generator_url: str | None = None,
    model: str | None = None,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
) -> Generator:
    """The remote server at `generator_url` when given, else the local vLLM engine (SmolLM2 by
    default) with the requested parallelism."""
    if generator_url:
        from ..generation.remote import RemoteGenerator

        return RemoteGenerator(generator_url, model)
    from ..generation import build_generator

    engine: dict[str, Any] = {}
    if tensor_parallel_size > 1:
        engine["tensor_parallel_size"] = tensor_parallel_size
    if data_parallel_size > 1:
        engine["data_parallel_size"] = data_parallel_size
    options: dict[str, Any] = {"model": model} if model else {}
    return build_generator(**options, **engine)


def open_retriever(kind: str) -> Retriever:
    """`context`: each question's own documents; `bm25` / `dense`: over the project corpus
    (every document shipped with the datasets)."""
    from .. import retrieval

    if kind == "context":
        return retrieval.ContextRetriever()
    if kind not in RETRIEVERS:
        raise ValueError(f"unknown retriever {kind!r}; choose one of {', '.join(RETRIEVERS)}")
    corpus = retrieval.load_corpus()
    return retrieval.BM25Retriever(corpus) if kind == "bm25" else retrieval.DenseRetriever(corpus)


def open_rag(
    gate: str,
    retriever: str = "bm25",
    k: int = DEFAULT_K,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    mode_options: ModeOptions | None = None,
    **generator_options: Any,
) -> AdaptiveRAG:
    """An `AdaptiveRAG` with the gate of mode `gate` (ONNX for a shipped service)."""
    generator = open_generator(**generator_options)
    (built,) = build_mode_gates([gate], generator, mode_options or ModeOptions()).values()
    return AdaptiveRAG(built, open_retriever(retriever), generator, k, max_new_tokens)
