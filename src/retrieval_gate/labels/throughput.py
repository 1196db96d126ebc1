"""Labelling throughput of a generator backend: questions per second closed-book and with the
top-5 documents, on the same RetrievalQA questions (they carry 5 contexts each), the median
of a few repeats after one warm-up call. `retrieval-gate label --throughput N` prints it."""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..data import load_dataset
from ..generation.base import Generator
from ..generation.prompts import closed_book_prompt, document_texts, with_context_prompt
from ..retrieval import ContextRetriever
from .closed_book import MAX_NEW_TOKENS
from .rag_gain import TOP_K


def throughput(generator: Generator, n: int = 64, repeats: int = 3) -> dict[str, Any]:
    """Median questions/s over `repeats` batched calls of `n` questions, each setting."""
    qs = load_dataset("retrievalqa")[:n]
    hits = ContextRetriever().retrieve(qs, TOP_K)
    settings = {
        "closed_book": [closed_book_prompt(q.text) for q in qs],
        "with_5_docs": [
            with_context_prompt(q.text, document_texts(h)) for q, h in zip(qs, hits, strict=True)
        ],
    }
    out: dict[str, Any] = {"backend": getattr(generator, "backend", "?"), "questions": len(qs)}
    for name, prompts in settings.items():
        generator.generate(prompts[:8], MAX_NEW_TOKENS)  # warm-up
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            generator.generate(prompts, MAX_NEW_TOKENS, logprobs=True)
            rates.append(len(prompts) / (time.perf_counter() - start))
        out[f"{name}_qps_median"] = round(statistics.median(rates), 2)
        out[f"{name}_qps_all"] = [round(r, 2) for r in rates]
    return out
