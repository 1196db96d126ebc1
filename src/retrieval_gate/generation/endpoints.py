"""Chat requests to one or several OpenAI-compatible endpoints (`vllm serve` replicas) with
retries and fail-over, where one request's failure is a result, not an exception: a labelling
job of a million questions records the few rows that keep failing and goes on.

Per request: a connection error marks that endpoint down for `cooldown` seconds and the request
moves at once to the next endpoint; a 429 or 5xx is retried after an exponential, jittered
pause, or the longer wait its `Retry-After` asks for (on the next endpoint when there are
several); any other 4xx is final (the request itself is wrong), except a refusal of a field the
server does not take (`ServerTraits.resend`): sent again without it. A reply that reasons
before its answer is asked again with thinking off (`ServerTraits.rethink`). After `retries`
retries the request is returned with its `error`. Used by the Ray labelling actors
(labels/ray_engine.py); standard library + httpx only, so a Ray worker imports it in well under
a second."""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import logging
import math
import os
import random
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..data.answer_confidence import parse_token_logprobs
from ..errors import BackendError, ConfigError, DataError, PromptRefused
from ..strict_rows import parse_json
from .base import Generation

log = logging.getLogger(__name__)


@dataclass
class ChatResult:
    """One request's outcome: the answer, or `error` after the retries were spent."""

    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_logprobs: list[float] | None = None
    error: str | None = None
    url: str | None = None
    attempts: int = 0
    # the chat-template arguments the answer was asked with (a label file records them)
    template: dict[str, Any] = field(default_factory=dict)


# The generator servers' bearer token (`vllm serve --api-key`, a hosted endpoint's key). Read
# from the environment only: a flag would show in process lists and shell history.
API_KEY_ENV = "RETRIEVAL_GATE_GENERATOR_API_KEY"


def server_key() -> str | None:
    """The key in $RETRIEVAL_GATE_GENERATOR_API_KEY (None when unset or blank); one an HTTP
    header cannot carry is refused before any server is contacted."""
    key = os.environ.get(API_KEY_ENV, "").strip()
    if any(not ("!" <= c <= "~") for c in key):
        raise ConfigError(f"${API_KEY_ENV} holds a space, control or non-ASCII character, which "
                          "an Authorization header cannot carry: set it to the key alone")  # fmt: skip
    return key or None


# seconds: a longer wait a server asks for is cut to this (the request is retried all the same)
MAX_RETRY_AFTER = 120.0


def retry_after(r: httpx.Response) -> float:
    """The seconds a 429 or 503 asks the client to wait before its retry (`Retry-After`, in
    seconds or as an HTTP date, as hosted APIs' rate limits send it), at most MAX_RETRY_AFTER;
    0 without one (or with one that says no time)."""
    value = r.headers.get("retry-after", "").strip()
    if not value or r.status_code not in (429, 503):
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return 0.0
        when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if math.isfinite(seconds) else 0.0


def http_client(api_key: str | None = None, **options: Any) -> httpx.Client:
    """An HTTP client carrying `api_key`, on the process's one TLS context: httpx builds a
    context per client by default, reading certifi's CA bundle anew (some 60 ms a client, and
    a run opens one per server listing, generator and endpoint pool)."""
    env = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))  # as httpx reads
    return httpx.Client(headers=bearer(api_key), verify=_tls_context(*env), **options)


@functools.cache
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """httpx's default context (SSL_CERT_FILE, SSL_CERT_DIR or certifi), one per value of
    the variables it reads."""
    return httpx.create_ssl_context()


