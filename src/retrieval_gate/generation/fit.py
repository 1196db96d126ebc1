"""Prompts that fit the generator's context window, so one long question cannot fail a batch.

vLLM refuses a whole `generate` call when any prompt is longer than its context window. Each
prompt is therefore measured (chat template included) against the window less the answer's
`max_new_tokens`. A with-context prompt that does not fit loses its lowest-ranked documents
first, then words from the end of the one document left; a prompt that does not fit even
without documents gets an error for that question alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..retrieval.base import Hit
from .base import Generator, WindowedGenerator
from .prompts import closed_book_prompt, document_texts, with_context_prompt


@dataclass
class FittedPrompt:
    """The prompt to generate from (None when nothing fits), the documents it holds and why
    it could not be built."""

    prompt: str | None
    hits: list[Hit] = field(default_factory=list)
    error: str | None = None


def check_room(generator: Generator, max_new_tokens: int) -> None:
    """Room for a prompt beside `max_new_tokens` in the generator's context window (known
    before its engine starts): without it every question would fail alone, a run of misses."""
    window = getattr(generator, "context_window", None)
    if window and max_new_tokens >= window:
        raise ConfigError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in "
                          f"{generator.name}'s context window of {window} tokens: pass fewer "
                          "(a short answer needs a few dozen)")  # fmt: skip


def most_documents(generator: Generator, k: int) -> int:
    """The documents worth retrieving for one prompt: at most `k`, and no more than the
    window has tokens (each document takes at least one), which fitting would drop anyway.
    `rag -k 1000000000000` asked the retriever for the whole corpus per question."""
    window = getattr(generator, "context_window", None)
    return min(k, window) if window else k


def build_prompt(question: str, hits: Sequence[Hit] | None, doc_words: int) -> str:
    """Closed-book without hits (None), else with-context over the hits' first words."""
    if hits is None:
        return closed_book_prompt(question)
    return with_context_prompt(question, document_texts(hits, doc_words))


def fit_prompts(
    generator: Generator,
    questions: Sequence[str],
    hits: Sequence[list[Hit] | None],
    doc_words: int,
    max_new_tokens: int,
) -> list[FittedPrompt]:
    """One fitted prompt per question; `hits[i]` is None for a closed-book question.

    Generators that cannot count tokens (a remote server) get the prompts unchanged."""
    prompts = [build_prompt(q, h, doc_words) for q, h in zip(questions, hits, strict=True)]
    if not isinstance(generator, WindowedGenerator):
        return [FittedPrompt(p, list(h or [])) for p, h in zip(prompts, hits, strict=True)]
    budget = generator.context_window - max_new_tokens
    lengths = generator.prompt_lengths(prompts)
    return [
        FittedPrompt(p, list(h or []))
        if n <= budget
        else _shrink(generator, q, h, doc_words, budget, n)
        for q, h, p, n in zip(questions, hits, prompts, lengths, strict=True)
    ]


def most(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest n in lo..hi with ok(n), for an `ok` true up to some n and false after it (a
    prompt's length grows with its documents and words), by binary search: a few tokenizer
    calls, not one per document (`-k` in the thousands took 44 s a question); lo - 1 if none."""
    lo -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _shrink(
    generator: WindowedGenerator,
    question: str,
    hits: list[Hit] | None,
    doc_words: int,
    budget: int,
    tokens: int,
) -> FittedPrompt:
    def fits(kept: list[Hit], words: int) -> bool:
        return generator.prompt_lengths([build_prompt(question, kept, words)])[0] <= budget

    hits = hits or []
    n = most(1, len(hits) - 1, lambda n: fits(hits[:n], doc_words))  # the lowest-ranked go first
    if n:
        return FittedPrompt(build_prompt(question, hits[:n], doc_words), hits[:n])
    if hits:  # one document left: the most words of it that fit
        words = most(1, doc_words, lambda w: fits(hits[:1], w))
        if words:
            return FittedPrompt(build_prompt(question, hits[:1], words), hits[:1])
    window = generator.context_window
    return FittedPrompt(
        None,
        error=f"the question does not fit the generator's context window: its prompt is "
        f"{tokens} tokens{' with its documents' if hits else ''}, and {window} tokens less "
        f"{window - budget} for the answer leave {budget}; shorten the question",
    )
