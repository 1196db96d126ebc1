"""Every gate by name, one `GateSpec` each: `build_gate("tfidf", context, options)`.

A spec says what its gate needs (`NEEDS`: labels, generator, a training run, an export),
whether its scores are label-free, and which `GateOptions` it reads. Every verb that takes
gates (`evaluate`, `tune`, `rag`, `serve`) offers the same gate flags (one per `GateOptions`
field, `commands/gate_args.py`) and calls `check_options` before any engine starts. Adding a
gate = its module + one `GateSpec` in `GATES`.

Gates that learn (popularity, tfidf), look things up (confidence), or need demonstrations
(TA-ARE) take what they need from a `GateContext` holding ONLY the train and dev splits,
the closed-book records and a lazily started generator; test questions never reach a gate's
construction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendError, ConfigError, DataError, MissingInputError
from ..generation.base import Generator
from ..generation.hidden_states import DTYPES
from ..labels.evalset import EvalSet
from ..labels.label_files import meta_path
from ..labels.labelling_run import CLOSED_BOOK, RAG_GAIN
from ..models import SMOLLM2
from ..run_folder import RunFolder
from ..strict_rows import parse_json
from .base import Gate, Questions
from .onnx_format import VARIANTS


class LazyGenerator:
    """The generator, started on first call (vLLM takes ~25 s) and then shared by every gate
    holding this object."""

    def __init__(self, **options: Any):
        self.options = {"name_or_path": SMOLLM2, **options}
        self._generator: Generator | None = None

    def __call__(self) -> Generator:
        if self._generator is None:
            try:
                from ..generation.cache import lazy_generator
            except ImportError as e:
                raise BackendError(f"no generator backend available ({e})") from None
            # behind the generation cache; the engine itself starts on the first cache miss
            self._generator = lazy_generator(**self.options)
        return self._generator

    @property
    def checksum(self) -> str:
        """What the generator reports as its `checksum` (a local folder's weights sha256, else
        the model's name), known without starting the engine: cached prompt-gate scores are
        found by it, so a cache hit costs no engine start."""
        if self._generator is not None:
            return self._generator.checksum
        from ..generation.model_folders import folder_checksum, resolve_generator_model

        model = resolve_generator_model(self.options["name_or_path"])
        return folder_checksum(Path(model)) if Path(model).is_dir() else model

    @property
    def name(self) -> str:
        """The running engine's name, else the model asked for."""
        started = self._generator
        return str(started.name if started is not None else self.options["name_or_path"])


class RecordedGenerator(LazyGenerator):
    """The labelling generator where no local copy of it is known (its answers came from a
    server, or were imported): gates read its recorded answers, and their score caches are
    keyed by its recorded identity; asking it for new answers is refused, naming the fix."""

    def __init__(self, name: str, identity: str, why: str, named_by: Path):
        super().__init__(name_or_path=name)
        self.identity = identity
        self.why = why
        self.named_by = named_by

    @property
    def checksum(self) -> str:
        return self.identity

    @property
    def weights_known(self) -> bool:
        """Its identity is a weights checksum (a local folder's), which a copy can match."""
        return not self.identity.startswith(("remote:", "recorded:"))

    def unavailable(self) -> str:
        """Why it cannot run here, in a refusal's words."""
        return (f"the labels' generator {self.name} ({self.named_by}) has no local copy here: "
                f"{self.why}")  # fmt: skip

    def __call__(self) -> Generator:
        raise MissingInputError(f"{self.unavailable()}; this step generates with it: pass "
                                f"--generator MODEL (a local copy of {self.name})")  # fmt: skip


def labelling_generator(label_file: str | Path, run_dir: str | Path) -> tuple[LazyGenerator, str]:
    """The generator whose answers the labels judge and where that was read: the first
    `.meta.json` naming one (the label file's, else its labelling run's closed-book or
    rag-gain file's). A model that resolves here runs when asked; one that does not (a
    server's, an import's) is a `RecordedGenerator`. None named: SmolLM2, the bundled run's."""
    run = Path(run_dir)
    for path in (Path(label_file), run / CLOSED_BOOK, run / RAG_GAIN):
        meta = _provenance(meta_path(path))
        if meta.get("generator"):
            return _named(meta, meta_path(path)), f"named by {meta_path(path)}"
    return LazyGenerator(), f"no label provenance names one: {SMOLLM2}"


def _provenance(path: Path) -> dict[str, Any]:
    """A `.meta.json`; {} where there is none or it is unreadable (`_label_name` reads it so)."""
    try:
        meta = parse_json(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _named(meta: dict[str, Any], path: Path) -> LazyGenerator:
    name, checksum = str(meta["generator"]), meta.get("generator_checksum")
    why = _no_local_copy(name, checksum, meta.get("source"))
    if why is None:
        return LazyGenerator(name_or_path=SMOLLM2 if name == "smollm2" else name)
    identity = checksum if isinstance(checksum, str) and checksum else f"recorded:{name}"
    return RecordedGenerator(name, identity, why, path)


def _no_local_copy(name: str, checksum: Any, source: Any) -> str | None:
    """Why the named generator cannot run here; None where it resolves as `--generator` would
    (SmolLM2, a Hub name: an engine's checksum is its name, a folder with those weights)."""
    if not isinstance(checksum, str) or not checksum:
        if source == "outcomes":
            return "its answers were imported (label --policy outcomes)"
        return "its labels record no weights checksum"
    if checksum.startswith("remote:"):
        return f"its answers came from a server ({checksum}), which this command does not ask"
    if name in (SMOLLM2, "smollm2") or checksum == name:
        return None
    from ..generation.model_folders import folder_checksum

    if Path(name).is_dir() and folder_checksum(Path(name)) == checksum:
        return None
    return "its labels keep a model folder's name and weights checksum, not its path"


@dataclass
class GateContext:
    train: EvalSet | None = None
    dev: EvalSet | None = None
    closed_book: dict[str, dict] = field(default_factory=dict)
    generator: LazyGenerator = field(default_factory=LazyGenerator)
    # an already running generator (the RAG loop passes its own engine)
    _generator: InitVar[Generator | None] = None
    # the strategies' costs the routers fitted here are calibrated at (--strategies FILE's;
    # None: the labels' own per-question costs, else the built-ins')
    costs: tuple[float, ...] | None = None

    def __post_init__(self, _generator: Generator | None) -> None:
        if _generator is not None:
            self.generator = LazyGenerator()
            self.generator._generator = _generator

    def need(self, what: str, gate: str) -> Any:
        value = getattr(self, what)
        if value is None or (isinstance(value, dict | EvalSet) and not len(value)):
            raise MissingInputError(
                f"gate {gate!r} needs {what} data (labels for the canonical split)"
            )
        return value


@dataclass
class GateOptions:
    """Every option a gate can take, one field per command-line flag (`--learned-run`, ...):
    each `GateSpec` names the fields it reads. A field's `metadata` is its flag's help."""

    learned_run: str | None = field(
        default=None,
        metadata={
            "help": "training run folder (checkpoints/<run>) of the learned gate "
            "(default: none; that gate needs it)"
        },
    )
    onnx: str | None = field(
        default=None,
        metadata={
            "help": "exported gate folder (export/<name>) of the onnx gate (default: none; "
            "that gate needs it)"
        },
    )
    variant: str = field(
        default="fp32",
        metadata={"help": "ONNX file of that export (default fp32)", "choices": tuple(VARIANTS)},
    )
    date: str | None = field(
        default=None, metadata={"help": "TA-ARE's 'Today is ...' date (default: today)"}
    )
    feature: str | None = field(
        default=None,
        metadata={"help": "numeric signal the popularity gates threshold (default s_pop; any "
                  "numeric column of --questions: low value -> retrieve)", "metavar": "COLUMN"},
    )  # fmt: skip
    recorded: str | None = field(
        default=None,
        metadata={"help": "file of decisions made elsewhere (a peer's, your system's) that the "
                  "recorded gate reads: an id and a score (0..1), a retrieve (true/false) or a "
                  "strategy per question (default: none; that gate needs it)", "metavar": "FILE"},
    )  # fmt: skip
    probe_model: str | None = field(
        default=None,
        metadata={"help": "model folder whose hidden states the probe reads: the serving "
                  f"generator's (default {SMOLLM2})", "metavar": "FOLDER"},
    )  # fmt: skip
    probe_layers: str | None = field(
        default=None,
        metadata={"help": "layer(s) of the probe, e.g. 12 or 6,12,18 (the best on dev is kept; "
                  "default auto: about ten spread over the model, the last included)",
                  "metavar": "LAYERS"},
    )  # fmt: skip
    probe_dtype: str | None = field(
        default=None,
        metadata={"help": "precision of the probe model's weights (default float32, the same "
                  "states on every machine; bfloat16 halves the memory of an LLM too big for "
                  "its GPU)", "choices": DTYPES},
    )  # fmt: skip


def option_flag(name: str) -> str:
    """`learned_run` -> `--learned-run`."""
    return "--" + name.replace("_", "-")


# What a gate may need, and how a user provides it.
NEEDS = {
    "labels": "the train/dev split of a label file (--labels)",
    "generator": "the generator (an LLM engine) at scoring time",
    "run": "a training run folder (--learned-run)",
    "export": "an exported gate folder (--onnx)",
}


@dataclass(frozen=True)
class GateSpec:
    """One gate: its name, builder, what it needs (`NEEDS` keys) and the `GateOptions` fields
    it reads. `label_free`: its scores do not depend on the label file it is judged on, so
    evaluation scores it once for all label files (keyed by its checksum)."""

    name: str
    build: Callable[[GateContext, GateOptions], Gate]
    summary: str
    needs: frozenset[str] = frozenset()
    label_free: bool = False
    options: tuple[str, ...] = ()
    # checks its options before any gate is built or weights load (raises InputError)
    check: Callable[[GateOptions], None] | None = None
    # False: it reads what questions sent to `serve` never have (an id, a popularity signal)
    serves: bool = True
    # refuses test questions it cannot score (and, on strategy labels, route) before any
    # gate is built: (options, questions, the labels' strategies or ())
    check_questions: Callable[[GateOptions, Questions, Sequence[str]], None] | None = None
    # asks the generator only for questions without a recorded closed-book answer (the
    # labelling run's): with a `RecordedGenerator` it scores from those answers alone
    recorded_answers: bool = False


def _always(ctx: GateContext, opts: GateOptions) -> Gate:
    from .trivial import always_gate

    return always_gate()


def _never(ctx: GateContext, opts: GateOptions) -> Gate:
    from .trivial import never_gate

    return never_gate()


def _popularity(per_relation: bool) -> Callable[[GateContext, GateOptions], Gate]:
    def build(ctx: GateContext, opts: GateOptions) -> Gate:
        from .popularity import fit_popularity

        dev = ctx.need("dev", "popularity")
        return fit_popularity(dev.questions, dev.y, dev.closed_correct, dev.rag_correct,
                              per_relation, feature=opts.feature or "s_pop")  # fmt: skip

    return build


def _tfidf(ctx: GateContext, opts: GateOptions) -> Gate:
    from .tfidf import TfidfGate

    train = ctx.need("train", "tfidf")
    return TfidfGate.fit(train.questions, train.y)


def _length(ctx: GateContext, opts: GateOptions) -> Gate:
    from .length import LengthGate

    train = ctx.need("train", "length")
    return LengthGate.fit(train.questions, train.y)


def _confidence(ctx: GateContext, opts: GateOptions) -> Gate:
    from .confidence import ConfidenceGate, unrecorded

    lacking = unrecorded(ctx.closed_book)
    if lacking and isinstance(ctx.generator, RecordedGenerator):  # no copy to answer them
        raise MissingInputError(
            f"{len(lacking)} of the {len(ctx.closed_book)} recorded closed-book answers record "
            f"no log-probabilities (mean_logprob / token_logprobs null; e.g. {lacking[0]}), "
            "so the confidence gate has nothing to score them by (1.0 read as 'certainly "
            f"wrong'); {ctx.generator.unavailable()}: record them (a token_logprobs column of "
            "the outcomes file, re-imported), or pass --generator MODEL (a local copy of it) to "
            "answer them"
        )
    return ConfidenceGate(ctx.closed_book, ctx.generator)


def _prompt(template: str) -> Callable[[GateContext, GateOptions], Gate]:
    def build(ctx: GateContext, opts: GateOptions) -> Gate:
        from ..retrieval.dense import MiniLMEncoder
        from .prompt import DemoPool, PromptGate

        demos = None
        if template == "ta-are":
            train = ctx.need("train", "prompt-ta-are")
            records = ctx.need("closed_book", "prompt-ta-are")
            demos = DemoPool.from_closed_book(train.questions, records, MiniLMEncoder().encode)
        return PromptGate(ctx.generator, template, demos, opts.date)

    return build


def _learned(ctx: GateContext, opts: GateOptions) -> Gate:
    from .learned import load_learned  # a router run loads as a router

    return load_learned(_required(opts, "learned", "learned_run"))


def _onnx(ctx: GateContext, opts: GateOptions) -> Gate:
    from .onnx import open_onnx  # a router export loads as a router

    return open_onnx(_required(opts, "onnx", "onnx"), variant=opts.variant)


def _probe(ctx: GateContext, opts: GateOptions) -> Gate:
    from .probe import fit_probe

    train, dev = ctx.need("train", "probe"), ctx.need("dev", "probe")
    gen = ctx.generator  # the serving model: the running engine's, else the one asked
    serving: tuple[str, str] | None = (gen.checksum, gen.name)
    if isinstance(gen, RecordedGenerator) and not gen.weights_known:
        if opts.probe_model is None:  # SmolLM2's states for another model's labels
            flag = option_flag("probe_model")
            raise MissingInputError(f"{gen.unavailable()}; the probe reads its hidden states: "
                                    f"pass {flag} FOLDER (a local copy)")  # fmt: skip
        serving = None  # a server's weights: nothing here to compare the folder's with
    return fit_probe(train, dev, opts.probe_model, opts.probe_layers, serving, opts.probe_dtype)


def _check_probe(opts: GateOptions) -> None:
    from .probe import check_probe_options

    check_probe_options(opts.probe_model, opts.probe_layers)


def _recorded(ctx: GateContext, opts: GateOptions) -> Gate:
    from .recorded import RecordedGate

    # rows that record a strategy only retrieve unless it is the labels' first strategy
    named = ctx.train.strategies if ctx.train is not None else ()
    return RecordedGate(_required(opts, "recorded", "recorded"),
                        first_strategy=named[0] if named else None)  # fmt: skip


def _check_recorded(opts: GateOptions) -> None:
    """The file is read (and a bad row named) before any other gate is built."""
    _recorded(GateContext(), opts)


def _check_recorded_questions(
    opts: GateOptions, questions: Questions, strategies: Sequence[str]
) -> None:
    from .recorded import RecordedGate

    RecordedGate(_required(opts, "recorded", "recorded")).check_questions(questions, strategies)


def _router_tfidf(ctx: GateContext, opts: GateOptions) -> Gate:
    from .strategy_routers import tfidf_router

    return tfidf_router(ctx.train, ctx.dev, costs=ctx.costs)


def _router_prior(ctx: GateContext, opts: GateOptions) -> Gate:
    from .strategy_routers import prior_router

    return prior_router(ctx.dev, ctx.costs)


GATES: dict[str, GateSpec] = {
    spec.name: spec
    for spec in (
        GateSpec("always", _always, "retrieve for every question", label_free=True),
        GateSpec("never", _never, "never retrieve", label_free=True),
        GateSpec("popularity", _popularity(True), "entity popularity, per-relation thresholds "
                 "(Mallen et al.)", frozenset({"labels"}), options=("feature",), serves=False),
        GateSpec("popularity-global", _popularity(False), "entity popularity, one threshold",
                 frozenset({"labels"}), options=("feature",), serves=False),
        GateSpec("prompt-vanilla", _prompt("vanilla"), "ask the generator (RetrievalQA's "
                 "prompt)", frozenset({"generator"}), label_free=True),
        GateSpec("prompt-ta-are", _prompt("ta-are"), "ask the generator with date and "
                 "demonstrations (TA-ARE)", frozenset({"generator", "labels"}), label_free=True,
                 options=("date",)),
        GateSpec("confidence", _confidence, "the generator's closed-book answer confidence",
                 frozenset({"generator"}), label_free=True, recorded_answers=True),
        GateSpec("tfidf", _tfidf, "TF-IDF + logistic regression fitted on train",
                 frozenset({"labels"})),
        GateSpec("length", _length, "question length (words), logistic regression fitted on "
                 "train: a floor line", frozenset({"labels"})),
        GateSpec("probe", _probe, "the generator's hidden state after the closed-book prompt "
                 "(one prefill), logistic head fitted on train, layer chosen on dev",
                 frozenset({"labels"}), options=("probe_model", "probe_layers", "probe_dtype"),
                 check=_check_probe),
        GateSpec("router-tfidf", _router_tfidf, "router: TF-IDF (words + characters), one "
                 "logistic head per strategy, fitted on train, price calibrated on dev "
                 "(strategy labels)", frozenset({"labels"})),
        GateSpec("router-prior", _router_prior, "router: each source's mean correctness per "
                 "strategy on dev (the per-dataset prior; reads the question's source)",
                 frozenset({"labels"})),
        GateSpec("learned", _learned, "a trained gate or router, scored with PyTorch",
                 frozenset({"run"}), label_free=True, options=("learned_run",)),
        GateSpec("onnx", _onnx, "an exported gate or router, scored with ONNX Runtime",
                 frozenset({"export"}), label_free=True, options=("onnx", "variant")),
        GateSpec("recorded", _recorded, "decisions made elsewhere (a published peer's, your "
                 "system's), read by question id from --recorded FILE", label_free=True,
                 options=("recorded",), check=_check_recorded, serves=False,
                 check_questions=_check_recorded_questions),
    )
}  # fmt: skip


def gate_names() -> list[str]:
    return list(GATES)


def gate_spec(name: str) -> GateSpec:
    if name not in GATES:
        raise ConfigError(f"unknown gate {name!r}; known gates: {', '.join(GATES)}")
    return GATES[name]


def needing(what: str, names: Sequence[str] | None = None) -> list[str]:
    """The gates (of `names`, default all) that need `what` (a `NEEDS` key)."""
    return [n for n in (names or GATES) if n in GATES and what in GATES[n].needs]


def asks_generator(gates: Sequence[str]) -> list[str]:
    """The gates that ask the generator for each decision (an LLM call of their own)."""
    return [g for g in gates if g in GATES and "generator" in GATES[g].needs]


def refuse_prompting(generator: LazyGenerator, gates: Sequence[str], fix: str) -> None:
    """A labelling generator with no local copy (labels made through a server, or imported)
    lends only its identity and recorded answers: a gate that asks it for every question is
    refused, naming `fix` (the command's way out), before any label file is read or engine
    starts (`evaluate`, `tune`)."""
    if not isinstance(generator, RecordedGenerator):
        return
    prompting = [g for g in asks_generator(gates) if not GATES[g].recorded_answers]
    if prompting:
        raise ConfigError(f"{generator.unavailable()}; the {' / '.join(prompting)} gate asks it "
                          f"for every question: {fix}")  # fmt: skip


def check_recorded_answers(
    gates: Sequence[str],
    scored: dict[str, EvalSet],
    records: dict[str, dict],
    generator: LazyGenerator,
    answers: Path,
    otherwise: str = "",
) -> None:
    """With a `RecordedGenerator`, a gate that reads the recorded closed-book answers needs
    one for every question it scores (`scored`: "test questions of <policy>" -> them): the
    rest would ask a generator there is no copy of. `otherwise`: a fix besides labelling
    them."""
    if not isinstance(generator, RecordedGenerator):
        return
    for name in asks_generator(gates):
        for what, split in scored.items():
            missing = [q.id for q in split.questions if q.id not in records]
            if missing:
                raise MissingInputError(
                    f"{len(missing)} of the {len(split)} {what} have no recorded closed-book "
                    f"answer in {answers} (e.g. {missing[0]}), and the {name} gate would ask "
                    f"the generator for them; {generator.unavailable()}; label them with it "
                    "into that file (`retrieval-gate label --policy closed-book`)"
                    + (f", or {otherwise}" if otherwise else "")
                )


def _required(opts: GateOptions, gate: str, option: str) -> str:
    value = getattr(opts, option)
    if not value:
        hint = {"learned_run": "checkpoints/<run>", "onnx": "export/<name>"}.get(option, "VALUE")
        if option == "onnx":
            found = sorted(str(p.parent) for p in Path("export").glob("*/model.onnx"))
            hint += f" (found: {', '.join(found)})" if found else " (run `retrieval-gate export`)"
        raise MissingInputError(f"the {gate} gate needs {option_flag(option)} {hint}")
    return value


def check_options(names: Sequence[str], opts: GateOptions) -> None:
    """Every flag and path the named gates need, checked before any gate is built or engine
    started. A flag not given is a `MissingInputError` (evaluate skips that gate); a path
    given that is not a training run or lacks the ONNX variant asked for is an InputError."""
    for name in names:
        spec = gate_spec(name)
        needs = spec.needs
        if spec.check is not None:
            spec.check(opts)
        if "run" in needs:
            run = Path(_required(opts, name, "learned_run"))
            if not RunFolder(run).is_run():
                raise DataError("not a training run folder (no gate.pt): pass the folder "
                                "`retrieval-gate train` wrote (--learned-run)", run)  # fmt: skip
        if "export" in needs:
            folder = Path(_required(opts, name, "onnx"))
            if not folder.is_dir():
                raise DataError("no such export folder: pass the folder `retrieval-gate "
                                "export` wrote (--onnx)", folder)  # fmt: skip
            model = folder / VARIANTS[opts.variant]
            if not model.is_file():
                raise DataError(f"no {opts.variant} model in this export (--onnx, --variant): "
                                f"run `retrieval-gate export --variants {opts.variant}`", model)  # fmt: skip


def build_gate(
    name: str, context: GateContext | None = None, options: GateOptions | None = None
) -> Gate:
    """A gate by registry name, built from `context` (train/dev, records, generator) and the
    `options` its spec reads."""
    return gate_spec(name).build(context or GateContext(), options or GateOptions())
