"""The Adaptive-RAG / AdaRAGUE release layout: one LLM's answers to six QA sets under three
strategies, as Questions plus each strategy's prediction and correctness.

Layout (`predictions/<split>/` of the release; the bundle ../shared/datasets/adaptive-rag-llama8b
holds `dev_500`):

    <strategy>_qa_<llm>_<dataset>____<settings>/
        prediction__<dataset>_to_<dataset>__<split>_subsampled.json          id -> answer
        ground_truth__<dataset>_to_<dataset>__<split>_subsampled.json        id -> gold answers
        zero_single_multi_classification__<...>.json                         the ids answered right
        prediction__<...>_chains.txt      (no-retrieval folder only)         each question's text

with <strategy> `nor` (no retrieval), `oner` (one BM25 retrieval) and `ircot` (multi-step IRCoT).
Any other folder of a split folder (a fourth strategy's, a misspelt prefix) is not read: a
warning names it, once.
A question's id is `adaptive-rag-<dataset>-<release id>`, its `source` the dataset name
(nq, squad, trivia, hotpotqa, 2wikimultihopqa, musique).

Where: a folder given by the caller (the release root, its `predictions/` or one split folder),
else $RETRIEVAL_GATE_ADAPTIVE_RAG, else `adaptive-rag-llama8b/` in the data folder."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..fileio import read_json, sha256_file
from ..questions import Question
from ..strategies import MULTI_STEP, NO_RETRIEVAL, ONE_RETRIEVAL
from ..text_bytes import not_utf8
from .bad_rows import BadRows
from .dataset_registry import register
from .paths import resolve_data_dir

log = logging.getLogger(__name__)
DATASET_NAME = "adaptive-rag"
BUNDLE_FOLDER = "adaptive-rag-llama8b"
ENV_VAR = "RETRIEVAL_GATE_ADAPTIVE_RAG"
DEFAULT_SPLIT = "dev_500"  # the split the release's classifier was trained on
# Folder prefix -> strategy name, in cost order; and the tag each uses in its
# zero_single_multi_classification file.
# (The release's three strategies are the registry's three built-ins.)
PREFIXES = {"nor": NO_RETRIEVAL, "oner": ONE_RETRIEVAL, "ircot": MULTI_STEP}
STRATEGIES = tuple(PREFIXES.values())
TAGS = {NO_RETRIEVAL: "zero", ONE_RETRIEVAL: "single", MULTI_STEP: "multi"}
# Adaptive-RAG's split of its six sets (its prior for questions no strategy answers).
SINGLE_HOP = ("nq", "squad", "trivia")
MULTI_HOP = ("hotpotqa", "2wikimultihopqa", "musique")

_FOLDER = re.compile(r"^(?P<prefix>nor|oner|ircot)_qa_(?P<llm>.+?)_(?P<dataset>[^_]+)____")


@dataclass(frozen=True)
class StrategyOutcome:
    """One strategy's answer to one question, and whether the release counted it correct."""

    prediction: str
    correct: bool


@dataclass(frozen=True)
class ReleaseQuestion:
    """A question of the release with its outcome under every strategy (in cost order)."""

    question: Question
    outcomes: dict[str, StrategyOutcome]


@dataclass(frozen=True)
class ReleaseSplit:
    """One split folder of a release, for one LLM: folder per (dataset, strategy)."""

    path: Path
    split: str
    llm: str
    folders: dict[tuple[str, str], Path]

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(sorted({d for d, _ in self.folders}))

    def checksum(self) -> str:
        """sha256 over the files the loader reads (names and contents): provenance."""
        h = hashlib.sha256()
        for (dataset, strategy), folder in sorted(self.folders.items()):
            for name, digest in _file_digests(folder):
                h.update(f"{dataset}/{strategy}/{name}:{digest}\n".encode())
        return h.hexdigest()


def _file_digests(folder: Path) -> list[tuple[str, str]]:
    """(name, sha256) of each file of a strategy folder the loader may read."""
    return [(p.name, sha256_file(p)) for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith("_time_taken.txt")]  # fmt: skip


def release_root(path: str | Path | None = None, data_dir: str | Path | None = None) -> Path:
    """The release folder: `path`, else $RETRIEVAL_GATE_ADAPTIVE_RAG, else the bundle in the
    data folder (--data-dir, $RETRIEVAL_GATE_DATA, ../shared/datasets)."""
    origin = "the folder given"
    if path is None and os.environ.get(ENV_VAR):
        path, origin = os.environ[ENV_VAR], f"${ENV_VAR}"
    if path is None:
        path = resolve_data_dir(data_dir, download=False) / BUNDLE_FOLDER  # never downloadable
        origin = "the data folder"
    path = Path(path)
    if not path.is_dir():
        raise DataError(
            f"no Adaptive-RAG release folder here (from {origin}); point at the release root, "
            f"its predictions/ folder or one predictions/<split>/ folder (or set ${ENV_VAR})",
            path,
        )
    return path


