"""The adaptive RAG loop: gate -> retriever -> generator, with QA accuracy and measured costs,
mode comparison, and the HTTP service."""

from .loop import AdaptiveRAG, Answer, Costs, RagRun
from .mode_comparison import ModeResult, compare_modes, comparison_rows
from .oracle import OracleGate

# The HTTP app lives in `retrieval_gate.rag.service` (imported on its own: it pulls FastAPI).


__all__ = [
    "AdaptiveRAG",
    "Answer",
    "Costs",
    "ModeResult",
    "OracleGate",
    "RagRun",
    "compare_modes",
    "comparison_rows",
]
