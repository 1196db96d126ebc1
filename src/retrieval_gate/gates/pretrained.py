"""`RetrievalGate`: the one gate object a user touches, in the style of SetFit and
sentence-transformers.

    gate = RetrievalGate.from_pretrained("export/minilm-gate")   # or a Hub id, or a run folder
    gate.predict_proba(["Who wrote Hamlet?"])                      # P(needs retrieval)
    gate.predict("What is Henry Feilden's occupation?")          # retrieve? at the threshold

ONNX (onnxruntime + tokenizers, no torch) is the default for export folders; a training run
folder (checkpoints/<run>/) is scored with PyTorch. Hub download and upload are
`huggingface_hub.ModelHubMixin`'s (as in SetFit): `_from_pretrained` takes a Hub id through
`snapshot_download`, which returns a local folder (from there on it is the same code as a local
path); `save_pretrained` and `push_to_hub` are the mixin's around `_save_pretrained`."""

from __future__ import annotations

import inspect
import json
import numbers
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
from huggingface_hub import ModelCard, ModelHubMixin

from ..artifacts import EXPORT_FILES, TOKENIZER_FILES, VARIANTS, open_artifact
from ..data.answer_confidence import MEAN_LOGPROB, TOKEN_LOGPROBS
from ..errors import BackendError, InputError, clipped, first_line
from ..fileio import staged_folder, write_text
from ..hub import OFFLINE_FIX, offline_when_unreachable, silent, without_offline_hint
from ..questions import Question
from ..run_folder import RunFolder
from ..strategies import StrategyRegistry, specs_of
from .base import (
    CarriesStrategies,
    Features,
    Gate,
    HasMetadata,
    OnDevice,
    Questions,
    TokenLogprobs,
    as_questions,
    checked_threshold,
    is_router,
    reads_answers,
    side_columns,
)

BACKENDS = ("onnx", "torch")
# The card `save_pretrained` writes where the gate's files have none (a training run's: an
# export carries its own README.md, which is kept).
_CARD = """---
{{ card_data }}
---

# {{ name }}

A `retrieval-gate` gate: P(needs retrieval) for a question; retrieve at or above its tuned
threshold ({{ threshold }}).{% if backend == "torch" %} These are a training run's files
(PyTorch); `retrieval-gate export` makes the ONNX export, with a fuller card.{% endif %}

```python
from retrieval_gate import RetrievalGate

gate = RetrievalGate.from_pretrained("<this folder or Hub id>")
gate.predict_proba(["Who wrote Hamlet?"])
```
"""
# a card snippet's load: `RetrievalGate.from_pretrained("<path>")` (a JSON string literal)
_CARD_LOAD = re.compile(r'(RetrievalGate\.from_pretrained\()("(?:[^"\\]|\\.)*")')


def card_loading(card: str, target: str) -> str:
    """`card` (a README.md) with its snippets loading `target`: an export's card names the
    folder export wrote, so a copy's or a Hub repo's loaded the original (or nothing)."""
    found = _CARD_LOAD.search(card)
    if found is None:
        return card
    old = json.loads(found.group(2))
    card = _CARD_LOAD.sub(lambda m: m.group(1) + json.dumps(target), card)
    return card.replace(f"--model {shlex.quote(old)} ", f"--model {shlex.quote(target)} ")


# The Hub's rules for a repo id (huggingface_hub's validator says which is broken)
_REPO_ID_RULES = (
    "owner/name, each part letters, digits, '-', '_' or '.', not starting or ending with '-' "
    "or '.', at most 96 characters, without '--' or '..', the name not ending in '.git'"
)


