"""What the adapters share: which branch each question goes down. A binary gate sends a
question to `retrieve` or `direct` at its threshold; a router (`gates.base.Router`) names a
strategy per question (`route(questions, budget)`) and each strategy's branch is read from its
spec (`retrieval_gate.strategies`, with the router export's own specs): one without retrieval
-> `direct`, a multi-step one -> `multi_step`, a one-call one on the caller's retriever and k
-> `retrieve`; any other (its own retriever or k, e.g. a `bm25_top3`) has a branch of its own,
named after it, which the caller wires (`extra` branches). The cascade's second step
(`Escalator`): an answer gate reads the `direct` branch's answers and escalates the unsure
ones to `retrieve`; with a router's budget, only as many as its `BudgetAccount` can pay for."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..gates.base import (  # check_gate: in gates.base, as `create_app` uses it too
    Gate,
    as_questions,
    check_gate,
    checked_threshold,
    is_router,
    side_columns,
)
from ..rag.cascade import Cascade, answer_gate_of, check_answer_gate, escalations
from ..rag.decisions import check_router, strategy_costs
from ..strategies import (
    BRANCHES,
    BUILTIN,
    DIRECT_BRANCH,
    MULTI_STEP,
    RETRIEVE_BRANCH,
    StrategyRegistry,
    StrategySpec,
    adapter_branch,
    check_branch_name,
    declared_by,
    is_strategies_file,
    load_strategies,
)

DIRECT, RETRIEVE, MULTI = DIRECT_BRANCH, RETRIEVE_BRANCH, MULTI_STEP  # the registry's names
BUILT_IN_BRANCHES = BRANCHES
STRATEGIES_ARG = "strategies="  # what the errors tell a Python user to pass (not --strategies)

Strategies = StrategyRegistry | str | Path | None


def registry_of(strategies: Strategies) -> StrategyRegistry | None:
    """The adapters' `strategies=`: a `StrategyRegistry`, or a strategies YAML file read as
    the CLI's `--strategies FILE.yaml` reads it (`load_strategies`); None: the built-ins (and
    a router export's own specs). It declares a router's strategies its export names only
    (one trained on a label file's own strategy names, without a strategies file)."""
    if strategies is None or isinstance(strategies, StrategyRegistry):
        return strategies
    if not isinstance(strategies, str | Path) or not is_strategies_file(str(strategies)):
        raise ConfigError(f"strategies={strategies!r}: give a strategies YAML file (.yaml / "
                          ".yml, a top-level strategies: list) or a StrategyRegistry")  # fmt: skip
    return load_strategies(strategies)


def _check_router(gate: Gate, budget: float | None, strategies: Strategies) -> StrategyRegistry:
    """`check_router` at `strategies` (`registry_of`), its errors naming `strategies=`."""
    with declared_by(STRATEGIES_ARG):
        return check_router(gate, budget, registry_of(strategies) or BUILTIN, flag="budget")


def own_mapping(value: Any, arg: str, kind: str) -> dict[str, Any]:
    """An adapter's branches of the strategies of their own (`arg`: its parameter, e.g.
    LangChain's `branches`, LlamaIndex's `engines`): a mapping of strategy name -> `kind`,
    None for none. A bare name (engines="bm25_top3") was a raw ValueError from dict()."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{arg} is {type(value).__name__}: give a mapping of strategy name "
                          f"-> {kind} (e.g. {arg}={{\"bm25_top3\": ...}})")  # fmt: skip
    return dict(value)


def branch_of(spec: StrategySpec) -> str:
    """A strategy's branch, from what it does (never from its name); a strategy named after a
    built-in branch it does not run is refused (a spec built in Python, past the registry's
    own check), else it went down that branch unsaid."""
    check_branch_name(spec, f"strategy {spec.name!r}")
    return adapter_branch(spec)


def branch_map(
    gate: Gate, budget: float | None = None, strategies: Strategies = None
) -> dict[str, str]:
    """strategy -> branch of every strategy `gate` routes to (a binary gate: none), its
    strategies declared by `strategies` (`registry_of`) where its export names them only."""
    check_gate(gate)
    registry = _check_router(gate, budget, strategies)
    if not is_router(gate):
        return {}
    return {s: branch_of(registry[s]) for s in gate.strategies}  # type: ignore[attr-defined]


def branches_of(
    gate: Gate,
    has_multi_step: bool,
    budget: float | None = None,
    extra: Sequence[str] = (),
    threshold: float | None = None,
    multi_arg: str = MULTI,
    extra_arg: str = "branches",
    strategies: Strategies = None,
) -> list[str]:
    """The branches `gate` can send questions down, checked against what the caller wired:
    a router that routes to multi-step needs that branch, one with a strategy of its own
    (`branch_of`) needs that branch among `extra`; a binary gate takes no multi-step branch
    and no budget (`budget`: a router's operating point), a router no `threshold`. A gate that
    also reads columns of the user's data (`data.features`) is refused: a framework hands the
    adapter the question alone. `multi_arg` / `extra_arg`: the caller's own parameters for the
    multi-step branch and for the strategies' own branches, which the errors name (a
    fixed `multi_step=` sent LlamaIndex users to an argument it does not have). A branch the
    router never routes to (a misspelt strategy's, a multi-step one it never picks) is
    refused, naming the branches it does route to."""
    check_gate(gate)
    if threshold is not None:
        checked_threshold(threshold)
        if is_router(gate):  # it routes at its budget: the threshold went unread
            raise ConfigError(
                f"threshold={threshold}: {gate.name!r} is a router, which picks "
                "a strategy per question at its budget; pass budget= instead"
            )
    if columns := side_columns(gate):
        raise ConfigError(
            f"{gate.name!r} also reads the side features {', '.join(columns)} beside the question, "
            "which a framework's input does not carry: use a gate trained on the question alone, "
            "or score with RetrievalGate.predict_proba(questions, {column: values}) or `serve` "
            '(its requests take "features")'
        )
    mapping = branch_map(gate, budget, strategies)
    if not is_router(gate):
        if has_multi_step or extra:
            raise ConfigError(
                f"{gate.name!r} is a binary gate: it picks retrieve or direct, never "
                "multi-step or another strategy; drop those branches, or pass a router export"
            )
        return [RETRIEVE, DIRECT]
    names = list(dict.fromkeys(mapping.values()))
    if MULTI in names and not has_multi_step:
        raise ConfigError(
            f"router {gate.name!r} routes questions to {MULTI}: pass its branch ({multi_arg}=...)"
        )
    unused = [f"{extra_arg}: {b}=..." for b in extra if b not in names]
    if has_multi_step and MULTI not in names:
        unused.insert(0, f"{multi_arg}=...")
    if unused:  # a misspelt name was taken and never ran, its strategy's questions refused
        raise ConfigError(
            f"router {gate.name!r} never routes questions to the branch given as {unused[0]}: "
            f"it routes to {', '.join(names)}; drop that branch, or fix its name"
        )
    own = [b for b in names if b not in BUILT_IN_BRANCHES and b not in extra]
    if own:
        raise ConfigError(
            f"router {gate.name!r} routes questions to strategy {own[0]!r}, which retrieves in "
            f"its own way (its own retriever or k): pass a branch for it ({extra_arg}: "
            f"{own[0]}=...)"
        )
    return names


def route(
    gate: Gate,
    texts: Sequence[str],
    threshold: float | None = None,
    budget: float | None = None,
    strategies: Strategies = None,
) -> list[str]:
    """The branch of each question: a router's strategy's (at `budget`), else the binary
    gate's decision at `threshold` (None: its own)."""
    if is_router(gate):
        return routed_choices(gate, texts, budget, strategies)[0]
    return routed(gate, texts, threshold)[0]


def routed_choices(
    gate: Gate, texts: Sequence[str], budget: float | None = None, strategies: Strategies = None
) -> tuple[list[str], list[str]]:
    """A router's branch and strategy for each question, from one routing (no scoring)."""
    picked = [str(s) for s in gate.route(list(texts), budget=budget)]  # type: ignore[attr-defined]
    branch = branch_map(gate, budget, strategies)
    return [branch[s] for s in picked], picked


def routed(
    gate: Gate,
    texts: Sequence[str],
    threshold: float | None = None,
    budget: float | None = None,
    strategies: Strategies = None,
) -> tuple[list[str], list[float], list[str] | None]:
    """`route`'s branches, each question's P(needs retrieval) and a router's strategy it
    picked for each question (None: a binary gate), from one scoring of the questions (a
    router's `scores` and `route` of the same batch share one model run). Two strategies may
    share a branch (two multi-step ones): the strategy is the router's own choice, never read
    back from its branch."""
    probs = [float(p) for p in gate.scores(list(texts))]
    if is_router(gate):
        branches, picked = routed_choices(gate, texts, budget, strategies)
        return branches, probs, picked
    t = gate.threshold if threshold is None else threshold
    return [RETRIEVE if p >= t else DIRECT for p in probs], probs, None


# ------------------------------------------------------------------ the cascade's second step
# After the `direct` branch answers, the answer gate (a two-stage gate, rag/cascade.py) reads
# each answer's token log-probabilities; the answers it scores at or above its threshold are
# escalated: the adapter runs those inputs through the `retrieve` branch instead.

LogprobsOf = Callable[[Any], list[float] | None]


def escalate(
    answer_gate: Gate,
    texts: Sequence[str],
    token_logprobs: Sequence[Sequence[float] | None],
    threshold: float | None = None,
    account: BudgetAccount | None = None,
) -> list[bool]:
    """Whether each closed-book answer is escalated: `answer_gate`'s P(answer wrong), from the
    question and its answer's token log-probabilities, >= `threshold` (None: the gate's own),
    the highest first and only as many as `account` (a router's budget) can pay for. A None
    entry reads no answer: that question gets the gate's question-only score."""
    if not texts:
        return []
    asked = as_questions(list(texts), token_logprobs=list(token_logprobs))
    t = answer_gate.threshold if threshold is None else threshold
    scores = np.asarray(answer_gate.scores(asked), dtype=float)
    if account is None:
        return [bool(s >= t) for s in scores]
    picked = set(account.pay(scores, t))
    return [i in picked for i in range(len(scores))]


@dataclass
class BudgetAccount:
    """A router's budget (its mean cost a question) kept over the questions an adapter routes:
    the router's choices are charged as they are made (`charge`), and an escalation is paid
    from what they left (`pay`), so the cascade's second step never takes the mean cost of
    the questions routed so far above the budget (as the RAG loop's cascade, rag/cascade.py).
    Thread-safe: one account may serve concurrent calls."""

    budget: float
    costs: Mapping[str, float]  # strategy -> its cost (two may share a branch)
    extra: float  # an escalation's cost beside the direct answer it replaces
    questions: int = 0
    spent: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, strategies: Sequence[str]) -> None:
        """The router's choices (the strategies it picked, `routed`), each at its own cost: a
        branch two strategies share was charged one of their costs for both."""
        with self._lock:
            self.questions += len(strategies)
            self.spent += sum(self.costs[s] for s in strategies)

    def pay(self, scores: np.ndarray, threshold: float) -> list[int]:
        """The indices escalated (at or above `threshold`, highest first, as many as the
        budget left pays for), charged."""
        with self._lock:
            slack = self.budget * self.questions - self.spent
            picked = escalations(scores, threshold, slack, self.extra)
            self.spent += self.extra * len(picked)
        return picked


def budget_account(
    gate: Gate, budget: float | None, strategies: Strategies = None
) -> BudgetAccount | None:
    """The account escalations are paid from: a router's (or a cascade's first router's) with
    an explicit `budget` whose choices include `direct` and `retrieve`; None (no cap) else.
    `strategies`: as the adapter's (`registry_of`)."""
    first = gate.first if isinstance(gate, Cascade) else gate
    if budget is None or not is_router(first):
        return None
    registry = _check_router(first, budget, strategies)
    cheapest: dict[str, str] = {}  # branch -> its cheapest strategy (the router's cost order)
    for s, b in branch_map(first, budget, strategies).items():
        cheapest.setdefault(b, s)
    if DIRECT not in cheapest or RETRIEVE not in cheapest:
        return None
    costs = strategy_costs(first, registry)
    extra = costs[cheapest[RETRIEVE]] - costs[cheapest[DIRECT]]
    return BudgetAccount(float(budget), costs, extra)


def check_answer(gate: Gate) -> Gate:
    """`gate`, refused unless it reads the answer (`rag.cascade.check_answer_gate`)."""
    check_gate(gate, "answer_gate")
    check_answer_gate(gate, "answer_gate")
    return gate


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def openai_logprobs(found: Any) -> list[float] | None:
    """The token log-probabilities in an OpenAI-compatible `logprobs` object (a dict or the SDK's
    object: `content[i].logprob`, or the completions API's `token_logprobs`), in a whole
    response (its first choice's), or in a stream's list of them; None when there are none."""
    if found is None or isinstance(found, str):
        return None
    if isinstance(found, list):  # a stream: one per chunk
        parts = [openai_logprobs(x) for x in found]
        return [lp for p in parts if p for lp in p] or None
    if choices := _field(found, "choices"):
        return openai_logprobs(_field(choices[0], "logprobs"))
    if (content := _field(found, "content")) and not isinstance(content, str):
        return [float(_field(t, "logprob")) for t in content]
    tokens = _field(found, "token_logprobs")
    return [float(x) for x in tokens] if tokens else None


@dataclass
class Escalator:
    """The answer gate as an adapter holds it. `logprobs_of(output)` reads an answer's token
    log-probabilities (None: the framework's `default` reader, which must find them, else the
    error says `hint`: how to turn them on); a `logprobs_of` of the user's may return None
    for an answer, which then gets the question-only score."""

    gate: Gate
    threshold: float | None = None
    logprobs_of: LogprobsOf | None = None
    default: LogprobsOf = openai_logprobs
    hint: str = "enable log-probabilities on your LLM"
    account: BudgetAccount | None = None  # a router's budget, shared with the routing step

    def __post_init__(self) -> None:
        check_answer(self.gate)
        if self.threshold is not None:
            checked_threshold(self.threshold, "answer_threshold")

    def logprobs(self, outputs: Sequence[Any]) -> list[list[float] | None]:
        found = [(self.logprobs_of or self.default)(o) for o in outputs]
        if self.logprobs_of is None and any(lp is None for lp in found):
            raise ConfigError(
                f"answer_gate reads the direct branch's token log-probabilities, and an output "
                f"carries none ({type(outputs[found.index(None)]).__name__}): {self.hint}; "
                "a vLLM OpenAI-compatible server returns them. Or pass logprobs_of=... reading "
                "them (an output it returns None for gets the question-only score)"
            )
        return found

    def escalations(self, texts: Sequence[str], outputs: Sequence[Any]) -> list[bool]:
        """Whether each `direct` output (the answer to `texts[i]`) is escalated."""
        return escalate(self.gate, texts, self.logprobs(outputs), self.threshold, self.account)


def escalator(
    gate: Gate | None,
    answer_gate: Gate | None,
    threshold: float | None,
    logprobs_of: LogprobsOf | None,
    default: LogprobsOf,
    hint: str,
    account: BudgetAccount | None = None,
) -> Escalator | None:
    """The adapter's `Escalator`: of `answer_gate`, else of `gate` (the adapter's first gate)
    when it is a `rag.cascade.Cascade`; None without either (no second step)."""
    answer_gate = answer_gate_of(gate) if answer_gate is None else answer_gate
    if answer_gate is None:
        if logprobs_of is not None or threshold is not None:
            raise ConfigError("logprobs_of and answer_threshold need answer_gate=...")
        return None
    return Escalator(answer_gate, threshold, logprobs_of, default, hint, account)
