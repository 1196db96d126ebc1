"""Chat-template handling shared by both backends, so vLLM and transformers see the very same
token ids for a prompt (their outputs are then comparable and label files interchangeable)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import InputError

# Chat templates that let the model reason before it answers (Qwen3, SmolLM3 and others read
# `enable_thinking`) get it off: every prompt here asks for a short answer (24 tokens for the
# closed-book one), which a reasoning block would fill before any answer began. Templates that
# do not read it render the same token ids.
THINKING_OFF = {"enable_thinking": False}


def chat_token_ids(tokenizer: Any, prompts: Sequence[str]) -> list[list[int]]:
    """Each prompt as one user turn through the model's chat template, ready for the
    assistant's answer (`THINKING_OFF`). Models without a template get the raw prompt tokens."""
    if getattr(tokenizer, "chat_template", None):
        out = []
        for p in prompts:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                **THINKING_OFF,
            )  # fmt: skip
            if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 BatchEncoding
                ids = ids["input_ids"]
            out.append(list(ids))
        return out
    return [list(tokenizer(p)["input_ids"]) for p in prompts]


def choice_token_ids(tokenizer: Any, choices: Sequence[str]) -> list[list[int]]:
    """The tokens of each answer choice as the assistant would write it (no special tokens)."""
    ids = [list(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in choices]
    for c, t in zip(choices, ids, strict=True):
        if not t:
            raise InputError(f"choice {c!r} tokenises to nothing; pass a non-empty choice")
    return ids


def next_token_split(
    tails: Sequence[Sequence[int]],
) -> tuple[list[int], list[int], list[int]] | None:
    """(shared prefix, one distinct token per choice, shared suffix) when the choices' tokens
    are the same except at ONE position, e.g. "[Yes]"/"[No]" = "[" + Yes|No + "]"; else None
    (choices of different lengths, or differing in more than one token: score them whole).

    Then log P(choice | prompt) = log P(prefix | prompt) + log P(token | prompt + prefix) +
    log P(suffix | prompt + prefix + token); the first term is the same for every choice, so
    next-token log-probabilities alone rank and normalise the choices exactly."""
    if len(tails) < 2 or len({len(t) for t in tails}) != 1:
        return None
    differing = [j for j in range(len(tails[0])) if len({t[j] for t in tails}) > 1]
    if len(differing) != 1:
        return None
    j = differing[0]
    distinct = [t[j] for t in tails]
    if len(set(distinct)) != len(distinct):
        return None  # two choices with the same tokens: nothing tells them apart
    return list(tails[0][:j]), distinct, list(tails[0][j + 1 :])


def common_prefix_length(seqs: Sequence[Sequence[int]], keep: int = 0) -> int:
    """Tokens every sequence starts with, leaving each at least `keep` of its own (the part
    of a template's prompts whose keys and values can be computed once)."""
    n = 0
    while all(len(s) > n + keep for s in seqs) and len({s[n] for s in seqs}) == 1:
        n += 1
    return n


def all_extend(seqs: Sequence[Sequence[int]], prefix: Sequence[int]) -> bool:
    """Whether every sequence starts with a (non-empty) `prefix` and has tokens after it."""
    n = len(prefix)
    return bool(n) and all(len(s) > n and list(s[:n]) == list(prefix) for s in seqs)
