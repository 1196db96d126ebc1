"""THE strategy registry (issue 36): every retrieval strategy is one `StrategySpec`, and the RAG
loop, `label --policy strategies`, `serve`, the oracles, costs and priors and the framework
adapters iterate specs. This module is the only one that names a strategy; everything else
asks a spec what it does (`retrieves`, `multi_step`, `k`, `prompt`) instead of comparing names.

A low layer (errors and PyYAML only), so every layer reads it.

Built-ins, in cost order (the user's unit: retrievals per question; issue 25's defaults):

    no_retrieval   cost 0     no retriever, the closed-book prompt, one LLM call
    one_retrieval  cost 1     the verb's retriever (--retriever) with its --k, the
                              with-context prompt, one LLM call
    multi_step     cost 3.35  the verb's retriever, IRCoT-style multi-step reasoning (at most
                              --max-steps LLM calls; 3.35 is the Adaptive-RAG release's mean
                              IRCoT step count)

A user declares more in YAML: a file whose top-level `strategies:` key is a list of mappings,
cheapest first, each with at least `name:` and `cost:`:

    strategies:
      - name: no_retrieval          # a built-in's name alone reuses the built-in (with
                                    # some keys: the built-in with those keys changed)
      - name: bm25_top3
        cost: 0.6                   # retrievals (or any unit, the same for every strategy)
        retriever: bm25             # none | default (the verb's --retriever) | bm25 | dense | contexts
        k: 3                        # documents (default: the verb's --k)
        steps: 1                    # 1, or multi (the multi-step reasoner; max_steps: N caps it)
        llm_calls: 1                # LLM calls per question where known (the second cost axis)
      - name: one_retrieval
      - name: multi_step

Keys: name, cost, retriever, k, steps, max_steps, prompt, generator, llm_calls, description.
`prompt` is implied by the rest (closed-book without a retriever, with-context with one,
ircot for multi-step) and, when given, must agree. `generator` (an OpenAI-compatible URL or
a model folder) is carried in specs and exports; the verbs of this version run every strategy
on their one generator and refuse a spec that names another one before any engine starts."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .yaml_files import Misread, read_yaml

NO_RETRIEVAL, ONE_RETRIEVAL, MULTI_STEP = "no_retrieval", "one_retrieval", "multi_step"
MAX_COST = 1e12  # a strategy's cost in any unit (ms, tokens, money); 1e308 overflowed sums
DEFAULT_RETRIEVER = "default"  # the verb's own --retriever
RETRIEVERS = ("none", DEFAULT_RETRIEVER, "bm25", "dense", "contexts")
PROMPTS = ("closed-book", "with-context", "ircot")
KEYS = ("name", "cost", "retriever", "k", "steps", "max_steps", "prompt", "generator",
        "llm_calls", "description")  # fmt: skip
MULTI = "multi"  # `steps: multi`
MAX_STEPS_LIMIT = 10  # the most steps (LLM calls) a multi-step question takes (--max-steps)
# The framework adapters' branches (integrations/branches.py), each read from what a strategy
# runs: no retrieval, the verb's retriever and k in one call, multi-step; any other strategy
# has a branch named after it, so a strategy named after one of these must run what it runs.
DIRECT_BRANCH, RETRIEVE_BRANCH = "direct", "retrieve"
BRANCHES = (DIRECT_BRANCH, RETRIEVE_BRANCH, MULTI_STEP)
COST_AXES = ("retrievals", "llm_calls")  # the cost model's axes (rag/costs.py's vocabulary)


@dataclass(frozen=True)
class StrategySpec:
    """One strategy: its name, cost (the user's unit, retrievals by default), what it retrieves
    (`retriever`: None for none, `default` for the verb's --retriever, or a named one, with `k`
    documents; None: the verb's --k), whether it reasons in steps (`multi_step`, at most
    `max_steps` LLM calls; None: the verb's --max-steps), its prompt, optionally its own
    generator and its LLM calls per question where known."""

    name: str
    cost: float
    retriever: str | None = None
    k: int | None = None
    multi_step: bool = False
    max_steps: int | None = None
    prompt: str = ""
    generator: str | None = None
    llm_calls: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not self.prompt:
            object.__setattr__(self, "prompt", implied_prompt(self.retriever, self.multi_step))
        if self.llm_calls is None and not self.multi_step:
            object.__setattr__(self, "llm_calls", 1.0)

    @property
    def retrieves(self) -> bool:
        return self.retriever is not None

    @property
    def steps(self) -> int | str:
        """What `steps:` says in YAML: 1, or `multi`."""
        return MULTI if self.multi_step else 1

    @property
    def expected_llm_calls(self) -> float:
        """LLM calls a question of it makes (the cost model's second axis): its `llm_calls`
        where declared; a multi-step strategy without one makes one call a step and retrieves
        once a step, so its expected steps are its cost in retrievals (the built-in's 3.35),
        at least 1 and at most its `max_steps` (else the most any run takes: a cost in another
        unit, 1422 ms, read as 1422 calls). Declare `llm_calls:` when cost is in another unit."""
        if self.llm_calls is not None:
            return self.llm_calls
        return min(max(self.cost, 1.0), float(self.max_steps or MAX_STEPS_LIMIT))

    def documents(self, default_k: int) -> int:
        """Documents per retrieval (0 without one): its own k, else the verb's."""
        return 0 if not self.retrieves else (self.k or default_k)

    def retriever_name(self, default: str) -> str | None:
        """The retriever it needs, the verb's own (`default`) resolved."""
        return None if self.retriever is None else (
            default if self.retriever == DEFAULT_RETRIEVER else self.retriever)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """Its YAML / export form (every key; `retriever: none` without one)."""
        return {"name": self.name, "cost": self.cost, "retriever": self.retriever or "none",
                "k": self.k, "steps": self.steps, "max_steps": self.max_steps,
                "prompt": self.prompt, "generator": self.generator,
                "llm_calls": self.llm_calls, "description": self.description}  # fmt: skip


def implied_prompt(retriever: str | None, multi_step: bool) -> str:
    return PROMPTS[2] if multi_step else PROMPTS[1] if retriever is not None else PROMPTS[0]


def _branch_run(spec: StrategySpec) -> str | None:
    """The built-in branch whose run `spec` runs (None: a run of its own)."""
    if not spec.retrieves:
        return DIRECT_BRANCH
    if spec.multi_step:
        return MULTI_STEP
    if spec.retriever == DEFAULT_RETRIEVER and spec.k is None:
        return RETRIEVE_BRANCH
    return None


def adapter_branch(spec: StrategySpec) -> str:
    """A strategy's branch in the framework adapters, from what it runs (never its name):
    `direct`, `retrieve` or `multi_step`, else a branch of its own named after it."""
    return _branch_run(spec) or spec.name


def check_branch_name(spec: StrategySpec, where: str, path: str | Path | None = None) -> None:
    """A strategy named after an adapter branch runs that branch's run: a bm25 top-3 strategy
    named `direct` had its questions sent down the adapters' no-retrieval branch, unsaid."""
    runs = _branch_run(spec)
    if spec.name in BRANCHES and runs != spec.name:
        does = (
            f"runs what the {runs} branch runs"
            if runs
            else "retrieves in its own way (its retriever or k)"
        )
        raise ConfigError(f"{where}: {spec.name!r} is the name of a framework adapter's built-in "
                          f"branch ({', '.join(BRANCHES)}), and this strategy {does}: an "
                          f"adapter would send its questions down the {spec.name} branch, which "
                          "does not run it; rename the strategy", path)  # fmt: skip


BUILTINS: tuple[StrategySpec, ...] = (
    StrategySpec(NO_RETRIEVAL, 0.0, description="closed book"),
    StrategySpec(ONE_RETRIEVAL, 1.0, DEFAULT_RETRIEVER, description="top-k documents"),
    StrategySpec(
        MULTI_STEP,
        3.35,
        DEFAULT_RETRIEVER,
        multi_step=True,
        description="IRCoT-style interleaved retrieval and reasoning",
    ),  # fmt: skip
)
BUILTIN_BY_NAME = {s.name: s for s in BUILTINS}
DEFAULT_COSTS = {s.name: s.cost for s in BUILTINS}


@dataclass(frozen=True)
class StrategyRegistry:
    """Strategies in cost order (the cheapest first) and where they were declared."""

    specs: tuple[StrategySpec, ...] = BUILTINS
    source: str = "built-in"
    _by_name: dict[str, StrategySpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {s.name: s for s in self.specs})

    def __iter__(self) -> Iterator[StrategySpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> StrategySpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(
                f"unknown strategy {name!r}; the registry ({self.source}) holds "
                f"{', '.join(self.names)} (in that cost order)"
            ) from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    @property
    def is_builtin(self) -> bool:
        return self.specs == BUILTINS

    def check(self, names: Iterable[str], where: str) -> None:
        """Every name is registered (`where` names the flag, file or router)."""
        unknown = [n for n in names if n not in self]
        if unknown:
            raise ConfigError(
                f"{where}: unknown strategy {unknown[0]!r}; the registry ({self.source}) holds "
                f"{', '.join(self.names)} (in that cost order; declare more with "
                f"{declare_hint()})"
            )

    def in_cost_order(self, names: Sequence[str]) -> bool:
        return list(names) == [n for n in self.names if n in set(names)]

    def costs(self, names: Sequence[str]) -> tuple[float, ...]:
        return tuple(self[n].cost for n in names)

    def costs_in_order(self, names: Sequence[str], where: str) -> tuple[float, ...]:
        """The costs of a label file's strategies (`names`, in its order: its targets are the
        cheapest strategy that answered, in that order), each registered and cheapest first;
        priced out of order, a router was calibrated at costs [0, 3, 1] and its oracle picked
        the dearer strategy."""
        self.check(names, where)
        costs = self.costs(names)
        if list(costs) != sorted(costs):
            said = ", ".join(f"{n} {c:g}" for n, c in zip(names, costs, strict=True))
            raise ConfigError(
                f"{where}: the registry ({self.source}) prices them {said}, not cheapest first "
                "in the label file's strategy order (its targets are the cheapest strategy that "
                "answered, in that order): give the strategies costs in that order, or label "
                "again with the strategies listed cheapest first"
            )
        return costs

    def llm_calls(self, names: Sequence[str]) -> tuple[float, ...]:
        """Each strategy's expected LLM calls per question (`StrategySpec.expected_llm_calls`)."""
        return tuple(self[n].expected_llm_calls for n in names)

    def cheapest(self, names: Sequence[str] | None = None) -> StrategySpec:
        return self[(list(names) if names else list(self.names))[0]]

    def binary_pair(self, names: Sequence[str] | None = None) -> tuple[str, str]:
        """The two strategies a binary gate picks between: the cheapest that does not
        retrieve, and the cheapest one-call strategy on the verb's own retriever and --k
        (else the cheapest one-call strategy that retrieves)."""
        specs = [self[n] for n in names] if names else list(self.specs)
        closed = next((s for s in specs if not s.retrieves), None)
        single = [s for s in specs if s.retrieves and not s.multi_step]
        own = [s for s in single if s.retriever == DEFAULT_RETRIEVER and s.k is None]
        pick = (own or single or [None])[0]
        if closed is None or pick is None:
            raise ConfigError(
                f"strategies {', '.join(s.name for s in specs)} ({self.source}): a binary gate "
                "needs one strategy without retrieval and one one-call strategy with it"
            )
        return closed.name, pick.name

    def merged(
        self, specs: Iterable[StrategySpec], where: str, carried: bool = True
    ) -> StrategyRegistry:
        """This registry plus `specs` it lacks (a router export's own); a spec registered here
        under the same name must agree on what it runs (retriever, k, steps, prompt) and, in
        a registry the user declared (not the built-ins, whose costs a router's replace), on
        its cost: else a budget in the router's unit was read in the file's. `carried`: the
        router carries these specs (False: names only, which the file must declare)."""
        specs = list(specs)
        extra = []
        for s in specs:
            if s.name not in self:
                extra.append(s)
            elif _runs(self[s.name]) != _runs(s):
                raise ConfigError(
                    f"{where}: strategy {s.name!r} runs {_runs(s)} there but {_runs(self[s.name])}"
                    f" in the registry ({self.source}); rename one of them"
                )
        self._check_costs([s for s in specs if s.name in self], where, carried)
        if not extra:
            return self
        specs_all = sorted((*self.specs, *extra), key=lambda s: s.cost)  # stable: ties keep order
        return StrategyRegistry(tuple(specs_all), f"{self.source} + {where}")

    def _check_costs(self, specs: Sequence[StrategySpec], where: str, carried: bool) -> None:
        """`specs` (a router's) cost what this registry declares (`merged`). Leaving the file
        out is offered only where the router `carried` its specs: one with names only was then
        refused as undeclared."""
        if self == BUILTIN:  # no --strategies: the router's own costs price its strategies
            return
        ours = self.costs([s.name for s in specs])
        if not all(math.isclose(s.cost, c, rel_tol=1e-5, abs_tol=1e-8)
                   for s, c in zip(specs, ours, strict=True)):  # fmt: skip
            declare = ", ".join(f"{s.name}: {s.cost!r}" for s in specs)
            out = f", or leave {_FLAG.get()} out" if carried else ""
            raise ConfigError(
                f"{where} was calibrated at costs {[s.cost for s in specs]} of "
                f"{[s.name for s in specs]}; {_FLAG.get()} ({self.source}) prices them at "
                f"{list(ours)}, so its budgets are not in the file's unit: pass a strategies "
                f"file with its costs (cost: entries {declare}){out}"
            )

    def to_list(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return [self[n].to_dict() for n in (names or self.names)]


def _runs(s: StrategySpec) -> dict[str, Any]:
    return {"retriever": s.retriever or "none", "k": s.k, "steps": s.steps,
            "max_steps": s.max_steps, "prompt": s.prompt}  # fmt: skip


BUILTIN = StrategyRegistry()


# ---------------------------------------------------------------- YAML / export form


# A strategy's name: one word a command line, a column and an ONNX output name can carry.
NAME = re.compile(r"\w[\w.-]*")


def spec_from_mapping(item: Any, where: str, path: str | Path | None = None) -> StrategySpec:
    """One mapping of a `strategies:` list (`where`: e.g. `strategies[2]`), checked; a
    built-in's name alone is the built-in."""
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where} must be a mapping with name: and cost:, got {item!r}", path)
    unknown = [k for k in item if k not in KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; a strategy takes "
                          f"{', '.join(KEYS)}", path)  # fmt: skip
    name = item.get("name")
    if name is not None and not isinstance(name, str):  # `name: yes` is True to YAML 1.1
        raise ConfigError(f"{where}: name {name!r} {_not_text(name)}", path)
    if name is None or not name.strip():
        raise ConfigError(f"{where}: missing name: (a strategy's name, e.g. bm25_top3)", path)
    name = name.strip()
    if not NAME.fullmatch(name):
        raise ConfigError(f"{where}: name {name!r} is not a plain name: use letters, digits, "
                          "'_', '-' and '.', starting with a letter, digit or '_' (it is "
                          "written in --modes a,b, --threshold NAME=VALUE and column names "
                          "NAME_correct)", path)  # fmt: skip
    where = f"{where} ({name})"
    if set(item) == {"name"} and name in BUILTIN_BY_NAME:
        return BUILTIN_BY_NAME[name]
    if name in BUILTIN_BY_NAME:  # a built-in with keys changed: the rest is the built-in's
        base = {k: v for k, v in BUILTIN_BY_NAME[name].to_dict().items()
                if v is not None and k not in ("prompt", "llm_calls", "description")}  # fmt: skip
        item = {**base, **item}
    if "cost" not in item:
        raise ConfigError(f"{where}: missing cost: (retrievals per question, or your unit)",
                          path)  # fmt: skip
    cost = _number(item["cost"], f"{where}.cost", path)
    retriever = item.get("retriever", "none")
    retriever = "none" if retriever is None else str(retriever).strip().lower()
    if retriever not in RETRIEVERS:
        raise ConfigError(f"{where}.retriever: unknown retriever {item['retriever']!r}; one of "
                          f"{', '.join(RETRIEVERS)}", path)  # fmt: skip
    k = _count(item.get("k"), f"{where}.k", path)
    multi, max_steps = _steps(item.get("steps", 1), item.get("max_steps"), where, path)
    if retriever == "none" and (multi or k is not None):
        raise ConfigError(f"{where}: without a retriever it takes no k: and no multi-step "
                          "steps:; name a retriever (e.g. retriever: default)", path)  # fmt: skip
    prompt = str(item.get("prompt") or implied_prompt(None if retriever == "none" else retriever,
                                                       multi))  # fmt: skip
    implied = implied_prompt(None if retriever == "none" else retriever, multi)
    if prompt != implied:
        raise ConfigError(f"{where}.prompt: {prompt!r} does not fit what it runs (one of "
                          f"{', '.join(PROMPTS)}; this strategy's is {implied!r})", path)  # fmt: skip
    llm_calls = item.get("llm_calls")
    if llm_calls is not None:
        llm_calls = _number(llm_calls, f"{where}.llm_calls", path)
    generator = item.get("generator")
    if generator is not None and (not isinstance(generator, str) or not generator.strip()):
        raise ConfigError(f"{where}.generator: an OpenAI-compatible URL or a model folder", path)
    spec = StrategySpec(name, cost, None if retriever == "none" else retriever, k, multi,
                        max_steps, prompt, generator, llm_calls,
                        str(item.get("description") or ""))  # fmt: skip
    check_branch_name(spec, where, path)
    return spec


def _not_text(value: Any) -> str:
    """Why a scalar a name should be is not text, for a message: YAML 1.1 reads a plain `yes`,
    `on` or `true` as a boolean, `7` as a number, `2024-01-01` as a date."""
    if isinstance(value, bool):
        return (
            "is read by YAML as a boolean, not text (YAML 1.1 reads a plain yes/no, on/off or "
            "true/false so): quote it as written (name: 'yes', not name: yes)"
        )
    if not isinstance(value, int | float | date):  # a list or mapping: no quoting helps
        return "is not text: a strategy's name is one plain name (e.g. bm25_top3)"
    kind = "a date" if isinstance(value, date) else "a number"
    return f'is read by YAML as {kind}, not text: quote it as written (name: "{value}")'


def is_cost(value: float) -> bool:
    """A cost in any unit: a finite number from 0 to MAX_COST (NaN is not)."""
    return math.isfinite(value) and 0 <= value <= MAX_COST


def _number(value: Any, where: str, path) -> float:
    if isinstance(value, str) and (read := _float(value)) is not None and is_cost(read):
        # YAML 1.1 reads `1e3` as text: its floats need a dot and a signed exponent
        plain = f"{read:.0f} or " if read.is_integer() else ""
        raise ConfigError(f"{where}: {value!r} is read by YAML as text, not a number: write it "
                          f"as {plain}{_exponent_form(read)}", path)  # fmt: skip
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {value!r} is not a number (a cost is 0 or more)", path)
    if not is_cost(value):
        raise ConfigError(f"{where}: {value!r} is negative, not finite or past {MAX_COST:g}; "
                          f"a cost is from 0 to {MAX_COST:g}", path)  # fmt: skip
    return float(value)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _exponent_form(value: float) -> str:
    """`value` as YAML 1.1 reads a float with an exponent: 1000 -> 1.0e+3."""
    mantissa, exponent = f"{value:e}".split("e")
    mantissa = f"{float(mantissa):.15g}"
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{int(exponent):+d}"


def _refuse_misreads(misreads: list[Misread], path: Path) -> None:
    """A plain scalar YAML 1.1 alone reads otherwise is refused, named as written: `cost: 1:30`
    was read as 90, `k: 010` as 8, `name: on` as true. A strategy has no yes/no key."""
    for misread in misreads:
        key = misread.path[-1] if misread.path else None
        quoted = f"{key}: '{misread.text}'" if isinstance(key, str) else f"'{misread.text}'"
        if misread.kind == "a boolean" or key in _TEXT_KEYS:
            fix = f"quote it as written ({quoted})"
        else:
            fix = f"write it in decimal (e.g. {misread.decimal()}), or quote it if it is text"
        raise ConfigError(f"{misread.read_as(misread.where())}; {fix}", path, misread.line)


_TEXT_KEYS = ("name", "prompt", "generator", "description", "retriever")


def _count(value: Any, where: str, path, top: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {value!r} must be a whole number of 1 or more", path)
    if top is not None and value > top:  # said here, not as a --max-steps never passed
        raise ConfigError(f"{where}: {value} is past {top}: a multi-step strategy takes 1 to "
                          f"{top} steps (LLM calls per question, as --max-steps)", path)  # fmt: skip
    return value


def _steps(steps: Any, max_steps: Any, where: str, path) -> tuple[bool, int | None]:
    if steps == MULTI:
        return True, _count(max_steps, f"{where}.max_steps", path, MAX_STEPS_LIMIT)
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ConfigError(f"{where}.steps: {steps!r}: 1, or {MULTI} (the multi-step reasoner)",
                          path)  # fmt: skip
    if steps < 1:
        raise ConfigError(f"{where}.steps: {steps} is below 1: 1, or {MULTI} (the multi-step "
                          "reasoner, max_steps: N caps its LLM calls)", path)  # fmt: skip
    if steps > 1:  # `steps: 4` = the multi-step reasoner with at most 4 steps
        _count(steps, f"{where}.steps", path, MAX_STEPS_LIMIT)
        if max_steps is not None and max_steps != steps:
            raise ConfigError(f"{where}: steps: {steps} and max_steps: {max_steps} disagree",
                              path)  # fmt: skip
        return True, steps
    if max_steps is not None:
        raise ConfigError(f"{where}.max_steps: only a multi-step strategy (steps: {MULTI}) has "
                          "steps to cap", path)  # fmt: skip
    return False, None


def registry_from_list(items: Any, where: str, path: str | Path | None = None) -> StrategyRegistry:
    """A `strategies:` list (a YAML file's, a training config's, an export's), checked."""
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: a non-empty list of strategies (each a mapping with name: "
                          "and cost:), cheapest first", path)  # fmt: skip
    specs: list[StrategySpec] = []
    seen: set[str] = set()  # a set: any() over the specs so far took 65 s for 20,000
    for i, item in enumerate(items):
        spec = spec_from_mapping(item, f"{where}[{i}]", path)
        if spec.name in seen:
            raise ConfigError(f"{where}[{i}]: duplicate name {spec.name!r}", path)
        seen.add(spec.name)
        if specs and spec.cost < specs[-1].cost:
            raise ConfigError(
                f"{where}[{i}] ({spec.name}): cost {spec.cost:g} is below {specs[-1].name}'s "
                f"{specs[-1].cost:g}; list strategies in cost order, the cheapest first", path
            )  # fmt: skip
        specs.append(spec)
    return StrategyRegistry(tuple(specs), str(path) if path else where)


def load_strategies(path: str | Path) -> StrategyRegistry:
    """A strategies YAML file (`strategies:` list at the top), checked, naming the file and
    key of anything wrong."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError("strategies file not found (a YAML file with a top-level "
                          "strategies: list)", path)  # fmt: skip
    misreads: list[Misread] = []
    try:
        raw = read_yaml(path, misreads)
    except yaml.YAMLError as e:
        raise ConfigError(f"strategies file is not valid YAML: {e}", path) from None
    if not isinstance(raw, Mapping) or "strategies" not in raw:
        raise ConfigError("a strategies file is a YAML mapping with a top-level strategies: "
                          "list", path)  # fmt: skip
    extra = [k for k in raw if k != "strategies"]
    if extra:
        raise ConfigError(f"unknown top-level key {extra[0]!r}; a strategies file has only "
                          "strategies:", path)  # fmt: skip
    _refuse_misreads(misreads, path)
    return registry_from_list(raw["strategies"], "strategies", path)


# How the errors above tell the user to declare strategies: `--strategies FILE.yaml` on the
# command line; the Python adapters (`integrations`) take `strategies=` instead (`declared_by`).
_FLAG: ContextVar[str] = ContextVar("strategies_flag", default="--strategies")


@contextmanager
def declared_by(flag: str) -> Iterator[None]:
    """Within it, the errors name `flag` (e.g. "strategies=") where they said --strategies."""
    token = _FLAG.set(flag)
    try:
        yield
    finally:
        _FLAG.reset(token)


def declare_hint() -> str:
    flag = _FLAG.get()
    if flag.startswith("--"):
        return f"{flag} FILE.yaml"
    return f'{flag}"FILE.yaml" or {flag}StrategyRegistry(...)'


def is_strategies_file(value: str) -> bool:
    return str(value).lower().endswith((".yaml", ".yml"))


def resolve_strategies(
    value: str | Path | Sequence[str] | StrategyRegistry | None, where: str = "--strategies"
) -> StrategyRegistry:
    """`--strategies FILE.yaml` (or names of built-ins, or nothing: the built-ins) as a
    registry. Names select built-ins in the order given."""
    if value is None:
        return BUILTIN
    if isinstance(value, StrategyRegistry):
        return value
    if isinstance(value, str | Path):
        value = [str(value)]
    items = [n.strip() for item in value for n in str(item).split(",") if n.strip()]
    files = [i for i in items if is_strategies_file(i)]
    if files:
        if len(items) != 1:
            raise ConfigError(f"{where} {' '.join(items)}: give one strategies file alone, "
                              "or strategy names")  # fmt: skip
        return load_strategies(files[0])
    BUILTIN.check(items, where)
    return StrategyRegistry(tuple(BUILTIN[n] for n in items), where)


def registry_names(value: Sequence[str] | None) -> tuple[str | None, list[str] | None]:
    """(a strategies file, or None; the names given, or None) of a --strategies value."""
    if not value:
        return None, None
    items = [n.strip() for item in value for n in str(item).split(",") if n.strip()]
    if len(items) == 1 and is_strategies_file(items[0]):
        return items[0], None
    return None, items


def specs_of(items: Any, names: Sequence[str], where: str) -> StrategyRegistry:
    """What an export or run metadata says of its strategies: its specs (a list of mappings)
    where it carries them, else its names resolved against the built-ins (exports before
    issue 36 carry names only)."""
    if items:
        reg = registry_from_list(list(items), where)
        missing = [n for n in names if n not in reg]
        if missing:
            raise ConfigError(f"{where}: no spec for strategy {missing[0]!r}")
        return reg
    unknown = [n for n in names if n not in BUILTIN_BY_NAME]
    if unknown:
        raise ConfigError(
            f"{where}: strategy {unknown[0]!r} is not a built-in and the export carries no "
            f"spec for it (a label file's own names, {', '.join(names)}): declare them with "
            f"{declare_hint()} (a strategies: list, docs/router.md), or train with that "
            "file as the config's `strategies:` so the export carries them"
        )
    return StrategyRegistry(tuple(BUILTIN_BY_NAME[n] for n in names), where)


def with_cost(spec: StrategySpec, cost: float) -> StrategySpec:
    """`spec` at another cost (a router's, or the labels' mean per-question cost) making the
    LLM calls it made: a multi-step spec without `llm_calls` read them off its cost, so the
    calls of a fixed policy moved with the costs its table was priced at. They are declared
    only where the cost moved them (the same spec stays equal to, and exports as, itself)."""
    moved = replace(spec, cost=float(cost))
    if moved.expected_llm_calls == spec.expected_llm_calls:
        return moved
    return replace(moved, llm_calls=spec.expected_llm_calls)
