"""The generation cache (generation/cache.py): keys, hits, misses, duplicates, two writers, the
size bound, `cache clear`, `--no-cache`, the RAG meter's replayed costs, and (on the session's
vLLM engine) a cached answer byte-identical to a fresh one."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from retrieval_gate import work
from retrieval_gate.cache_settings import NO_CACHE_ENV
from retrieval_gate.errors import ConfigError
from retrieval_gate.generation.base import Generation
from retrieval_gate.generation.cache import (
    CachedGenerator,
    GenerationStore,
    cached,
    default_store,
    lazy_generator,
)
from retrieval_gate.generation.vllm_backend import CHOICE_BACKEND_ENV, choice_backend
from retrieval_gate.rag.costs import Costs, Meter
from retrieval_gate.rag.mode_comparison import clear_prefix_cache


class FakeGenerator:
    """Answers are a function of (prompt, max_new_tokens, logprobs, checksum); counts calls."""

    name = "fake"
    backend = "fake"

    def __init__(self, checksum: str = "weights-a"):
        self.checksum = checksum
        self.calls: list[list[str]] = []

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        self.calls.append(list(prompts))
        return [
            Generation(
                f"{p}|{max_new_tokens}|{self.checksum}",
                len(p.split()),
                3,
                [-0.1 * len(p), -1 / 3, -2 / 7] if logprobs else None,
            )  # fmt: skip
            for p in prompts
        ]

    def choice_probs(self, prompts, choices):
        self.calls.append(list(prompts))
        return np.array([[1 / 3 + len(p) / 1e3, 2 / 3 - len(p) / 1e3] for p in prompts])


def _bytes(g: Generation) -> str:
    """What a caller reads of an answer, serialised (not `seconds` / `cached`)."""
    d = asdict(g)
    return json.dumps([d[k] for k in ("text", "prompt_tokens", "completion_tokens",
                                      "token_logprobs")])  # fmt: skip


@pytest.fixture
def store(tmp_path):
    s = GenerationStore(tmp_path / "generations.sqlite")
    yield s
    s.close()


def test_hit_is_identical_and_not_computed(store):
    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    before = work.snapshot()
    fresh = gen.generate(["a b", "c d e"], 8, logprobs=True)
    again = gen.generate(["a b", "c d e"], 8, logprobs=True)
    assert fake.calls == [["a b", "c d e"]]
    assert again == fresh == fake.generate(["a b", "c d e"], 8, logprobs=True)
    assert [_bytes(g) for g in again] == [_bytes(g) for g in fresh]
    assert [g.cached for g in fresh] == [False, False] and all(g.cached for g in again)
    assert [g.seconds for g in again] == [g.seconds for g in fresh]  # the time when computed
    after = work.snapshot()
    assert after["llm_calls_computed"] - before["llm_calls_computed"] == 2
    assert after["llm_calls_cached"] - before["llm_calls_cached"] == 2
    assert after["prefill_tokens_cached"] - before["prefill_tokens_cached"] == 5
    assert after["decode_tokens_computed"] - before["decode_tokens_computed"] == 6


def test_changed_prompt_parameters_or_model_miss(store):
    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    gen.generate(["q"], 8)
    gen.generate(["q "], 8)  # another prompt
    gen.generate(["q"], 9)  # another max_new_tokens
    gen.generate(["q"], 8, logprobs=True)  # log-probabilities asked for
    other = FakeGenerator("weights-b")
    CachedGenerator(other, store=store).generate(["q"], 8)  # other weights
    assert len(fake.calls) == 4 and len(other.calls) == 1
    gen.generate(["q"], 8)
    assert len(fake.calls) == 4


def test_duplicates_in_a_batch_are_computed_once(store):
    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    gen.generate(["x"], 4)
    out = gen.generate(["y", "x", "y", "z", "y"], 4)
    assert fake.calls == [["x"], ["y", "z"]]
    assert [g.text.split("|")[0] for g in out] == ["y", "x", "y", "z", "y"]
    # a copy counts as its first does (y: computed, not read from the store) and costs nothing
    assert [g.cached for g in out] == [False, True, False, False, False]
    assert [g.seconds for g in out[2::2]] == [0.0, 0.0] and out[0].seconds > 0
    assert out[0] is not out[2]  # one object per prompt


def test_choice_probs_cached_exactly(store):
    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    fresh = gen.choice_probs(["p", "pq", "p"], ["[Yes]", "[No]"])
    again = gen.choice_probs(["pq", "p"], ["[Yes]", "[No]"])
    assert fake.calls == [["p", "pq"]]
    assert np.array_equal(again, fresh[[1, 0]]) and again.dtype == np.float64
    gen.choice_probs(["p"], ["[No]", "[Yes]"])  # other choices: a miss
    assert len(fake.calls) == 2


def test_choice_scores_are_stored_batch_by_batch(store, monkeypatch):
    """All of a call's misses were scored in one engine call and stored after it: a prompt
    gate over 10,000 questions (an hour on a 2-core CPU) killed near its end kept nothing."""
    from retrieval_gate.generation import cache

    monkeypatch.setattr(cache, "STORE_CHUNK", 2)
    fake = FakeGenerator()
    real = fake.choice_probs

    def killed_in_the_third(prompts, choices):
        if len(fake.calls) == 2:
            raise KeyboardInterrupt
        return real(prompts, choices)

    fake.choice_probs = killed_in_the_third
    prompts = ["a", "bb", "ccc", "dddd", "eeeee"]
    with pytest.raises(KeyboardInterrupt):
        CachedGenerator(fake, store=store).choice_probs(prompts, ["[Yes]", "[No]"])
    assert fake.calls == [["a", "bb"], ["ccc", "dddd"]]
    fake.choice_probs = real
    again = CachedGenerator(fake, store=store).choice_probs(prompts, ["[Yes]", "[No]"])
    assert fake.calls[2:] == [["eeeee"]] and np.array_equal(again, real(prompts, ["", ""]))


def test_all_hits_never_start_the_engine(store):
    started = []

    def factory():
        started.append(1)
        return FakeGenerator()

    def lazy():
        return CachedGenerator(store=store, factory=factory, identity={"checksum": "weights-a"},
                               name="fake", checksum="weights-a")  # fmt: skip

    lazy().generate(["a", "b"], 8)
    assert started == [1]
    gen = lazy()
    assert gen.generate(["b", "a"], 8)[0].text.startswith("b|8")
    clear_prefix_cache(gen)  # what the RAG comparison does before each mode: no engine start
    getattr(gen, "provenance", None)  # a probe of an attribute the wrapper lacks: neither
    assert started == [1] and not gen.started


def test_choice_backend_follows_the_cpu(monkeypatch):
    monkeypatch.delenv(CHOICE_BACKEND_ENV, raising=False)
    assert choice_backend(cuda=False, dtype="float32") == "transformers"  # vLLM in fp32
    assert choice_backend(cuda=False, dtype="bfloat16") == "vllm"
    assert choice_backend(cuda=True, dtype="auto") == "vllm"
    monkeypatch.setenv(CHOICE_BACKEND_ENV, "vLLM")
    assert choice_backend(cuda=False, dtype="float32") == "vllm"
    monkeypatch.setenv(CHOICE_BACKEND_ENV, "onnx")
    with pytest.raises(ConfigError, match=f"{CHOICE_BACKEND_ENV}='onnx': use vllm or"):
        choice_backend(cuda=False, dtype="float32")


@pytest.mark.slow  # resolves the bundled SmolLM2 folder (its conversion: ~15 s cold)
def test_choice_scores_go_to_their_own_engine(store, monkeypatch):
    """Where transformers scores the choices beside vLLM: a choice-only run starts it alone
    (never vLLM), generation starts vLLM, and the scores are keyed by the engine that computed
    them (a vLLM-scored entry is not served as transformers' or the other way round)."""
    from retrieval_gate import generation

    built = []

    def build(name, backend, **kwargs):
        built.append(backend)
        return FakeGenerator(checksum=f"weights-{backend}")

    monkeypatch.setattr(generation, "build_generator", build)
    monkeypatch.setenv(CHOICE_BACKEND_ENV, "transformers")
    gen = lazy_generator("smollm2-135m-instruct", "vllm", store=store)
    assert gen.identity["backend"] == "vllm" and gen.choice_identity["backend"] == "transformers"
    first = gen.choice_probs(["p", "q"], ["[Yes]", "[No]"])
    assert built == ["transformers"] and not gen.started
    assert np.array_equal(gen.choice_probs(["q", "p"], ["[Yes]", "[No]"]), first[[1, 0]])
    gen.generate(["p"], 8)
    assert built == ["transformers", "vllm"]
    resets = []
    gen._choice_inner.reset_prefix_cache = lambda: resets.append("choices")
    clear_prefix_cache(gen)  # the RAG comparison before each mode: both engines start cold
    assert resets == ["choices"]
    monkeypatch.setenv(CHOICE_BACKEND_ENV, "vllm")
    same = lazy_generator("smollm2-135m-instruct", "vllm", store=store)
    assert same.choice_identity == same.identity
    same.choice_probs(["p"], ["[Yes]", "[No]"])
    assert built == ["transformers", "vllm", "vllm"]  # computed: not the transformers entry


def _write(path: str, start: int) -> None:
    s = GenerationStore(path)
    gen = CachedGenerator(FakeGenerator(), store=s)
    for i in range(start, start + 60, 3):
        gen.generate([f"prompt {j}" for j in range(i, i + 3)], 8)


@pytest.mark.slow  # spawns two Python processes
def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "generations.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write, args=(path, start)) for start in (0, 30)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    s = GenerationStore(path)
    assert s.info()["entries"] == 90  # prompts 0..89, the 30 shared ones once
    fake = FakeGenerator()
    CachedGenerator(fake, store=s).generate([f"prompt {j}" for j in range(90)], 8)
    assert fake.calls == []


OPEN_AT_ONCE = """
import json, multiprocessing, os, sys
from retrieval_gate.generation.cache import GenerationStore

def open_and_write(path, go):
    go.wait()
    GenerationStore(path).put_many({f"k{os.getpid()}": {"text": "x"}})

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")  # the children touch SQLite only
    codes = []
    for path in sys.argv[1:]:
        go = ctx.Event()
        procs = [ctx.Process(target=open_and_write, args=(path, go)) for _ in range(6)]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(120)
        codes.append([p.exitcode for p in procs])
    print(json.dumps(codes))
"""


@pytest.mark.slow  # a Python process that forks 60
def test_processes_opening_a_new_cache_at_once_all_get_it(tmp_path):
    # SQLite answers "locked" at once to a second process switching a new file to WAL; the
    # store retries (CI once lost a process to this). The children fork from a small process
    # (forking this one, with torch and an engine loaded, took ~7 s for the 60).
    import subprocess
    import sys

    paths = [str(tmp_path / f"g{round_}.sqlite") for round_ in range(10)]
    proc = subprocess.run([sys.executable, "-c", OPEN_AT_ONCE, *paths], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [[0] * 6] * 10, proc.stderr[-3000:]
    assert [GenerationStore(path).info()["entries"] for path in paths] == [6] * 10


def test_size_bound_evicts_least_recently_used(tmp_path):
    s = GenerationStore(tmp_path / "g.sqlite", limit_bytes=4000)
    gen = CachedGenerator(FakeGenerator(), store=s)
    gen.generate(["keep me"], 8)
    for i in range(40):
        gen.generate([f"filler {i}"], 8)
        gen.generate(["keep me"], 8)  # used again: recently used, kept
    info = s.info()
    assert info["stored_bytes"] <= 4000 * 1.05 and 0 < info["entries"] < 41
    fake = FakeGenerator()
    CachedGenerator(fake, store=s).generate(["keep me", "filler 0"], 8)
    assert fake.calls == [["filler 0"]]


def test_cache_verb_info_and_clear(tmp_path, monkeypatch, capsys):
    from retrieval_gate.cli import main

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "new"))
    assert main(["cache", "info"]) == 0  # no cache yet: said, and none made by looking
    assert json.loads(capsys.readouterr().out)["exists"] is False
    assert not (tmp_path / "new").exists()
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    s = GenerationStore()
    CachedGenerator(FakeGenerator(), store=s).generate(["a", "b"], 8)
    assert main(["cache", "info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"] == 2 and info["path"] == str(tmp_path / "generations.sqlite")
    assert main(["cache", "clear"]) == 0
    assert json.loads(capsys.readouterr().out)["cleared"] == 2
    assert s.info()["entries"] == 0


def test_cache_verb_on_a_damaged_file_names_it_and_clear_sets_it_aside(
    tmp_path, monkeypatch, capsys
):
    """`cache info` on a file that is not a cache: an error naming it and the fix, no
    traceback; `cache clear` renames it beside itself (never deletes what it may not own) and
    starts an empty cache, which the verbs then use."""
    from retrieval_gate.cli import main

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    damaged = tmp_path / "generations.sqlite"
    damaged.write_bytes(b"not a database, but someone's bytes " * 100)
    assert main(["cache", "info"]) == 2
    err = capsys.readouterr().err
    assert str(damaged) in err and "damaged or unreadable" in err and "cache clear" in err
    assert "Traceback" not in err and "internal error" not in err
    assert main(["cache", "clear"]) == 0
    out = json.loads(capsys.readouterr().out)
    aside = Path(out["set_aside"])
    assert aside.parent == tmp_path and aside.name.startswith("generations.sqlite.damaged-")
    assert aside.read_bytes() == b"not a database, but someone's bytes " * 100
    assert out["entries"] == 0 and main(["cache", "info"]) == 0
    CachedGenerator(FakeGenerator(), store=GenerationStore()).generate(["a"], 8)
    assert GenerationStore().info()["entries"] == 1
    blocker = tmp_path / "other" / "generations.sqlite"  # a folder where the file goes: no
    blocker.mkdir(parents=True)  # traceback either
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(blocker.parent))
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err
    assert f"{blocker}: is a folder" in err and "move or remove it" in err
    assert "RETRIEVAL_GATE_CACHE" in err and "Traceback" not in err
    assert blocker.is_dir() and not any(blocker.iterdir())
    # a mistyped folder: nothing to clear, said, and nothing made there
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "typo" / "sub"))
    assert main(["cache", "clear"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cleared"] == 0 and out["exists"] is False and not (tmp_path / "typo").exists()
    # a file where the folder goes: said, where `info` reported an empty cache there
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "notes.txt"))
    for action in ("info", "clear"):
        assert main(["cache", action]) == 2
        assert "notes.txt: is not a folder" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_cache_with_a_damaged_page_is_said_so_with_the_fix(tmp_path, monkeypatch, capsys, caplog):
    """SQLite reads a page only when asked for it: a cache with a damaged page opened, `cache
    info` called it fine, and every lookup reaching the page warned "could not be read" with
    no way out named, run after run."""
    from retrieval_gate.cli import main

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    store = GenerationStore()
    store.put_many({f"k{i}": {"text": "x" * 1000} for i in range(300)})
    store.close()
    path = tmp_path / "generations.sqlite"
    for suffix in ("-wal", "-shm"):  # checkpointed into the file on close
        assert not path.with_name(path.name + suffix).exists()
    data = bytearray(path.read_bytes())
    data[8192:12288] = b"\x5a" * 4096  # the third page: an index or table page
    path.write_bytes(bytes(data))
    assert main(["cache", "info"]) == 2
    assert "damaged" in capsys.readouterr().err
    with caplog.at_level("WARNING"):
        GenerationStore(path).get_many([f"k{i}" for i in range(300)])
    assert "could not be read" in caplog.text and "`retrieval-gate cache clear`" in caplog.text
    assert main(["cache", "clear"]) == 0
    assert "set_aside" in json.loads(capsys.readouterr().out)
    assert main(["cache", "info"]) == 0  # an empty cache: its size leaves the copy set aside
    assert json.loads(capsys.readouterr().out)["file_mb"] < 0.1


