"""Every label policy by name, one `PolicySpec` each: `policy_spec("rag-gain").run(...)`.

A spec says what its policy needs (a generator, a retriever, the RAG loop), whether its file
is rebuilt whole, where the file lives, and the `PolicyOption`s it reads. `label`'s
policy-specific flags are generated from those options (`commands/policy_args.py`), so a flag
and the policies that read it are one list. Built-in policies register in
`labels/policies.py`; a policy that needs a higher layer (the RAG loop's `strategies`,
`retrieval_gate.labelling`) registers itself with `register_policy` when its package is
imported (the CLI imports it), so labels/ never imports upward."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError
from ..models import SMOLLM2
from ..questions import Question
from .label_files import LABELS_DIR
from .selection import EQ_SAMPLE


@dataclass
class LabelRequest:
    """What `retrieval-gate label` asks for: the flags every policy shares as fields, the
    policy's own options (its `PolicyOption`s not stored as a field) in `options`."""

    policy: str
    datasets: Sequence[str] | None = None
    limit: int | None = None
    generator: str = SMOLLM2
    backend: str = "auto"
    criterion: str | None = None  # None: the policy's default
    chunk_size: int | None = None  # None: the policy's default (512; strategies 64)
    eq_sample: int = EQ_SAMPLE
    seed: int = 0
    out: Path | None = None
    labels_dir: Path = LABELS_DIR
    options: dict[str, Any] = field(default_factory=dict)
    questions: Sequence[Question] | None = None  # your own questions (None: the bundled ones)
    # where they came from (--questions, --field): what a label file of them names, so that
    # training on it can say which questions to read
    questions_source: dict[str, Any] | None = None
    llm: str | None = None  # --generator as given (a release folder picks its LLM by it)

    def value(self, name: str) -> Any:
        """An option as given, else its policy's default."""
        given = getattr(self, name) if name in _FIELDS else self.options.get(name)
        return policy_spec(self.policy).option(name).default if given is None else given


