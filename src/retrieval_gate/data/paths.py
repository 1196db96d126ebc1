"""Where the datasets are: --data-dir, then $RETRIEVAL_GATE_DATA, then ../shared/datasets,
else the official releases downloaded once into a cache folder (checksums verified)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import BackendError, DataError
from ..models import cache_dir

ENV_VAR = "RETRIEVAL_GATE_DATA"

_RAW = "https://raw.githubusercontent.com"
# (path in the data folder, URL of the authors' release, sha256) — PROVENANCE.md's sources.
OFFICIAL_FILES: list[tuple[str, str, str]] = [
    (
        "retrievalqa/retrievalqa_gpt4.jsonl",
        f"{_RAW}/hyintell/RetrievalQA/f26134c/data/retrievalqa_gpt4.jsonl",
        "96b0811e12df9baba02384f53dd77851cb154bcfd7d726db2fd36ca0820c18b1",
    ),
    (
        "retrievalqa/retrievalqa.jsonl",
        f"{_RAW}/hyintell/RetrievalQA/f26134c/data/retrievalqa.jsonl",
        "cf86765748a8f54e8f6bbaec8a59de43d3fb2e01e4c69bc35bef559253c76aed",
    ),
    (
        "popqa/popqa_longtail.jsonl",
        f"{_RAW}/HSLiu-Initial/CtrlA/04b60ba/eval_data/popqa_longtail.jsonl",
        "4ee4fa46bc6c382a86679e9156ddc1d9fa06f8e07421ed71598ea640262a9c00",
    ),
    (
        "freshqa/FreshQA_v04082024.jsonl",
        f"{_RAW}/HSLiu-Initial/CtrlA/04b60ba/eval_data/FreshQA_v04082024.jsonl",
        "9514ef05fcb712a48a57596a05639fc70fee397caf9dca6ea030bda66f74a3d1",
    ),
    (
        "triviaqa/triviaqa_test.jsonl",
        f"{_RAW}/HSLiu-Initial/CtrlA/04b60ba/eval_data/triviaqa_test.jsonl",
        "7424599f0f7da21ad9f0ed5fdfc05305f4c778723ae6899d2c99dcc3292f5617",
    ),
]
_EQ = [
    "P106",
    "P112",
    "P127",
    "P131",
    "P136",
    "P159",
    "P17",
    "P170",
    "P175",
    "P176",
    "P19",
    "P20",
    "P26",
    "P264",
    "P276",
    "P36",
    "P40",
    "P407",
    "P413",
    "P495",
    "P50",
    "P69",
    "P740",
    "P800",
]
OFFICIAL_FILES += [
    (
        f"entityquestions/test/{r}.test.json",
        f"{_RAW}/princeton-nlp/EntityQuestions/bac842b/dataset/test/{r}.test.json",
        "",
    )
    for r in _EQ
]
_TOOLQA = [
    "easy/agenda-easy",
    "easy/airbnb-easy",
    "easy/coffee-easy",
    "easy/dblp-easy",
    "easy/flight-easy",
    "easy/gsm8k-easy",
    "easy/scirex-easy",
    "easy/yelp-easy",
    "hard/airbnb-hard",
    "hard/coffee-hard",
    "hard/dblp-hard",
    "hard/flight-hard",
    "hard/genda-hard",
    "hard/scirex-hard",
    "hard/yelp-hard",
]
OFFICIAL_FILES += [
    (f"toolqa/{f}.jsonl", f"{_RAW}/night-chen/ToolQA/acf5553/data/questions/{f}.jsonl", "")
    for f in _TOOLQA
]
# The full PopQA release lives on the hub; it is saved as the official TSV and read by the
# same loader as a local copy.
HUB_POPQA = ("akariasai/PopQA", "popqa/popqa.tsv")


def resolve_data_dir(flag: str | Path | None = None, download: bool = True) -> Path:
    """The data folder, in order: the flag, $RETRIEVAL_GATE_DATA, ../shared/datasets seen from
    the working directory, else the official download cache. Never a path relative to where
    the package is installed: that only works from a source checkout."""
    if flag is not None:
        return _existing(Path(flag), "--data-dir")
    if os.environ.get(ENV_VAR):
        return _existing(Path(os.environ[ENV_VAR]), f"${ENV_VAR}")
    candidate = Path.cwd() / "../shared/datasets"
    if candidate.is_dir():
        return candidate.resolve()
    cache = cache_dir() / "datasets"
    if download:
        fetch_official(cache)
    return cache


@contextmanager
def data_dir_env(flag: str | Path | None) -> Iterator[None]:
    """`--data-dir` for the duration of a command: checked, then handed on as
    $RETRIEVAL_GATE_DATA, which every loader (and every process the command starts) reads;
    the environment is restored afterwards (the CLI also runs inside tests)."""
    if flag is None:
        yield
        return
    before = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(_existing(Path(flag), "--data-dir"))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before


def _existing(path: Path, origin: str) -> Path:
    if not path.is_dir():
        raise DataError(f"data folder {path} (from {origin}) does not exist or is not a folder")
    if not any(path.iterdir()):
        raise DataError(
            f"data folder {path} (from {origin}) is empty; expected dataset folders "
            "such as popqa/ and retrievalqa/ (see ../shared/datasets/PROVENANCE.md)"
        )
    return path.resolve()


def fetch_official(cache: Path) -> None:
    """Downloads what is missing from the cache once; verifies checksums where known."""
    missing = [(p, u, s) for p, u, s in OFFICIAL_FILES if not (cache / p).is_file()]
    for rel, url, sha in missing:
        target = cache / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                data = r.read()
        except (urllib.error.URLError, TimeoutError) as e:
            raise BackendError(
                f"no local datasets (no --data-dir, no ${ENV_VAR}, no ../shared/datasets) and the "
                f"official release could not be downloaded ({url}: {e}). This machine looks "
                f"offline: put the files in a folder and pass --data-dir."
            ) from e
        if sha and hashlib.sha256(data).hexdigest() != sha:
            raise BackendError(f"checksum mismatch for {url}; expected sha256 {sha}", target)
        tmp = target.with_suffix(target.suffix + ".part")
        tmp.write_bytes(data)
        tmp.replace(target)
    if not (cache / HUB_POPQA[1]).is_file():
        save_hub_popqa(cache / HUB_POPQA[1])


def save_hub_popqa(target: Path) -> None:
    """The official PopQA release from the hub, written as its TSV (read by the popqa loader)."""
    try:
        import datasets

        rows = datasets.load_dataset(HUB_POPQA[0], split="test")
    except Exception as e:  # the hub client raises many types when offline
        raise BackendError(f"could not download {HUB_POPQA[0]} from the hub ({e}); offline?") from e
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows.column_names), delimiter="\t")
        w.writeheader()
        for row in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
