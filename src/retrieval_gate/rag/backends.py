"""The generator and retriever a RAG run or the service uses, from command-line choices.

Scale-out uses vLLM's own knobs: tensor parallelism is passed to the in-process engine;
`--generator-url` points at an OpenAI-compatible vLLM server instead, which is also where data
parallelism lives (vLLM refuses `LLM(data_parallel_size>1)` in one process)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from ..errors import ConfigError
from ..gates.base import Gate
from ..gates.registry import needing
from ..generation.base import Generator
from ..generation.fit import check_room
from ..models import SMOLLM2
from ..retrieval.base import Retriever
from .cascade import CASCADE, check_logprobs
from .loop import DEFAULT_K, DEFAULT_MAX_NEW_TOKENS, AdaptiveRAG
from .modes import ModeOptions, build_gates_then_engine, build_mode_gates, check_modes
from .multistep import MultiStepConfig


def check_answers_readable(generator: Generator, generator_options: dict[str, Any]) -> None:
    """The cascade's generator returns log-probabilities (`cascade.check_logprobs`), the
    error naming the option that chose it: `--generator-url`, else `--model`."""
    check_logprobs(generator, "--generator-url" if generator_options.get("generator_url")
                   else "--model")  # fmt: skip


def open_generator(
    generator_url: str | None = None,
    model: str | None = None,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    deadline: float | None = None,
) -> Generator:
    """The remote server at `generator_url` when given, else the local vLLM engine (SmolLM2 by
    default) with the requested parallelism; either behind the generation cache
    (`generation/cache.py`: the local engine starts on the first cache miss). `deadline`: the
    seconds a request to the server may take, retries included (`serve`'s --request-timeout:
    a server that took requests and never answered held the engine 20 minutes a call)."""
    from ..generation.cache import cached, lazy_generator

    check_engine(generator_url, model, tensor_parallel_size, data_parallel_size)
    if generator_url:
        from ..generation.endpoints import server_key
        from ..generation.remote import RemoteGenerator

        remote = RemoteGenerator(generator_url, model, api_key=server_key(), deadline=deadline)
        return cached(remote)
    engine: dict[str, Any] = {}
    if tensor_parallel_size > 1:
        engine["tensor_parallel_size"] = tensor_parallel_size
    return lazy_generator(model or SMOLLM2, **engine)


def _is_http_url(text: str) -> bool:
    """An http(s) URL with a host and, if any, a port that is a number from 0 to 65535."""
    try:
        url = urlparse(text)
        url.port  # noqa: B018 (a port that is no number, or past 65535, raises)
    except ValueError:  # also a '[' left open
        return False
    return url.scheme in ("http", "https") and bool(url.hostname)


def check_engine(
    generator_url: str | None = None,
    model: str | None = None,
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
) -> None:
    """The engine's options, before it starts (`open_generator` and the verbs' plans): counts
    of at least 1, data parallelism only through a server, an http(s) server URL, and a model
    named by a path that is a folder."""
    for flag, value in (("--tensor-parallel-size", tensor_parallel_size),
                        ("--data-parallel-size", data_parallel_size)):  # fmt: skip
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    if generator_url:
        if not _is_http_url(generator_url):
            raise ConfigError(f"--generator-url {generator_url!r}: give the server's http(s) "
                              "URL, e.g. http://localhost:8000/v1")  # fmt: skip
        from ..generation.endpoints import check_base_url  # httpx: only with a server

        check_base_url(generator_url)
        return
    if data_parallel_size > 1:
        raise ConfigError(
            f"--data-parallel-size {data_parallel_size} needs a vLLM server (vLLM's in-process "
            "engine has no data parallelism): start `python -m vllm.entrypoints.openai.api_server "
            f"--model MODEL --data-parallel-size {data_parallel_size}` and pass --generator-url "
            "http://HOST:PORT/v1"
        )
    if model:
        from ..generation.model_folders import check_model_folder

        check_model_folder(model)


def open_retriever(kind: str, corpus: str | None = None) -> Retriever:
    """`contexts`: each question's own documents; `bm25` / `dense`: over `corpus` (a file of
    rows), by default every document shipped with the datasets."""
    from ..retrieval import build_retriever, load_corpus

    return build_retriever(kind, None if kind == "contexts" else load_corpus(corpus))


def open_gate(gate: str, mode_options: ModeOptions | None = None) -> Gate:
    """The gate of mode `gate` alone (`router`: the export of `--router`), for a gate-only
    service: no generator is started, so the gates that ask the generator are refused."""
    if needing("generator", [gate]):
        raise ConfigError(
            f"the {gate} gate asks the generator, which gate-only serving does not start: "
            "serve it with --mode answer, or pick a gate such as onnx"
        )
    # a gate alone retrieves nothing: its strategies need no retriever here
    mode_options = replace(mode_options or ModeOptions(), retriever=None)
    check_modes([gate], mode_options)
    (built,) = build_mode_gates([gate], None, mode_options).values()
    return built


def open_rag(
    gate: str,
    retriever: str = "bm25",
    corpus: str | None = None,
    k: int = DEFAULT_K,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    mode_options: ModeOptions | None = None,
    multi_step: MultiStepConfig | None = None,
    **generator_options: Any,
) -> AdaptiveRAG:
    """An `AdaptiveRAG` with the gate of mode `gate` (ONNX for a shipped service; `router`:
    the export of `--router`, at `--budget` by default; `cascade`: that router with the
    two-stage gate of `--answer-gate` reading its closed-book answers)."""
    mode_options = mode_options or ModeOptions()
    check_modes([gate], mode_options)
    ret = open_retriever(retriever, corpus)  # a bad --corpus fails before the engine starts

    def started() -> Generator:
        generator = open_generator(**generator_options)
        check_room(generator, max_new_tokens)
        engine = getattr(generator, "engine", None)
        if callable(engine):  # a service starts its engine now, not on its first request's miss
            engine()
        return generator

    # a gate that does not ask the generator loads (or fails) before the engine starts
    gates, generator = build_gates_then_engine([gate], started, mode_options)
    if gate == CASCADE:  # it reads answers' log-probabilities: asked once, before serving
        check_answers_readable(generator, generator_options)
    return AdaptiveRAG(gates[gate], ret, generator, k, max_new_tokens, multi_step=multi_step,
                       budget=mode_options.budget, strategies=mode_options.strategies)  # fmt: skip