def is_release(path: str | Path) -> bool:
    """Whether `path` is a release folder (root, predictions/ or a split folder)."""
    path = Path(path)
    for base in (path, path / "predictions"):
        if not base.is_dir():
            continue
        for child in base.iterdir():
            if child.is_dir() and (
                _FOLDER.match(child.name)
                or any(_FOLDER.match(c.name) for c in child.iterdir() if c.is_dir())
            ):
                return True
    return False


def find_release(
    path: str | Path | None = None, split: str | None = None, llm: str | None = None
) -> ReleaseSplit:
    """The split folder and strategy folders of one LLM, checked for completeness.

    `path` may be the release root, its `predictions/` folder or a split folder; `split`
    picks among several splits (default: dev_500 when there, else the only one); `llm`
    among several LLMs (default: the only one)."""
    folder = _split_folder(release_root(path), split)
    found: dict[str, dict[tuple[str, str], list[Path]]] = {}
    unread: list[str] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        m = _FOLDER.match(sub.name)
        if m:
            key = (m["dataset"], PREFIXES[m["prefix"]])
            found.setdefault(m["llm"], {}).setdefault(key, []).append(sub)
        else:
            unread.append(sub.name)
    if not found:
        raise DataError(
            "no <nor|oner|ircot>_qa_<llm>_<dataset>____* folders: not a split folder of the "
            "Adaptive-RAG release layout",
            folder,
        )
    _say_unread(folder, unread)  # before a strategy said missing: a misspelt one is among them
    name = _pick("LLM", _spelt_as_here(llm, found), sorted(found), folder, "with --generator NAME")
    folders = found[name]
    for (dataset, strategy), paths in sorted(folders.items()):
        if len(paths) > 1:
            raise DataError(
                f"{len(paths)} folders for dataset {dataset!r}, strategy {strategy!r} "
                f"({', '.join(p.name for p in paths)}); keep one per strategy",
                folder,
            )
    for dataset in sorted({d for d, _ in folders}):
        for prefix, strategy in PREFIXES.items():
            if (dataset, strategy) not in folders:
                raise DataError(
                    f"strategy {strategy!r} is missing for dataset {dataset!r}: no "
                    f"{prefix}_qa_{name}_{dataset}____* folder (each dataset needs "
                    f"{', '.join(f'{p}_qa_*' for p in PREFIXES)})",
                    folder,
                )
    return ReleaseSplit(folder, folder.name, name, {k: v[0] for k, v in folders.items()})


_SAID: set[tuple[str, tuple[str, ...]]] = set()  # (split folder, names) warned about


def _say_unread(folder: Path, names: list[str]) -> None:
    """Warns, once per process, of a split folder's folders the layout does not read (a fourth
    strategy's `flare_qa_<llm>_*`, a misspelt `IRCoT_qa_*`): they were skipped unsaid, and a
    router trained on the rest of the folder, without that strategy."""
    key = (str(folder.resolve()), tuple(names))
    if not names or key in _SAID:
        return
    _SAID.add(key)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    log.warning(f"{folder}: {len(names)} folder(s) not read: {shown}. A release is read from its "
                "<nor|oner|ircot>_qa_<llm>_<dataset>____* folders only (no_retrieval, "
                "one_retrieval, multi_step; the prefix in lower case); to import another "
                "strategy, write every strategy's outcomes into one generic file "
                "(`<strategy>_correct` columns) and run `label --policy outcomes --outcomes "
                "FILE --strategies <names, cheapest first>` (docs/label.md)")  # fmt: skip


def load_release(
    path: str | Path | None = None,
    split: str | None = None,
    llm: str | None = None,
    datasets: list[str] | None = None,
) -> list[ReleaseQuestion]:
    """Every question of the release split with each strategy's prediction and correctness."""
    release = find_release(path, split, llm)
    names = datasets or list(release.datasets)
    unknown = sorted(set(names) - set(release.datasets))
    if unknown:
        raise DataError(
            f"dataset(s) {', '.join(unknown)} not in this release; it has "
            f"{', '.join(release.datasets)}",
            release.path,
        )
    out: list[ReleaseQuestion] = []
    for dataset in names:
        out += _load_dataset(release, dataset)
    return out