def _check_repo_id(name: str) -> None:
    """Refuses what is not a Hub id before any network: a looser pattern let "owner/na..me"
    or "owner/-name" through to snapshot_download, whose HFValidationError (a raw ValueError)
    escaped. Checked by huggingface_hub's own validator, plus the owner/ part: a bare name is
    more likely a mistyped local folder than a Hub id."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    why = None
    if name.count("/") != 1:
        why = f"it has {name.count('/')} '/', not one"
    else:
        try:
            validate_repo_id(name)
        except HFValidationError as e:  # its reason, without the id again
            why = first_line(e).replace(f": '{name}'", "").removesuffix(".")
    if why is not None:
        raise InputError(
            f"no such folder, and not a Hub id of the form {_REPO_ID_RULES} ({why}): "
            "give an export folder (`retrieval-gate export`), a run folder (`retrieval-gate "
            "train`) or a Hub id",
            clipped(name),
        )


def resolve_folder(path_or_repo_id: str | Path, **hub_kwargs: Any) -> Path:
    """A local folder, made absolute; an `owner/name` Hub id through `snapshot_download` (its
    cache, `local_dir`, `revision`, `token`, `local_files_only` pass through `hub_kwargs`)."""
    if not str(path_or_repo_id).strip():  # Path("") is the working folder: loaded silently
        raise InputError("the gate's path is empty: give an export folder (`retrieval-gate "
                         "export`), a run folder (`retrieval-gate train`) or a Hub id")  # fmt: skip
    path = Path(path_or_repo_id).expanduser()
    if path.is_dir():  # absolute: a copy loaded in another working folder (a pickled one in a
        return path.resolve()  # worker, a saved pipeline) must find the same files
    if path.exists():
        raise InputError("expected a folder (an export or a training run), got a file", path)
    name = str(path_or_repo_id)
    _check_repo_id(name)
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    not_local = f"no local folder {name!r}, so it was taken as a Hub id"
    unreachable = offline_when_unreachable()
    endpoint = hub_kwargs.get("endpoint") or constants.ENDPOINT
    no_answer = None
    if not (constants.HF_HUB_OFFLINE or hub_kwargs.get("local_files_only")):
        no_answer = silent(endpoint)  # else snapshot_download may wait on it for good
    try:
        if no_answer:  # as snapshot_download does when its requests time out: the cache alone
            found = snapshot_download(repo_id=name, **{**hub_kwargs, "local_files_only": True})
            return Path(found).resolve()
        return Path(snapshot_download(repo_id=name, **hub_kwargs)).resolve()
    except (LocalEntryNotFoundError, RepositoryNotFoundError) as e:
        if no_answer:
            raise BackendError(f"{name}: {not_local}, but the Hub at {endpoint} gave {no_answer}, "
                               "and the gate is not in the local Hub cache: check the network "
                               "(and HF_ENDPOINT), load a local folder, or set HF_HUB_OFFLINE=1 "
                               "to read the Hugging Face cache alone") from None  # fmt: skip
        why, hub = first_line(e), ""
        if unreachable:  # offline mode is this tool's doing: huggingface_hub's hint misleads
            why = without_offline_hint(why)
            hub = f"; the Hub cannot be reached from here ({unreachable}): {OFFLINE_FIX}"
        raise InputError(f"{not_local}, but it is not in the local Hub cache and could not "
                         f"be downloaded ({why}{hub})", name) from None  # fmt: skip
    except HfHubHTTPError as e:
        raise BackendError(f"{name}: {not_local}; the Hub refused the download ({e})") from None
    except HFValidationError as e:  # another argument of the Hub's (a revision)
        raise InputError(f"{not_local}, which the Hub refuses: {first_line(e)}", name) from None


def _load_gate(
    folder: Path, backend: str | None, variant: str | None, device: str | None, **kw: Any
) -> tuple[Gate, str]:
    """(the gate, its backend): the folder's kind from its manifest (`open_artifact`)."""
    kind = open_artifact(folder).backend
    if kind == "torch" and variant is not None:  # it was loaded as the run, variant unread
        raise InputError(f"variant={variant!r} names an export's ONNX file, and this folder "
                         "is a training run (PyTorch): drop variant, or load its export",
                         folder)  # fmt: skip
    if backend not in (None, kind):
        fix = {
            "torch": "export it first (`retrieval-gate export --run <folder>`) or use backend='torch'",
            "onnx": "load the training run folder instead",
        }[kind]
        raise InputError(f"this folder holds a {kind} gate, not a {backend} one: {fix}", folder)  # fmt: skip
    if kind == "onnx":
        from .onnx import open_onnx

        return open_onnx(folder, variant or "fp32", provider=device, **kw), kind
    from .learned import load_learned  # torch only when asked for

    return load_learned(folder, device=device, **kw), kind


def _export_files(folder: Path) -> list[str]:
    """The files `retrieval-gate export` wrote there: the user's own (notes, a .cache/ of
    snapshot_download's) are not the gate's, and a saved copy or a Hub upload took them too."""
    return sorted(n for n in (*EXPORT_FILES, *TOKENIZER_FILES) if (folder / n).is_file())


