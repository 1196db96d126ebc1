"""The RAG comparison's modes as gates: every registry gate by name (`gates.registry.GATES`),
plus `multi-step` (every question runs the multi-step strategy), every registered strategy by
its name (`retrieval_gate.strategies`: the built-ins and a `--strategies FILE.yaml`'s; every
question runs that strategy), `router` (the router or gate
export of `--router DIR`, loaded through `strategies.load_router`, at `--budget`) and two
oracles:
`oracle` follows a label file (rag-gain by default); `oracle-run` follows this very run's
`never` and `always` answers (retrieve exactly where the with-context answer matches and the
closed-book one does not) and, when `multi-step` ran too, routes each question to the
cheapest of the strategies that answered it (none did: the cheapest strategy). It needs no
labelling run and is the exact ceiling of any gate or router on these questions with this
generator, retriever and prompts.

Gates that fit something (popularity thresholds, TA-ARE demonstrations) take the train/dev
part of the canonical split of a label file through the registry's `GateContext`; test
questions never reach their construction. Prompt and confidence gates share the RAG loop's own
generator, so their LLM calls are measured as gate time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..artifacts import open_artifact
from ..errors import ConfigError, DataError, comma_joined
from ..gates.base import Gate, is_router, uncached_gate
from ..gates.registry import GATES, GateContext, GateOptions, build_gate, check_options, needing
from ..generation.base import Generator
from ..labels.evalset import load_splits
from ..labels.labelling_run import CLOSED_BOOK, DEFAULT_RUN_DIR, RAG_GAIN, LabellingRun
from ..pricing import Calibration, check_budget
from ..questions import Question
from ..strategies import BUILTIN, StrategyRegistry
from ..strict_rows import first_repeated
from .cascade import CASCADE, Cascade, check_answer_gate_folder
from .decisions import (
    FixedStrategy,
    check_budget_sign,
    check_router,
    check_runnable,
    load_router,
    routed_strategies,
)
from .gate_folders import check_gate_folders
from .loop import RagRun
from .oracle import OracleGate, OracleRouter

ORACLE, ORACLE_RUN = "oracle", "oracle-run"  # oracle-run is built after `never` and `always` ran
ORACLES = (ORACLE, ORACLE_RUN)
MULTI_STEP_MODE, ROUTER = "multi-step", "router"
ROUTING = (MULTI_STEP_MODE, ROUTER, CASCADE)
FIRST_GATE = (ROUTER, CASCADE)  # the modes that route with --router
# `rag`'s modes unless --modes says otherwise (the routing modes are asked for by name)
DEFAULT_MODES = ("never", "always", "learned", "onnx", "popularity", "prompt-vanilla",
                 "prompt-ta-are", "confidence", "oracle", "oracle-run")  # fmt: skip


@dataclass
class ModeOptions(GateOptions):
    """Where each mode's gate comes from: the gate options, plus the label files the fitted
    gates and the oracle read, and per-mode threshold overrides."""

    labels: Path = DEFAULT_RUN_DIR / CLOSED_BOOK  # fits popularity / TA-ARE / tfidf
    run_dir: Path = DEFAULT_RUN_DIR  # closed-book records and outcomes of the labelling run
    oracle_labels: Path = DEFAULT_RUN_DIR / RAG_GAIN
    thresholds: dict[str, float] = field(default_factory=dict)  # mode -> threshold override
    questions: Sequence[Question] | None = None  # the question set (None: bundled, canonical)
    router: Path | Gate | None = None  # the router mode's export folder (or a loaded router)
    budget: float | None = None  # the router mode's budget (None: the router's default)
    router_variant: str = "fp32"  # the router export's ONNX file
    answer_gate: Path | Gate | None = None  # the cascade's two-stage gate (--answer-gate DIR)
    strategies: StrategyRegistry = BUILTIN  # the registry (--strategies FILE.yaml)
    retriever: str | None = None  # the verb's --retriever (None: not checked here)


def known_modes(strategies: StrategyRegistry = BUILTIN) -> list[str]:
    """Every registry gate, the multi-step and router modes, every registered strategy (a
    fixed-strategy mode) and the two oracles."""
    return [*GATES, *ROUTING, *strategies.names, *ORACLES]


def check_modes(modes: Sequence[str], options: ModeOptions) -> None:
    """Fails fast, before an engine starts, on an unknown mode, a missing flag or input file,
    or a fixed-strategy mode the loop cannot run (a retriever other than --retriever)."""
    taken = [n for n in options.strategies.names if n in {*GATES, *ROUTING, *ORACLES}]
    if taken:  # the strategy's fixed mode and the other one would share a name
        raise ConfigError(f"strategy {taken[0]!r} of --strategies has the name of a rag mode "
                          "(a gate, router or oracle): rename it in "
                          f"{options.strategies.source}")  # fmt: skip
    known = known_modes(options.strategies)
    unknown = [m for m in modes if m not in known]
    if unknown:
        raise ConfigError(f"unknown mode {unknown[0]!r} (--modes); known: {', '.join(known)}"
                          f"{comma_joined('--modes', unknown[0], known, 'modes')}")  # fmt: skip
    fixed = [options.strategies[m] for m in modes if m in options.strategies]
    if options.retriever is not None:
        check_runnable(fixed, options.retriever, "--modes")
    check_options([m for m in modes if m in GATES], options)
    check_gate_folders([m for m in modes if m in GATES], options)
    if ORACLE_RUN in modes and not {"never", "always"} <= set(modes):
        raise ConfigError(f"the {ORACLE_RUN} mode needs the never and always modes in --modes")
    _check_router_flags(modes, options)
    needed = []
    if ORACLE in modes:
        needed.append(("oracle mode", "--oracle-labels", options.oracle_labels))
    fitted = needing("labels", modes)
    if fitted:
        needed.append((f"{' / '.join(fitted)} mode", "--labels", options.labels))
    for what, flag, path in needed:
        if not Path(path).is_file():
            raise DataError(
                f"no label file for the {what}: run `retrieval-gate label` or pass {flag}", path
            )


def _check_router_flags(modes: Sequence[str], options: ModeOptions) -> None:
    routing = [m for m in FIRST_GATE if m in modes]
    if routing and options.router is None:
        raise ConfigError(f"the {routing[0]} mode needs --router DIR (a router or gate export)")
    if not routing and (options.router is not None or options.budget is not None
                        or options.router_variant != ModeOptions.router_variant):  # fmt: skip
        raise ConfigError("--router, --budget and --router-variant go with the router mode or "
                          "the cascade mode (--modes ... router)")  # fmt: skip
    _check_answer_gate_flag(modes, options)
    check_budget_sign(options.budget)  # before the router loads
    if isinstance(options.router, str | Path):
        if not Path(options.router).is_dir():
            raise DataError("no such folder: --router takes a router or gate export folder "
                            "(`retrieval-gate export`)", options.router)  # fmt: skip
        artifact = open_artifact(options.router, flag="--router")  # before any engine
        if artifact.kind == "export":
            artifact.model_file(options.router_variant, "--router-variant")
        _check_declared_budget(artifact.folder, artifact.router, options.budget)


def _check_answer_gate_flag(modes: Sequence[str], options: ModeOptions) -> None:
    """--answer-gate goes with the cascade mode and names a two-stage gate's folder."""
    if (CASCADE in modes) != (options.answer_gate is not None):
        raise ConfigError("the cascade mode and --answer-gate DIR (a two-stage gate export, "
                          "`train --config cascade-closed-book`) go together")  # fmt: skip
    if isinstance(options.answer_gate, str | Path):
        check_answer_gate_folder(options.answer_gate)