def release_questions(
    path: str | Path | None = None, split: str | None = None, llm: str | None = None
) -> list[Question]:
    return [r.question for r in load_release(path, split, llm)]


@register(DATASET_NAME, default=False)
def load_adaptive_rag(data_dir: Path, bad: BadRows) -> list[Question]:
    """`--dataset adaptive-rag`: the questions of the release ($RETRIEVAL_GATE_ADAPTIVE_RAG or
    the bundle). Not one of the default datasets: `load_all()` and the canonical split of the
    other datasets stay as they were."""
    env = os.environ.get(ENV_VAR)  # release_root reads it itself, to say where a folder came from
    return release_questions(None if env else data_dir / BUNDLE_FOLDER)


# ---------------------------------------------------------------- reading one dataset


def _load_dataset(release: ReleaseSplit, dataset: str) -> list[ReleaseQuestion]:
    """One dataset's questions, kept per process under its folders' files (names and sha256,
    as `checksum` reads them: hashing takes 1/30 of parsing): a router's training read the
    release twice, `transfer --learned` 26 times (0.22 s each); a changed, added or removed
    file is read afresh."""
    key = _dataset_key(release, dataset)
    if key not in _KEPT:
        if len(_KEPT) >= 64:
            _KEPT.clear()
        _KEPT[key] = tuple(_read_dataset(release, dataset))
    return list(_KEPT[key])


_KEPT: dict[tuple, tuple[ReleaseQuestion, ...]] = {}


def _dataset_key(release: ReleaseSplit, dataset: str) -> tuple:
    folders = [release.folders[(dataset, strategy)] for strategy in STRATEGIES]
    files = tuple((os.path.realpath(f), *_file_digests(f)) for f in folders)
    return (release.split, release.llm, dataset, files)


def _read_dataset(release: ReleaseSplit, dataset: str) -> list[ReleaseQuestion]:
    nor = release.folders[(dataset, NO_RETRIEVAL)]
    chains = _one(nor, "prediction__*_chains.txt")
    texts = _read_chains(chains)
    gold_path = _one(nor, "ground_truth__*.json")
    gold = _id_map(gold_path)
    outcomes = {s: _strategy(release.folders[(dataset, s)], s) for s in STRATEGIES}
    ids = list(outcomes[NO_RETRIEVAL][1])
    reference = outcomes[NO_RETRIEVAL][0]
    for path, predictions in outcomes.values():
        _same_ids(path, set(predictions), reference, set(ids))
    _same_ids(chains, set(texts), reference, set(ids))
    missing_gold = [i for i in ids if i not in gold]
    if missing_gold:
        raise DataError(
            f"{len(missing_gold)} question(s) have no gold answers (e.g. {missing_gold[0]!r})",
            gold_path,
        )
    out = []
    for qid in ids:
        question = Question(
            id=f"adaptive-rag-{dataset}-{qid}",
            text=texts[qid],
            answers=tuple(str(a) for a in _as_list(gold[qid])),
            source=dataset,
            hops="multi-hop"
            if dataset in MULTI_HOP
            else "one-hop"
            if dataset in SINGLE_HOP
            else None,
            extra={"release_id": qid, "release_split": release.split, "llm": release.llm},
        )
        per = {s: StrategyOutcome(*outcomes[s][1][qid]) for s in STRATEGIES}
        out.append(ReleaseQuestion(question, per))
    return out


def _strategy(folder: Path, strategy: str) -> tuple[Path, dict[str, tuple[str, bool]]]:
    """(prediction file, id -> (prediction, correct)) of one strategy folder."""
    path = _one(folder, "prediction__*.json")
    predictions = _id_map(path)
    right_path = _one(folder, "zero_single_multi_classification__*.json")
    right = _id_map(right_path)
    extra = [i for i in right if i not in predictions]
    if extra:
        raise DataError(
            f"id {extra[0]!r} is counted correct but has no prediction in {path.name} "
            f"({len(extra)} such ids): the files of this folder do not belong together",
            right_path,
        )
    correct = {i: _correct(v, strategy, right_path, i) for i, v in right.items()}
    return path, {i: (str(p), correct.get(i, False)) for i, p in predictions.items()}


def _correct(value: Any, strategy: str, path: Path, qid: str) -> bool:
    """A classification entry: the strategy's tag list (["zero"], ["single", "15"], ...) as
    the release writes it, or a plain 0/1."""
    if isinstance(value, list) and value and value[0] == TAGS[strategy]:
        return True
    if isinstance(value, bool | int) and value in (0, 1):
        return bool(value)
    raise DataError(
        f"id {qid!r}: correctness {value!r} is neither 0/1 nor the {strategy} tag "
        f"[{TAGS[strategy]!r}, ...]",
        path,
    )


