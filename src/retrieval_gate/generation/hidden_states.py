"""One prefill, no decoding: the generator's hidden state at the last prompt token.

`HiddenStateReader` runs a causal LM's decoder stack (transformers, fp32 on CPU and on CUDA
alike by default, so a probe fitted on one machine reads the same numbers on another; `dtype`
"bfloat16" halves the weights' memory for an LLM too big for its GPU in fp32) over prompts that
went through the model's chat template (`chat_token_ids`, the very token ids vLLM and the
labelling run see), in length-sorted, right-padded mini-batches, and returns the state of the
requested layers at each prompt's last token. Layer L is the output of decoder block L (0: the
token embeddings; `num_layers`: the last block, after the final norm). Prompts of one template
share its prefix (`share_prefix`): prefilled once, its keys and values reused, so each prompt
pays for its own tokens only (about a quarter of a SmolLM2 closed-book prompt).

States are cached in the generation cache's store (`generation/cache.py`: the same SQLite file
under `$RETRIEVAL_GATE_CACHE`, its WAL and 'locked' retries, its size bound, `--no-cache` and
its `computing()` mode for timings), one entry per (model checksum, dtype, prompt token ids,
layer), so a changed prompt or layer misses and a cached state is the float32 computed, bit for
bit (stored as base64 bytes). Every call adds to `work.WORK`: per prompt one LLM call, computed
(when any asked layer misses: one prefill gives every layer) or cached; prefill tokens computed
are those run through the model (a shared prefix once, then each prompt's own), cached ones
those of the prompts served from the store."""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .. import work
from ..errors import InputError
from ..models import SMOLLM2
from .cache import GenerationStore, _digest, _split, _store_of, _storing, default_store
from .chat import all_extend, chat_token_ids, common_prefix_length
from .model_folders import (
    config_checksums,
    folder_checksum,
    generator_name,
    resolve_generator_model,
)

KIND = "hidden-state"
KEY_VERSION = 1  # bump when what a stored state means changes
DTYPE = "float32"  # the default: the same numbers on every machine
DTYPES = ("float32", "bfloat16", "float16")
LAYER_KEYS = ("num_hidden_layers", "n_layer")  # a config's count of decoder blocks, first set


