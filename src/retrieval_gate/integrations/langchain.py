"""LangChain: `GateRouter`, a Runnable that sends each question either to a retrieval chain or
straight to the LLM chain, as the gate decides; with a router, to one of three chains (direct,
retrieve, multi-step, and one per strategy of its own: `branches`). Batches go through the gate
in one call and through each branch with that branch's `batch`. With an `answer_gate` (the
cascade), the direct branch's unsure answers are escalated: re-run through `retrieve`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.base import coerce_to_runnable

from ..errors import ConfigError, InputError
from ..gates.base import Gate, as_questions
from ..gates.encoder import check_text
from .branches import (
    DIRECT,
    MULTI,
    RETRIEVE,
    LogprobsOf,
    Strategies,
    branches_of,
    budget_account,
    escalator,
    openai_logprobs,
    own_mapping,
    registry_of,
    route,
    routed_choices,
)

HINT = ("enable log-probabilities on the chat model (e.g. ChatOpenAI(logprobs=True)) and let the "
        "direct branch return its AIMessage, not a parsed string")  # fmt: skip


def message_logprobs(output: Any) -> list[float] | None:
    """An AIMessage's token log-probabilities, where OpenAI-compatible chat models put them:
    `response_metadata["logprobs"]["content"][i]["logprob"]`."""
    meta = getattr(output, "response_metadata", None) or {}
    return openai_logprobs(meta.get("logprobs"))


def _branch(value: Any, what: str) -> Runnable:
    """A wired branch as a Runnable: a function (or a dict of them) coerced as LangChain's
    own RunnableBranch does (`coerce_to_runnable`: RunnableLambda, RunnableParallel). None was
    taken, and every question routed there got None as its output; a function was a raw
    AttributeError ("'function' object has no attribute 'batch") at the first batch."""
    if isinstance(value, Runnable):
        return value
    if value is not None and (callable(value) or isinstance(value, Mapping)):
        return coerce_to_runnable(value)
    raise ConfigError(f"{what} is {type(value).__name__}: give a Runnable (a chain, an LLM) "
                      "or a function of the input for that branch")  # fmt: skip


class GateRouter(Runnable[Any, Any]):
    """`retrieve` gets the questions the gate flags, `direct` the rest; a router (a
    `RetrievalGate` of a router export) also sends questions to `multi_step`. The input is a
    question string or a dict holding it under `question_key`; each branch receives it
    unchanged. `threshold` overrides a binary gate's stored threshold, `budget` is a router's
    operating point (None: its default). `branches`: a chain per strategy that retrieves in its
    own way (its own retriever or k, e.g. `{"bm25_top3": chain}`), for a router that routes to
    one. `answer_gate` (a two-stage gate; or `gate` a `rag.cascade.Cascade`): the cascade's
    second step, at `answer_threshold` (None: its own), reading each direct output with
    `logprobs_of` (default `message_logprobs`); with a router's `budget`, escalations are paid
    from what its choices left (`branches.BudgetAccount`), the unsurest answers first. Each
    branch is a Runnable, or a function (a dict of them) made one as RunnableBranch does.
    `strategies`: a strategies YAML file (read as the CLI's `--strategies FILE.yaml`) or a
    `StrategyRegistry`, declaring a router's strategies its export names only (a router
    trained on a label file's own strategy names without a strategies file)."""

    def __init__(
        self,
        gate: Gate,
        retrieve: Runnable,
        direct: Runnable,
        multi_step: Runnable | None = None,
        question_key: str = "question",
        threshold: float | None = None,
        budget: float | None = None,
        branches: Mapping[str, Runnable] | None = None,
        answer_gate: Gate | None = None,
        answer_threshold: float | None = None,
        logprobs_of: LogprobsOf | None = None,
        strategies: Strategies = None,
    ):
        self.gate, self.question_key = gate, question_key
        self.strategies = registry_of(strategies)  # read once, not per batch
        self.threshold, self.budget = threshold, budget
        self.retrieve, self.direct = _branch(retrieve, "retrieve"), _branch(direct, "direct")
        self.multi_step = None if multi_step is None else _branch(multi_step, MULTI)
        own = own_mapping(branches, "branches", "Runnable")
        self.own = {name: _branch(b, f"branches[{name!r}]") for name, b in own.items()}
        self.branches = branches_of(gate, multi_step is not None, budget, extra=list(self.own),
                                    threshold=threshold, multi_arg=MULTI,  # its parameter
                                    extra_arg="branches", strategies=self.strategies)  # fmt: skip
        # escalations paid from the budget
        self.account = budget_account(gate, budget, self.strategies)
        self.escalator = escalator(gate, answer_gate, answer_threshold, logprobs_of,
                                   message_logprobs, HINT, self.account)  # fmt: skip

    def _text(self, item: Any) -> str:
        if not isinstance(item, dict):
            return item
        if self.question_key not in item:  # was a bare KeyError
            raise ConfigError(f"an input has no {self.question_key!r} key (it has "
                              f"{', '.join(map(repr, item)) or 'none'}): pass question_key= "
                              "naming the question's")  # fmt: skip
        return item[self.question_key]

    def route(self, inputs: Sequence[Any]) -> list[str]:
        """The branch of each input: retrieve, direct or multi_step."""
        texts = [self._text(x) for x in inputs]
        return route(self.gate, texts, self.threshold, self.budget, self.strategies)

    def decide(self, inputs: Sequence[Any]) -> list[bool]:
        """Whether each input retrieves (one retrieval or multi-step)."""
        return [b != DIRECT for b in self.route(inputs)]

    def escalations(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> list[bool]:
        """Whether the answer gate escalates each `direct` output (the answer to `inputs[i]`)
        to `retrieve`: the cascade's second step, for wiring it yourself."""
        if self.escalator is None:
            raise ConfigError("GateRouter.escalations needs answer_gate=... (a two-stage gate)")
        return self.escalator.escalations([self._text(x) for x in inputs], outputs)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.batch([input], config, **kwargs)[0]

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        if isinstance(config, list) and len(config) != len(inputs):  # was a raw IndexError
            raise ConfigError(f"config has {len(config)} entries for {len(inputs)} inputs: give "
                              "one RunnableConfig per input, or one for all")  # fmt: skip
        outputs: list[Any] = [None] * len(inputs)
        every = list(range(len(inputs)))
        ok = self._readable(inputs, outputs) if kwargs.get("return_exceptions") else every
        if not ok:
            return outputs
        texts = [self._text(inputs[i]) for i in ok]
        if self.account is None:
            branches = route(self.gate, texts, self.threshold, self.budget, self.strategies)
        else:  # a router's budget: each choice charged at its strategy's cost
            branches, strategies = routed_choices(self.gate, texts, self.budget, self.strategies)
            self.account.charge(strategies)
        decisions = dict(zip(ok, branches, strict=True))
        runnables = {RETRIEVE: self.retrieve, DIRECT: self.direct, MULTI: self.multi_step,
                     **self.own}  # fmt: skip
        for name, branch in runnables.items():
            idx = [i for i, d in decisions.items() if d == name]
            self._run(branch, idx, inputs, outputs, config, kwargs)
        if self.escalator is not None:  # the cascade: unsure direct answers go to retrieve
            # a failed call (return_exceptions) stays its input's output: it has no answer to
            # read, and the others' escalations went with it (a log-probabilities ConfigError)
            direct = [i for i, d in decisions.items()
                      if d == DIRECT and not isinstance(outputs[i], Exception)]  # fmt: skip
            up = self.escalations([inputs[i] for i in direct], [outputs[i] for i in direct])
            idx = [i for i, e in zip(direct, up, strict=True) if e]
            self._run(self.retrieve, idx, inputs, outputs, config, kwargs)
        return outputs

    def _readable(self, inputs: list[Any], outputs: list[Any]) -> list[int]:
        """The inputs a question can be read from and the gate can score (`check_text`: not
        empty, valid Unicode); each other one's error is its output (`return_exceptions`: one
        empty question, or one with a lone surrogate, failed the whole batch)."""
        ok = []
        for i, item in enumerate(inputs):
            try:
                for q in as_questions([self._text(item)]):
                    check_text(q.text, i)
                ok.append(i)
            except (InputError, ConfigError) as e:
                outputs[i] = e
        return ok

    @staticmethod
    def _run(
        branch: Runnable | None,
        idx: list[int],
        inputs: list[Any],
        outputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None,
        kwargs: dict[str, Any],
    ) -> None:
        """`branch.batch` over the inputs at `idx`, its outputs written in place."""
        if not idx or branch is None:
            return
        cfg = [config[i] for i in idx] if isinstance(config, list) else config
        for i, out in zip(idx, branch.batch([inputs[i] for i in idx], cfg, **kwargs), strict=True):
            outputs[i] = out
