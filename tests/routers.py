"""Small stand-ins for the tests of the RAG loop's strategies: a `Router` that routes by
question length (it implements the project's own `gates.base.Router` protocol, so the loop,
the service and the adapters are exercised as with a real router export), and a scripted
generator whose multi-step replies are set per question (deterministic, so the tests can
check batching, stopping and accounting exactly; the vLLM tests run the real engine)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from retrieval_gate.data.answer_confidence import TOKEN_LOGPROBS, AnswerConfidence
from retrieval_gate.data.text_features import TextFeatures, TokenLayout
from retrieval_gate.errors import BackendError
from retrieval_gate.gates.base import Questions, as_questions
from retrieval_gate.generation.base import Generation
from retrieval_gate.pricing import Calibration, route_indices
from retrieval_gate.retrieval import Document

STRATEGIES = ("no_retrieval", "one_retrieval", "multi_step")
COSTS = (0.0, 1.0, 3.35)


class LengthRouter:
    """Up to `short` words: no retrieval; up to `long`: one retrieval; longer: multi-step.
    A budget caps the strategy at the dearest one whose cost is within it. `costs` (strategy
    -> cost, like issue 25's routers' `costs` property) prices the strategies in its own unit;
    without it the router states none (the loop's defaults apply)."""

    name = "length-router"
    threshold = 0.5
    checksum = "length-router-v1"

    def __init__(self, short: int = 4, long: int = 8, strategies: Sequence[str] = STRATEGIES,
                 costs: dict[str, float] | None = None):  # fmt: skip
        self.short, self.long, self.strategies = short, long, tuple(strategies)
        if costs is not None:
            self.costs = dict(costs)
        self._prices = [costs[s] for s in self.strategies] if costs else COSTS

    def _pick(self, text: str, budget: float | None) -> int:
        words = len(text.split())
        pick = 0 if words <= self.short else 1 if words <= self.long else 2
        pick = min(pick, len(self.strategies) - 1)
        if budget is not None:
            pick = min(pick, max(i for i, c in enumerate(self._prices) if c <= budget))
        return pick

    def route(self, questions: Questions, budget: float | None = None) -> list[str]:
        return [self.strategies[self._pick(q.text, budget)] for q in as_questions(questions)]

    def strategy_proba(self, questions: Questions) -> np.ndarray:
        qs = as_questions(questions)
        out = np.zeros((len(qs), len(self.strategies)))
        out[np.arange(len(qs)), [self._pick(q.text, None) for q in qs]] = 1.0
        return out

    def scores(self, questions: Questions) -> np.ndarray:
        return np.array(
            [min(1.0, len(q.text.split()) / self.long) for q in as_questions(questions)]
        )


class TableRouter:
    """A router whose P(correct | strategy) is a given table (rows by question id), routed at
    its calibration's price for a budget."""

    name, threshold = "table-router", 0.5

    def __init__(self, P: dict[str, np.ndarray], calibration: Calibration):
        self.P, self.calibration, self.strategies = P, calibration, calibration.strategies

    def strategy_proba(self, questions):
        return np.array([self.P[q.id] for q in questions])

    def scores(self, questions):
        return 1 - self.strategy_proba(questions)[:, 0]

    def route(self, questions, budget=None):
        P, cal = self.strategy_proba(questions), self.calibration
        return [self.strategies[i] for i in route_indices(P, cal.price(budget), cal.costs)]


class ScriptedGenerator:
    """Closed-book prompts get "I don't know"; with-context prompts the last word of their
    paragraph; a multi-step prompt the next reply of `script[question]` (then "So the answer
    is: <last word of the question>"). Words count as tokens; every call is recorded.
    `fail`: (question, step) pairs whose request fails (as a dead server's would)."""

    name = "scripted-test-generator"
    checksum = "scripted"

    def __init__(self, script: dict[str, list[str]] | None = None, fail=()):
        self.script = script or {}
        self.fail = set(fail)
        self.calls: list[list[str]] = []
        self.seen: Counter[str] = Counter()

    def _reply(self, prompt: str) -> str | BackendError:
        if "Paragraph:\n" in prompt:
            words = prompt.split("Paragraph:\n")[1].split("\n\nQuestion:")[0].split()
            return words[-1] if words else "I don't know"
        if "\nQ: " not in prompt:
            return "I don't know"
        question = prompt.split("\nQ: ")[1].split("\nA:")[0]
        step = self.seen[question]
        self.seen[question] += 1
        if (question, step + 1) in self.fail:
            return BackendError(f"cannot reach the generator server (step {step + 1})")
        replies = self.script.get(question, [])
        return replies[step] if step < len(replies) else f"So the answer is: {question.split()[-1]}"

    def try_generate(self, prompts: Sequence[str], max_new_tokens: int = 24):
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            r = self._reply(p)
            out.append(
                r if isinstance(r, BackendError) else Generation(r, len(p.split()), len(r.split()))
            )
        return out

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False):
        out = self.try_generate(prompts, max_new_tokens)
        for g in out:
            if isinstance(g, BackendError):
                raise g
        return out

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        return np.full((len(prompts), len(choices)), 1 / len(choices))


class WindowedScripted(ScriptedGenerator):
    """The scripted generator with a context window of `window` words (one word, one token)."""

    def __init__(self, window: int, script: dict[str, list[str]] | None = None):
        super().__init__(script)
        self.context_window = window

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        return [len(p.split()) for p in prompts]


# A six-document corpus the routing tests retrieve from (multi-hop: Hamlet -> London -> Romans).
DOCS = [Document(f"d{i}", t, x) for i, (t, x) in enumerate([
    ("Hamlet", "Hamlet is a tragedy written by William Shakespeare in London."),
    ("London", "London was founded by the Romans as Londinium."),
    ("Romans", "The Romans built roads and founded cities across Europe."),
    ("Paris", "Paris is the capital of France."),
    ("Everest", "Mount Everest is the highest mountain on Earth."),
    ("Seine", "The Seine flows through Paris."),
])]  # fmt: skip


# what a two-stage gate reads beside the text: the answer's confidence columns
CONFIDENCE = TextFeatures((), TokenLayout(0, 0), None, AnswerConfidence((0,) * 4, (1,) * 4))


class AnswerConfidenceGate:
    """A two-stage gate's stand-in: P(wrong) = 1 - the geometric mean token probability; an
    answer without log-probabilities gets the question-only score (0.9 when the question says
    "unsure", else 0.1)."""

    name, threshold, checksum = "answer-gate", 0.5, "answer-gate-v1"
    side_features = CONFIDENCE

    def scores(self, questions):
        def p_wrong(lps: list[float] | None, text: str) -> float:
            if lps is None:
                return 0.9 if "unsure" in text else 0.1
            return float(1 - np.exp(np.mean(lps)))

        return np.array([p_wrong(q.extra[TOKEN_LOGPROBS], q.text) for q in as_questions(questions)])
