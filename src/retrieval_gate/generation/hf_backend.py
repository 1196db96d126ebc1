"""The transformers backend, for machines without vLLM: same prompts, same chat-template token
ids, greedy decoding in length-sorted, left-padded mini-batches (transformers has no
scheduler of its own, so sorting by length is what keeps padding cheap)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import Generation
from .chat import chat_token_ids, choice_token_ids
from .model_folders import folder_checksum
from .vllm_backend import softmax_rows


class TransformersGenerator:
    """A `Generator` over a local folder or hub name, on CUDA when there is one."""

    backend = "transformers"

    def __init__(
        self,
        model: str,
        name: str | None = None,
        batch_size: int = 32,
        max_model_len: int | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path = model
        self.name = name or Path(model).name
        self.checksum = folder_checksum(Path(model)) if Path(model).is_dir() else model
        self.batch_size = batch_size
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(self.device)
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

    def _batches(self, seqs: list[list[int]]) -> list[list[int]]:
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]

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
        """As the vLLM backend: the summed log-probability of each choice's tokens after the
        prompt, from one forward pass per mini-batch, normalised over `choices`."""
        import torch

        heads = chat_token_ids(self.tokenizer, prompts)
        tails = choice_token_ids(self.tokenizer, choices)
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


def _counts(g: Generation) -> tuple[int, int]:
    return g.prompt_tokens, g.completion_tokens


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [int(x)]