def _check_declared_budget(folder: Path, declared: Calibration | None, budget: float | None) -> None:  # fmt: skip
    """--budget against the costs the router's folder declares (read before it loads)."""
    if budget is None:
        return
    if declared is None:
        raise ConfigError(f"--budget {budget}: {folder} holds a binary gate, which has no "
                          "retrieval budget to meet; its operating point is its threshold "
                          "(--threshold router=VALUE), or pass a router export")  # fmt: skip
    check_budget(budget, declared.costs, "--budget")


def build_mode_gates(
    modes: Sequence[str], generator: Generator | None, options: ModeOptions
) -> dict[str, Gate]:
    """mode name -> gate, in the order given (`generator`: the engine the prompt and
    confidence gates share, None when there is none)."""
    check_modes(modes, options)
    context = _context(modes, generator, options)
    return {m: _mode_gate(m, context, options) for m in modes if m != ORACLE_RUN}


def build_gates_then_engine(
    modes: Sequence[str], start_engine: Callable[[], Generator], options: ModeOptions
) -> tuple[dict[str, Gate], Generator]:
    """Every mode's gate and the engine: the gates that do not ask the generator are built
    first, so a damaged gate or router file, or a budget the router cannot meet, fails before
    `start_engine` is called; the prompt and confidence gates follow with the engine."""
    check_modes(modes, options)
    asking = set(needing("generator", modes))
    context = _context(modes, None, options)
    gates = {m: _mode_gate(m, context, options) for m in modes
             if m not in asking and m != ORACLE_RUN}  # fmt: skip
    generator = start_engine()
    context = replace(context, _generator=generator)
    gates |= {m: _mode_gate(m, context, options) for m in modes if m in asking}
    return {m: gates[m] for m in modes if m in gates}, generator