def _check_load_args(variant: Any, device: Any, batch_size: Any, hub: dict[str, Any]) -> int:
    """from_pretrained's arguments, before anything loads, and the batch size as an int: a
    misspelt or unknown keyword (`threshold=0.5`, `varient=`) was ignored for a local folder,
    `batch_size=0` taken, `variant=["int8"]` a raw TypeError, and a device not a str (1,
    True) an ONNX export's raw AttributeError (0: the default device)."""
    from huggingface_hub import snapshot_download

    known = set(inspect.signature(snapshot_download).parameters) - {"repo_id"}
    if unknown := sorted(set(hub) - known):
        hint = "; set gate.threshold after loading" if "threshold" in unknown else ""
        raise InputError(f"from_pretrained got unknown argument(s) {', '.join(unknown)}: it "
                         "takes backend, variant, device, batch_size and snapshot_download's "
                         "(revision, token, cache_dir, local_dir, local_files_only, ...)"
                         f"{hint}")  # fmt: skip
    if variant is not None and (not isinstance(variant, str) or variant not in VARIANTS):
        raise InputError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    if device is not None and not isinstance(device, str):  # as LearnedGate's checked_device
        raise InputError(f"unknown device {device!r}: choose cpu or cuda (cuda:N for the "
                         "N-th GPU)")  # fmt: skip
    whole = isinstance(batch_size, numbers.Integral) and not isinstance(batch_size, bool)
    if not whole or batch_size < 1:
        raise InputError(f"batch_size must be a whole number of 1 or more, got {batch_size!r}")
    return int(batch_size)