def bearer(api_key: str | None) -> dict[str, str]:
    """The request headers that carry `api_key` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def key_refused(url: str, status: int, keyed: bool) -> str | None:
    """What a 401 or 403 from a generator server means (None for another status): it wants
    a key and none was sent, or it refused the one sent."""
    if status not in (401, 403):
        return None
    if keyed:
        return (f"the generator server at {url} refused the API key in ${API_KEY_ENV} "
                f"({status}): set it to the key the server was started with")  # fmt: skip
    return (f"the generator server at {url} wants an API key ({status}): set ${API_KEY_ENV} "
            "(e.g. to the key given to `vllm serve --api-key`)")  # fmt: skip


def listed_models(
    client: httpx.Client, url: str, keyed: bool, timeout: float
) -> dict[str, dict[str, Any]]:
    """The models `url/models` lists: each id with the server's entry for it (`model_root`).
    A refused key or a redirect is a BackendError that says so; an unreachable server raises
    httpx's error, a reply that is no list of models KeyError, TypeError or ValueError."""
    r = client.get(f"{url}/models", timeout=timeout)
    refused = key_refused(url, r.status_code, keyed)
    if refused:
        raise BackendError(refused)
    if r.is_redirect:  # requests are not followed: a POST redirected would arrive as a GET
        to = r.headers.get("location", "?")
        raise BackendError(f"{url}/models answered {r.status_code}, a redirect to {to}: pass "
                           "the URL the server is at (https:// where it redirects there)")  # fmt: skip
    r.raise_for_status()
    entries = parse_json(r.content)["data"]
    named = {e["id"]: e for e in entries if isinstance(e["id"], str) and e["id"].strip()}
    if entries and not named:  # a null or numeric id was used as the model "None", or "7"
        raise BackendError(f"{url}/models lists no model by name (ids: "
                           f"{', '.join(repr(e['id']) for e in entries[:3])}): fix the "
                           "server's model list, or name it with --served-model-name on "
                           "`vllm serve`")  # fmt: skip
    return named


def model_root(entry: dict[str, Any] | None) -> str:
    """What a listed model is beyond its id: vLLM's `root` (the weights' path or hub name) and
    `parent` (a LoRA adapter's base); "" where the server says neither. Answers cached from a
    server are keyed by it, so other weights served under the same name miss."""
    entry = entry or {}
    return ":".join(str(entry[k]) for k in ("root", "parent") if entry.get(k))


def remote_checksum(urls: list[str], model: str, root: str) -> str:
    """The generator identity of a model served at `urls`: the weights live on the server."""
    return f"remote:{','.join(urls)}:{model}" + (f":{root}" if root else "")


def pick_model(url: str, listed: Sequence[str], model: str | None) -> str:
    """The model to ask `url` for: `model` where the server lists it (or lists nothing), else
    the one model it lists. Two listed and none named (a base model and its LoRA adapters, a
    hosted API) is an error, never the first taken silently."""
    listed = list(listed)
    names = ", ".join(listed[:10]) + (f" and {len(listed) - 10} more" if len(listed) > 10 else "")
    if model is not None and listed and model not in listed:
        raise ConfigError(f"the generator server at {url} does not serve {model!r}; it serves "
                          f"{names}: pass one of them as --generator")  # fmt: skip
    if model is None and len(listed) != 1:
        serves = f"serves {len(listed)} models ({names})" if listed else "lists no model"
        raise ConfigError(f"the generator server at {url} {serves}: name the one to use with "
                          "--generator")  # fmt: skip
    return model if model is not None else listed[0]


# A route of the OpenAI API, which the client adds to the base URL itself
ROUTES = ("/chat/completions", "/completions", "/models", "/embeddings")


def check_base_url(url: str) -> None:
    """A server's base URL, not one of its routes: `http://h:8000/v1/chat/completions`,
    pasted from a curl example, was asked for `.../chat/completions/models` and said only
    that no endpoint answered."""
    route = next((r for r in ROUTES if url.rstrip("/").endswith(r)), None)
    if route is not None:
        base = url.rstrip("/")[: -len(route)]
        raise ConfigError(f"--generator-url {url}: give the server's base URL, {base} (the "
                          f"client adds {route} itself)")  # fmt: skip


def normalise_urls(urls: list[str]) -> list[str]:
    """The endpoints as given, without trailing slashes or repeats (order kept)."""
    out: list[str] = []
    for url in urls:
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"--generator-url {url!r} is not an http(s) URL; give the server's base URL "
                "ending in /v1, e.g. http://host:8000/v1"
            )
        check_base_url(url)
        if url not in out:
            out.append(url)
    if not out:
        raise ConfigError("--generator-url needs at least one URL")
    return out


def served_models(
    url: str, api_key: str | None = None, timeout: float = 5.0
) -> dict[str, dict[str, Any]] | None:
    """`listed_models`, or None when the endpoint cannot be reached or does not answer like an
    OpenAI-compatible server (a refused key or a redirect is an error)."""
    with http_client(api_key) as http:
        try:
            return listed_models(http, url, bool(api_key), timeout)
        except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError):
            return None


