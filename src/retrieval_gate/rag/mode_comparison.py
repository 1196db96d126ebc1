"""Several gates ("modes") through the same RAG loop on the same questions, side by side.

Honest cost accounting: each mode runs its own pass (`AdaptiveRAG.run`), i.e. its own gate
call, its own batched retrieval call and its own batched generation call holding its
closed-book and with-context prompts together. Sharing one generation batch across modes would
save CPU, but then no mode's generation time would be measured; so modes are not merged.
Two things keep the passes comparable:

- before the first mode, the generator and every gate run once on a couple of questions
  outside the timings (engine and ONNX Runtime warm-up, one-off lazy loading), so no mode pays
  a cold start the others do not;
- before each mode, the generator's prefix cache is cleared when it has one (vLLM caches the
  KV of prompts it has seen; without the reset a later mode would reuse an earlier mode's
  identical prompts and look cheaper than it is in a service);
- the generation cache (`generation/cache.py`) is shared by every mode, so a prompt an earlier
  mode (or run) computed is not computed again; each answer carries the seconds it took when
  it was computed, and a mode's generation time is the sum of those (`Costs.as_computed`), so
  a cached mode shows the cost it would have had fresh. `prompts computed` / `prompts cached`
  say how many were which; `--no-cache` measures everything afresh.

Timings are wall-clock: on a machine shared with other jobs they carry that load, so compare
modes within one run (same questions, same minutes), not across runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from .. import work
from ..errors import InputError, PromptRefused
from ..gates.base import Gate, is_router
from ..generation.base import Generator
from ..generation.prompts import closed_book_prompt
from ..questions import Question
from ..retrieval.base import Retriever
from ..strategies import StrategyRegistry
from .decisions import Budget
from .loop import DEFAULT_K, DEFAULT_MAX_NEW_TOKENS, AdaptiveRAG, Answer, Costs, RagRun
from .multistep import MultiStepConfig

WARMUP_QUESTIONS = 2


@dataclass
class ModeResult:
    mode: str
    gate: str
    run: RagRun

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "gate": self.gate,
            "costs": self.run.costs.to_dict(),
            "answers": [a.to_dict() for a in self.run.answers],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModeResult:
        costs = Costs.from_dict(d["costs"])
        return cls(d["mode"], d["gate"], RagRun([Answer(**a) for a in d["answers"]], costs))


def compare_modes(
    gates: dict[str, Gate],
    questions: Sequence[Question],
    retriever: Retriever,
    generator: Generator,
    k: int = DEFAULT_K,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    warm_up: bool = True,
    done: Mapping[str, ModeResult] | None = None,
    on_result: Callable[[ModeResult], None] | None = None,
    multi_step: MultiStepConfig | None = None,
    budget: Budget = None,
    strategies: Mapping[str, StrategyRegistry] | None = None,
) -> list[ModeResult]:
    """One measured RAG pass per mode (mode name -> gate or router), on exactly the same
    questions. `budget` is the routers' operating point (None: each router's default);
    `strategies`: mode -> the registry its loop runs with (absent: the built-ins).

    `done`: modes already measured by an interrupted run (kept, not re-run); `on_result` is
    called as each mode finishes, so a caller can save it at once."""
    if not questions:
        raise InputError("no questions to answer")
    done = done or {}
    todo = {m: g for m, g in gates.items() if m not in done}
    if warm_up and todo:
        _warm_up(todo, questions[:WARMUP_QUESTIONS], generator)
    bar = tqdm(todo.items(), desc="rag modes", unit="mode")
    for mode, gate in bar:
        bar.set_postfix_str(mode)
        clear_prefix_cache(generator)
        rag = AdaptiveRAG(gate, retriever, generator, k=k, max_new_tokens=max_new_tokens,
                          multi_step=multi_step, budget=budget if is_router(gate) else None,
                          strategies=(strategies or {}).get(mode))  # fmt: skip
        replay = getattr(generator, "replay_seconds", None)  # a cached generator's ledger
        before = work.snapshot()
        run = rag.run(questions)
        c = run.costs
        _count_prompts(c, before, work.snapshot())
        # answers from the generation cache cost what they cost when computed; the part of the
        # ledger not booked by the meter (generation) is the gate's calls to the generator
        gate_replay = 0.0
        if replay is not None:
            gate_replay = (
                generator.replay_seconds - replay - (c.computed_seconds - c.generation_seconds)
            )  # type: ignore[attr-defined]
        c.as_computed(gate_replay)
        result = ModeResult(mode, gate.name, run)
        if on_result is not None:
            on_result(result)
        done = {**done, mode: result}
    return [done[m] for m in gates]


def _count_prompts(c: Costs, before: dict[str, int], after: dict[str, int]) -> None:
    """The pass's prompts and prefill tokens, computed and cached, from the process's work
    counters: the gate's own calls to the generator (prompt, confidence gates) included."""
    delta = {k: after[k] - before[k] for k in after}
    if delta["llm_calls_computed"] + delta["llm_calls_cached"] == 0:
        return  # a generator that does not count (not behind the cache): the meter's counts
    c.prompts_computed, c.prompts_cached = delta["llm_calls_computed"], delta["llm_calls_cached"]
    c.prefill_tokens_computed = delta["prefill_tokens_computed"]
    c.prefill_tokens_cached = delta["prefill_tokens_cached"]


