"""The transformers backend, for machines without vLLM: same prompts, same chat-template token
ids, greedy decoding in length-sorted, left-padded mini-batches (transformers has no scheduler
of its own, so sorting by length is what keeps padding cheap).

Choice scores ("[Yes]"/"[No]", the prompt gates) take one forward pass per mini-batch over each
prompt's own tokens and, in the same pass, a short branch per choice under a tree mask: the
prompts' common token prefix (chat template, instruction, a TA-ARE head) is run once and its
keys and values reused, to the token (vLLM's prefix cache reuses whole 32-token blocks only and
needs a second request per prompt for the other choice). On a CPU without native bf16 this
scores the prompt gates faster than vLLM in fp32, so the generation cache sends choice scores
there (`vllm_backend.choice_backend`; docs/prompt-gates.md has the figures)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import Generation
from .chat import (
    all_extend,
    chat_token_ids,
    choice_token_ids,
    common_prefix_length,
    next_token_split,
)
from .model_folders import folder_checksum
from .vllm_backend import softmax_rows


def transformers_dtype(device: str) -> str:
    """The transformers generator's precision on `device` ("cpu", "cuda", "cuda:1"): bf16 on
    CUDA, fp32 on CPU. Also what the generation cache keys its answers by (`cache.py`)."""
    return "bfloat16" if str(device).startswith("cuda") else "float32"


# Prompt tokens (after the shared prefix) per choice-scoring mini-batch. On a 2-core AMD EPYC
# Zen 3 (AVX2 only), 128 TA-ARE prompts (~100 own tokens each) took 32.7-33.8 s in batches of
# at most 1,024 tokens, 37.2 s at 512, 39.3 s at 2,048 and 40.2 s in batches of 32 prompts (the
# working set stays in cache); Vanilla prompts (~22 own tokens) fill 32 rows under it anyway.
CHOICE_TOKENS = 1024


class TransformersGenerator:
    """A `Generator` over a local folder or hub name, on CUDA when there is one (bf16 there,
    fp32 on CPU); `device` ("cpu", "cuda", "cuda:1") picks one."""

    backend = "transformers"

    def __init__(
        self,
        model: str,
        name: str | None = None,
        batch_size: int = 32,
        max_model_len: int | None = None,
        device: str | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path = model
        self.name = name or Path(model).name
        self.checksum = folder_checksum(Path(model)) if Path(model).is_dir() else model
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = transformers_dtype(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        cuda = torch.device(self.device).type == "cuda"
        attention = {} if cuda else {"attn_implementation": gqa_attention()}
        self.model = AutoModelForCausalLM.from_pretrained(
            model, dtype=getattr(torch, self.dtype), **attention
        )
        self.model.to(self.device)
        self._prefix: tuple[list[int], Any] = ([], None)  # a shared prefix and its keys/values
        self.model.eval()
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id
        # as vLLM's max_model_len: the model's own length, or less when asked
        window = int(self.model.config.max_position_embeddings)
        self.context_window = min(window, max_model_len) if max_model_len else window

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        """Tokens of each prompt as the model sees it (chat template included)."""
        return [len(ids) for ids in chat_token_ids(self.tokenizer, prompts)]

    def _batches(self, seqs: list[list[int]], tokens: int = 0) -> list[list[int]]:
        """Length-sorted mini-batches of at most `batch_size` rows and, when `tokens` is given,
        at most that many padded tokens (rows x the longest row)."""
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        out: list[list[int]] = []
        for i in order:
            full = out and len(out[-1]) >= self.batch_size
            over = out and tokens and (len(out[-1]) + 1) * len(seqs[i]) > tokens
            if not out or full or over:
                out.append([])
            out[-1].append(i)
        return out

    def _pad_left(self, seqs: list[list[int]]) -> tuple[Any, Any]:
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, width - len(s) :] = torch.tensor(s)
            mask[row, width - len(s) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 24,
        logprobs: bool = False,
        progress: bool = False,
    ) -> list[Generation]:
        seqs = chat_token_ids(self.tokenizer, prompts)
        out: list[Generation | None] = [None] * len(seqs)
        for batch in self._batches(seqs):
            for i, gen in zip(
                batch, self._generate([seqs[i] for i in batch], max_new_tokens), strict=True
            ):
                out[i] = gen if logprobs else Generation(gen.text, *_counts(gen))
        return [g for g in out if g is not None]

    def _generate(self, seqs: list[list[int]], max_new_tokens: int) -> list[Generation]:
        import torch

        ids, mask = self._pad_left(seqs)
        with torch.inference_mode():
            res = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self.pad_id,
            )
        new = res.sequences[:, ids.shape[1] :]
        steps = torch.stack(res.scores, dim=1).float().log_softmax(-1)  # (b, t, vocab)
        chosen = steps.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        eos = set(_as_list(self.model.generation_config.eos_token_id)) | {self.pad_id}
        gens = []
        for row, s in enumerate(seqs):
            toks = new[row].tolist()
            n = next((j + 1 for j, t in enumerate(toks) if t in eos), len(toks))
            text = self.tokenizer.decode(toks[:n], skip_special_tokens=True).strip()
            gens.append(Generation(text, len(s), n, chosen[row, :n].tolist()))
        return gens

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        """P(choice | prompt), normalised over `choices`, shape (n, c). Choices that differ in
        one token ("[" + Yes|No + "]", `next_token_split`) are read from one forward pass over
        each prompt's own tokens plus one short pass per choice (module docstring); other
        choices are scored whole."""
        heads = chat_token_ids(self.tokenizer, prompts)
        tails = choice_token_ids(self.tokenizer, choices)
        split = next_token_split(tails)
        # the one-pass tree needs attention that reads a boolean 4D mask as given (SDPA);
        # eager attention would add it, flash attention has none
        tree = getattr(self.model.config, "_attn_implementation", None) in (GQA, "sdpa")
        if split is None or not tree:
            return self._whole_probs(heads, tails)
        prefix, ids, suffix = split
        seqs = [h + prefix for h in heads]
        shared = self._shared_prefix(seqs)
        own = [s[shared:] for s in seqs]
        logp = np.empty((len(seqs), len(ids)))
        for batch in self._batches(own, CHOICE_TOKENS):
            logp[batch] = self._split_logprobs([own[i] for i in batch], shared, ids, suffix)
        return softmax_rows(logp)

    def reset_prefix_cache(self) -> None:
        """Forgets the kept prefix (as vLLM's `reset_prefix_cache`: a timed run starts cold)."""
        self._prefix = ([], None)

    def _shared_prefix(self, seqs: list[list[int]]) -> int:
        """Tokens at the start of every sequence whose keys and values are computed once: the
        call's common prefix when it has two or more prompts (kept for later calls, so batch-1
        calls of the same template reuse it), else the kept one where it fits. Each sequence
        keeps at least one token of its own."""
        n = common_prefix_length(seqs, keep=1) if len(seqs) > 1 else 0
        if n and seqs[0][:n] != self._prefix[0]:
            self._prefix = (list(seqs[0][:n]), None)
        kept = self._prefix[0]
        return len(kept) if all_extend(seqs, kept) else 0

    def _prefix_cache(self, n: int, batch: int) -> Any:
        """The kept prefix's keys and values (computed on first use) as a cache of `batch`
        rows: broadcast views, which the forward pass copies once when it appends to them."""
        import torch
        from transformers import DynamicCache

        if not n:
            return None
        ids, kv = self._prefix
        if kv is None:
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([ids], device=self.device))
            kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
            self._prefix = (ids, kv)
        return DynamicCache([(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1))
                             for k, v in kv])  # fmt: skip

    def _split_logprobs(
        self, own: list[list[int]], n: int, ids: list[int], suffix: list[int]
    ) -> np.ndarray:
        """log P(d | seq) + log P(suffix | seq + [d]) for every d in `ids`, shape (b, c), each
        seq being the kept n-token prefix and its `own` tokens, from one forward pass: each row
        holds its own tokens (left-padded after the shared prefix) and then, per choice, a
        branch [d] + suffix[:-1] that sees the row's tokens and itself only (a tree mask,
        positions given), so pads and other branches change nothing."""
        import torch

        rows, c, k = len(own), len(ids), len(suffix)
        x, pos, seen = _tree_inputs(own, n, ids, suffix, self.pad_id)
        with torch.inference_mode():
            out = self.model(input_ids=x.to(self.device), position_ids=pos.to(self.device),
                             attention_mask=seen[:, None].to(self.device),
                             past_key_values=self._prefix_cache(n, rows), use_cache=True,
                             logits_to_keep=1 + c * k)  # fmt: skip
            logp = out.logits.float().log_softmax(-1)  # (b, 1 + c*k, vocab)
            total = logp[:, 0, ids]  # (b, c)
            if k:
                branches = logp[:, 1:].reshape(rows, c, k, -1)
                total = total + branches[:, :, torch.arange(k), suffix].sum(-1)
        return total.cpu().numpy()

    def _whole_probs(self, heads: list[list[int]], tails: list[list[int]]) -> np.ndarray:
        """The general path: the summed log-probability of each choice's tokens after the
        prompt, from one forward pass per mini-batch over prompt + choice."""
        import torch

        seqs = [h + t for h in heads for t in tails]
        scores = np.empty(len(seqs))
        for batch in self._batches(seqs):
            ids, mask = self._pad_left([seqs[i] for i in batch])
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            logp = logits.log_softmax(-1)
            for row, i in enumerate(batch):
                n = len(tails[i % len(tails)])
                width = ids.shape[1]
                pos = range(width - n, width)  # choice tokens sit at the right end
                scores[i] = sum(float(logp[row, p - 1, ids[row, p]]) for p in pos)
        return softmax_rows(scores.reshape(len(heads), len(tails)))