def test_answers_held_without_a_store_are_bounded(monkeypatch):
    """Without a store the answers of a call that failed on one prompt are held for that call
    asked again; a caller that never asks again (serve --no-cache) held them all, for good.
    The newest HELD_MAX stay; older ones are computed again if asked."""
    from retrieval_gate.errors import PromptRefused
    from retrieval_gate.generation import cache

    monkeypatch.setattr(cache, "HELD_MAX", 3)

    class Server(FakeGenerator):  # fails prompt by prompt, as RemoteGenerator does
        def try_generate(self, prompts, max_new_tokens=24, logprobs=False):
            return [PromptRefused("refused") if p == "bad" else g for p, g in
                    zip(prompts, self.generate(prompts, max_new_tokens, logprobs), strict=True)]  # fmt: skip

    fake = Server()
    gen = CachedGenerator(fake, store=None)
    with pytest.raises(PromptRefused):
        gen.generate(["a", "b", "c", "d", "e", "bad"], 8)
    gen.generate(["a", "b", "c", "d", "e"], 8)
    assert fake.calls[1:] == [["a", "b"]]  # c, d, e held; a and b dropped, so asked again


def test_a_failed_prompts_retries_are_not_booked_on_the_answers(store):
    """A server's call in which one prompt failed after its retries (seconds of pauses): the
    call's whole time was split over the answers given, so a cached run replayed them about
    45x slower than a fresh one. The answers are booked until the last of them came back."""
    from retrieval_gate.errors import PromptRefused

    class Server(FakeGenerator):
        def try_generate(self, prompts, max_new_tokens=24, logprobs=False):
            answers = self.generate([p for p in prompts if p != "poison"], max_new_tokens)
            for g in answers:
                g.finished = time.perf_counter()
            time.sleep(0.5)  # the poison prompt's retries
            return [*answers, PromptRefused("refused")]  # it is asked last

    got = CachedGenerator(Server(), store=store).try_generate(["a b", "c d", "poison"])
    assert isinstance(got[2], PromptRefused) and sum(g.seconds for g in got[:2]) < 0.25
    again = CachedGenerator(Server(), store=store).try_generate(["a b", "c d"])
    assert all(g.cached for g in again) and sum(g.seconds for g in again) < 0.25