@dataclass(frozen=True)
class PolicyOption:
    """One option of one or more policies and its `label` flag (`--<name with dashes>`).
    `name` is the `LabelRequest` field or `options` key it fills; `default` is what the policy
    uses when the flag is not given (None: the labeller's own, which `help` states)."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[Any, ...] | None = None
    nargs: str | None = None
    metavar: str | None = None
    switch: bool = False  # a flag without a value (store_true)
    least: float | None = None
    most: float | None = None
    required: str = ""  # why the policy cannot run without it ("" = optional)
    # further checks of a given value, before any engine starts: (value, flag) -> None
    check: Callable[[Any, str], None] | None = None
    # the `.meta.json` key its value is recorded under: a resume under another value is
    # refused (rows made with 5 documents and with 1 mixed under one `top_k`)
    meta: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def validate(self, value: Any) -> None:
        """A given value within bounds (NaN fails both comparisons, so it is refused)."""
        if value is None or value is False:
            return
        above = self.most is not None and not value <= self.most
        below = self.least is not None and not value >= self.least
        if (above or below) and None not in (self.least, self.most):
            raise InputError(
                f"{self.flag} must be a number in [{self.least:g}, {self.most:g}], got {value}"
            )
        if above:
            raise InputError(f"{self.flag} must be at most {self.most:g}, got {value}")
        if below:
            raise InputError(f"{self.flag} must be at least {self.least:g}, got {value}")
        if self.check is not None:
            self.check(value, self.flag)

    def same_flag(self, other: PolicyOption) -> bool:
        """Two policies may share a flag only if it parses alike (help and default may differ)."""
        keys = ("type", "choices", "nargs", "switch", "metavar")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


Labeller = Callable[[LabelRequest, Path, Any, Any], dict[str, Any]]


@dataclass(frozen=True)
class PolicySpec:
    """One label policy. `run(request, path, generator, retriever)` labels into `path`;
    `generator` / `retriever` are None unless the caller passes running ones (tests, Ray)."""

    name: str
    help: str
    run: Labeller
    # its labels judge a generator's answers: --generator / --generator-url name the
    # generator, and the questions need gold answers
    needs_generator: bool = False
    needs_retriever: bool = False  # documents per question (--retriever, --corpus, --k)
    needs_rag_loop: bool = False  # runs the RAG loop's strategies (retrieval_gate.labelling)
    rebuilt: bool = False  # recomputed whole on every run (nothing to resume)
    file: str = ""  # the label file's stem (default: the policy's name)
    per_generator: bool = True  # <labels-dir>/<generator>/<file>.jsonl, else <labels-dir>/
    ray: bool = False  # --engine ray can spread it (one request per question)
    relabel: bool = False  # --relabel recomputes its labels from stored measures
    # reads <labels-dir>/<generator>/closed-book.jsonl: --labels-dir names it beside --out
    reads_closed_book: bool = False
    # it labels questions it picks (--dataset, --limit, --eq-sample, --seed); False: every
    # row of its input (outcomes imports its whole file)
    selects: bool = True
    options: tuple[PolicyOption, ...] = ()
    # checks a request (its options together) before questions are read or engines start
    check: Callable[[LabelRequest], None] | None = None

    def path(self, generator: str = SMOLLM2, labels_dir: Path = LABELS_DIR) -> Path:
        name = f"{self.file or self.name}.jsonl"
        if not self.per_generator:
            return labels_dir / name
        return labels_dir / generator_dir_name(generator) / name

    def option(self, name: str) -> PolicyOption:
        for opt in self.options:
            if opt.name == name:
                return opt
        raise ConfigError(f"--policy {self.name} has no option {name!r}")

    def reads(self, name: str) -> bool:
        return any(opt.name == name for opt in self.options)


_FIELDS = {f.name for f in fields(LabelRequest)}
POLICIES: dict[str, PolicySpec] = {}


def register_policy(spec: PolicySpec) -> PolicySpec:
    """Adds a policy (a built-in, or a higher layer's); a name registered twice is refused
    unless it is the same spec (a module imported again)."""
    old = POLICIES.get(spec.name)
    if old is not None and old != spec:
        raise ConfigError(f"label policy {spec.name!r} is registered twice")
    for opt in spec.options:  # a flag parses alike for every policy that reads it
        other = next((o for s in POLICIES.values() for o in s.options if o.name == opt.name), None)
        if other is not None and not opt.same_flag(other):
            raise ConfigError(f"policy {spec.name!r}: {opt.flag} parses unlike other policies'")
    POLICIES[spec.name] = spec
    return spec


def policy_spec(name: str) -> PolicySpec:
    if name not in POLICIES:
        raise ConfigError(f"unknown label policy {name!r}; choose one of {', '.join(POLICIES)}")
    return POLICIES[name]


def policies_reading(name: str) -> list[str]:
    """The registered policies that read option `name`."""
    return [s.name for s in POLICIES.values() if s.reads(name)]


def generator_dir_name(generator: str) -> str:
    return Path(generator).name.lower()


def label_path(policy: str, generator: str = SMOLLM2, labels_dir: Path = LABELS_DIR) -> Path:
    """data/labels/<policy>.jsonl, or data/labels/<generator>/<file>.jsonl."""
    return policy_spec(policy).path(generator, labels_dir)


def request(policy: str, given: Mapping[str, Any], **shared: Any) -> LabelRequest:
    """A `LabelRequest` from the options given (name -> value; None = not given) and the
    flags every policy shares; options the policy does not read are refused."""
    spec = policy_spec(policy)
    given = {k: v for k, v in given.items() if v is not None and v is not False}
    check_options(spec, given)
    as_fields = {k: v for k, v in given.items() if k in _FIELDS}
    rest = {k: v for k, v in given.items() if k not in _FIELDS}
    return LabelRequest(policy, **shared, **as_fields, options=rest)


def check_options(spec: PolicySpec, given: Mapping[str, Any]) -> None:
    """Each option given is one the policy reads (else the message names the policies that
    do), within its bounds; each required one is there."""
    for name, value in given.items():
        if not spec.reads(name):
            flag = "--" + name.replace("_", "-")
            users = " / ".join(f"--policy {p}" for p in policies_reading(name)) or "no policy"
            which = "the policies that read it" if " / " in users else "the policy that reads it"
            raise InputError(f"{flag} does not go with --policy {spec.name}; drop it (that "
                             f"policy would ignore it), or go with {users} ({which})")  # fmt: skip
        spec.option(name).validate(value)
    for opt in spec.options:
        if opt.required and given.get(opt.name) in (None, False):
            raise InputError(
                f"--policy {spec.name} needs {opt.flag} {opt.metavar or 'VALUE'} ({opt.required})"
            )