def _read_chains(path: Path) -> dict[str, str]:
    """id -> question text from the no-retrieval chains file: blocks of `<id>`, the question,
    `Q: <question>`, the model's lines, separated by blank lines."""
    data = path.read_bytes()
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise DataError(not_utf8(data, e.start, path), path) from None
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        if lines[i].strip() and (i == 0 or not lines[i - 1].strip()):
            qid = lines[i].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("Q: ") and lines[j].strip():
                j += 1
            text = " ".join(x.strip() for x in lines[i + 1 : j]).strip()
            if not text or j >= len(lines) or not lines[j].startswith("Q: "):
                raise DataError(
                    f"block of id {qid!r} has no question line followed by 'Q: <question>'",
                    path,
                    i + 1,
                )
            if qid in out:
                raise DataError(f"id {qid!r} appears twice", path, i + 1)
            out[qid] = text
            while j < len(lines) and lines[j].strip():
                j += 1
            i = j
        i += 1
    if not out:
        raise DataError("no question blocks in the chains file", path)
    return out


def _same_ids(path: Path, ids: set[str], reference: Path, expected: set[str]) -> None:
    if ids == expected:
        return
    only_here, only_there = sorted(ids - expected), sorted(expected - ids)
    other = f"{reference.parent.name}/{reference.name}"
    if only_here:
        what = f"id {only_here[0]!r} is in this file but not in {other}"
    else:
        what = f"id {only_there[0]!r} of {other} is not in this file"
    raise DataError(
        f"{what} ({len(only_here)} ids only here, {len(only_there)} only there): every "
        "strategy must answer the same questions",
        path,
    )


def _one(folder: Path, pattern: str) -> Path:
    files = sorted(p for p in folder.glob(pattern) if p.is_file())
    if pattern == "prediction__*.json":
        files = [p for p in files if not p.name.endswith("_chains.json")]
    if len(files) != 1:
        what = "no" if not files else f"{len(files)}"
        raise DataError(f"{what} {pattern} file(s) in this folder; expected exactly one", folder)
    return files[0]


def _id_map(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError("expected a JSON object keyed by question id", path)
    return data


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _split_folder(root: Path, split: str | None) -> Path:
    if any(_FOLDER.match(p.name) for p in root.iterdir() if p.is_dir()):
        if split is not None and root.name != split:
            raise DataError(f"this is the split folder {root.name!r}, not {split!r}", root)
        return root
    base = root / "predictions" if (root / "predictions").is_dir() else root
    splits = sorted(p.name for p in base.iterdir() if p.is_dir() and _holds_strategy_folders(p))
    if not splits and (split is None or not (base / split).is_dir()):  # any folder is no split
        raise DataError("no Adaptive-RAG release here: expected [predictions/]<split>/"
                        "<nor|oner|ircot>_qa_<llm>_<dataset>____* folders; pass the release's "
                        "root, its predictions/ or one split folder", root)  # fmt: skip
    if split is None and DEFAULT_SPLIT in splits:
        split = DEFAULT_SPLIT
    return base / _pick("split", split, splits, base, f"by passing its folder, {base}/<split>")


def _holds_strategy_folders(folder: Path) -> bool:
    """A split folder of the release: it holds <strategy>_qa_<llm>_<dataset>____* folders."""
    try:
        return any(_FOLDER.match(p.name) and p.is_dir() for p in folder.iterdir())
    except OSError:  # unreadable: not a split this run can read
        return False


def _pick(what: str, wanted: str | None, available: list[str], folder: Path, how: str) -> str:
    if wanted is not None and wanted not in available:
        raise DataError(
            f"no {what} {wanted!r} here; available: {', '.join(available) or 'none'}", folder
        )
    if wanted is None and len(available) != 1:
        raise DataError(
            f"{len(available)} {what}s here ({', '.join(available) or 'none'}); name one {how}",
            folder,
        )
    return wanted or available[0]


def _spelt_as_here(llm: str | None, found: Mapping[str, Any]) -> str | None:
    """`flan-t5-xl` or `Flan_T5_XL` names the release's `flan_t5_xl` (folder names spell an LLM
    in lower case with underscores), where exactly one LLM reads so."""
    if llm is None or llm in found:
        return llm
    key = re.sub(r"[^a-z0-9]+", "_", llm.lower())
    same = [name for name in found if re.sub(r"[^a-z0-9]+", "_", name.lower()) == key]
    return same[0] if len(same) == 1 else llm