def test_no_cache_computes_afresh(tmp_path, monkeypatch):
    from retrieval_gate import cli

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    assert default_store() is not None
    seen = []
    monkeypatch.setattr(cli, "_run_counted", lambda args: seen.append(args.no_cache) or 0)
    required = {"evaluate": ["--labels", "x"], "tune": ["--labels", "x", "--gate", "tfidf"]}
    for verb in ("rag", "evaluate", "tune", "label", "serve"):
        assert cli.main([verb, *required.get(verb, []), "--no-cache"]) == 0
    assert seen == [True] * 5 and os.environ[NO_CACHE_ENV] == "1"
    assert default_store() is None
    fake = FakeGenerator()
    gen = cached(fake)
    gen.generate(["a", "a"], 8)
    gen.generate(["a"], 8)
    assert fake.calls == [["a", "a"], ["a"]]  # no store: every prompt computed, every time
    assert GenerationStore().info()["entries"] == 0


def test_meter_replays_the_computed_seconds(store):
    gen = CachedGenerator(FakeGenerator(), store=store)
    prompts, tags = ["a b", "c", "d e f"], ["no_retrieval", "one_retrieval", "one_retrieval"]
    first, second = Costs(questions=3), Costs(questions=3)
    Meter(first).generate(gen, prompts, tags, 8)
    Meter(second).generate(gen, prompts, tags, 8)
    assert (first.prompts_computed, first.prompts_cached) == (3, 0)
    assert (second.prompts_computed, second.prompts_cached) == (0, 3)
    for c in (first, second):
        c.total_seconds = c.generation_seconds
        c.as_computed()
    assert second.generation_seconds == pytest.approx(first.generation_seconds, rel=1e-12)
    assert second.total_seconds == pytest.approx(first.total_seconds, rel=1e-12)
    by = second.by_strategy["one_retrieval"].generation_seconds
    assert by == pytest.approx(first.by_strategy["one_retrieval"].generation_seconds)


