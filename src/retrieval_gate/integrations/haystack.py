"""Haystack: `RetrievalGateRouter`, a component with an output socket per branch: the query
comes out of `retrieve` when the gate says it needs retrieval, else out of `direct`; with a
router, also out of `multi_step`, and out of a branch named after each strategy of its own (its
own retriever or k, `integrations.branches.branch_of`). Only one branch of the pipeline runs.
`AnswerGateRouter`, the cascade's second step: after the direct branch's generator, its
unsure answers' queries come out of `escalate` (wire it to the retrieve branch), the rest's
replies out of `answer`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haystack import component
from haystack.core.serialization import default_from_dict, default_to_dict
from haystack.utils import deserialize_callable, serialize_callable

from ..errors import ConfigError
from ..gates.base import Gate, is_router
from ..strategies import StrategyRegistry
from .branches import (
    MULTI,
    BudgetAccount,
    Escalator,
    LogprobsOf,
    Strategies,
    branch_map,
    branches_of,
    budget_account,
    openai_logprobs,
    registry_of,
    routed,
)

# budget_account: shared by the two routers so escalations are paid from the budget
__all__ = ["AnswerGateRouter", "RetrievalGateRouter", "budget_account", "reply_logprobs"]

HINT = ("enable log-probabilities on the generator (e.g. OpenAIChatGenerator(generation_kwargs="
        '{"logprobs": True}), which puts them in each reply\'s meta)')  # fmt: skip


# RetrievalGateRouter's output sockets beside its branches': a strategy of its own named like
# one (a valid name) was a raw TypeError from set_output_types, and run() overwrote its query
FIXED_SOCKETS = {"probability": "P(needs retrieval)", "strategy": "the strategy picked"}


def _saved_gate(gate: Gate) -> dict[str, Any]:
    """What a saved pipeline keeps of a gate: the folder it was loaded from
    (`RetrievalGate.from_pretrained`), absolute (a relative one named another folder, or none,
    when the pipeline was loaded elsewhere), its backend, variant, threshold and load options
    (device, batch_size), as a pickled gate keeps them. A gate built in
    Python has no folder to name: refused, saying so (a pipeline failed to save with
    Haystack's "unsupported value of type RetrievalGate")."""
    folder = getattr(gate, "folder", None)
    if folder is None:
        raise ConfigError(f"a pipeline saves its gate by the folder it was loaded from, and "
                          f"{gate.name!r} ({type(gate).__name__}) has none: load it with "
                          "RetrievalGate.from_pretrained(folder) to save the pipeline")  # fmt: skip
    return {
        "folder": str(Path(folder).expanduser().absolute()),
        "backend": getattr(gate, "backend", None),
        "variant": getattr(gate, "variant", None),
        "threshold": float(gate.threshold),
        "load_options": dict(getattr(gate, "load_options", None) or {}),
    }


def _loaded_gate(saved: dict[str, Any]) -> Gate:
    """The gate `_saved_gate` named, loaded again, its threshold as it was."""
    from ..gates.pretrained import reload_gate

    return reload_gate(saved["folder"], saved.get("backend"), saved.get("variant"),
                       saved["threshold"], saved.get("load_options"))  # fmt: skip


def _with_gate(data: dict[str, Any], key: str) -> dict[str, Any]:
    params = dict(data.get("init_parameters") or {})
    params[key] = _loaded_gate(params[key])
    return {**data, "init_parameters": params}


def _unshared(account: BudgetAccount | None) -> None:
    if account is not None:  # one object shared by two components: a copy each on reload
        raise ConfigError("a pipeline whose routers share a budget account cannot be saved "
                          "(each would load its own): build it in code, or save it without "
                          "account=")  # fmt: skip


def _saved_strategies(strategies: StrategyRegistry | str | Path) -> str:
    """What a saved pipeline keeps of `strategies=`: the YAML file's absolute path (read again
    on load); a `StrategyRegistry` built in Python has no file to name: refused, saying so."""
    if isinstance(strategies, StrategyRegistry):
        raise ConfigError("a pipeline saves strategies= by its YAML file, and it was given a "
                          f"StrategyRegistry ({strategies.source}): pass the strategies file's "
                          "path as strategies= to save the pipeline")  # fmt: skip
    return str(Path(strategies).expanduser().absolute())


def reply_logprobs(reply: Any) -> list[float] | None:
    """A generator reply's token log-probabilities: `reply.meta["logprobs"]`, as the OpenAI
    chat generators put them there (a stream's: one per chunk)."""
    meta = getattr(reply, "meta", None) or {}
    return openai_logprobs(meta.get("logprobs"))


@component
class RetrievalGateRouter:
    """Connect `retrieve` to the retriever branch and `direct` to the LLM-only branch (a
    router: also `multi_step` to a multi-step branch); `probability` always carries
    P(needs retrieval), and a router's `strategy` the strategy it picked. `threshold`
    overrides a binary gate's threshold, `budget` is a router's operating point; `account`
    (`budget_account(gate, budget)`, shared with an `AnswerGateRouter`) is charged with each
    choice, so that the answer gate's escalations are paid from the budget. `strategies`: a
    strategies YAML file (read as the CLI's `--strategies FILE.yaml`) or a `StrategyRegistry`
    declaring a router's strategies its export names only (pass the same to `budget_account`);
    a saved pipeline keeps the file's path (a registry object cannot be saved)."""

    def __init__(self, gate: Gate, threshold: float | None = None, budget: float | None = None,
                 account: BudgetAccount | None = None,
                 strategies: Strategies = None):  # fmt: skip
        self.gate, self.threshold, self.budget = gate, threshold, budget
        self.account, self.strategies = account, strategies
        self.registry = registry_of(strategies)  # read once, not per query
        own = list(branch_map(gate, budget, self.registry).values())  # a socket per branch
        self.branches = branches_of(gate, MULTI in own, budget, extra=own, threshold=threshold,
                                    strategies=self.registry)  # fmt: skip
        fixed = {"probability": float, **({"strategy": str} if is_router(gate) else {})}
        if clash := next((b for b in self.branches if b in FIXED_SOCKETS), None):
            raise ConfigError(f"strategy {clash!r} names a branch socket that clashes with the "
                              f"component's fixed output socket {clash!r} (it carries "
                              f"{FIXED_SOCKETS[clash]}): rename the strategy in its strategies "
                              "file (e.g. bm25_top3)")  # fmt: skip
        component.set_output_types(self, **dict.fromkeys(self.branches, str), **fixed)

    def to_dict(self) -> dict[str, Any]:
        """The component in a saved pipeline (`Pipeline.dumps`, YAML): its gate by folder."""
        _unshared(self.account)
        given = self.strategies
        saved = {} if given is None else {"strategies": _saved_strategies(given)}
        return default_to_dict(self, gate=_saved_gate(self.gate), threshold=self.threshold,
                               budget=self.budget, **saved)  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrievalGateRouter:
        return default_from_dict(cls, _with_gate(data, "gate"))

    def run(self, query: str) -> dict[str, Any]:
        (branch,), (p,), strategies = routed(self.gate, [query], self.threshold, self.budget,
                                             self.registry)  # fmt: skip
        out: dict[str, Any] = {branch: query, "probability": p}
        if strategies is not None:  # a router: the strategy it picked (two may share a branch)
            if self.account is not None:
                self.account.charge(strategies)
            out["strategy"] = strategies[0]
        return out


@component
class AnswerGateRouter:
    """The cascade's second step: connect the direct branch's generator `replies` (and the
    query) in; an answer `answer_gate` escalates sends the query out of `escalate` (connect it,
    with the first router's `retrieve`, through a `BranchJoiner(str)` to the retrieve branch),
    any other its replies out of `answer`. `threshold` overrides the answer gate's own,
    `logprobs_of(reply)` reads a reply's token log-probabilities (default `reply_logprobs`);
    `account`: the first router's (see `RetrievalGateRouter`), escalations paid from it."""

    def __init__(
        self,
        answer_gate: Gate,
        threshold: float | None = None,
        logprobs_of: LogprobsOf | None = None,
        account: BudgetAccount | None = None,
    ):
        self.escalator = Escalator(answer_gate, threshold, logprobs_of, reply_logprobs, HINT,
                                   account)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """The component in a saved pipeline: its answer gate by folder, `logprobs_of` by its
        import path."""
        e = self.escalator
        _unshared(e.account)
        reader = serialize_callable(e.logprobs_of) if e.logprobs_of is not None else None
        return default_to_dict(self, answer_gate=_saved_gate(e.gate), threshold=e.threshold,
                               logprobs_of=reader)  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerGateRouter:
        data = _with_gate(data, "answer_gate")
        reader = data["init_parameters"].get("logprobs_of")
        if reader is not None:
            data["init_parameters"]["logprobs_of"] = deserialize_callable(reader)
        return default_from_dict(cls, data)

    def escalations(self, queries: Sequence[str], replies: Sequence[Any]) -> list[bool]:
        """Whether the answer gate escalates each reply (the answer to `queries[i]`)."""
        return self.escalator.escalations(queries, replies)

    @component.output_types(answer=list[Any], escalate=str)
    def run(self, query: str, replies: list[Any]) -> dict[str, Any]:
        if not replies:  # no answer at all: nothing to keep
            return {"escalate": query}
        (up,) = self.escalations([query], replies[:1])
        return {"escalate": query} if up else {"answer": replies}