def check_endpoints(
    urls: list[str], model: str | None, api_key: str | None = None
) -> tuple[list[str], list[str], str, str]:
    """(live URLs, dead URLs, model id, its `model_root`) before any work starts: every live
    endpoint must serve the same model, the same weights under the same name (rows from two
    models would mix under one provenance); none live is an error."""
    found = {url: served_models(url, api_key) for url in urls}
    live = [u for u, m in found.items() if m is not None]
    dead = [u for u in urls if u not in live]
    if not live:
        raise BackendError(
            f"no generator endpoint answered at {', '.join(u + '/models' for u in urls)}; start "
            "the server(s) (e.g. `vllm serve MODEL`) or fix --generator-url"
        )
    picked = {u: pick_model(u, found[u] or {}, model) for u in live}
    served = {u: (name, model_root((found[u] or {}).get(name))) for u, name in picked.items()}
    if len(set(served.values())) > 1:
        kinds = sorted({f"{name} ({root})" if root else name for name, root in served.values()})
        raise ConfigError(
            f"the endpoints serve different models ({', '.join(kinds)}); label with one model "
            "at a time: pass URLs of one model's replicas"
        )
    return live, dead, *served[live[0]]


class EndpointPool:
    """Sends chat requests over `urls`, spreading them round-robin from `start` (so actors
    sharing the list do not all start on the first endpoint). Thread-safe."""

    def __init__(
        self,
        urls: list[str],
        model: str,
        start: int = 0,
        retries: int = 4,
        backoff: float = 0.5,
        cooldown: float = 10.0,
        timeout: float = 300.0,
        api_key: str | None = None,
        connections: int = 16,
    ):
        self.urls, self.model = normalise_urls(urls), model
        self.retries, self.backoff, self.cooldown = retries, backoff, cooldown
        self._keyed = bool(api_key)
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = http_client(api_key, timeout=timeout, limits=limits)
        self._next = start % len(self.urls)
        self._down_until: dict[str, float] = {}
        self._lock = threading.Lock()
        self._traits = {url: ServerTraits(url) for url in self.urls}  # one model, many servers

    def _pick(self) -> str:
        """The next endpoint not marked down (any, when all are down)."""
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.urls)):
                url = self.urls[self._next]
                self._next = (self._next + 1) % len(self.urls)
                if self._down_until.get(url, 0.0) <= now:
                    return url
            return self.urls[self._next]

    def _mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + self.cooldown

    def chat(self, prompt: str, max_tokens: int, logprobs: bool = False) -> ChatResult:
        """One greedy chat completion; never raises for a server or network failure."""
        pause, problem, failures, attempt = self.backoff, "", 0, 0
        while True:
            attempt, wait = attempt + 1, 0.0  # wait: what a rate limit asks for (`Retry-After`)
            url = self._pick()
            traits = self._traits[url]
            body = traits.body(self.model, prompt, max_tokens, logprobs)
            try:
                r = self._client.post(f"{url}/chat/completions", json=body)
            except httpx.HTTPError as e:
                problem = f"cannot reach {url} ({type(e).__name__}: {e})"
                timed_out_note(url, e)
                self._mark_down(url)
                if self._any_up():  # fail over at once: a dead endpoint costs no retry
                    continue
            else:
                if r.status_code == 200:
                    result = _result(r, body, traits, attempt)
                    if result is None:  # it reasoned: asked again, with thinking off
                        continue
                    return result
                problem = (key_refused(url, r.status_code, self._keyed)
                           or answered(f"{url}/chat/completions", r))  # fmt: skip
                if traits.resend(r.status_code, r.text, body):
                    continue  # built again without the field the server refused
                if r.status_code < 500 and r.status_code != 429:
                    return ChatResult(error=problem, url=url, attempts=attempt)
                wait = retry_after(r)
                waiting_note(url, wait)
            failures += 1
            if failures > self.retries:
                return ChatResult(error=problem, url=url, attempts=attempt)
            jittered = pause * random.uniform(0.5, 1.5)  # replicas not hit in step
            time.sleep(max(jittered, wait))
            pause = min(pause * 2, 30.0)

    def _any_up(self) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(self._down_until.get(u, 0.0) <= now for u in self.urls)

    def close(self) -> None:
        self._client.close()


THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}


