"""What runs inside Ray Data for labelling: the chat-request stage over OpenAI-compatible
endpoints (a pool of Ray actors, each with a bounded number of requests in flight), and the
vLLM-engine processor of `ray.data.llm` for GPU clusters. Rows in: `row_id`, `prompt`,
`max_tokens`, `logprobs`; rows out: `row_id`, `text`, `prompt_tokens`, `completion_tokens`,
`token_logprobs` (empty without), `error` (empty when the request succeeded), `attempts`, `actor`,
`t_done`, `template` (the chat-template arguments a server was asked with, as JSON; "" none).

This module imports no Ray at import time and nothing heavy (the actors import it)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .chat import THINKING_OFF
from .endpoints import EndpointPool

ROW_FIELDS = ("row_id", "prompt", "max_tokens", "logprobs")


class HttpChatActor:
    """A Ray Data callable class: one instance per actor, `in_flight` requests at a time.
    Requests that keep failing come back with their `error` set (never an exception: one bad
    row must not fail the job)."""

    def __init__(self, urls: list[str], model: str, in_flight: int = 1, **pool_options: Any):
        self.in_flight = in_flight
        self.actor = f"{socket.gethostname()}:{os.getpid()}"
        start = os.getpid() % len(urls)  # actors start on different endpoints
        self.pool = EndpointPool(urls, model, start=start, connections=in_flight, **pool_options)
        self._threads = ThreadPoolExecutor(max_workers=in_flight)

    def _one(self, row: tuple[str, str, int, bool]) -> dict[str, Any]:
        row_id, prompt, max_tokens, logprobs = row
        r = self.pool.chat(str(prompt), int(max_tokens), bool(logprobs))
        return {
            "row_id": str(row_id),
            "text": r.text,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "token_logprobs": r.token_logprobs or [],  # columns hold no None: Arrow/NumPy
            "error": r.error or "",  # would turn an all-None column into NaN
            "attempts": r.attempts,
            "actor": self.actor,
            "t_done": time.time(),
            "template": json.dumps(r.template, sort_keys=True) if r.template else "",
        }

    def __call__(self, batch: dict[str, Sequence[Any]]) -> dict[str, list[Any]]:
        rows = list(zip(*(batch[k] for k in ROW_FIELDS), strict=True))
        done = list(self._threads.map(self._one, rows))
        return {k: [d[k] for d in done] for k in done[0]} if done else {}


def vllm_request(row: dict[str, Any]) -> dict[str, Any]:
    """preprocess of the vLLM-engine processor: the chat message and greedy sampling."""
    params: dict[str, Any] = {"temperature": 0.0, "max_tokens": int(row["max_tokens"])}
    if row["logprobs"]:
        params["logprobs"] = 0  # the sampled token's log-probability only
    return {
        "row_id": row["row_id"],
        "messages": [{"role": "user", "content": row["prompt"]}],
        "sampling_params": params,
    }


def vllm_result(row: dict[str, Any]) -> dict[str, Any]:
    """postprocess of the vLLM-engine processor: the same columns as `HttpChatActor`."""
    token_logprobs: list[float] = []
    if row.get("logprobs"):
        token_logprobs = [
            float(step[token]["logprob"])
            for step, token in zip(row["logprobs"], row["generated_tokens"], strict=False)
        ]
    return {
        "row_id": row["row_id"],
        "text": row.get("generated_text") or "",
        "prompt_tokens": int(row.get("num_input_tokens") or 0),
        "completion_tokens": int(row.get("num_generated_tokens") or 0),
        "token_logprobs": token_logprobs,
        "error": str(row.get("__inference_error__") or ""),
        "attempts": 1,
        "actor": "vllm-engine",
        "t_done": time.time(),
        "template": "",  # every prompt asked as in-process (`vllm_processor`), which records none
    }


def vllm_processor(model: str, actors: int, batch_size: int, engine_kwargs: dict | None = None):
    """`ray.data.llm`'s vLLM-engine processor (GPU clusters): `actors` engine replicas, each
    `engine_kwargs` (e.g. tensor_parallel_size); a failing row is recorded, not raised."""
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(
        model_source=model,
        engine_kwargs={"enable_prefix_caching": True, **(engine_kwargs or {})},
        concurrency=actors,
        batch_size=batch_size,
        should_continue_on_error=True,
        chat_template_stage=True,
        tokenize_stage=True,
        detokenize_stage=True,
    )
    # the chat template as chat_token_ids applies it in-process: a thinking model answers at once
    return build_processor(config, preprocess=vllm_request, postprocess=vllm_result,
                           builder_kwargs={"chat_template_kwargs": THINKING_OFF})  # fmt: skip


def steady_state(actors: Sequence[str], t_done: Sequence[float]) -> dict[str, float] | None:
    """Requests/s while every actor was working: from the moment the last actor finished its
    first request (actor start-up excluded) to the moment the first actor finished its last
    one (the tail, where actors run out of work, excluded). None when too few requests."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for a, t in zip(actors, t_done, strict=True):
        first[a] = min(first.get(a, t), t)
        last[a] = max(last.get(a, t), t)
    start, end = max(first.values(), default=0.0), min(last.values(), default=0.0)
    inside = sum(start < t <= end for t in t_done)
    if end <= start or inside < 2:
        return None
    return {
        "actors_seen": len(first),
        "requests": inside,
        "seconds": round(end - start, 3),
        "requests_per_second": round(inside / (end - start), 3),
    }
