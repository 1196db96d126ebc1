"""The Generator interface: batched generation, optional per-token log-probabilities."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import BackendError


@dataclass
class Generation:
    """One generated answer with its token accounting. `seconds` (the answer's share of the
    batch that computed it) and `cached` (served from the generation cache) are set by
    `generation.cache.CachedGenerator`, `finished` (`time.perf_counter()` when a server's
    answer came back) by `RemoteGenerator`; they are not part of the answer (equality ignores
    them)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    token_logprobs: list[float] | None = None
    seconds: float | None = field(default=None, compare=False, repr=False)
    cached: bool = field(default=False, compare=False, repr=False)
    finished: float | None = field(default=None, compare=False, repr=False)

    @property
    def mean_logprob(self) -> float | None:
        """Mean log-probability of the generated tokens (None without logprobs)."""
        if not self.token_logprobs:
            return None
        return float(np.mean(self.token_logprobs))


@runtime_checkable
class Generator(Protocol):
    """Generates for a whole batch of user prompts in one call (chat template applied inside).

    `name` and `checksum` (sha256 of the weights) go into label-file provenance."""

    name: str
    checksum: str

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]: ...

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        """P(choice | prompt) for each prompt, normalised over `choices`: shape (n, len(choices)).
        Prompt gates use it to score P([Yes])."""
        ...


@runtime_checkable
class WindowedGenerator(Generator, Protocol):
    """A generator that knows its context window and counts a prompt's tokens exactly as it
    will feed them (chat template included), so callers can fit prompts before generating:
    one prompt over the window would otherwise fail the engine's whole batch."""

    context_window: int  # tokens per sequence: prompt + generated answer

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]: ...


@runtime_checkable
class PartialGenerator(Generator, Protocol):
    """A generator whose prompts succeed or fail one by one (a server: each prompt is its own
    request). `try_generate` returns, per prompt, its generation or the `BackendError` that
    ended it, so a server dying mid-batch fails the prompts it did not answer, not the batch."""

    def try_generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation | BackendError]: ...


def checksum_of(factory: Callable[[], Generator]) -> str:
    """The weights identity of the generator a factory returns: the factory's own `checksum`
    when it knows it without starting an engine (`LazyGenerator`), else the generator's."""
    known = getattr(factory, "checksum", None)
    return known if known is not None else factory().checksum