class ServerTraits:
    """What one server was seen to take and to do, learned from its replies and shared by the
    requests sent to it: a field it refused is no longer sent, and a model that reasons before
    it answers is asked with thinking off, as the in-process engine asks it (`chat.THINKING_OFF`).
    Threads share it without a lock: a race costs at most a request sent once more."""

    def __init__(self, url: str):
        self.url = url
        self.logprobs = True  # asked for until the server refuses them
        self.thinking = "unknown"  # "off": asked so (it reasoned); "on": it cannot be turned off
        self.takes_template = True  # chat_template_kwargs, until the server refuses them
        self.length_field = "max_tokens"  # or OpenAI's newer models' max_completion_tokens

    def body(self, model: str, prompt: str, max_tokens: int, logprobs: bool) -> dict[str, Any]:
        """The request as this server takes it."""
        body = chat_body(model, prompt, max_tokens, logprobs and self.logprobs)
        body[self.length_field] = body.pop("max_tokens")
        return {**body, **self.template()}

    def template(self) -> dict[str, Any]:
        """The fields that ask for the chat template as the answers are asked (a prompt's
        tokens are counted with them)."""
        return THINKING_OFF if self.thinking == "off" else {}

    def scoring(self, model: str, prompt: str, reply: str) -> dict[str, Any]:
        """The request for the log-probabilities of every token of (prompt, reply) (vLLM's
        `prompt_logprobs`), asked with thinking off while the server takes it: no reply tells
        whether the model reasons, and the in-process engine scores choices so (a thinking
        template renders a reasoning turn where the reply is scored)."""
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
        body = {"model": model, "messages": messages, self.length_field: 1, "temperature": 0.0,
                "add_generation_prompt": False, "continue_final_message": True,
                "prompt_logprobs": 0}  # fmt: skip
        return {**body, **(THINKING_OFF if self.takes_template else {})}

    def resend(self, status: int, text: str, body: dict[str, Any]) -> bool:
        """True when a refusal names a field this request sent that the server does not take
        (a 400/422 naming it): the trait is learned and the request goes again without it.
        `logprobs`: several hosted OpenAI-compatible APIs give none (answers matter more than
        their confidence, which the labels record where they can); `max_tokens`: OpenAI's
        newer models take `max_completion_tokens` instead, and say so; `chat_template_kwargs`:
        one that takes no template arguments (OpenAI's API), whose model then keeps its
        reasoning (`reasoning_note`)."""
        if status not in (400, 422):
            return False
        said = text.lower()
        if body.get("logprobs") and "logprob" in said:
            self.logprobs = False
            no_logprobs_note(self.url, text)
            return True
        if "max_tokens" in body and "max_completion_tokens" in said:  # "use it instead"
            self.length_field = "max_completion_tokens"
            return True
        if "chat_template_kwargs" in body and "chat_template_kwargs" in said:
            self.takes_template = False
            if self.thinking == "off":  # it reasoned: it keeps its reasoning now
                self.thinking = "on"
                reasoning_note(self.url, f"it refused chat_template_kwargs: {text[:200]}")
            return True
        return False

    def rethink(self, body: dict[str, Any], message: Any) -> bool:
        """True when the reply reasoned before its answer (`reasoned`) and was not asked with
        thinking off: asked again so (a reasoning block fills the short answers asked for
        here before any answer begins). A reply that reasons when asked so is taken as it is,
        its reasoning cut off (`without_reasoning`), and said once."""
        if not reasoned(message):
            return False
        if self.thinking == "on" or "chat_template_kwargs" in body or not self.takes_template:
            self.thinking = "on"
            reasoning_note(self.url, "it reasons when asked with enable_thinking false too"
                           if self.takes_template else "it refused chat_template_kwargs")  # fmt: skip
            return False
        self.thinking = "off"
        note_once(self.url, "thinking-off", "the model at %s reasons before it answers: asking "
                  "it with thinking off (chat_template_kwargs {\"enable_thinking\": false}), as "
                  "the in-process engine does", self.url)  # fmt: skip
        return True


def no_logprobs_note(url: str, text: str) -> None:
    """Says once per server that its answers come without log-probabilities, and who needs
    them."""
    note_once(url, "no-logprobs", "the generator server at %s gives no token log-probabilities "
              "(it answered: %s): answering without them, so label files record no answer "
              "confidence (the confidence gate, the two-stage gate and the cascade read it)",
              url, text[:200])  # fmt: skip