def _mode_gate(mode: str, context: GateContext, options: ModeOptions) -> Gate:
    """One mode's gate, checked as the loop will run it (`loop_strategies`: a strategy
    declared twice with different specs failed mid-run); a router against the loop's
    retriever too."""
    gate = _build(mode, context, options)
    budget = options.budget if mode in FIRST_GATE or is_router(gate) else None
    registry = check_router(gate, budget, loop_strategies(mode, gate, options))
    if mode in FIRST_GATE:
        if options.retriever is not None:
            check_runnable([registry[s] for s in routed_strategies(gate, registry)], options.retriever,
                           f"router {gate.name!r}")  # fmt: skip
    if mode in options.thresholds:
        gate.threshold = options.thresholds[mode]
    return gate


def loop_strategies(mode: str, gate: Gate, options: ModeOptions) -> StrategyRegistry:
    """The registry `rag` runs a mode's gate with (`AdaptiveRAG`'s `strategies`): a
    fixed-strategy mode's or an oracle router's own (a --strategies file's specs, the
    built-in multi-step's), --strategies' for a router (the registry's `router-prior` and
    `router-tfidf` too: they declare their names there), the built-ins for a binary gate."""
    if isinstance(gate, FixedStrategy | OracleRouter):
        return gate.strategy_registry()
    return options.strategies if mode in FIRST_GATE or is_router(gate) else BUILTIN


def _build(mode: str, context: GateContext, options: ModeOptions) -> Gate:
    if mode == ORACLE:
        return OracleGate.from_file(options.oracle_labels)
    if mode == MULTI_STEP_MODE:
        multi = next((s for s in BUILTIN if s.multi_step), None)
        return FixedStrategy(multi.name, name=MULTI_STEP_MODE)  # type: ignore[union-attr]
    if mode in options.strategies:
        return FixedStrategy(mode, registry=options.strategies)
    if mode in FIRST_GATE:
        router = options.router
        if not isinstance(router, Gate):
            router = load_router(router, options.router_variant)  # type: ignore[arg-type]
        if mode == ROUTER:
            return router
        answer = options.answer_gate
        if not isinstance(answer, Gate):
            answer = load_router(answer, options.router_variant)  # type: ignore[arg-type]
        return Cascade(router, answer)
    gate = build_gate(mode, context, options)
    # The confidence gate can look answers up in the labelling run's records; in a RAG pass it
    # must generate them, or its cost would not be measured.
    return uncached_gate(gate)


def _context(
    modes: Sequence[str], generator: Generator | None, options: ModeOptions
) -> GateContext:
    context = GateContext(_generator=generator)
    if needing("labels", modes):
        splits = load_splits(options.labels, options.run_dir, options.questions)
        context.train, context.dev = splits.train, splits.dev
        if options.strategies is not BUILTIN and splits.dev.has_strategies:
            # the fitted routers are priced at --strategies' costs, as `evaluate` prices them
            context.costs = options.strategies.costs_in_order(
                splits.dev.strategies, "the label file's strategies"
            )
    if "prompt-ta-are" in modes:
        context.closed_book = LabellingRun(Path(options.run_dir)).records()
    return context


def oracle_from_run(
    never: RagRun,
    always: RagRun,
    multi: RagRun | None = None,
    *more: RagRun,
    strategies: StrategyRegistry = BUILTIN,
) -> OracleGate | OracleRouter:
    """Retrieve exactly where retrieval turned a wrong closed-book answer right (match); with
    a multi-step run (and any further fixed-strategy runs), the cheapest of the strategies
    that answered (in the registry's cost order; none did: the cheapest strategy). Each run's
    strategy is read from its answers."""
    closed = {a.id: bool(a.match) for a in never.answers}
    if multi is None:
        labels = {a.id: int(bool(a.match) and not closed[a.id]) for a in always.answers}
        return OracleGate(labels, name=ORACLE_RUN, source="this run's never/always answers")
    runs = [never, always, multi, *more]
    ran = {a.strategy for r in runs for a in r.answers}
    strategies.check(sorted(ran), "oracle-run")
    right: dict[str, set[str]] = {i: set() for i in closed}
    for r in runs:
        for a in r.answers:
            if a.match and a.id in right:
                right[a.id].add(a.strategy)
    order, cheapest = strategies.names, strategies.names[0]
    picks = {i: next((s for s in order if s in ok), cheapest) for i, ok in right.items()}
    return OracleRouter(picks, name=ORACLE_RUN, source="this run's fixed-strategy answers",
                        strategies=strategies)  # fmt: skip


def parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    """`mode=0.3` pairs from the command line."""
    out: dict[str, float] = {}
    repeated = first_repeated([m for m, sep, _ in (i.partition("=") for i in items) if sep and m])
    if repeated:  # the last one won, silently
        raise DataError(f"--threshold {repeated} is given more than once; give each mode one")
    for item in items:
        mode, sep, value = item.partition("=")
        try:
            out[mode] = float(value)
        except ValueError:
            sep = ""
        if not sep or not mode:
            raise DataError(f"--threshold expects MODE=VALUE (e.g. onnx=0.4), got {item!r}")
    return out