class RetrievalGate(
    ModelHubMixin, library_name="retrieval-gate", tags=["retrieval-gate"], model_card_template=_CARD
):
    """A trained gate with its threshold and metadata, itself a `Gate` (`name`, `threshold`,
    `scores`): evaluation, tuning, `AdaptiveRAG` and `create_app` take it as it is. It wraps
    an `OnnxGate` or a `LearnedGate` (`.gate`)."""

    def __init__(
        self,
        gate: Gate,
        folder: Path,
        backend: str,
        variant: str | None = None,
        load_options: Mapping[str, Any] | None = None,
    ):
        self.gate = gate
        self.folder = Path(folder).expanduser().absolute()  # see resolve_folder
        # from_pretrained's device and batch_size: a pickled copy (a worker's) loads with them
        self.load_options = dict(load_options or {})
        self.backend = backend
        self.variant = variant
        self._saved_threshold = float(gate.threshold)  # what its files say (save_pretrained)
        # The mixin keeps the JSON-able __init__ arguments (backend, variant) as a config that
        # `save_pretrained` would write as config.json: a gate's folder says what it is in its
        # own files (the manifest), so no config.json.
        self._hub_mixin_config = None

    @classmethod
    def from_pretrained(
        cls,
        path_or_repo_id: str | Path,
        backend: str | None = None,
        variant: str | None = None,
        device: str | None = None,
        batch_size: int = 64,
        **hub_kwargs: Any,
    ) -> RetrievalGate:
        """Loads an export folder, a training run folder or a Hub id (`owner/name`).

        backend: "onnx" or "torch"; by default whatever the folder holds (ONNX for exports).
        variant: the ONNX file (fp32 | opt | int8 | fp16; default fp32), an export's only.
        device: "cpu" or "cuda" (ONNX
        execution provider / torch device; default CUDA when available, else CPU).
        hub_kwargs: passed to `snapshot_download` (revision, token, cache_dir, local_dir,
        local_files_only, force_download).

        Straight to the mixin's `_from_pretrained` hook: the mixin's own `from_pretrained` first
        fetches a `config.json` of __init__ arguments, which a gate has none of (its manifest
        says what it is), and that fetch fails offline or with `local_files_only=True` even
        where the snapshot is cached (and warns about every local folder)."""
        return cls._from_pretrained(
            model_id=str(path_or_repo_id), backend=backend, variant=variant, device=device,
            batch_size=batch_size, **hub_kwargs,
        )  # fmt: skip

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        backend: str | None = None,
        variant: str | None = None,
        device: str | None = None,
        batch_size: int = 64,
        **hub_kwargs: Any,
    ) -> RetrievalGate:
        """The mixin's loading hook: a local folder as is, a Hub id through `snapshot_download`
        (`resolve_folder`), then the folder's kind from `open_artifact`: a router's export or
        run gives a `RetrievalRouter`."""
        if backend is not None and backend not in BACKENDS:
            raise InputError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
        batch_size = _check_load_args(variant, device, batch_size, hub_kwargs)
        folder = resolve_folder(model_id, revision=revision, cache_dir=cache_dir, token=token,
                                force_download=force_download, local_files_only=local_files_only,
                                **hub_kwargs)  # fmt: skip
        gate, backend = _load_gate(folder, backend, variant, device, batch_size=batch_size)
        kind = RetrievalRouter if is_router(gate) else RetrievalGate
        return kind(gate, folder, backend, (variant or "fp32") if backend == "onnx" else None,
                    {"device": device, "batch_size": batch_size})  # fmt: skip

    @property
    def name(self) -> str:
        return self.gate.name

    @property
    def threshold(self) -> float:
        """Retrieve iff P(needs retrieval) >= threshold (the tuned one travels in the files)."""
        return float(self.gate.threshold)

    @threshold.setter
    def threshold(self, value: float) -> None:  # e.g. a per-mode override in `rag`
        self.gate.threshold = checked_threshold(value)

    @property
    def side_features(self) -> Any:
        """What the gate reads beside the text (None: the text alone): a user's columns, a
        stacked head's features, a two-stage gate's answer confidence among them."""
        return getattr(self.gate, "side_features", None)

    @property
    def checksum(self) -> str:
        """The model file's (or the weights') sha256 (see `HasChecksum`)."""
        return self.gate.checksum  # type: ignore[attr-defined]  (both backends have one)

    @property
    def metadata(self) -> dict[str, Any]:
        """Label meaning, threshold and the objective that chose it, backbone, provenance."""
        return dict(self.gate.metadata) if isinstance(self.gate, HasMetadata) else {}

    @property
    def device(self) -> str:
        """The ONNX execution provider or the torch device actually used."""
        return str(self.gate.device) if isinstance(self.gate, OnDevice) else "cpu"

    def scores(self, questions: Questions) -> np.ndarray:
        """P(needs retrieval) per question (strings or `Question`s), as every `Gate`."""
        return np.asarray(self.gate.scores(as_questions(questions)), np.float32)

    @overload
    def predict_proba(
        self, questions: str, features: Features | None = None,
        token_logprobs: Sequence[float] | None = None,
    ) -> float: ...  # fmt: skip
    @overload
    def predict_proba(
        self, questions: Sequence[str] | Sequence[Question], features: Features | None = None,
        token_logprobs: TokenLogprobs | None = None,
    ) -> np.ndarray: ...  # fmt: skip
    def predict_proba(
        self, questions: Questions, features: Features | None = None,
        token_logprobs: Any = None,
    ) -> Any:  # fmt: skip
        """P(needs retrieval): a float for one string, else an array in input order. A
        two-stage gate (`model.answer_confidence`) also reads each question's closed-book
        answer's `token_logprobs` (one list per question, None where there is no answer: that
        question gets the question-only score); other gates ignore them. A `features` column
        the gate does not read is refused (it changed nothing)."""
        features = self._check_features(features)
        scores = self.scores(as_questions(questions, features, token_logprobs))
        return float(scores[0]) if isinstance(questions, str) else scores

    def _check_features(self, features: Features | None) -> Features | None:
        """`features`, refused if it has a column this gate does not read (its data.features,
        and a two-stage gate's answer columns): any other was scored as if absent (in one
        mapping per question too). Rows given by an iterator (a generator) come back as a
        list: they are read once, here, and were not checked at all."""
        if hasattr(features, "keys"):
            named = set(features.keys())
        elif isinstance(features, Iterable) and not isinstance(features, str | bytes):
            features = list(features)  # one mapping per question
            named = {k for row in features if isinstance(row, Mapping) for k in row}
        else:  # a number: as_questions says what is wrong
            return features
        reads = {*side_columns(self.gate), *((TOKEN_LOGPROBS, MEAN_LOGPROB)
                                            if reads_answers(self.gate) else ())}  # fmt: skip
        if unread := sorted(str(k) for k in named if k not in reads):
            has = ", ".join(sorted(reads)) or "none: the question text alone"
            raise InputError(f"features {', '.join(unread)}: {self.name!r} does not read them "
                             f"(the columns it reads: {has}); drop them")  # fmt: skip
        return features

    @overload
    def predict(
        self, questions: str, features: Features | None = None, threshold: float | None = None,
        token_logprobs: Sequence[float] | None = None,
    ) -> bool: ...  # fmt: skip
    @overload
    def predict(
        self,
        questions: Sequence[str] | Sequence[Question],
        features: Features | None = None,
        threshold: float | None = None,
        token_logprobs: TokenLogprobs | None = None,
    ) -> np.ndarray: ...
    def predict(
        self, questions: Questions, features: Features | None = None,
        threshold: float | None = None, token_logprobs: Any = None,
    ) -> Any:  # fmt: skip
        """Retrieve (True) or not, at the stored threshold unless `threshold` is given."""
        t = self.threshold if threshold is None else checked_threshold(threshold)
        decisions = np.asarray(self.predict_proba(questions, features, token_logprobs)) >= t
        return bool(decisions) if isinstance(questions, str) else decisions

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> Path:
        """Writes the gate's files (every ONNX variant, tokenizer, model card; or the run's
        config, weights and metadata, with a card) into a new or empty folder: loadable by
        `from_pretrained` and uploadable as a Hub repo as is. The mixin's `save_pretrained`
        (kwargs: `model_card_kwargs`, `push_to_hub`, `repo_id`, ...) around `_save_pretrained`,
        after the check that touches nothing: a non-empty folder is refused."""
        if not isinstance(save_directory, str | Path) or not str(save_directory).strip():
            raise InputError(f"save_directory is {save_directory!r}: give a new folder's path")
        out = Path(save_directory).expanduser()  # "~/x" made a folder named "~" here
        for parent in out.parents:  # the mixin makes them: a file among them was a raw
            if parent.is_symlink() and not parent.exists():  # NotADirectoryError
                raise InputError(f"{parent} is a broken link: give a path in a folder", out)
            if parent.exists():
                if not parent.is_dir():
                    raise InputError(f"{parent} is a file, not a folder: give a new or empty "
                                     "folder's path in a folder", out)  # fmt: skip
                break
        if out.exists() and not out.is_dir():
            raise InputError("is a file: give a new or empty folder's path", out)
        if out.exists() and any(out.iterdir()):
            raise InputError("refusing to write into a non-empty folder; choose a new one", out)
        if self.threshold != self._saved_threshold:  # the copy said the files' threshold
            raise InputError(f"threshold {self.threshold:g} was set after loading, and "
                             "save_pretrained copies the gate's files, whose threshold is "
                             f"{self._saved_threshold:g}: set it back, or set it again after "
                             "loading the copy (a tuned one: `retrieval-gate tune "
                             "--save-objective`, then export)", out)  # fmt: skip
        if not self.folder.is_dir():  # an empty target was left, and pathlib's traceback
            raise InputError(f"the gate's files are gone from {self.folder}, the folder it was "
                             "loaded from: load it again from where they are now", out)  # fmt: skip
        push, repo_id = kwargs.pop("push_to_hub", False), kwargs.pop("repo_id", None)
        local = {k: kwargs.pop(k) for k in ("config", "model_card_kwargs") if k in kwargs}
        # written whole or not at all: a full disk or read-only folder left half a folder
        # that the retry refused as non-empty and loading called a damaged export
        with staged_folder(out) as stage:
            super().save_pretrained(stage, **local)
            card = stage / "README.md"  # its snippets load the folder where it now is
            write_text(card, card_loading(card.read_text(encoding="utf-8"), self._card_target(out)))
        if push:  # the mixin's push, after the local copy is whole
            self.push_to_hub(repo_id or out.name, **local, **kwargs)
        return out

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> str:
        """The mixin's (kwargs: private, token, commit_message, branch, create_pr, ...); the
        card it uploads loads the gate by its Hub id."""
        self.__dict__["_pushing"] = True  # the mixin saves into <tmp>/<owner>/<name>
        try:
            return super().push_to_hub(repo_id, **kwargs)
        finally:
            self.__dict__.pop("_pushing", None)

    def _card_target(self, out: Path) -> str:
        """What the saved card's snippets load: the Hub id when pushing, else the folder as
        given to save_pretrained."""
        return "/".join(out.parts[-2:]) if self.__dict__.get("_pushing") else str(out)

    def _save_pretrained(self, save_directory: Path) -> None:
        # a run folder's gate files (the rest is training state); an export is all its files
        names = RunFolder.GATE if self.backend == "torch" else _export_files(self.folder)
        for name in names:
            src = self.folder / name
            if src.is_dir():
                shutil.copytree(src, save_directory / name)
            elif src.is_file():
                shutil.copy2(src, save_directory / name)

    def generate_model_card(self, *args: Any, **kwargs: Any) -> ModelCard:
        """The card `save_pretrained` writes for a folder without one (a run's): the mixin's
        (`_CARD`), naming the gate and its threshold."""
        kwargs = {"name": self.name, "threshold": f"{self.threshold:g}", "backend": self.backend,
                  **kwargs}  # fmt: skip
        return super().generate_model_card(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        """A router's attribute asked of a binary gate: say so, not only "no attribute"."""
        if name in _ROUTER_ONLY:
            raise AttributeError(
                f"{name!r} is a router's: {self.__dict__.get('folder')} holds a binary gate "
                "(predict / predict_proba: P(needs retrieval)); a router export (`retrieval-gate "
                "train --config router-...`, docs/router.md) routes among strategies"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({str(self.folder)!r}, backend={self.backend!r}, "
                f"variant={self.variant!r}, threshold={self.threshold})")  # fmt: skip

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled (multiprocessing, Ray, Spark and Dask workers; deepcopy) as the folder it
        loads from, each copy loading its own: an ONNX session cannot be pickled (a raw
        onnxruntime TypeError), with the device and batch size it was loaded with."""
        args = (str(self.folder), self.backend, self.variant, self.threshold, self.load_options)
        return reload_gate, args


def reload_gate(
    folder: str,
    backend: str | None,
    variant: str | None,
    threshold: float,
    load_options: Mapping[str, Any] | None = None,
) -> RetrievalGate:
    """A gate loaded again from the folder a pickled or saved one named, with its load options
    (`device`, `batch_size`) and its threshold as it was (one set in code after loading
    included)."""
    options = dict(load_options or {})
    gate = RetrievalGate.from_pretrained(folder, backend=backend, variant=variant, **options)
    if gate.threshold != threshold:  # set in code after loading
        gate.threshold = threshold
    return gate


_ROUTER_ONLY = ("route", "strategy_proba", "strategies", "costs", "budget", "strategy_registry")


class RetrievalRouter(RetrievalGate):
    """A router's export or run (issue 25): what `RetrievalGate.from_pretrained` returns for
    one. Beside the unchanged `predict_proba` / `predict` (P(needs retrieval) = 1 -
    P(correct | no retrieval), at the threshold), it routes each question to a strategy:

        router.strategies                    # names in cost order, e.g. the three built-ins
        router.strategy_registry()           # their specs (strategies.StrategySpec)
        router.strategy_proba(texts)         # (n, 3): P(correct | strategy)
        router.route(texts, budget=1.0)      # one strategy name per question
        router.costs, router.budget          # costs per strategy; the default budget

    `route(budget=None)` uses the exported default operating point."""

    @property
    def strategies(self) -> tuple[str, ...]:
        return tuple(self.gate.strategies)  # type: ignore[attr-defined]

    @property
    def costs(self) -> dict[str, float]:
        """Each strategy's cost in the router's unit (default: retrievals per question)."""
        return dict(self.gate.costs)  # type: ignore[attr-defined]

    @property
    def budget(self) -> float:
        """The default budget (mean cost per question): `route(budget=None)` routes at the
        best dev accuracy within it, which may spend less; `route(budget=b)` spends up to b."""
        return float(self.gate.budget)  # type: ignore[attr-defined]

    def strategy_registry(self) -> StrategyRegistry:
        """Its strategies' specs (what each retrieves, in how many steps), as exported; an
        export with names only resolves them against the built-ins."""
        if not isinstance(self.gate, CarriesStrategies):
            return specs_of(None, self.strategies, f"router {self.name!r}")
        return self.gate.strategy_registry()

    def strategy_proba(self, questions: Questions, features: Features | None = None) -> np.ndarray:
        """P(correct | strategy) per question, columns in `strategies` order."""
        features = self._check_features(features)
        qs = as_questions(questions, features)
        return np.asarray(self.gate.strategy_proba(qs), np.float32)  # type: ignore[attr-defined]

    def route(
        self, questions: Questions, budget: float | None = None, features: Features | None = None
    ) -> list[str]:
        """One strategy name per question (a list, also for one string), for `budget`."""
        features = self._check_features(features)
        qs = as_questions(questions, features)
        return list(self.gate.route(qs, budget))  # type: ignore[attr-defined]