def reasoning_note(url: str, why: str) -> None:
    """Says once per server that its model reasons before answering and thinking could not be
    turned off per request, and how to turn it off on the server."""
    note_once(url, "reasoning", "the model at %s reasons before it answers (%s): the short "
              "answers asked for here (24 tokens closed-book) may end before the answer "
              "begins; start its server with thinking off: vllm serve ... "
              "--default-chat-template-kwargs '{\"enable_thinking\": false}'", url, why)  # fmt: skip


def answered(route: str, r: httpx.Response) -> str:
    """What a server's refusal of a request says, with the way out where its status tells one:
    a chat route it has not (a base model's server), a redirect (requests are not followed)."""
    said = f"{route} answered {r.status_code}: {r.text[:200]}"
    if r.status_code == 404 and route.endswith("/chat/completions"):
        return (f"{said} (no chat-completions route there: is it a base model served without "
                "a chat template, or not the /v1 URL of an OpenAI-compatible server? Serve an "
                "instruct model, or give it one: vllm serve ... --chat-template FILE)")  # fmt: skip
    if r.is_redirect:
        return (f"{route} answered {r.status_code}, a redirect to "
                f"{r.headers.get('location', '?')}: pass the URL the server is at")  # fmt: skip
    return said


def timed_out_note(url: str, e: httpx.HTTPError) -> None:
    """Says once per server that a request got no answer within the client's timeout (it is
    asked again): a server that took requests and never answered kept a run silent for the
    timeout times the attempts."""
    if isinstance(e, httpx.TimeoutException):
        note_once(url, "timeout", "the generator server at %s gave no answer within the "
                  "timeout (%s): asking again; is it overloaded or stuck?", url,
                  type(e).__name__)  # fmt: skip


def waiting_note(url: str, wait: float) -> None:
    """Says once per server that it asked for a long wait (`Retry-After`): the run was silent
    for it."""
    if wait >= 10:
        note_once(url, "retry-after", "the generator server at %s asks to wait %.0f s before "
                  "the next attempt (Retry-After, at most %.0f s is waited): waiting", url, wait,
                  MAX_RETRY_AFTER)  # fmt: skip


def note_once(url: str, what: str, message: str, *args: Any) -> None:
    """A warning about a server, said once per server and kind in a process (the request
    threads that meet it together included: it was said twice)."""
    with _NOTED_LOCK:
        if (url, what) in _NOTED:
            return
        _NOTED.add((url, what))
    log.warning(message, *args)


_NOTED: set[tuple[str, str]] = set()
_NOTED_LOCK = threading.Lock()
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def without_reasoning(text: str) -> str:
    """The answer after a reasoning block a server left in the reply's text (`<think>...
    </think>`, served without a reasoning parser); "" when the block had not ended within the
    tokens the answer was given."""
    if not text.lstrip().startswith(THINK_OPEN):
        return text
    _, closed, answer = text.partition(THINK_CLOSE)
    return answer.strip() if closed else ""


def reasoned(message: Any) -> bool:
    """The reply's message holds a reasoning part: a reasoning parser's field, or a block in
    its text."""
    if not isinstance(message, dict):
        return False
    text = message.get("content") or ""
    parts = text if isinstance(text, list) else []
    return bool(message.get("reasoning_content") or message.get("reasoning")
                or (isinstance(text, str) and text.lstrip().startswith(THINK_OPEN))
                or any(isinstance(p, dict) and p.get("type") in REASONING_PARTS
                       for p in parts))  # fmt: skip


REASONING_PARTS = ("thinking", "reasoning")  # content parts of a reasoning model's reply


def content_text(content: Any) -> str:
    """A reply message's text: a string, or a list of content parts (as Mistral's API sends a
    reasoning model's reply): its text parts joined, its thinking parts left out."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content
                       if isinstance(p, dict) and p.get("type") == "text")  # fmt: skip
    return content or ""


def chat_body(model: str, prompt: str, max_tokens: int, logprobs: bool) -> dict[str, Any]:
    """A greedy chat-completions request with the prompt as the user's message; `logprobs`
    only when asked for (a server that takes no such field, not even false, then takes the
    request sent again without it)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    return {**body, "logprobs": True} if logprobs else body