def test_vllm_cached_answer_is_byte_identical(vllm_generator, tmp_path):
    """On the real engine: the answer served from the cache equals the fresh one byte for byte
    (text, token counts, log-probabilities; choice scores), and the key's token ids from the
    tokenizer alone (no engine) are the engine's own."""
    from transformers import AutoTokenizer

    from retrieval_gate.generation.chat import chat_token_ids

    prompts = ["What is the capital of France?", "Who wrote Hamlet?",
               "What is the capital of France?"]  # fmt: skip
    s = GenerationStore(tmp_path / "g.sqlite")
    gen = CachedGenerator(vllm_generator, store=s)
    fresh = vllm_generator.generate(prompts[:2], 12, logprobs=True)
    first = gen.generate(prompts, 12, logprobs=True)
    again = CachedGenerator(vllm_generator, store=GenerationStore(s.path)).generate(
        prompts, 12, logprobs=True
    )
    for out in (first, again):
        assert out[:2] == fresh and out[2] == fresh[0]
        assert [_bytes(g) for g in out] == [_bytes(g) for g in fresh + fresh[:1]]
    assert all(g.cached for g in again) and all(g.token_logprobs for g in again)
    choices = ["[Yes]", "[No]"]
    fresh_p = vllm_generator.choice_probs(prompts[:2], choices)
    gen.choice_probs(prompts[:2], choices)
    assert np.array_equal(gen.choice_probs(prompts[:2], choices), fresh_p)
    folder = vllm_generator.model
    lazy_ids = chat_token_ids(AutoTokenizer.from_pretrained(folder), prompts)
    assert lazy_ids == chat_token_ids(vllm_generator.tokenizer, prompts)
    # the key a verb computes before its engine starts is the running engine's: a cache that
    # `rag` filled is hit by a caller holding the engine, and the other way round
    lazy = lazy_generator("smollm2-135m-instruct", "vllm", store=None, max_model_len=2048,
                          dtype="float32")  # the fixture's settings  # fmt: skip
    assert lazy.identity == CachedGenerator(vllm_generator, store=None).identity
    assert lazy._inner is None  # the engine was not started for it


class SlowGenerator(FakeGenerator):
    """Takes 20 ms a prompt, so the RAG comparison has generation time to account for."""

    def generate(self, prompts, max_new_tokens=24, logprobs=False):
        time.sleep(0.02 * len(prompts))
        return super().generate(prompts, max_new_tokens, logprobs)

    def choice_probs(self, prompts, choices):
        time.sleep(0.02 * len(prompts))
        return super().choice_probs(prompts, choices)


class AskingGate:
    """A gate that asks the generator (as the prompt gates do): retrieve when P(first) > 0.5."""

    threshold = 0.5
    name = "asking"

    def __init__(self, generator):
        self.generator = generator

    def scores(self, questions):
        probs = self.generator.choice_probs([q.text for q in questions], ["[Yes]", "[No]"])
        return np.where(probs[:, 0] > 0.3335, 1.0, 0.0)