def _tree_inputs(
    own: list[list[int]], n: int, ids: list[int], suffix: list[int], pad: int
) -> tuple[Any, Any, Any]:
    """Token ids (b, q), positions (b, q) and which keys each query sees (b, q, n + q) for
    `_split_logprobs`: own tokens left-padded to the longest, then c branches of k tokens
    ([d] + suffix[:-1]) placed right after each row's last own token. Every query sees the
    shared prefix and itself (so a pad's row is never empty)."""
    import torch

    width, k = max(len(t) for t in own), len(suffix)
    branches = [[d, *suffix[:-1]] for d in ids] if k else []
    q = width + len(branches) * k
    x = torch.full((len(own), q), pad, dtype=torch.long)
    pos = torch.zeros((len(own), q), dtype=torch.long)
    seen = torch.zeros((len(own), q, n + q), dtype=torch.bool)
    seen[:, :, :n] = True
    seen[:, torch.arange(q), n + torch.arange(q)] = True
    for row, t in enumerate(own):
        first = width - len(t)
        x[row, first:width] = torch.tensor(t)
        pos[row, first:width] = torch.arange(n, n + len(t))
        seen[row, first:width, n + first : n + width] = torch.ones(len(t), len(t)).tril().bool()
        for j, branch in enumerate(branches):
            b = width + j * k
            x[row, b : b + k] = torch.tensor(branch)
            pos[row, b : b + k] = torch.arange(n + len(t), n + len(t) + k)
            seen[row, b : b + k, n + first : n + width] = True
            seen[row, b : b + k, n + b : n + b + k] = torch.ones(k, k).tril().bool()
    return x, pos, seen