def reply_json(r: httpx.Response, url: str) -> dict[str, Any]:
    """A 200 reply's JSON object; a body that is none (a proxy's login page, an HTML error) is
    a `PromptRefused` naming the server, not a JSONDecodeError traceback (a labelling run lists
    the question and goes on; a server that answers every prompt so stops it)."""
    try:
        out = parse_json(r.content)
    except ValueError:  # not JSON (UnicodeDecodeError too), nested too deep
        out = None
    if not isinstance(out, dict):
        raise PromptRefused(f"{url} answered 200 with a body that is not a JSON object (a "
                            f"proxy's page?): {r.text[:200]!r}")  # fmt: skip
    return out


def reply_chat(
    out: dict[str, Any], body: dict[str, Any], traits: ServerTraits
) -> Generation | None:
    """`parse_chat`, a reply without a chat completion in it (an error object sent with 200, no
    choices, a logprob that is no number) or without an answer in it (`no_answer`) said as a
    `PromptRefused` naming the server; None when the request is to go again with thinking off
    (`ServerTraits.rethink`)."""
    url = traits.url
    try:
        generation = parse_chat(out, bool(body.get("logprobs")), body.get(traits.length_field), url)
        message = out["choices"][0].get("message")
    except DataError as e:  # NaN, a value above 0: a label file stored them as numbers
        raise PromptRefused(f"{url} answered 200 with a token log-probability that is none: "
                            f"{e}") from None  # fmt: skip
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise PromptRefused(f"{url} answered 200 without a chat completion in it "
                            f"({type(e).__name__}: {e}): {str(out)[:200]}") from None  # fmt: skip
    if traits.rethink(body, message):
        return None
    if not reasoned(message):  # a reasoning block cut short leaves no answer, as said
        no_answer(out["choices"][0], url)
    return generation


# Why a reply holds no answer, from its choice's `finish_reason`
NO_ANSWER = {"content_filter": "the server's content filter withheld it",
             "tool_calls": "the model called a tool instead"}  # fmt: skip


def no_answer(choice: dict[str, Any], url: str) -> None:
    """A `PromptRefused` for a reply that is no answer of the model's: its content null (tool
    calls), a refusal (OpenAI's `message.refusal`) or a content filter's cut. Each was judged
    as the empty answer: a question the model cannot answer (label 1)."""
    message = choice.get("message") or {}
    why = NO_ANSWER.get(str(choice.get("finish_reason")))
    if message.get("refusal"):
        why = f"the model refused: {str(message['refusal'])[:200]!r}"
    elif why is None and message.get("content") is None:
        why = f"its content is null (finish_reason {choice.get('finish_reason')!r})"
    if why is not None:
        raise PromptRefused(f"{url} answered without an answer: {why}")


# Characters of text kept per token asked for, where a reply holds more tokens than asked (a
# server that ignores max_tokens): a token's text is rarely longer
TOKEN_CHARS = 16


def parse_chat(
    out: dict[str, Any], logprobs: bool, max_tokens: int | None = None, url: str = "the server"
) -> Generation:
    """The answer, token counts and (when asked) token log-probabilities of a response (its
    `logprobs` object: the chat API's `content` list, or the completions API's older
    `token_logprobs`): those of the answer only, a reasoning block's cut off with its text
    (`answer_entries`). A reply of more tokens than `max_tokens` is clipped to them (`clipped`);
    asked-for log-probabilities a reply lacks are said once (`logprob_entries`). Token counts
    are accounting only: a `usage` count that is none (null, a word) is 0 (it refused the
    answer)."""
    choice = out["choices"][0]
    usage = out.get("usage") or {}
    completion_tokens = _tokens(usage.get("completion_tokens"))
    text = content_text(choice["message"]["content"])
    entries = logprob_entries(choice.get("logprobs"), bool(text), url) if logprobs else None
    if max_tokens and max(completion_tokens, len(entries or ())) > max_tokens:
        text, entries = clipped(text, entries, completion_tokens, max_tokens, url)
    answer = without_reasoning(text)
    cut = text.lstrip().startswith(THINK_OPEN)
    if entries is not None and (cut or reasoned(choice["message"])):
        entries = answer_entries(entries, answer, url, required=cut)
    token_logprobs = None  # checked as a file's column is: finite, <= 0
    if entries is not None:
        token_logprobs = parse_token_logprobs(entries, column="logprobs")
    return Generation(
        text=answer,
        prompt_tokens=_tokens(usage.get("prompt_tokens")),
        completion_tokens=completion_tokens,
        token_logprobs=token_logprobs,
    )


