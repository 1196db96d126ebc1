"""How a 200 reply of an OpenAI-compatible server becomes an answer (`endpoints.reply_chat`):
its log-probabilities, those it lacks, and a reply longer than asked for. Direct calls, no
server: the reply is the JSON object a server sends."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from retrieval_gate.generation import endpoints
from retrieval_gate.generation.endpoints import ServerTraits, reply_chat

URL = "http://llm:8000/v1"


@pytest.fixture(autouse=True)
def fresh_notes(monkeypatch, caplog):
    """Server warnings said anew (they are said once per server in a process)."""
    monkeypatch.setattr(endpoints, "_NOTED", set())
    caplog.set_level(logging.WARNING, logger=endpoints.__name__)


def reply(text: str | None, tokens: list[tuple[str, float]] | None, **fields: Any) -> dict:
    """A chat completion of `text` whose `logprobs.content` holds `tokens` (None: null)."""
    content = None if tokens is None else [{"token": t, "logprob": lp} for t, lp in tokens]
    message = {"role": "assistant", "content": text, **fields}
    choice = {"index": 0, "message": message, "logprobs": None if tokens is None else
              {"content": content}, "finish_reason": "stop"}  # fmt: skip
    used = len(tokens or ())
    return {"choices": [choice], "usage": {"prompt_tokens": 50, "completion_tokens": used}}


def asked(traits: ServerTraits, max_tokens: int = 24, logprobs: bool = True) -> dict:
    return traits.body("llm", "Who wrote Pride and Prejudice?", max_tokens, logprobs)


def reasoning_server() -> ServerTraits:
    """A server that refused `chat_template_kwargs`: its model keeps its reasoning."""
    traits = ServerTraits(URL)
    traits.takes_template = False
    return traits


def warnings(caplog, words: str) -> int:
    return sum(words in r.getMessage() for r in caplog.records)


THOUGHT = [("<think>", -3.0), (" hmm", -3.0), (" hmm", -3.0), (" hmm", -3.0), (" </", -3.0),
           ("think>", -3.0), ("\n\n", -3.0)]  # fmt: skip


def test_a_cut_reasoning_block_is_cut_off_the_log_probabilities_too(caplog):
    """A reply of a server that keeps its model's reasoning (it refused chat_template_kwargs):
    its `<think>` block was cut off the answer's text only, and the reasoning's tokens
    (-3.0 each) counted in the answer's confidence (mean -2.17 for an answer of -0.1s). Only
    the kept answer's tokens are left: those after the one that ends `</think>`, less the
    whitespace its strip dropped; an unended block leaves no answer and no log-probabilities."""
    traits = reasoning_server()
    answer = [("Jane", -0.1), (" Austen", -0.1)]
    text = "<think> hmm hmm hmm </think>\n\nJane Austen"
    g = reply_chat(reply(text, THOUGHT + answer), asked(traits), traits)
    assert g is not None and g.text == "Jane Austen"
    assert g.token_logprobs == [-0.1, -0.1] and g.mean_logprob == pytest.approx(-0.1)
    g = reply_chat(reply("<think> hmm hmm", THOUGHT[:3]), asked(traits), traits)
    assert g is not None and g.text == "" and g.token_logprobs is None
    # a reasoning parser's reply whose entries cover its reasoning too (vLLM gives them all)
    parsed = reply("Jane Austen", THOUGHT + answer, reasoning_content="hmm hmm hmm")
    g = reply_chat(parsed, asked(traits), traits)
    assert g is not None and g.token_logprobs == [-0.1, -0.1]
    parsed = reply("Jane Austen", answer, reasoning_content="hmm hmm hmm")  # the answer's alone
    g = reply_chat(parsed, asked(traits), traits)
    assert g is not None and g.token_logprobs == [-0.1, -0.1]
    assert warnings(caplog, "do not show where") == 0


def test_log_probabilities_that_do_not_show_the_reasonings_end_are_dropped(caplog):
    """Where the tokens' text never reaches `</think>` (entries without text, or none after
    it), the answer is recorded without log-probabilities, said once."""
    traits = reasoning_server()
    text = "<think> hmm </think> Paris"
    bare = reply(text, [("?", -3.0)] * 4)
    for entry in bare["choices"][0]["logprobs"]["content"]:
        del entry["token"]
    for out in (bare, reply(text, THOUGHT)):
        g = reply_chat(out, asked(traits), traits)
        assert g is not None and g.text == "Paris" and g.token_logprobs is None
    assert warnings(caplog, "do not show where a reply's reasoning (</think>) ends") == 1


@pytest.mark.parametrize("logprobs", [None, {"content": []}, {"content": None}])
def test_a_server_that_gives_no_logprobs_unasked_is_said_once(caplog, logprobs):
    """A 200 with `logprobs` null although asked for them, or an empty list beside an answer:
    every row recorded no answer confidence and nothing said so (the confidence gate then
    scored every question 1.0); a null list refused every question. Said once, as for a server
    that refuses them with a 400."""
    traits = ServerTraits(URL)
    out = reply("Paris", [("Paris", -0.1)])
    out["choices"][0]["logprobs"] = logprobs
    for _ in range(3):
        g = reply_chat(out, asked(traits), traits)
        assert g is not None and g.text == "Paris" and g.token_logprobs is None
    assert warnings(caplog, f"the generator server at {URL} gives no token log-prob") == 1


def test_no_logprobs_is_said_only_where_they_were_asked_for_and_an_answer_has_tokens(caplog):
    traits = ServerTraits(URL)
    g = reply_chat(reply("Paris", None), asked(traits, logprobs=False), traits)
    assert g is not None and g.token_logprobs is None
    g = reply_chat(reply("", []), asked(traits), traits)  # an empty answer: no tokens
    assert g is not None and g.token_logprobs == []
    g = reply_chat(reply("Paris", [("Paris", -0.1)]), asked(traits), traits)
    assert g is not None and g.token_logprobs == [-0.1]
    assert caplog.records == []


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_reply_longer_than_asked_for_is_cut_to_the_tokens_asked_for(caplog, field):
    """200,000 tokens answered to a 24-token request were stored and judged whole (a gold
    answer anywhere in them counted as correct). The reply is cut to the tokens asked for:
    their log-probabilities, and their text's length bound; said once."""
    traits = ServerTraits(URL)
    traits.length_field = field
    words = ["word "] * 200_000 + ["Jane Austen"]
    out = reply("".join(words), [(w, -0.5) for w in words])
    for _ in range(2):
        g = reply_chat(out, asked(traits, max_tokens=24), traits)
        assert g is not None and "Jane" not in g.text
        assert 0 < len(g.text) <= 24 * endpoints.TOKEN_CHARS
        assert g.token_logprobs == [-0.5] * 24
    assert warnings(caplog, "answered 200001 tokens where at most 24 were asked for") == 1
    short = reply("Paris", [("Paris", -0.1)])  # within its tokens: as it is, unsaid
    short["usage"]["completion_tokens"] = 24
    g = reply_chat(short, asked(traits, max_tokens=24), traits)
    assert g is not None and g.text == "Paris" and len(caplog.records) == 1