def test_rag_comparison_replays_costs_from_the_cache(store):
    """A warm rerun computes nothing and reports the fresh run's per-mode costs: generation
    from each answer's stored seconds, the gate's generator calls likewise."""
    from retrieval_gate.questions import Question
    from retrieval_gate.rag import OracleGate, compare_modes, comparison_rows
    from retrieval_gate.retrieval import ContextRetriever

    qs = [Question(id=f"q{i}", text=f"What is item {i}?" + " x" * i, answers=(f"a{i}",),
                   source="test", contexts=({"title": "", "text": f"item {i} is a{i}"},))
          for i in range(4)]  # fmt: skip

    def run():
        gen = CachedGenerator(SlowGenerator(), store=store)
        gates = {"never": OracleGate({q.id: 0 for q in qs}, name="never"),
                 "always": OracleGate({q.id: 1 for q in qs}, name="always"),
                 "asking": AskingGate(gen)}  # fmt: skip
        return compare_modes(gates, qs, ContextRetriever(), gen, k=1)

    fresh, warm = run(), run()
    counts = [(r.run.costs.prompts_computed, r.run.costs.prompts_cached) for r in fresh]
    # `asking`: its gate's 4 scores computed (the warm-up's 2 were not stored), 4 answers cached
    assert counts == [(4, 0), (4, 0), (4, 4)]
    assert [(r.run.costs.prompts_computed, r.run.costs.prompts_cached) for r in warm] == [
        (0, 4),
        (0, 4),
        (0, 8),
    ]
    rows = comparison_rows(warm)
    assert [(r["prompts computed"], r["prompts cached"]) for r in rows] == [(0, 4), (0, 4), (0, 8)]
    for f, w in zip(fresh, warm, strict=True):
        assert [a.answer for a in w.run.answers] == [a.answer for a in f.run.answers]
        cf, cw = f.run.costs, w.run.costs
        assert cw.generation_seconds == pytest.approx(cf.generation_seconds, rel=1e-9)
        # the same but for the gate's and the loop's own work (noise on a busy machine: a
        # 0.3 s stall of the loop was seen under a full suite, so the loop's own share is
        # bounded, not compared): the total holds the replayed seconds
        assert cw.gate_seconds == pytest.approx(cf.gate_seconds, abs=0.04)
        own = cw.total_seconds - cw.generation_seconds - cw.gate_seconds
        assert -1e-6 <= own < 1.0, (cw.total_seconds, cw.generation_seconds, cw.gate_seconds)
    assert fresh[2].run.costs.gate_seconds > 0.07  # the gate's 4 scores took 80 ms


def test_computing_bypasses_the_store(store):
    """`evaluate`'s cost column times what a call costs: inside `computing()` nothing is read."""
    from retrieval_gate.generation.cache import computing

    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    gen.generate(["a"], 8)
    gen.choice_probs(["a"], ["[Yes]", "[No]"])
    with computing():
        gen.generate(["a"], 8)
        gen.choice_probs(["a"], ["[Yes]", "[No]"])
    gen.generate(["a"], 8)
    assert fake.calls == [["a"]] * 4


def test_warming_reads_but_does_not_store(store):
    """Warm-up calls (first calls, tiny batches) read the cache but store nothing."""
    from retrieval_gate.generation.cache import warming

    fake = FakeGenerator()
    gen = CachedGenerator(fake, store=store)
    gen.generate(["a"], 8)
    with warming():
        gen.generate(["a", "b"], 8)
        gen.choice_probs(["b"], ["[Yes]", "[No]"])
    gen.generate(["b"], 8)
    gen.choice_probs(["b"], ["[Yes]", "[No]"])
    assert fake.calls == [["a"], ["b"], ["b"], ["b"], ["b"]]


def test_a_cache_path_that_is_a_file_is_said_plainly(tmp_path, monkeypatch, caplog):
    """$RETRIEVAL_GATE_CACHE naming a file: the model preparation was a NotADirectoryError
    traceback (after the 15 s conversion), the dense retriever's embeddings another. Now the
    model is refused before converting anything and embeddings are computed, not kept; the
    generation cache's warning named `cache clear` as the fix, which refuses it too."""
    from retrieval_gate.errors import InputError
    from retrieval_gate.generation import model_folders
    from retrieval_gate.retrieval.dense import cached_embeddings

    (tmp_path / "cache").write_text("not a folder\n")
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(model_folders, "_gguf_read_once", lambda: pytest.fail("converted"))
    with pytest.raises(InputError, match=r"cannot prepare the model in .*cache/models \(Not a"):
        model_folders.prepare_smollm2()
    caplog.set_level("WARNING", logger="retrieval_gate")
    emb = cached_embeddings(str(tmp_path / "encoder"), ["a", "b"], lambda: np.ones((2, 3)))
    assert emb.shape == (2, 3) and "embeddings not kept in" in caplog.text
    monkeypatch.setenv(NO_CACHE_ENV, "0")  # the generation cache: said so, not `cache clear`
    assert default_store() is None and "cache clear" not in caplog.text
    assert f"{tmp_path / 'cache'} is not a folder: point $RETRIEVAL_GATE_CACHE at" in caplog.text


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RETRIEVAL_GATE_CACHE_MB", "nan", "must be a number of megabytes, 0 or more"),
        ("RETRIEVAL_GATE_CACHE_MB", "inf", "must be a number of megabytes, 0 or more"),
        ("RETRIEVAL_GATE_CACHE_MB", "-5", "got '-5'"),
        ("RETRIEVAL_GATE_CACHE_MB", "abc", "got 'abc'"),
        ("RETRIEVAL_GATE_NO_CACHE", "maybe", "set 1 (no cache) or 0"),
    ],
)
def test_bad_cache_settings_stop_a_verb_before_it_runs(monkeypatch, capsys, name, value, message):
    """Read where the store opened, a bad one stopped `label` after its model was prepared
    (19 s), and NaN or inf was a traceback; an unknown RETRIEVAL_GATE_NO_CACHE kept the cache."""
    from retrieval_gate import cli

    monkeypatch.setenv(name, value)
    ran = []
    monkeypatch.setattr(cli, "_run_counted", lambda args: ran.append(args) or 0)
    assert cli.main(["cache", "info"]) == 2 and not ran
    err = capsys.readouterr().err
    assert f"${name}" in err and message in err and "Traceback" not in err
    monkeypatch.setenv(name, "0")
    assert cli.main(["cache", "info"]) == 0 and ran