def logprob_entries(value: Any, answered: bool, url: str) -> list[Any] | None:
    """A reply's `logprobs` as its list of token entries (chat's `content`, the completions
    API's `token_logprobs`). None, said once (`no_logprobs_note`), where a reply asked for them
    holds none (null, a null list, an empty one beside an answer): such a server's rows had all
    recorded no answer confidence, unsaid, and the confidence gate scored every question 1."""
    if isinstance(value, dict):
        value = value.get("content", value.get("token_logprobs"))
    if value is None or (value == [] and answered):
        said = "logprobs null" if value is None else "an empty logprobs list beside its answer"
        no_logprobs_note(url, f"a 200 with {said}")
        return None
    if not isinstance(value, list):
        raise DataError(f"its logprobs hold {str(value)[:60]!r}, not a list of token entries")
    return value


def clipped(
    text: str, entries: list[Any] | None, tokens: int, max_tokens: int, url: str
) -> tuple[str, list[Any] | None]:
    """A reply of more tokens than asked for, cut to them: the first `max_tokens` entries, and
    at most TOKEN_CHARS characters of text per token (200,000 tokens answered to a 24-token
    request were stored and judged whole: a gold answer anywhere in them counted); said once."""
    given = max(tokens, len(entries or ()))
    note_once(url, "too-long", "the generator server at %s answered %d tokens where at most %d "
              "were asked for (does it ignore max_tokens?): its replies are cut to %d tokens' "
              "text", url, given, max_tokens, max_tokens)  # fmt: skip
    return text[: max_tokens * TOKEN_CHARS], None if entries is None else entries[:max_tokens]


def answer_entries(entries: list[Any], answer: str, url: str, required: bool) -> list[Any] | None:
    """The entries of the answer a reasoning block was cut off (`without_reasoning`): those
    after the one whose running token text reaches `</think>`, less the whitespace-only ones
    the kept answer was stripped of (its leading ones); the reasoning's had counted in the
    answer's confidence. None where no answer was kept, and (said once) where none follow
    `</think>` or, for a block in the reply's text (`required`), no token's text reaches it;
    a reasoning parser's reply whose entries never reach it keeps them (the answer's alone)."""
    if not answer:
        return None
    tail = ""  # the running text's last characters: a `</think>` may span tokens
    for i, entry in enumerate(entries):
        token = _token_text(entry)
        if token is None:
            break
        if THINK_CLOSE in tail + token:
            start = i + 1
            while start < len(entries) and _blank(entries[start]):
                start += 1
            return entries[start:] or _unmatched(url)
        tail = (tail + token)[-(len(THINK_CLOSE) - 1) :]
    return _unmatched(url) if required else entries


def _unmatched(url: str) -> None:
    note_once(url, "reasoning-logprobs", "the generator server at %s gives token "
              "log-probabilities that do not show where a reply's reasoning (%s) ends: its "
              "answers are recorded without them (no answer confidence)", url,
              THINK_CLOSE)  # fmt: skip


def _token_text(entry: Any) -> str | None:
    """A chat token entry's text (None for an entry without one, such as a bare number)."""
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) else None


def _blank(entry: Any) -> bool:
    """A token entry whose text is whitespace alone (an answer's strip dropped it)."""
    token = _token_text(entry)
    return token is not None and not token.strip()


def _tokens(value: Any) -> int:
    """A `usage` count; 0 for one that is none (null, a word, a negative number)."""
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(count, 0)


def _result(
    r: httpx.Response, body: dict[str, Any], traits: ServerTraits, attempts: int
) -> ChatResult | None:
    url = traits.url
    try:
        g = reply_chat(reply_json(r, url), body, traits)
    except BackendError as e:  # the same body again would not parse either: no retry
        return ChatResult(error=str(e), url=url, attempts=attempts)
    if g is None:
        return None
    return ChatResult(g.text, g.prompt_tokens, g.completion_tokens, g.token_logprobs, url=url,
                      attempts=attempts, template=body.get("chat_template_kwargs") or {})  # fmt: skip
