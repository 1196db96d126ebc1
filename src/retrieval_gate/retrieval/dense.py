"""Dense retrieval with MiniLM: mean-pooled token embeddings, L2-normalised, cosine by dot
product. The encoder also exposes token embeddings (RRCP's token relevance uses them)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..fileio import read_arrays, write_arrays
from ..models import MINILM, cache_dir, resolve_model
from ..questions import Question
from .base import Document, Hit

log = logging.getLogger(__name__)


class MiniLMEncoder:
    """A sentence-transformers-style encoder from any Hugging Face folder or name."""

    def __init__(self, model: str = MINILM, batch_size: int = 64, max_length: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_name = resolve_model(model)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        self.model = AutoModel.from_pretrained(self.model_name).to(self.device).eval()
        self.batch_size = batch_size
        self.max_length = max_length

    def _forward(self, texts: list[str]):
        import torch

        enc = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state
        return enc, hidden

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) unit-length mean-pooled embeddings."""
        out = []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        for i in range(0, len(order), self.batch_size):
            batch = [texts[j] for j in order[i : i + self.batch_size]]
            enc, hidden = self._forward(batch)
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(pooled.float().cpu().numpy())
        emb = np.concatenate(out) if out else np.zeros((0, 1), dtype=np.float32)
        emb = emb[np.argsort(order)] if len(order) else emb
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    def token_embeddings(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per text, the unit-length contextual embeddings of its word pieces, special and
        punctuation-only tokens dropped (they carry no content to be relevant to)."""
        out: list[np.ndarray] = []
        special = set(self.tokenizer.all_special_ids)
        for i in range(0, len(texts), self.batch_size):
            enc, hidden = self._forward(list(texts[i : i + self.batch_size]))
            for row, ids in enumerate(enc["input_ids"].tolist()):
                pieces = self.tokenizer.convert_ids_to_tokens(ids)
                keep = [
                    j
                    for j, (t, p) in enumerate(zip(ids, pieces, strict=True))
                    if t not in special and any(c.isalnum() for c in p)
                ]
                emb = hidden[row, keep].float().cpu().numpy()
                out.append(emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12))
        return out


class DenseRetriever:
    """Cosine top-k over MiniLM embeddings of the corpus (cached on disk by corpus hash, so a
    second run does not re-encode thousands of documents on a CPU)."""

    name = "dense"

    def __init__(self, documents: Sequence[Document], encoder: MiniLMEncoder | None = None):
        if not documents:
            raise InputError("DenseRetriever needs at least one document (--corpus)")
        self.documents = list(documents)
        self.encoder = encoder or MiniLMEncoder()
        self.matrix = self._corpus_embeddings()

    def _corpus_embeddings(self) -> np.ndarray:
        # keyed by the documents' text and the encoder, not only their ids: an edited corpus
        # with the same ids must not reuse old embeddings
        keyed = [f"{d.id}\t{d.as_prompt_text()}" for d in self.documents]
        return cached_embeddings(
            self.encoder.model_name,
            keyed,
            lambda: self.encoder.encode([d.as_prompt_text() for d in self.documents]),
        )

    def retrieve(self, questions: Sequence[Question], k: int = 5) -> list[list[Hit]]:
        if not questions:
            return []
        sims = self.encoder.encode([q.text for q in questions]) @ self.matrix.T
        k = min(k, len(self.documents))
        top = np.argsort(-sims, axis=1)[:, :k]
        return [
            [Hit(self.documents[int(j)], float(sims[r, j])) for j in row]
            for r, row in enumerate(top)
        ]


def cached_embeddings(
    model: str, texts: Sequence[str], encode: Callable[[], np.ndarray]
) -> np.ndarray:
    """Embeddings stored under `cache_dir()/embeddings`, keyed by what they depend on: the
    texts and the encoder (its name and, for a local folder, its weight files' names, sizes and
    modification times, so replaced weights miss), computed by `encode` when missing."""
    folder = Path(model)
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))
    stamp = [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in weights]
    identity = "\n".join([model, *stamp, "", *texts])
    key = hashlib.sha1(identity.encode()).hexdigest()[:16]
    path = cache_dir() / "embeddings" / f"{key}.npz"
    if path.is_file():
        kept = (read_arrays(path) or {}).get("embeddings")
        if kept is not None and kept.ndim == 2 and len(kept) == len(texts):
            return kept
        log.warning("kept embeddings %s are damaged: computed again", path)
    emb = encode()
    try:
        write_arrays(path, embeddings=emb)  # atomic: a crash never leaves half a file
    except (OSError, InputError) as e:  # a cache not writable costs the next run's encoding
        log.warning("embeddings not kept in %s (%s): computed again next time", path.parent, e)
    return emb
