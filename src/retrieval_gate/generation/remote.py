"""A `Generator` backed by an OpenAI-compatible server (`vllm serve`, or any server speaking
the OpenAI chat-completions API): how the RAG loop scales out beyond one process.

The server does the batching (vLLM's continuous batching across concurrent requests), so a
batch of prompts goes out as concurrent requests over one HTTP connection pool; tensor and data
parallelism are the server's own flags (`vllm serve --tensor-parallel-size N
--data-parallel-size M`). The chat template is applied by the server, as the local backend
applies it in-process. Token counts are the server's own `usage` numbers."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np

from ..errors import BackendError, PromptRefused
from .base import Generation
from .endpoints import (
    ServerTraits,
    answered,
    http_client,
    key_refused,
    listed_models,
    model_root,
    pick_model,
    remote_checksum,
    reply_chat,
    reply_json,
    retry_after,
    timed_out_note,
    waiting_note,
)

RETRIES = 3
RETRY_PAUSE = 1.0  # seconds before the first retry; doubled each time
# Seconds the server has to list its models when the generator opens: a server that took the
# connection and never answered held `rag` and `serve` silent for the 300 s request timeout.
LIST_TIMEOUT = 10.0
# Seconds a prompt refused for good answers with that refusal again, unasked: the labelling loop
# halves a chunk around it, and a poison prompt (a 500 to every retry, 7 s of pauses) was asked
# again at every halving. Only a refusal that is the prompt's is remembered (`_remember`): a
# final 4xx naming the request, or a 500 or a reply with no answer while the server answered
# (or refused so) a prompt batched with it. A refusal of that kind every prompt of its batch got
# is the server's (an outage, a proxy's page): `serve` asked the question again after the
# server came back and got the outage's 503 for a minute, the server unasked.
REFUSAL_MEMORY = 60.0
# The final 4xx that name the request itself (malformed, too large, unprocessable: a prompt past
# the window of a server that counts no tokens): the same request is refused again.
REQUEST_REFUSALS = frozenset({400, 413, 414, 422})


class RequestRefused(PromptRefused):
    """A final 4xx naming the request (REQUEST_REFUSALS): the prompt's whatever else the server
    answers, so remembered for REFUSAL_MEMORY seconds."""


class RemoteGenerator:
    """Generation through `POST {base_url}/chat/completions`, greedy decoding.

    `base_url` ends in `/v1` (e.g. `http://localhost:8000/v1`); `model` defaults to the one
    model the server lists at `/v1/models` (`endpoints.pick_model`); `api_key` goes with every
    request (`rag.backends.open_generator` passes `endpoints.server_key()`). `timeout`: the
    seconds an attempt may wait for an answer; `deadline`: the seconds one request may take,
    its retries included (None: RETRIES + 1 attempts of `timeout` each, 20 minutes for a server
    that takes requests and never answers; `serve` passes its --request-timeout)."""

    # part of the generation cache's key: answers cached before a reasoning model was asked
    # with thinking off (`ServerTraits`) were its reasoning's remains, and choice scores its
    # thinking template's
    asks = "thinking off when it reasons; choices scored with thinking off"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        concurrency: int = 32,
        timeout: float = 300.0,
        deadline: float | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout, self.deadline = timeout, deadline
        self._traits = ServerTraits(self.base_url)  # what the server takes, learned as it goes
        self._refused: dict[tuple[str, int, bool], tuple[float, PromptRefused]] = {}
        self._refused_lock = threading.Lock()  # the request threads share it
        self._keyed = bool(api_key)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._client = http_client(api_key, timeout=timeout, limits=limits)
        self.concurrency = concurrency
        listed = self._listed(required=model is None)
        self.name = pick_model(self.base_url, listed, model)
        entry = listed.get(self.name)
        root = model_root(entry)
        self.checksum = remote_checksum([self.base_url], self.name, root)
        self._root = root
        self._window = self._counted_window(entry)

    @property
    def provenance(self) -> dict[str, Any]:
        """What label files record of the server: the weights behind the name (a resume on
        others is refused) and the chat-template arguments its answers were asked with."""
        return {**({"generator_root": self._root} if self._root else {}),
                **self._traits.template()}  # fmt: skip

    def _post(
        self, path: str, body: dict[str, Any], root: bool = False, chat: bool = False
    ) -> dict[str, Any] | None:
        """One request, retried RETRIES times (with a growing pause, or the longer wait a
        `Retry-After` asks for) when the server cannot be reached or answers 5xx/429 (a
        restarting or overloaded server, a rate limit); a 4xx is final. A final 4xx, a 500 to
        the last attempt or a 200 that is no JSON object is `PromptRefused` (this prompt's: the
        server is up). `root`: a route beside `/v1` (vLLM's `/tokenize`), not under it.
        `chat`: None when the server refused a field it does not take (`ServerTraits.resend`),
        for the caller to send the request again as the server takes it."""
        base = self.base_url.removesuffix("/v1") if root else self.base_url
        poison = False  # the last attempt got a 500: this prompt's, not a lost connection's
        start, attempts = time.monotonic(), 0
        for attempt in range(RETRIES + 1):
            wait = 0.0  # what a rate limit asks for (`Retry-After`)
            attempts += 1
            try:
                r = self._client.post(f"{base}{path}", json=body, timeout=self._left(start))
            except httpx.HTTPError as e:
                problem = f"cannot reach the generator server at {self.base_url} ({e})"
                poison = False
                if attempt < RETRIES and self._left(start) > RETRY_PAUSE * 2**attempt:
                    timed_out_note(self.base_url, e)  # "asking again": only where it will
            else:
                poison, wait = r.status_code == 500, retry_after(r)
                waiting_note(self.base_url, wait)
                if r.status_code == 200:
                    return reply_json(r, self.base_url)
                refused = key_refused(self.base_url, r.status_code, self._keyed)
                if refused:
                    raise BackendError(refused)
                problem = f"generator server {answered(base + path, r)}"
                if chat and self._traits.resend(r.status_code, r.text, body):
                    return None
                if r.status_code in REQUEST_REFUSALS:
                    raise RequestRefused(problem)
                if r.status_code < 500 and r.status_code != 429:
                    raise PromptRefused(problem)
            pause = max(RETRY_PAUSE * 2**attempt, wait)
            if attempt == RETRIES or self._left(start) <= pause:  # no time for another
                break
            time.sleep(pause)
        failed = PromptRefused if poison else BackendError  # 429/503: busy, not refusing
        within = "" if self.deadline is None else f" within {self.deadline:g} s"
        raise failed(f"{problem} (after {attempts} attempt{'s' * (attempts > 1)}{within})")

    def _left(self, start: float) -> float:
        """The timeout of an attempt begun now, in a request begun at `start`: `timeout`,
        or what is left of `deadline` where that is less."""
        if self.deadline is None:
            return self.timeout
        return max(0.0, min(self.timeout, self.deadline - (time.monotonic() - start)))

    def _listed(self, required: bool = True) -> dict[str, dict[str, Any]]:
        """The models the server lists. A server that does not answer within LIST_TIMEOUT is
        an error even when the model is named (`required` False); else a named model needs no
        list (a server without one, or one that is down while the generation cache holds
        every answer: {})."""
        try:
            return listed_models(self._client, self.base_url, self._keyed, LIST_TIMEOUT)
        except httpx.TimeoutException as e:
            what = ("did not take the connection" if isinstance(e, httpx.ConnectTimeout)
                    else "took the connection but did not list its models")  # fmt: skip
            raise BackendError(f"the generator server at {self.base_url} {what} within "
                               f"{LIST_TIMEOUT:g} s: is it starting, or stuck?") from None  # fmt: skip
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
            if not required:
                return {}
            raise BackendError(
                f"could not list models at {self.base_url}/models ({e}); is --generator-url an "
                "OpenAI-compatible server ending in /v1 (e.g. http://localhost:8000/v1)?"
            ) from e

    def _counted_window(self, entry: dict[str, Any] | None) -> int | None:
        """The model's context window where the server lists it (vLLM's `max_model_len`) and
        counts a chat prompt's tokens as it will feed them (vLLM's `/tokenize`, beside `/v1`):
        then prompts are fitted to the window as the local engine's are. None otherwise: the
        server fits, or refuses, each prompt itself."""
        window = (entry or {}).get("max_model_len")
        if not isinstance(window, int) or window < 1 or not self.base_url.endswith("/v1"):
            return None
        try:
            self._count("Hello")
        except (BackendError, httpx.HTTPError, KeyError, TypeError, ValueError):
            return None
        return window

    @property
    def context_window(self) -> int:
        if self._window is None:  # not a `WindowedGenerator` then (hasattr is False)
            raise AttributeError("the server does not say its context window or count tokens")
        return self._window

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        """Each prompt's tokens with the chat template applied, counted by the server."""
        return self._map(self._count, list(prompts))

    def _count(self, prompt: str) -> int:
        body = {"model": self.name, "messages": [{"role": "user", "content": prompt}],
                **self._traits.template()}  # fmt: skip
        return int((self._post("/tokenize", body, root=True) or {})["count"])

    def _map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """Concurrent requests so the server can batch them; results in input order. Ctrl-C
        (or an exit) does not wait for the requests under way: a pool's `with` waited for each,
        retries and all (minutes for a server that holds them); the client is closed, so
        they end at their next attempt."""
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(items))))
        try:
            out = list(pool.map(fn, items))
        except BaseException as e:
            pool.shutdown(wait=False, cancel_futures=True)
            if not isinstance(e, Exception):  # KeyboardInterrupt, SystemExit: leaving
                self._client.close()
            raise
        pool.shutdown()
        return out

    def _chat(self, prompt: str, max_new_tokens: int, logprobs: bool) -> Generation:
        """One answer, or the refusal remembered for the same request (`_remember`)."""
        key = (prompt, max_new_tokens, logprobs)
        with self._refused_lock:
            when, refusal = self._refused.get(key, (-REFUSAL_MEMORY, None))
        if refusal is not None and time.monotonic() - when < REFUSAL_MEMORY:
            raise refusal
        answer = self._ask(prompt, max_new_tokens, logprobs)
        answer.finished = time.perf_counter()
        return answer

    def _batch(
        self, prompts: Sequence[str], max_new_tokens: int, logprobs: bool
    ) -> list[Generation | BackendError]:
        """Each prompt's answer, or the error its request failed with, in its place."""

        def one(prompt: str) -> Generation | BackendError:
            try:
                return self._chat(prompt, max_new_tokens, logprobs)
            except BackendError as e:
                return e

        out = self._map(one, list(prompts))
        self._remember([(p, max_new_tokens, logprobs) for p in prompts], out)
        return out

    def _remember(
        self, keys: list[tuple[str, int, bool]], out: list[Generation | BackendError]
    ) -> None:
        """Keeps for REFUSAL_MEMORY seconds the refusals that are their prompts': a final 4xx
        naming the request (`RequestRefused`), or any `PromptRefused` (a 500 to every retry, a
        200 with no answer) while the server answered another prompt of the batch, or refused
        it so (it was up, reading requests). Such a refusal every prompt got is the server's
        (down, or a proxy's page in its place): forgotten, the next request for the prompt asks
        the server again. A lost connection, a timeout, a 429 or 503 is a `BackendError` only,
        never remembered."""
        answered = any(isinstance(g, (Generation, RequestRefused)) for g in out)  # it was up
        now = time.monotonic()
        with self._refused_lock:
            self._refused = {k: v for k, v in self._refused.items()
                             if now - v[0] < REFUSAL_MEMORY}  # fmt: skip
            for key, got in zip(keys, out, strict=True):
                known = self._refused.get(key, (0.0, None))[1] is got  # kept from when it came
                if isinstance(got, PromptRefused) and not known:
                    if answered or isinstance(got, RequestRefused):
                        self._refused[key] = (now, got)

    def _ask(self, prompt: str, max_new_tokens: int, logprobs: bool) -> Generation:
        """One answer, asked as the server was seen to take it (`ServerTraits`: without the
        log-probabilities it refuses, with thinking off for a model that reasons)."""
        while True:  # a pass that gets no answer learned a trait of the server's
            body = self._traits.body(self.name, prompt, max_new_tokens, logprobs)
            out = self._post("/chat/completions", body, chat=True)
            answer = None if out is None else reply_chat(out, body, self._traits)
            if answer is not None:
                return answer

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]:
        out = self._batch(prompts, max_new_tokens, logprobs)
        failed = next((g for g in out if isinstance(g, BackendError)), None)
        if failed is not None:  # the first in the prompts' order, as a pool's map raises
            raise failed
        return out  # type: ignore[return-value]

    def try_generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation | BackendError]:
        """As `generate`, but a request that fails (after its retries) gives its error in its
        place instead of failing the batch (`generation.base.PartialGenerator`)."""
        return self._batch(prompts, max_new_tokens, logprobs)

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        """P(choice | prompt) normalised over `choices`, scoring each whole choice as the
        assistant's reply: log P = sum of the server's prompt log-probabilities of the choice
        tokens (vLLM's `prompt_logprobs` with `continue_final_message`)."""
        jobs = [(p, c) for p in prompts for c in ("", *choices)]
        logps = self._map(lambda job: self._reply_logprobs(*job), jobs)
        width = len(choices) + 1
        out = np.zeros((len(prompts), len(choices)))
        for i in range(len(prompts)):
            base, *with_choice = logps[i * width : (i + 1) * width]
            scores = np.array([sum(lp[len(base) :]) for lp in with_choice])
            scores = np.exp(scores - scores.max())
            out[i] = scores / scores.sum()
        return out

    def _reply_logprobs(self, prompt: str, reply: str) -> list[float]:
        """Log-probabilities of every prompt token of (user prompt, assistant reply)."""
        out = None
        while out is None:  # None: the server refused a field, learned (`ServerTraits`)
            out = self._post("/chat/completions", self._traits.scoring(self.name, prompt, reply),
                             chat=True)  # fmt: skip
        entries = out.get("prompt_logprobs")
        if entries is None:
            raise BackendError(
                f"the server at {self.base_url} returned no prompt_logprobs; choice_probs needs "
                "a vLLM OpenAI-compatible server"
            )
        # One entry per prompt token (the first is null); each holds the actual token's logprob.
        try:
            return [_actual_logprob(e) for e in entries[1:]]
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise BackendError(f"the server at {self.base_url} returned prompt_logprobs of "
                               f"another shape ({type(e).__name__}: {e})") from None  # fmt: skip

    def close(self) -> None:
        self._client.close()


def _actual_logprob(entry: dict[str, Any] | None) -> float:
    if not entry:
        return 0.0
    # With prompt_logprobs=0 the dict holds exactly one item: the token actually in the prompt.
    (only,) = entry.values()
    lp = float(only["logprob"])
    return lp if math.isfinite(lp) else -1e9
