"""A small OpenAI-compatible chat server with a fixed latency and injectable faults, for the
Ray labelling tests and `scripts/bench_label_scale.py` (loopback only, standard library only).

Answers are a deterministic function of the prompt (same prompt, same answer, whichever
replica or actor sends it), so a local and a Ray run over the same server must write the same
labels. Faults:
- `transient=N`: a prompt's first N attempts answer 503 or 429 (alternating), later ones 200
  (with `retry_after=S`, each with a `Retry-After: S` header, as hosted APIs' rate limits);
- `always_fail="text"`: any prompt containing the text answers 500, always;
- `refuse="text"`: any prompt containing the text answers 400 (as a prompt past a window), always;
- `garbled="text"`: any prompt containing the text answers 200 with an error object, no
  chat completion (as a hosted API's filter may), always;
- `hold="text"` (also set after start; "" holds every prompt): any prompt containing the text
  is held, counted in `held`, until `release` is set (a server that took the request and
  never answers), then answers 503.
With `api_key="..."` every route answers 401 to a request without `Authorization: Bearer <key>`,
as `vllm serve --api-key` does. With `window=N` the models list `max_model_len: N` and
`POST /tokenize` counts a chat prompt's words as its tokens (as `usage` does), as vLLM's does.
With `logprobs=False` a request asking for token log-probabilities answers 400 naming
`logprobs`, as hosted APIs that give none do (counted in `logprobs_refused`); with
`logprobs="never"` any request holding the field does, `false` too. A thinking model:
`reasoning="inline"` puts a `<think>...</think>` block before the answer (a server without a
reasoning parser), `"cut"` an unended block and no answer, `"parsed"` the answer with a
`reasoning_content` field (vLLM's `--reasoning-parser`), `"parts"` a list of content parts, a
`thinking` one before the text (Mistral's API); a request with `chat_template_kwargs`
`{"enable_thinking": false}` gets the answer alone (`template_kwargs="honour"`, as vLLM's), the
reasoning still (`"ignore"`), or a 400 naming the field (`"refuse"`, as OpenAI's API). With
`length_field="max_completion_tokens"` a request giving `max_tokens` answers 400 asking for that
field instead, as OpenAI's newer models do. A request for `prompt_logprobs` (choice scoring)
gets them (`scored`).

    python scripts/fake_openai_server.py --port 8321 --latency 0.2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-llm"
POLL = 0.02  # seconds between serve_forever's checks for a stop
WORDS = ("Paris", "London", "politician", "1984", "football", "Jupiter", "I don't know")


def answer(prompt: str) -> str:
    """A deterministic answer: one of a few words picked by the prompt's hash, or a word of the
    question itself (so some answers match gold answers and labels are not all one value)."""
    digest = hashlib.sha256(prompt.encode()).digest()
    words = [w.strip("?.,\"'") for w in prompt.split()]
    if digest[0] % 3 == 0 and words:
        return words[digest[1] % len(words)]
    return WORDS[digest[2] % len(WORDS)]


def scored(messages: list[dict[str, Any]], thinking: str | None) -> list[Any]:
    """vLLM's `prompt_logprobs` of a chat (None, then one entry per token: here a word): the
    last message's words score by their hash, or all alike where the model was left thinking
    (it expected its reasoning there, as a template that was not asked with thinking off
    renders it)."""
    words = [w for m in messages for w in str(m["content"]).split()]
    first = len(words) - len(str(messages[-1]["content"]).split())
    lps = [-1.0 if thinking and i >= first else -hashlib.sha256(w.encode()).digest()[0] / 64
           for i, w in enumerate(words)]  # fmt: skip
    return [None] + [{str(i): {"logprob": lp, "rank": 1}} for i, lp in enumerate(lps[1:])]


class FakeServer:
    """`with FakeServer(latency=0.2) as url:` serves `url` (ending in /v1) until the block
    ends. `requests` counts the requests each prompt received; `served` counts all."""

    def __init__(
        self,
        latency: float = 0.2,
        port: int = 0,
        transient: int = 0,
        always_fail: str | None = None,
        model: str = MODEL,
        api_key: str | None = None,
        more_models: tuple[str, ...] = (),
        root: str | None = None,
        window: int | None = None,
        logprobs: bool | str = True,
        reasoning: str | None = None,
        refuse: str | None = None,
        template_kwargs: str = "honour",
        retry_after: str | None = None,
        garbled: str | None = None,
        length_field: str = "max_tokens",
        hold: str | None = None,
    ):
        self.latency, self.transient, self.always_fail = latency, transient, always_fail
        self.model, self.api_key = model, api_key
        self.listed = [model, *more_models]  # what /v1/models lists (LoRA adapters, say)
        self.root = root  # the weights behind them, as vLLM lists them
        self.window = window
        self.logprobs, self.logprobs_refused = logprobs, 0
        self.reasoning, self.refuse, self.refused = reasoning, refuse, 0
        self.template_kwargs, self.thinking_off = template_kwargs, 0  # requests asking it
        self.retry_after, self.garbled, self.length_field = retry_after, garbled, length_field
        self.hold, self.held, self.release = hold, 0, threading.Event()
        self.requests: Counter[str] = Counter()
        self.served = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._httpd.request_queue_size = 256
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, on every stop
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.release.set()  # held requests end: their threads do not outlive the server
        self._httpd.shutdown()
        self._httpd.server_close()

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) for one chat-completions request."""
        prompt = body["messages"][-1]["content"]
        asked = body.get("logprobs") if self.logprobs is False else "logprobs" in body
        if asked and self.logprobs is not True:  # "never": the field itself, even false
            with self._lock:
                self.logprobs_refused += 1
            return 400, {
                "error": {
                    "message": "logprobs is not supported with this model",
                    "type": "invalid_request_error",
                    "param": "logprobs",
                }
            }
        if self.length_field not in body:
            return 400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not "
                                   "supported with this model. Use 'max_completion_tokens' "
                                   "instead.", "type": "invalid_request_error",
                                   "param": "max_tokens"}}  # fmt: skip
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and self.template_kwargs == "refuse":
            return 400, {"error": {"message": "Unrecognized request argument supplied: "
                                   "chat_template_kwargs", "type": "invalid_request_error"}}  # fmt: skip
        thinking = self.reasoning
        if kwargs == {"enable_thinking": False}:
            with self._lock:
                self.thinking_off += 1
            thinking = None if self.template_kwargs == "honour" else thinking
        if self.refuse and self.refuse in prompt:
            with self._lock:
                self.refused += 1
            return 400, {"error": {"message": "This model's maximum context length is 2048 tokens",
                                   "type": "BadRequestError"}}  # fmt: skip
        if self.hold is not None and self.hold in prompt:
            with self._lock:
                self.held += 1
            self.release.wait(60)
            return 503, {"error": {"message": "held, then released"}}
        with self._lock:
            self.requests[prompt] += 1
            self.served += 1
            attempt = self.requests[prompt]
        time.sleep(self.latency)
        if self.garbled and self.garbled in prompt:
            return 200, {"object": "error", "message": "the reply was filtered"}
        if self.always_fail and self.always_fail in prompt:
            return 500, {"error": {"message": "injected permanent failure"}}
        if attempt <= self.transient:
            return (503 if attempt % 2 else 429), {"error": {"message": "injected overload"}}
        if "prompt_logprobs" in body:  # vLLM's scoring of a prompt's own tokens
            return 200, {"id": "fake", "object": "chat.completion", "model": self.model,
                         "prompt_logprobs": scored(body["messages"], thinking)}  # fmt: skip
        text = answer(prompt)
        tokens = text.split()
        content = [{"token": t, "logprob": -0.25 * (i + 1)} for i, t in enumerate(tokens)]
        message = {"role": "assistant", "content": text}
        if thinking == "inline":
            message["content"] = f"<think>Let me recall.</think>\n\n{text}"
        elif thinking == "cut":
            message["content"] = "<think>Let me recall what"
        elif thinking == "parts":
            message["content"] = [{"type": "thinking", "thinking": [{"type": "text",
                                   "text": "Let me recall."}]}, {"type": "text", "text": text}]  # fmt: skip
        elif thinking == "parsed":
            message["reasoning_content"] = "Let me recall."
        return 200, {
            "id": "fake",
            "object": "chat.completion",
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": {"content": content} if body.get("logprobs") else None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(tokens)},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status in (429, 503) and server.retry_after is not None:
                    self.send_header("Retry-After", server.retry_after)
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> bool:
                """A 401 sent, as vLLM's, when a key is set and the request lacks it."""
                if server.api_key is None:
                    return False
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return False
                self._send(401, {"error": "Unauthorized"})
                return True

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self._refused():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list",
                                     "data": [{"id": m, "root": server.root,
                                               "max_model_len": server.window}
                                              for m in server.listed]})  # fmt: skip
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self._refused():
                    return
                if self.path.rstrip("/") == "/tokenize" and server.window:
                    words = len(body["messages"][-1]["content"].split())
                    self._send(200, {"count": words, "max_model_len": server.window})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(*server.reply(body))

            def log_message(self, *args: object) -> None:  # quiet: tests read counters
                pass

        return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8321)
    p.add_argument("--latency", type=float, default=0.2, help="seconds per request")
    p.add_argument("--transient", type=int, default=0, help="first N attempts of a prompt fail")
    p.add_argument("--always-fail", help="prompts containing this text always answer 500")
    args = p.parse_args()
    server = FakeServer(args.latency, args.port, args.transient, args.always_fail)
    print(f"serving {server.url} (latency {args.latency} s); Ctrl-C stops", flush=True)
    with server:
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
