"""The RAG comparison's modes as gates: every registry gate by name, plus two oracles:
`oracle` follows a label file (rag-gain by default); `oracle-run` follows this very run's
`never` and `always` answers (retrieve exactly where the with-context answer matches and the
closed-book one does not), so it needs no labelling run and is the exact ceiling of any gate
on these questions with this generator, retriever and prompts.

Gates that fit something (popularity thresholds, TA-ARE demonstrations) take the train/dev
part of the canonical split of a label file through the registry's `GateContext`; test
questions never reach their construction. Prompt and confidence gates share the RAG loop's own
generator, so their LLM calls are measured as gate time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, DataError
from ..gates.base import Gate
from ..gates.registry import GateContext, build_gate, gate_names
from ..generation.base import Generator
from ..labels.evalset import DEFAULT_RUN_DIR, load_splits
from ..labels.files import LabelFile
from .loop import RagRun
from .oracle import OracleGate

MODES = (
    "never",
    "always",
    "learned",
    "onnx",
    "popularity",
    "prompt-vanilla",
    "prompt-ta-are",
    "confidence",
    "oracle",
    "oracle-run",
)
ORACLE_RUN = "oracle-run"  # built after `never` and `always` have run (see oracle_from_run)
# Gates that ask the generator itself (they cannot be served without one).
GENERATOR_MODES = ("prompt-vanilla", "prompt-ta-are", "confidence")
# Modes whose construction needs the labelled train/dev split.
_FITTED = {"popularity", "popularity-global", "prompt-ta-are", "tfidf"}


@dataclass
class ModeOptions:
    """Where each mode's gate comes from."""

    onnx: str | None = None  # exported gate folder (export/<name>)
    variant: str = "fp32"  # which ONNX file of that export: fp32 / opt / int8 / fp16
    learned_run: str | None = None  # training run folder (checkpoints/<run>)
    labels: Path = DEFAULT_RUN_DIR / "closed-book.jsonl"  # fits popularity / TA-ARE
    run_dir: Path = DEFAULT_RUN_DIR  # closed-book records and outcomes of the labelling run
    oracle_labels: Path = DEFAULT_RUN_DIR / "rag-gain.jsonl"
    date: str | None = None  # TA-ARE's "Today is ..." (default: today)
    thresholds: dict[str, float] = field(default_factory=dict)  # mode -> threshold override


def known_modes() -> list[str]:
    return list(dict.fromkeys([*MODES, ORACLE_RUN, *gate_names()]))


def check_modes(modes: Sequence[str], options: ModeOptions) -> None:
    """Fails fast, before an engine starts, on an unknown mode or a missing input file."""
    unknown = [m for m in modes if m not in known_modes()]
    if unknown:
        raise ConfigError(
            f"unknown mode {unknown[0]!r} (--modes); known: {', '.join(known_modes())}"
        )
    if "onnx" in modes and not options.onnx:
        found = sorted(str(p.parent) for p in Path("export").glob("*/model.onnx"))
        raise ConfigError(
            "the onnx mode needs an exported gate: --onnx export/<name>"
            + (f" (found: {', '.join(found)})" if found else " (run `retrieval-gate export`)")
        )
    if ORACLE_RUN in modes and not {"never", "always"} <= set(modes):
        raise ConfigError(f"the {ORACLE_RUN} mode needs the never and always modes in --modes")
    if "learned" in modes and not options.learned_run:
        raise ConfigError("the learned mode needs a training run: --learned-run checkpoints/<run>")
    needed = []
    if "oracle" in modes:
        needed.append(("oracle mode", "--oracle-labels", options.oracle_labels))
    if _FITTED & set(modes):
        needed.append(("popularity / TA-ARE / tfidf modes", "--labels", options.labels))
    for what, flag, path in needed:
        if not Path(path).is_file():
            raise DataError(
                f"no label file for the {what}: run `retrieval-gate label` or pass {flag}", path
            )


def build_mode_gates(
    modes: Sequence[str], generator: Generator | None, options: ModeOptions
) -> dict[str, Gate]:
    """mode name -> gate, in the order given (`generator`: the engine the prompt and
    confidence gates share, None when there is none)."""
    check_modes(modes, options)
    context = _context(modes, generator, options)
    gates: dict[str, Gate] = {}
    for mode in (m for m in modes if m != ORACLE_RUN):
        gate = _build(mode, context, options)
        if mode in options.thresholds:
            gate.threshold = options.thresholds[mode]
        gates[mode] = gate
    return gates


def _build(mode: str, context: GateContext, options: ModeOptions) -> Gate:
    if mode == "oracle":
        return OracleGate.from_file(options.oracle_labels)
    kwargs = {
        "learned": {"run": options.learned_run},
        "onnx": {"path": options.onnx, "variant": options.variant},
    }
    gate = build_gate(mode, context, **kwargs.get(mode, {}), date=options.date)
    # The confidence gate can look answers up in the labelling run's records; in a RAG pass it
    # must generate them, or its cost would not be measured.
    uncached = getattr(gate, "uncached", None)
    return uncached() if callable(uncached) else gate


def _context(
    modes: Sequence[str], generator: Generator | None, options: ModeOptions
) -> GateContext:
    context = GateContext(_generator=generator)
    if _FITTED & set(modes):
        splits = load_splits(options.labels, options.run_dir)
        context.train, context.dev = splits.train, splits.dev
    closed = Path(options.run_dir) / "closed-book.jsonl"
    if "prompt-ta-are" in modes and closed.is_file():
        context.closed_book = LabelFile(closed).rows
    return context


def oracle_from_run(never: RagRun, always: RagRun) -> OracleGate:
    """Retrieve exactly where retrieval turned a wrong closed-book answer right (match)."""
    closed = {a.id: bool(a.match) for a in never.answers}
    labels = {a.id: int(bool(a.match) and not closed[a.id]) for a in always.answers}
    return OracleGate(labels, name=ORACLE_RUN, source="this run's never/always answers")


def parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    """`mode=0.3` pairs from the command line."""
    out: dict[str, float] = {}
    for item in items:
        mode, sep, value = item.partition("=")
        try:
            out[mode] = float(value)
        except ValueError:
            sep = ""
        if not sep or not mode:
            raise DataError(f"--threshold expects MODE=VALUE (e.g. onnx=0.4), got {item!r}")
    return out