def test_a_damaged_entry_is_computed_again(tmp_path, caplog):
    """SQLite checks its pages' structure, not the bytes of a stored answer: a character
    changed inside one (a bit flipped on disk, the length kept) was replayed as the answer, and
    a value that is no longer JSON stopped the verb with a JSONDecodeError traceback. Each
    entry now carries the CRC-32 of its text: a damaged one is computed again and stored whole;
    entries of a cache made before CRCs (NULL) are read as before."""
    import sqlite3

    path = tmp_path / "g.sqlite"
    gen = CachedGenerator(FakeGenerator(), store=GenerationStore(path))
    first = gen.generate(["Who wrote Hamlet?", "Capital of France?"], 8)
    with sqlite3.connect(path) as db:
        (key, text), (other, _) = db.execute("SELECT key, value FROM entries ORDER BY key")
        flipped = text.replace('"text":"', '"text":"X', 1)[: len(text)]  # same length
        db.execute("UPDATE entries SET value = ? WHERE key = ?", (flipped, key))
        db.execute("UPDATE entries SET value = '{\"te', crc = NULL WHERE key = ?", (other,))
    fake = FakeGenerator()
    again = CachedGenerator(fake, store=GenerationStore(path)).generate(
        ["Who wrote Hamlet?", "Capital of France?"], 8
    )
    assert [g.text for g in again] == [g.text for g in first] and len(fake.calls[0]) == 2
    assert "2 entries of the generation cache" in caplog.text and "are damaged" in caplog.text
    fake = FakeGenerator()  # stored whole again: both served from the cache
    CachedGenerator(fake, store=GenerationStore(path)).generate(["Who wrote Hamlet?"], 8)
    assert fake.calls == []
    with sqlite3.connect(path) as db:  # a cache made before CRCs: its entries are read
        db.execute("UPDATE entries SET crc = NULL")
    fake = FakeGenerator()
    CachedGenerator(fake, store=GenerationStore(path)).generate(["Capital of France?"], 8)
    assert fake.calls == []


def test_a_stored_field_of_the_wrong_type_is_computed_again(tmp_path, caplog):
    """A bit flipped in a row's type byte (which `quick_check` does not check) made its value
    bytes: `zlib.crc32(text.encode())` raised AttributeError and the verb stopped with
    "internal error". Such a row is damage like a failed CRC: computed again, stored whole; a
    size of the wrong type is evicted, not a TypeError."""
    import sqlite3

    path = tmp_path / "g.sqlite"
    gen = CachedGenerator(FakeGenerator(), store=GenerationStore(path))
    first = gen.generate(["Who wrote Hamlet?", "Capital of France?"], 8)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET value = CAST(value AS BLOB) WHERE rowid = 1")
        db.execute("UPDATE entries SET crc = crc + 0.5 WHERE rowid = 2")  # a REAL
        assert db.execute("SELECT typeof(value) FROM entries WHERE rowid = 1").fetchone() == (
            "blob",
        )
    fake = FakeGenerator()
    with caplog.at_level("WARNING"):
        again = CachedGenerator(fake, store=GenerationStore(path)).generate(
            ["Who wrote Hamlet?", "Capital of France?"], 8
        )
    assert [g.text for g in again] == [g.text for g in first] and len(fake.calls[0]) == 2
    assert "2 entries of the generation cache" in caplog.text and "are damaged" in caplog.text
    fake = FakeGenerator()  # stored whole again: served from the cache
    CachedGenerator(fake, store=GenerationStore(path)).generate(["Who wrote Hamlet?"], 8)
    assert fake.calls == []
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET bytes = CAST('12' AS BLOB)")
    store = GenerationStore(path, limit_bytes=20)
    store.put_many({"new": {"text": "x"}})  # evicts past the bound: no TypeError
    assert store.info()["entries"] == 1 and store.get_many(["new"]) == {"new": {"text": "x"}}


def test_a_cache_made_before_crcs_is_read_and_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:  # the schema before entries carried their CRC
        db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, value TEXT NOT NULL, bytes "
                   "INTEGER NOT NULL, created REAL NOT NULL, used REAL NOT NULL, hits INTEGER "
                   "NOT NULL DEFAULT 0)")  # fmt: skip
        db.execute("INSERT INTO entries VALUES ('k', '{\"a\":1}', 7, 0, 0, 0)")
    assert GenerationStore(path).get_many(["k"]) == {"k": {"a": 1}}
    GenerationStore(path).put_many({"n": {"b": 2}})
    assert GenerationStore(path).get_many(["k", "n"]) == {"k": {"a": 1}, "n": {"b": 2}}


