"""Every gate by name: `build_gate("tfidf", context)`.

Gates that learn (popularity, tfidf), look things up (confidence), or need demonstrations
(TA-ARE) take what they need from a `GateContext` holding ONLY the train and dev splits,
the closed-book records and a lazily started generator; test questions never reach a gate's
construction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendError, DataError
from ..generation.base import Generator
from ..labels.evalset import EvalSet
from ..models import SMOLLM2
from .base import Gate


class LazyGenerator:
    """The generator, started on first call (vLLM takes ~25 s) and then shared by every gate
    holding this object."""

    def __init__(self, **options: Any):
        self.options = {"name_or_path": SMOLLM2, **options}
        self._generator: Generator | None = None

    def __call__(self) -> Generator:
        if self._generator is None:
            try:
                from ..generation import build_generator
            except ImportError as e:
                raise BackendError(f"no generator backend available ({e})") from None
            self._generator = build_generator(**self.options)
        return self._generator

    @property
    def checksum(self) -> str:
        """What the generator reports as its `checksum` (a local folder's weights sha256, else
        the model's name), known without starting the engine: cached prompt-gate scores are
        found by it, so a cache hit costs no engine start."""
        if self._generator is not None:
            return self._generator.checksum
        from ..generation.models import folder_checksum, resolve_generator_model

        model = resolve_generator_model(self.options["name_or_path"])
        return folder_checksum(Path(model)) if Path(model).is_dir() else model


@dataclass
class GateContext:
    train: EvalSet | None = None
    dev: EvalSet | None = None
    closed_book: dict[str, dict] = field(default_factory=dict)
    generator: LazyGenerator = field(default_factory=LazyGenerator)
    # an already running generator (the RAG loop passes its own engine)
    _generator: InitVar[Generator | None] = None

    def __post_init__(self, _generator: Generator | None) -> None:
        if _generator is not None:
            self.generator = LazyGenerator()
            self.generator._generator = _generator

    def need(self, what: str, gate: str) -> Any:
        value = getattr(self, what)
        if value is None or (isinstance(value, dict | EvalSet) and not len(value)):
            raise DataError(f"gate {gate!r} needs {what} data (labels for the canonical split)")
        return value


def _always(ctx: GateContext, **_: Any) -> Gate:
    from .trivial import always_gate

    return always_gate()


def _never(ctx: GateContext, **_: Any) -> Gate:
    from .trivial import never_gate

    return never_gate()


def _popularity(
    ctx: GateContext, per_relation: bool = True, feature: str | None = None, **_: Any
) -> Gate:
    from .popularity import fit_popularity

    dev = ctx.need("dev", "popularity")
    return fit_popularity(dev.questions, dev.y, dev.closed_correct, dev.rag_correct, per_relation,
                          feature=feature or "s_pop")  # fmt: skip


def _popularity_global(ctx: GateContext, feature: str | None = None, **kw: Any) -> Gate:
    return _popularity(ctx, per_relation=False, feature=feature)


def _tfidf(ctx: GateContext, **kw: Any) -> Gate:
    from .tfidf import TfidfGate

    train = ctx.need("train", "tfidf")
    return TfidfGate.fit(train.questions, train.y, **kw)


def _confidence(ctx: GateContext, **_: Any) -> Gate:
    from .confidence import ConfidenceGate

    return ConfidenceGate(ctx.closed_book, ctx.generator)


def _prompt(template: str) -> Callable[..., Gate]:
    def build(ctx: GateContext, date: str | None = None, **_: Any) -> Gate:
        from ..retrieval.dense import MiniLMEncoder
        from .prompt import DemoPool, PromptGate

        demos = None
        if template == "ta-are":
            train = ctx.need("train", "prompt-ta-are")
            records = ctx.need("closed_book", "prompt-ta-are")
            demos = DemoPool.from_closed_book(train.questions, records, MiniLMEncoder().encode)
        return PromptGate(ctx.generator, template, demos, date)

    return build


def _learned(ctx: GateContext, run: str | None = None, **_: Any) -> Gate:
    if not run:
        raise DataError(
            "the learned gate needs a training run folder: --learned-run checkpoints/<run>"
        )
    from .learned import LearnedGate

    return LearnedGate(run)


def _onnx(ctx: GateContext, path: str | None = None, variant: str = "fp32", **_: Any) -> Gate:
    if not path:
        raise DataError("the onnx gate needs an exported model: --onnx export/<name>")
    from .onnx import OnnxGate

    return OnnxGate(path, variant=variant)


GATES: dict[str, Callable[..., Gate]] = {
    "always": _always,
    "never": _never,
    "popularity": _popularity,
    "popularity-global": _popularity_global,
    "prompt-vanilla": _prompt("vanilla"),
    "prompt-ta-are": _prompt("ta-are"),
    "confidence": _confidence,
    "tfidf": _tfidf,
    "learned": _learned,
    "onnx": _onnx,
}


def gate_names() -> list[str]:
    return list(GATES)


def build_gate(name: str, context: GateContext | None = None, **options: Any) -> Gate:
    """A gate by registry name; `options` go to that gate (e.g. run=, path=, date=)."""
    if name not in GATES:
        raise DataError(f"unknown gate {name!r}; known gates: {', '.join(GATES)}")
    return GATES[name](context or GateContext(), **options)