def _warm_up(gates: dict[str, Gate], questions: Sequence[Question], generator: Generator) -> None:
    """Outside the timings; the generation cache is read, but what the warm-up computes (first
    calls, a batch of two) is not stored as any answer's cost. A cached generator whose engine
    has not started is left alone: it warms its engine up itself if a miss starts it, and a
    run served from the cache never starts it."""
    from ..generation.cache import warming

    with warming():
        if getattr(generator, "started", True):
            try:
                generator.generate([closed_book_prompt(q.text) for q in questions],
                                   max_new_tokens=2)  # fmt: skip
            except PromptRefused:  # a server's, for this prompt only: its question fails in
                pass  # the run, as any other's would (the whole run stopped here)
        for gate in gates.values():
            gate.scores(questions)


def clear_prefix_cache(generator: Generator) -> bool:
    """Clears a vLLM generator's prefix cache (the generator's own method, else its `llm`).
    Returns whether there was one to clear."""
    reset = getattr(generator, "reset_prefix_cache", None)
    if not callable(reset):  # asked only now: a cached generator's `llm` would start its engine
        reset = getattr(getattr(generator, "llm", None), "reset_prefix_cache", None)
    if callable(reset):
        reset()
        return True
    return False


def comparison_rows(results: Sequence[ModeResult]) -> list[dict[str, object]]:
    """Table rows: accuracy, retrieval rate, retrieval requests and LLM calls per question,
    per-question milliseconds of each stage, tokens and the engine's tokens per second, the
    gate's (router's) share of end-to-end time, and time saved and accuracy change vs
    always-retrieve (when an `always` mode was run)."""
    always = next((r for r in results if r.mode == "always"), None)
    rows = []
    for r in results:
        c, acc = r.run.costs, r.run.accuracy()
        row: dict[str, object] = {
            "mode": r.mode,
            "n": c.questions,
            "match": _pct(acc["match"]),
            "EM": _pct(acc["em"]),
            "F1": _pct(acc["f1"]),
            "retrieve %": _pct(c.retrieval_rate),
            "retrievals/q": f"{c.retrievals / c.questions:.2f}",
            "LLM calls/q": f"{c.llm_calls / c.questions:.2f}",
            "gate ms/q": f"{c.per_question_ms('gate'):.2f}",
            "retr ms/q": f"{c.per_question_ms('retrieval'):.2f}",
            "gen ms/q": f"{c.per_question_ms('generation'):.1f}",
            "total ms/q": f"{c.per_question_ms('total'):.1f}",
            "q/s": f"{c.questions_per_second:.2f}",
            "prompt tok/q": f"{c.prompt_tokens / c.questions:.0f}",
            "gen tok/q": f"{c.completion_tokens / c.questions:.1f}",
            "tok/s": f"{c.tokens_per_second:.0f}",
            "gate share": f"{100 * c.gate_share:.2f}%",
            "prompts computed": c.prompts_computed,
            "prompts cached": c.prompts_cached,
        }
        if always is not None:
            row.update(_versus_always(r.run, always.run))
        rows.append(row)
    return rows


def _versus_always(run: RagRun, always: RagRun) -> dict[str, object]:
    base = always.costs.total_seconds
    saved = (base - run.costs.total_seconds) / base if base > 0 else 0.0
    acc, ref = run.accuracy()["match"], always.accuracy()["match"]
    delta = "-" if acc is None or ref is None else f"{100 * (acc - ref):+.1f}"
    return {"time saved vs always": f"{100 * saved:+.1f}%", "match vs always": delta}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"