def config_num_layers(model: str) -> int | None:
    """The number of decoder blocks a model folder's config.json states at its top level
    (`num_hidden_layers` or `n_layer`), read as JSON in milliseconds; None where it states
    none (a Hub name, a nested config): `model_num_layers` asks transformers, seconds in."""
    from ..strict_rows import parse_json

    try:
        config = parse_json((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    n = next((config[k] for k in LAYER_KEYS if config.get(k)), None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def model_num_layers(model: str) -> int:
    """The number of decoder blocks of a model folder or name, from its config alone (no
    weights are read)."""
    from .model_folders import read_config

    config = read_config(model)  # a Hub name without a network: the cache alone, at once
    n = next((getattr(config, k) for k in LAYER_KEYS if getattr(config, k, None)), None)
    if not n:
        raise InputError("the model's config names no num_hidden_layers: not a causal LM", model)
    return int(n)


class HiddenStateReader:
    """Last-prompt-token hidden states of one model (module docstring). The weights load on
    the first cache miss; checksum, layer count and tokenizer are known before that."""

    def __init__(
        self,
        name_or_path: str = SMOLLM2,
        store: GenerationStore | None | str = "default",
        batch_size: int = 16,
        device: str | None = None,
        dtype: str = DTYPE,
    ):
        from transformers import AutoTokenizer

        if dtype not in DTYPES:
            raise InputError(f"dtype {dtype!r}: use one of {', '.join(DTYPES)}")

        self.model_path = resolve_generator_model(name_or_path)
        folder = Path(self.model_path).is_dir()
        self.name = generator_name(name_or_path, self.model_path)
        self.checksum = folder_checksum(Path(self.model_path)) if folder else self.model_path
        self.num_layers = model_num_layers(self.model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.store = default_store() if store == "default" else store
        self.batch_size = batch_size
        self._device = device
        self._model: Any = None
        self._depth = 0  # blocks of the loaded model
        self.prefix: list[int] = []  # token prefix prefilled once (`share_prefix`)
        self._prefix_kv: Any = None
        self.dtype = dtype  # part of every state's key: states of two dtypes never mix
        self.identity = {"checksum": self.checksum, "dtype": dtype, "key_version": KEY_VERSION}
        if folder:  # its config (rope, norm eps) changes the states as its weights do
            self.identity["config"] = config_checksums(Path(self.model_path))

    def check_layers(self, layers: Sequence[int], flag: str = "layers") -> None:
        bad = [x for x in layers if not 0 <= int(x) <= self.num_layers]
        if bad:
            raise InputError(
                f"{flag} {bad[0]} is out of range: {self.name} has {self.num_layers} layers; "
                f"pass 1-{self.num_layers} (0: the embeddings)"
            )

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        return chat_token_ids(self.tokenizer, prompts)

    def states(self, prompts: Sequence[str], layers: Sequence[int]) -> dict[int, np.ndarray]:
        """layer -> (len(prompts), hidden) float32: each prompt's state at its last token."""
        layers = sorted({int(x) for x in layers})
        self.check_layers(layers)
        values = self._values(self.prompt_ids(prompts), layers)
        return {
            layer: np.stack([_decode(v[j]) for v in values]) if values else np.zeros((0, 0))
            for j, layer in enumerate(layers)
        }

    def _values(self, ids: list[list[int]], layers: list[int]) -> list[list[dict[str, Any]]]:
        """Per prompt, the stored value of each layer: looked up first; prompts with any layer
        missing are computed (each distinct prompt once) and stored batch by batch, so an
        interrupted run keeps what it computed."""
        keys = [[self._key(x, layer) for layer in layers] for x in ids]
        store = _store_of(self)  # type: ignore[arg-type]  # None: --no-cache or computing()
        found = store.get_many([k for row in keys for k in row]) if store is not None else {}
        first: dict[str, int] = {}  # the first prompt of each missing token sequence
        for i, row in enumerate(keys):
            if not all(k in found for k in row):
                first.setdefault(row[0], i)
        order = list(first.values())
        batches = self._batches([ids[i] for i in order])
        batches = [[order[j] for j in batch] for batch in batches]
        for batch in tqdm(batches, desc=f"prefill {self.name}", disable=len(batches) < 8):
            values = self._batch_values([ids[i] for i in batch], layers)
            fresh = {k: v for i, vs in zip(batch, values, strict=True)
                     for k, v in zip(keys[i], vs, strict=True)}  # fmt: skip
            if store is not None and _storing():
                store.put_many(fresh)
            found.update(fresh)
        _count(ids, order)
        return [[found[k] for k in row] for row in keys]

    def _batches(self, seqs: list[list[int]]) -> list[list[int]]:
        """Positions of `seqs` in batches: those extending the shared prefix apart from the
        others (a batch shares the prefix or not), each group sorted by length (little
        padding)."""
        extends = [bool(self._shared([s])) for s in seqs]
        out = []
        for group in (True, False):
            order = sorted((i for i in range(len(seqs)) if extends[i] == group),
                           key=lambda i: len(seqs[i]))  # fmt: skip
            out += [order[b : b + self.batch_size] for b in range(0, len(order), self.batch_size)]
        return out

    def _key(self, token_ids: list[int], layer: int) -> str:
        return _digest([self.identity, {"kind": KIND, "layer": layer}, token_ids])

    # -- the prefill --------------------------------------------------------------------

    @property
    def device(self) -> str:
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    def depth_for(self, layers: Sequence[int]) -> int:
        """Blocks a prefill runs to give `layers`: one past the deepest (the last block's output
        is returned after the final norm, so layer L < num_layers needs block L + 1 to exist)."""
        deepest = max(layers)
        return self.num_layers if deepest >= self.num_layers else deepest + 1

    def model(self, depth: int | None = None) -> Any:
        """The decoder stack (no LM head: states need no logits), loaded on first use with its
        first `depth` blocks only (a probe of layer 21 of 30 runs 22 blocks; the states are the
        full model's, bit for bit); reloaded deeper when a deeper layer is asked for."""
        depth = depth or self.num_layers
        if self._model is None or self._depth < depth:
            import torch
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            before = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()  # the blocks left out are reported as unused
            try:
                lm = AutoModelForCausalLM.from_pretrained(
                    self.model_path, dtype=getattr(torch, self.dtype), num_hidden_layers=depth
                )
            finally:
                hf_logging.set_verbosity(before)
            self._model, self._depth = lm.base_model.to(self.device).eval(), depth
            self._prefix_kv = None  # the prefix's keys and values are the model's
        return self._model

    def unload(self) -> None:
        """Drops the weights: the next prefill loads only as deep as its layers need (after
        fitting a probe on many layers, before scoring on one)."""
        self._model = self._prefix_kv = None
        self._depth = 0

    def _batch_values(self, seqs: list[list[int]], layers: list[int]) -> list[list[dict]]:
        """Per sequence of one batch, a value to store per layer, with the sequence's share of
        the batch's seconds (by tokens)."""
        start = time.perf_counter()
        states = self._prefill(seqs, layers)
        shares = _split(time.perf_counter() - start, [len(s) for s in seqs])
        return [[_encode(layer[row], len(seqs[row]), shares[row]) for layer in states]
                for row in range(len(seqs))]  # fmt: skip

    # -- a shared prefix, prefilled once --------------------------------------------------

    def share_prefix(self, prompts: Sequence[str]) -> None:
        """Prompts of one template (two or more, differing where the template's variable part
        starts): their common token prefix (the chat template's system turn and the
        instruction) is prefilled once and its keys and values reused by every prompt that
        starts with it, as vLLM's prefix cache does, so a question pays for its own tokens
        only. The states are the full prefill's up to float rounding (about 1e-6 relative)."""
        ids = self.prompt_ids(prompts)
        n = common_prefix_length(ids)
        if len(ids) > 1 and list(ids[0][:n]) != self.prefix:
            self.prefix, self._prefix_kv = list(ids[0][:n]), None

    def _shared(self, seqs: list[list[int]]) -> int:
        """Length of the shared prefix when every sequence of the batch extends it, else 0."""
        return len(self.prefix) if all_extend(seqs, self.prefix) else 0

    def _prefix_cache(self, batch: int) -> Any:
        """The prefix's keys and values, computed once, copied for a batch of `batch`."""
        import torch

        if self._prefix_kv is None:
            ids = torch.tensor([self.prefix], device=self.device)
            with torch.inference_mode():
                self._prefix_kv = self._model(input_ids=ids, use_cache=True).past_key_values
            work.add(prefill_tokens_computed=len(self.prefix))
        cache = copy.deepcopy(self._prefix_kv)
        cache.batch_repeat_interleave(batch)
        return cache

    def _prefill(self, seqs: list[list[int]], layers: list[int]) -> list[np.ndarray]:
        import torch

        model = self.model(self.depth_for(layers))
        n = self._shared(seqs)
        tails = [s[n:] for s in seqs]
        width = max(len(t) for t in tails)
        # right padding: real tokens keep positions n..n+len-1 and, attending causally, never
        # see the pads after them, so a state does not depend on its batch's other prompts
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), n + width), dtype=torch.long)
        mask[:, :n] = 1
        for row, t in enumerate(tails):
            ids[row, : len(t)] = torch.tensor(t)
            mask[row, : n + len(t)] = 1
        cache = self._prefix_cache(len(seqs)) if n else None
        with torch.inference_mode():
            hidden = model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                  past_key_values=cache, use_cache=cache is not None,
                                  output_hidden_states=True).hidden_states  # fmt: skip
        rows = torch.arange(len(seqs), device=self.device)
        last = torch.tensor([len(t) - 1 for t in tails], device=self.device)
        work.add(prefill_tokens_computed=sum(map(len, tails)))
        return [hidden[layer][rows, last].float().cpu().numpy() for layer in layers]


def _count(ids: list[list[int]], computed: list[int]) -> None:
    """LLM calls, and the tokens of prompts served from the store (the prefill tokens
    computed are counted where they are: a shared prefix once, each prompt's own tokens)."""
    cached = len(ids) - len(computed)
    work.add(llm_calls_computed=len(computed), llm_calls_cached=cached,
             prefill_tokens_cached=sum(map(len, ids)) - sum(len(ids[i]) for i in computed))  # fmt: skip


def _encode(state: np.ndarray, prompt_tokens: int, seconds: float) -> dict[str, Any]:
    raw = np.ascontiguousarray(state, dtype=np.float32).tobytes()
    return {"state": base64.b64encode(raw).decode("ascii"), "prompt_tokens": prompt_tokens,
            "seconds": seconds}  # fmt: skip


def _decode(value: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(value["state"]), dtype=np.float32)