def test_eviction_keeps_the_batch_just_written(tmp_path):
    """Every entry of one `put_many` / `get_many` shares its `used` time, and eviction deleted
    all entries up to the cutoff time: a put_many of 15 KB into a 10 KB store left nothing,
    and 30 entries read in one call then 5 new ones left those 5 (1.4 KB of a 10 KB bound)."""
    value = {"text": "x" * 980}  # ~1 KB stored
    s = GenerationStore(tmp_path / "g.sqlite", limit_bytes=10_000)
    s.put_many({f"a{i:02}": value for i in range(15)})
    info = s.info()
    assert 9_000 <= info["stored_bytes"] <= 10_000 and info["entries"] == 10
    assert set(s.get_many([f"a{i:02}" for i in range(15)])) == {f"a{i:02}" for i in range(5, 15)}
    s.close()
    s = GenerationStore(tmp_path / "h.sqlite", limit_bytes=10_000)
    s.put_many({f"b{i:02}": {"text": "x" * 300} for i in range(30)})  # 9.3 KB: kept
    assert s.info()["entries"] == 30
    s.get_many([f"b{i:02}" for i in range(30)])  # one `used` time for all 30
    s._written = s.limit  # sum at the next write, as a newly opened store does
    s.put_many({f"c{i}": {"text": "x" * 260} for i in range(5)})
    info = s.info()
    assert 8_000 <= info["stored_bytes"] <= 9_000, info  # down to 90% of the bound, not 1.4 KB
    assert set(s.get_many([f"c{i}" for i in range(5)])) == {f"c{i}" for i in range(5)}
    # a batch that fits the bound alone stays whole though it is past 90% of it
    s.put_many({f"d{i}": {"text": "x" * 940} for i in range(10)})  # ~9.5 KB
    assert set(s.get_many([f"d{i}" for i in range(10)])) == {f"d{i}" for i in range(10)}
    assert s.info()["stored_bytes"] <= 10_000
    s.close()


@pytest.mark.parametrize("kind", ["folder", "link to a folder", "fifo"])
def test_a_folder_where_the_cache_file_goes_is_named_with_a_fix_that_works(
    tmp_path, monkeypatch, capsys, caplog, kind
):
    """A folder at $RETRIEVAL_GATE_CACHE/generations.sqlite: verbs warned "unable to open
    database file" and sent the user to `cache clear`, which then asked for "a writable
    folder" (the folder was writable). Both now name the path as a folder, not the cache's
    file, and say to move or remove it; `cache clear` removes nothing it did not make."""
    from retrieval_gate.cli import main

    path = tmp_path / "generations.sqlite"
    if kind == "folder":
        path.mkdir()
        (path / "mine.txt").write_text("mine")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "elsewhere").mkdir()
        path.symlink_to(tmp_path / "elsewhere")
    word = "a special file" if kind == "fifo" else "a folder"
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    monkeypatch.setenv(NO_CACHE_ENV, "0")
    caplog.set_level("WARNING", logger="retrieval_gate")
    assert default_store() is None
    assert f"{path} is {'a link to ' if 'link' in kind else ''}{word}" in caplog.text
    assert "not the generation cache's database file" in caplog.text
    assert "move or remove it" in caplog.text and "cache clear" not in caplog.text
    for action in ("info", "clear"):
        assert main(["cache", action]) == 2
        err = capsys.readouterr().err
        assert f"{path}: is" in err and word in err and "move or remove it" in err, err
        assert "writable folder" not in err and "Traceback" not in err
    assert "removes only what it made" in err  # `clear`'s own reason
    if kind == "folder":
        assert (path / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["generations.sqlite"] + (["elsewhere"] if "link" in kind else [])
    )


def test_an_answer_stored_without_logprobs_is_asked_again_when_they_are_asked_for(store):
    """A server that gave no log-probabilities (it refused them), fixed, was never asked again:
    the answers stored without them were replayed to calls that ask for them ("8 LLM calls (8
    cached)", no answer confidence recorded). They are computed again (and stored with them);
    an empty answer, which has no tokens, is replayed as it is."""

    class Server(FakeGenerator):
        gives_logprobs = False

        def generate(self, prompts, max_new_tokens=24, logprobs=False):
            out = super().generate(prompts, max_new_tokens, logprobs and self.gives_logprobs)
            for g in out:
                g.text = "" if g.text.startswith("silent") else g.text
            return out

    refusing = Server()
    CachedGenerator(refusing, store=store).generate(["q1", "q2", "silent"], 8, logprobs=True)
    fixed = Server()
    fixed.gives_logprobs = True
    gen = CachedGenerator(fixed, store=store)
    out = gen.generate(["q1", "q2", "silent"], 8, logprobs=True)
    assert fixed.calls == [["q1", "q2"]]  # the empty answer is replayed
    assert [g.cached for g in out] == [False, False, True]
    assert all(g.token_logprobs for g in out[:2]) and out[2].text == ""
    again = gen.generate(["q1", "q2"], 8, logprobs=True)  # stored with them now
    assert fixed.calls == [["q1", "q2"]] and again == out[:2]
    gen.generate(["q3"], 8)  # not asked for: an answer without them serves the call
    gen.generate(["q3"], 8)
    assert fixed.calls[1:] == [["q3"]]


