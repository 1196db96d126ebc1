"""retrieval-gate: train, evaluate and ship retrieval-necessity gates.

`from retrieval_gate import RetrievalGate` is the public API. It is imported lazily (module
`__getattr__`) so that `import retrieval_gate` stays cheap and never imports onnxruntime or
torch until a gate is used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["RetrievalGate", "__version__"]

if TYPE_CHECKING:
    from .gates.pretrained import RetrievalGate


def __getattr__(name: str) -> Any:
    if name == "RetrievalGate":
        from .gates.pretrained import RetrievalGate

        return RetrievalGate
    raise AttributeError(f"module 'retrieval_gate' has no attribute {name!r}")
