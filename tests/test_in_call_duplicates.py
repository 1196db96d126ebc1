"""A prompt repeated within one generator call (PopQA repeats 62 question texts) is computed
once, so it is charged once: its copies cost 0.0 seconds and are not counted as read from the
store. A cold, a warm and a `--no-cache` pass report the same costs (docs/rag.md)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from retrieval_gate import work
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.cache import CachedGenerator, GenerationStore
from retrieval_gate.rag.costs import Costs, Meter

LATENCY = 0.2  # one batched call: the engine answers every prompt of it at once


class SlowGenerator:
    """Takes LATENCY per call, whatever its size (a batching engine or a server's concurrent
    requests); records the prompts of each call."""

    name = "slow"
    backend = "fake"
    checksum = "slow-weights"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls.append(list(prompts))
        time.sleep(LATENCY)
        return [Generation(f"answer to {p}", 4, 2) for p in prompts]

    def choice_probs(self, prompts, choices):
        self.calls.append(list(prompts))
        time.sleep(LATENCY)
        return np.array([[0.25, 0.75] for _ in prompts])


@pytest.fixture
def store(tmp_path):
    s = GenerationStore(tmp_path / "generations.sqlite")
    yield s
    s.close()


def _pass(generator, prompts: list[str]) -> tuple[Costs, dict[str, int]]:
    """One metered call, costs replayed as the RAG comparison does; and the work it counted."""
    costs, before = Costs(questions=len(prompts)), work.snapshot()
    Meter(costs).generate(generator, prompts, ["no_retrieval"] * len(prompts), 8)
    costs.total_seconds = costs.generation_seconds
    costs.as_computed()
    after = work.snapshot()
    return costs, {k: after[k] - before[k] for k in ("llm_calls_computed", "llm_calls_cached")}


def test_duplicates_are_charged_once_and_not_counted_as_cached(store):
    prompts = ["Who wrote Hamlet?"] * 4
    slow = SlowGenerator()
    cold, cold_work = _pass(CachedGenerator(slow, store=store), prompts)
    assert slow.calls == [["Who wrote Hamlet?"]]
    # the old code booked 4 x LATENCY on a call that took LATENCY
    assert LATENCY <= cold.generation_seconds < 2 * LATENCY
    assert (cold.prompts_computed, cold.prompts_cached) == (4, 0)  # the store was empty
    assert cold_work == {"llm_calls_computed": 4, "llm_calls_cached": 0}

    warm, warm_work = _pass(CachedGenerator(SlowGenerator(), store=store), prompts)
    assert warm.generation_seconds == pytest.approx(cold.generation_seconds, rel=1e-12)
    assert (warm.prompts_computed, warm.prompts_cached) == (0, 4)
    assert warm_work == {"llm_calls_computed": 0, "llm_calls_cached": 4}

    fresh, _ = _pass(CachedGenerator(SlowGenerator(), store=None), prompts)  # --no-cache
    assert cold.generation_seconds == pytest.approx(fresh.generation_seconds, rel=0.5)


def test_a_stored_prompt_repeated_is_replayed_once(store):
    gen = CachedGenerator(SlowGenerator(), store=store)
    (first,) = gen.generate(["q"], 8)
    out = gen.generate(["q", "p", "q"], 8)
    assert [g.cached for g in out] == [True, False, True]
    assert out[0].seconds == first.seconds and out[2].seconds == 0.0


def test_repeated_choice_prompts_are_charged_once(store):
    """The seconds a prompt gate's scores took (its replayed decision time) likewise."""
    gen = CachedGenerator(SlowGenerator(), store=store)
    before = gen.replay_seconds
    gen.choice_probs(["p", "p", "p"], ["[Yes]", "[No]"])
    assert abs(gen.replay_seconds - before) < LATENCY / 2  # booked what the call took
    warm = CachedGenerator(SlowGenerator(), store=store)
    counted = work.snapshot()
    warm.choice_probs(["p", "p", "p"], ["[Yes]", "[No]"])
    assert LATENCY / 2 < warm.replay_seconds < 1.5 * LATENCY  # not 3 x LATENCY
    assert work.snapshot()["llm_calls_cached"] - counted["llm_calls_cached"] == 3