def _hold_a_write(path: Path, held, release) -> None:
    """Another writer: its write transaction open on `path` until `release` is set."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO entries (key, value, bytes, created, used, crc) "
               "VALUES ('theirs', '{}', 2, 0, 0, NULL)")  # fmt: skip
    held.set()
    release.wait(300)  # the old code waited out its 60 s busy timeout, twice for a lookup
    db.execute("COMMIT")
    db.close()


@pytest.fixture
def busy_cache(tmp_path, monkeypatch):
    """A cache of 10 entries under $RETRIEVAL_GATE_CACHE, a short busy timeout, and `hold()`:
    a thread holding a write transaction on it until the test ends."""
    import threading

    from retrieval_gate.generation import cache as cache_module

    monkeypatch.setattr(cache_module, "BUSY_SECONDS", 0.3, raising=False)
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    path = tmp_path / "generations.sqlite"
    s = GenerationStore(path)
    s.put_many({f"k{i}": {"text": "a", "prompt_tokens": 1, "completion_tokens": 1}
                for i in range(10)})  # fmt: skip
    s.close()
    held, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_hold_a_write, args=(path, held, release), daemon=True)

    def hold() -> None:
        thread.start()
        assert held.wait(30)

    yield path, hold
    release.set()
    if thread.is_alive():
        thread.join(30)


def test_clear_refuses_a_cache_another_process_is_writing(busy_cache, capsys):
    """`cache clear` on a cache another process held a write transaction on: after the busy
    timeout it renamed the intact database and its -wal / -shm files aside as "damaged" (while
    the writer still wrote to them) and said `cleared: 0`. Now refused, nothing moved."""
    from retrieval_gate.cli import main

    path, hold = busy_cache
    hold()
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: the cache is in use by another process" in err and "try again" in err
    assert "Traceback" not in err
    assert not [p.name for p in path.parent.iterdir() if "damaged" in p.name]
    assert GenerationStore(path).get_many(["k0", "k9"]).keys() == {"k0", "k9"}


def test_a_busy_cache_read_by_a_verb_is_not_called_damaged(busy_cache, caplog):
    """A lookup that waited out the busy timeout warned "If it is damaged, `retrieval-gate
    cache clear` sets it aside": a cache in use is intact, so it is said so instead."""
    path, hold = busy_cache
    store = GenerationStore(path)
    gen = CachedGenerator(FakeGenerator(), store=store)
    gen.generate(["a"], 8)
    hold()
    caplog.set_level("WARNING", logger="retrieval_gate")
    out = gen.generate(["a", "b"], 8)  # the hit's use time: a write, which waits
    assert [g.text for g in out] == ["a|8|weights-a", "b|8|weights-a"]
    assert "could not be read" in caplog.text and "not damaged" in caplog.text
    assert "cache clear" not in caplog.text
    store.close()
    assert not [p.name for p in path.parent.iterdir() if "damaged" in p.name]


def test_a_cache_that_cannot_be_written_is_not_set_aside(tmp_path, monkeypatch, capsys):
    """Only a damaged file is set aside: one SQLite could not write (disk full, read-only) was
    renamed as "damaged" too. Now refused with the error, nothing moved."""
    import sqlite3

    from retrieval_gate.cli import main

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    GenerationStore().put_many({"k": {"text": "x"}})

    def full(self):
        e = sqlite3.OperationalError("database or disk is full")
        e.sqlite_errorcode = sqlite3.SQLITE_FULL
        raise e

    monkeypatch.setattr(GenerationStore, "clear", full)
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err
    assert "(database or disk is full); nothing was moved" in err and "free disk space" in err
    assert not [p.name for p in tmp_path.iterdir() if "damaged" in p.name]
    assert GenerationStore().get_many(["k"]) == {"k": {"text": "x"}}


def test_two_clears_within_a_second_keep_both_copies_set_aside(tmp_path, monkeypatch, capsys):
    """Two clears of a damaged cache within one second named the same copy, and the second
    rename replaced the first: a copy set aside is never deleted, so each gets its own name."""
    from retrieval_gate.cli import main
    from retrieval_gate.generation import cache as cache_module

    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path))
    monkeypatch.setattr(cache_module.time, "strftime", lambda fmt, *t: "20261202-055005")
    path = tmp_path / "generations.sqlite"
    copies = []
    for n in range(3):
        path.write_bytes(f"not a database {n} ".encode() * 100)
        assert main(["cache", "clear"]) == 0
        copies.append(Path(json.loads(capsys.readouterr().out)["set_aside"]))
    assert len(set(copies)) == 3
    for n, copy in enumerate(copies):
        assert copy.name.startswith("generations.sqlite.damaged-20261202-055005")
        assert copy.read_bytes() == f"not a database {n} ".encode() * 100


def test_a_cache_intact_but_unusable_is_not_sent_to_cache_clear(tmp_path, monkeypatch, caplog):
    """A full disk, a read-only file, or a file above the cache's folder: every warning said
    "If it is damaged, `retrieval-gate cache clear` sets it aside", and `cache clear` then
    refused or did nothing. Each now names the problem and a fix that works; only a damaged
    file is sent to `cache clear`."""
    import sqlite3

    from retrieval_gate.cli import main

    caplog.set_level("WARNING", logger="retrieval_gate")
    store = GenerationStore(tmp_path / "g.sqlite")

    def failing(code, words):
        def fail(self, *args):
            e = sqlite3.OperationalError(words)
            e.sqlite_errorcode = code
            raise e

        return fail

    monkeypatch.setattr(GenerationStore, "_put", failing(sqlite3.SQLITE_FULL, "disk is full"))
    store.put_many({"k": {"text": "x"}})
    assert "free disk space" in caplog.text and "cache clear" not in caplog.text
    caplog.clear()
    monkeypatch.setattr(GenerationStore, "_get", failing(sqlite3.SQLITE_READONLY, "readonly"))
    store.get_many(["k"])
    assert "permissions" in caplog.text and "cache clear" not in caplog.text
    caplog.clear()
    monkeypatch.setattr(GenerationStore, "_get", failing(sqlite3.SQLITE_CORRUPT, "malformed"))
    store.get_many(["k"])  # damaged: the one case `cache clear` is the way out
    assert "`retrieval-gate cache clear`" in caplog.text
    caplog.clear()
    store.close()
    (tmp_path / "notes.txt").write_text("mine")  # a file two levels above the cache's file
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "notes.txt" / "sub"))
    monkeypatch.setenv(NO_CACHE_ENV, "0")
    assert default_store() is None
    assert f"{tmp_path / 'notes.txt'} is not a folder" in caplog.text
    assert "cache clear" not in caplog.text
    for action in ("info", "clear"):
        assert main(["cache", action]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"