GQA = "sdpa-gqa"
HARMLESS = {"dropout", "scaling", "is_causal", "position_ids", "cache_position", "use_cache",
            "sliding_window"}  # fmt: skip


def gqa_attention() -> str:
    """Registers and names an attention function that is transformers' SDPA but reads
    grouped key/value heads in place (`enable_gqa`): on CPU, transformers' own copies every KV
    head out to each query head it serves whenever a mask is passed, ~10% of a SmolLM2
    prompt-gate batch (3 KV heads for 9). Attention with extras SDPA cannot express (soft-
    capping, sinks) goes to transformers' own function."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GQA, _gqa_sdpa)  # registering again replaces: harmless
    AttentionMaskInterface.register(GQA, sdpa_mask)
    return GQA


def _gqa_sdpa(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, None]:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # what SDPA with a mask already expresses; anything else (softcap, sinks, attention weights
    # asked for) is transformers' own function's business
    extras = {k for k, v in kwargs.items() if v is not None and v is not False} - HARMLESS
    if extras or kwargs.get("dropout"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    asked = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if asked is None else asked
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, is_causal=causal,
        scale=kwargs.get("scaling"), enable_gqa=key.shape[1] != query.shape[1],
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


def _counts(g: Generation) -> tuple[int, int]:
    return g.prompt_tokens, g.completion_tokens


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [int(x)]
