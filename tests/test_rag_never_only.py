"""`rag --modes never`: no retriever is built for a run whose modes never retrieve."""

from __future__ import annotations

import json

import numpy as np

from retrieval_gate.generation.base import Generation
from retrieval_gate.rag import experiment
from retrieval_gate.rag.experiment import Pipeline, Sample, run_comparison
from retrieval_gate.retrieval import ContextRetriever


class Closed:
    """Answers "I don't know" to every prompt; counts calls."""

    name = "closed"
    checksum = "none"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls.append(list(prompts))
        return [Generation("I don't know", len(p.split()), 3) for p in prompts]

    def choice_probs(self, prompts, choices):
        return np.full((len(prompts), len(choices)), 1 / len(choices))


def _counting(monkeypatch) -> list[tuple]:
    built: list[tuple] = []

    def open_retriever(kind, corpus=None):
        built.append((kind, corpus))
        return ContextRetriever()

    monkeypatch.setattr(experiment, "open_retriever", open_retriever)
    return built


def test_a_never_only_run_builds_no_retriever_and_resumes(tmp_path, monkeypatch):
    """`--modes never` loaded every shipped document and built BM25 over them, unused."""
    built = _counting(monkeypatch)
    progress = tmp_path / "run.modes.jsonl"
    kwargs = dict(sample=Sample(["retrievalqa"], limit=3), pipeline=Pipeline(),
                  progress_file=progress)  # fmt: skip
    first = run_comparison(["never"], generator=Closed(), **kwargs)
    assert built == []
    assert first["settings"]["retriever"] == "none" and "retriever=none" in first["note"]
    assert first["modes"]["never"]["costs"]["retrieval_rate"] == 0.0
    assert [json.loads(line)["mode"] for line in progress.read_text().splitlines()] == ["never"]
    gen = Closed()
    again = run_comparison(["never"], generator=gen, **kwargs)  # its own progress kept
    assert "kept from an earlier run: never" in again["note"] and built == []
    assert again["modes"]["never"] == first["modes"]["never"]


def test_a_run_that_retrieves_builds_its_retriever_once(monkeypatch):
    built = _counting(monkeypatch)
    report = run_comparison(["never", "always"], Sample(["retrievalqa"], limit=2),
                            Pipeline("contexts", k=1), generator=Closed())  # fmt: skip
    assert built == [("contexts", None)] and report["settings"]["retriever"] == "contexts"
