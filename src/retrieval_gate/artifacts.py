"""The manifest every training run and export carries (`manifest.json`), and `open_artifact`,
THE one reader of what a gate's folder holds (issue 36, part 3). Every verb and
`RetrievalGate.from_pretrained` asks it before anything loads or any engine starts:

    format            "retrieval-gate-artifact/1"
    kind              "run" (checkpoints/<run>/, scored with PyTorch) | "export" (ONNX)
    task              "gate" (binary) | "router" (strategies) | "rrcp" (3-way)
    signals           what the gate reads: "question", plus "side_features" (a user's columns)
                      and "answer_logprobs" (a two-stage gate's closed-book answer)
    strategies        a router's strategy names in cost order ([] for a gate)
    calibration       a router's `pricing.Calibration` dict, its strategies' specs included
                      where it has them (null for a gate)
    variants          an export's ONNX variants (fp32 | opt | int8 | fp16; [] for a run)
    package_version   the retrieval-gate version that wrote it
    checksums         {file name: sha256} of gate.pt, config.yaml and each tokenizer/ and
                      backbone/ file (a run: an edited pooling or activation scored otherwise), or
                      each model*.onnx and the tokenizer.json (an export), taken as they were
                      written; loading checks the file against it, so a bit flipped by a disk
                      or a copy, or a file copied in from another folder, is refused rather
                      than scored with (a folder written before checksums has none, or only
                      some: nothing to check for the rest)

A folder written before manifests (no manifest.json) is read from its metadata.json (a run) or
gate_metadata.json (an export), by the same rules; one whose metadata says it wrote one
(`"manifest": "manifest.json"`, every folder since) and has none is refused. Nothing is
guessed: damaged JSON, a missing or wrongly typed field, an unknown value, or a manifest its
metadata contradicts is a `DataError` naming the file and field and the fix, never a fallback
to another kind.

No torch and no ONNX Runtime: JSON files only (`pricing` checks a router's calibration), so a
plan reads it in milliseconds before anything heavy loads."""

from __future__ import annotations

import zipfile
from dataclasses import asdict, dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import DataError, InputError, clipped
from .fileio import sha256_file, write_json
from .pricing import Calibration
from .run_folder import RunFolder
from .strict_rows import parse_json

FORMAT = "retrieval-gate-artifact/1"
READABLE_FORMATS = (FORMAT,)
MANIFEST = "manifest.json"
EXPORT_METADATA = "gate_metadata.json"  # an export's copy of its run's metadata.json
KINDS = {"run": RunFolder.METADATA, "export": EXPORT_METADATA}  # kind -> its metadata file
BACKENDS = {"run": "torch", "export": "onnx"}
# training's `data.task` -> the manifest's task
TASK_OF = {"binary": "gate", "strategies": "router", "3way": "rrcp"}
TASKS = tuple(TASK_OF.values())
SIGNALS = ("question", "side_features", "answer_logprobs")
# variant -> file name in an export folder; each a named option of `retrieval-gate export`
VARIANTS = {
    "fp32": "model.onnx",  # plain export, the parity reference
    "opt": "model.opt.onnx",  # ONNX Runtime graph optimisation (transformer fusions for BERT)
    "int8": "model.int8.onnx",  # static int8 (QDQ, calibrated at export) of fp32, for CPUs
    "fp16": "model.fp16.onnx",  # float16 weights/compute of `opt`, for GPUs (fp32 inputs/outputs)
}
EXPORT_TOKENIZER = "tokenizer.json"  # what an export's ONNX gate tokenizes with
# What an export writes besides the tokenizer's own files (`retrieval-gate export`): anything
# else in an export folder is the user's (carried into a re-export, not into a saved copy).
EXPORT_FILES = (*VARIANTS.values(), EXPORT_METADATA, MANIFEST, "parity.json", "README.md")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                   "chat_template.jinja")  # fmt: skip
CHECKED_FILES = (RunFolder.WEIGHTS, RunFolder.CONFIG, *VARIANTS.values(), EXPORT_TOKENIZER)
RUN_TOKENIZER = f"{RunFolder.TOKENIZER}/"  # and a run's tokenizer files: "tokenizer/<file>"
RUN_BACKBONE = f"{RunFolder.BACKBONE}/"  # and its backbone's config files: "backbone/<file>"
MAX_TOKENS = 2**20  # a max_length past any backbone's positions (the tokenizer overflows)
FIX = {"run": "re-train it (`retrieval-gate train`)",
       "export": "re-export it (`retrieval-gate export --run RUN`)"}  # fmt: skip


@dataclass(frozen=True)
class Manifest:
    kind: str
    task: str
    signals: tuple[str, ...]
    strategies: tuple[str, ...] = ()
    calibration: dict[str, Any] | None = None
    variants: tuple[str, ...] = ()
    package_version: str = __version__
    format: str = FORMAT
    checksums: dict[str, str] = dataclass_field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"format": d.pop("format"), **d}

    def write(self, folder: Path) -> Path:
        """`folder/manifest.json`, atomically."""
        path = Path(folder) / MANIFEST
        write_json(path, self.to_dict())
        return path

    @classmethod
    def from_dict(cls, d: Any, path: Path) -> Manifest:
        """A manifest.json's contents, every field checked."""
        if not isinstance(d, dict):
            raise DataError("manifest must be a JSON object; re-train or re-export", path)
        field = _Fields(d, path)
        if "format" not in d:  # every manifest has one: without it the file is damaged
            raise DataError("missing field 'format': the manifest is damaged; re-train or "
                            "re-export", path)  # fmt: skip
        fmt = field.choice("format", READABLE_FORMATS, "upgrade retrieval-gate")
        kind = field.choice("kind", tuple(KINDS), "re-train or re-export")
        fix = FIX[kind]
        return cls(
            kind=kind,
            task=field.choice("task", TASKS, fix),
            signals=field.names("signals", SIGNALS, fix),
            strategies=field.names("strategies", None, fix),
            calibration=field.calibration("calibration", fix),
            variants=field.names("variants", tuple(VARIANTS), fix),
            package_version=field.string("package_version", fix),
            format=fmt,
            checksums=field.checksums("checksums", fix),
        )

    @classmethod
    def from_metadata(cls, meta: Any, kind: str, path: Path, variants: tuple[str, ...] = ()) -> Manifest:  # fmt: skip
        """What a run's metadata.json or an export's gate_metadata.json declares (`path`)."""
        if not isinstance(meta, dict):
            raise DataError(f"metadata must be a JSON object; {FIX[kind]}", path)
        field = _Fields(meta, path)
        task = TASK_OF[field.choice("task", tuple(TASK_OF), FIX[kind])]
        calibration = field.calibration("router", FIX[kind]) if "router" in meta else None
        if (task == "router") != (calibration is not None):
            have = "a router task without" if calibration is None else "a gate's task with"
            raise DataError(f"key router: {have} a router calibration (`router`); "
                            f"{FIX[kind]}", path)  # fmt: skip
        field.gate_values(FIX[kind])
        version = meta.get("package_version")
        return cls(kind, task, signals_of(meta.get("side_features"), path, FIX[kind]),
                   tuple(calibration["strategies"]) if calibration else (), calibration,
                   variants, version if isinstance(version, str) else "")  # fmt: skip


class _Fields:
    """Typed reads of one JSON object's keys, each failure naming the file and the key."""

    def __init__(self, d: dict[str, Any], path: Path):
        self.d, self.path = d, path

    def _get(self, key: str, want: str, fix: str) -> Any:
        if key not in self.d:
            raise DataError(f"missing field {key!r} ({want}); {fix}", self.path)
        return self.d[key]

    def _bad(self, key: str, want: str, fix: str) -> DataError:
        return DataError(f"field {key!r} = {self.d[key]!r} is not {want}; {fix}", self.path)

    def string(self, key: str, fix: str) -> str:
        value = self._get(key, "a string", fix)
        if not isinstance(value, str):
            raise self._bad(key, "a string", fix)
        return value

    def choice(self, key: str, allowed: tuple[str, ...], fix: str) -> str:
        want = "one of " + ", ".join(allowed)
        value = self._get(key, want, fix)
        if value not in allowed:
            raise self._bad(key, want, fix)
        return value

    def names(self, key: str, allowed: tuple[str, ...] | None, fix: str) -> tuple[str, ...]:
        want = "a list of names" + (f" from {', '.join(allowed)}" if allowed else "")
        value = self._get(key, want, fix)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise self._bad(key, want, fix)
        if (allowed and not set(value) <= set(allowed)) or len(set(value)) < len(value):
            raise self._bad(key, want + ", each once", fix)
        return tuple(value)

    def gate_values(self, fix: str) -> None:
        """The values a gate scores with, where present: a hand-edited or damaged threshold
        ("abc", 5, NaN) or max_length (-3, 10**30) was an internal error, or read as given
        (a threshold of 5 never retrieves), where the ONNX metadata's are refused."""
        if "threshold" in self.d:
            value = self.d["threshold"]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0.0 <= value <= 1.0)
            ):  # fmt: skip  (NaN fails the comparison too)
                raise self._bad("threshold", "a number in [0, 1]", fix)
        if "max_length" in self.d:
            value = self.d["max_length"]
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    1 <= value <= MAX_TOKENS):  # fmt: skip
                raise self._bad("max_length", f"a whole number of tokens, 1 to {MAX_TOKENS:,}", fix)
        if "classes" in self.d and len(self.names("classes", None, fix)) < 2:
            raise self._bad("classes", "a list of at least two class names", fix)

    def checksums(self, key: str, fix: str) -> dict[str, str]:
        """Optional (manifests written before checksums have none): the checked files' names
        to sha256 hex digests."""
        value = self.d.get(key, {})
        want = (
            f"an object of file names ({', '.join(CHECKED_FILES)}, {RUN_TOKENIZER}<file>, "
            f"{RUN_BACKBONE}<file>) "
            "to sha256 digests"
        )
        if not (isinstance(value, dict) and all(
                is_checked(k) and isinstance(v, str) and len(v) == 64
                and set(v) <= set("0123456789abcdef") for k, v in value.items())):  # fmt: skip
            raise self._bad(key, want, fix)
        return value

    def calibration(self, key: str, fix: str) -> dict[str, Any] | None:
        value = self._get(key, "a router calibration or null", fix)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(key, "a router calibration (a JSON object) or null", fix)
        try:
            Calibration.from_dict(value)  # every field a router routes with, typed
        except InputError as e:
            raise DataError(f"key {key}: {e}", self.path) from None
        return value


def signals_of(side: Any, path: Path, fix: str) -> tuple[str, ...]:
    """What a gate reads, from its metadata's `side_features` (a user's columns, a stacked
    head's text features, a two-stage gate's answer confidence)."""
    if isinstance(side, str):  # an export's ONNX metadata keeps it as JSON text
        try:
            side = parse_json(side)
        except ValueError:
            side = []  # not an object: refused below
    if side is None:
        return ("question",)
    if not isinstance(side, dict):
        raise DataError(f"key side_features is not an object or null; {fix}", path)
    if side.get("kind") == "text":  # text features, maybe with side columns and answers
        extra = [s for s, key in (("side_features", "side"), ("answer_logprobs",
                 "answer_confidence")) if side.get(key)]  # fmt: skip
        return ("question", *extra)
    return ("question", "side_features") if side.get("names") else ("question",)


@dataclass(frozen=True)
class Artifact:
    """An opened (not loaded) run or export folder: its manifest, and its metadata file's
    contents (threshold, side features, ...), checked against each other."""

    folder: Path
    manifest: Manifest
    metadata: dict[str, Any]
    source: Path  # manifest.json, or the metadata file an older folder was read from

    @property
    def kind(self) -> str:
        return self.manifest.kind

    @property
    def task(self) -> str:
        return self.manifest.task

    @property
    def backend(self) -> str:
        """torch (a run) or onnx (an export)."""
        return BACKENDS[self.kind]

    @property
    def is_router(self) -> bool:
        return self.task == "router"

    @property
    def signals(self) -> tuple[str, ...]:
        return self.manifest.signals

    @property
    def router(self) -> Calibration | None:
        """A router's calibration (strategies, costs, default budget); None for a gate."""
        cal = self.manifest.calibration
        return None if cal is None else Calibration.from_dict(cal)

    def verified_sha256(self, name: str) -> str:
        """The sha256 of the checked file `name` in the folder, which must be the one the manifest
        recorded when the file was written (a folder without a record is not checked)."""
        return verified_sha256(self.folder, name, self.manifest.checksums, self.kind)

    def model_file(self, variant: str, flag: str | None = None) -> Path:
        """An export's ONNX file of `variant`, which must be there."""
        if variant not in VARIANTS:
            raise DataError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        path = self.folder / VARIANTS[variant]
        if variant not in self.manifest.variants or not path.is_file():
            raise DataError(f"{_for(flag)}no {variant} model in this export: run `retrieval-gate "
                            f"export --variants {variant}`", path)  # fmt: skip
        return path


def open_artifact(path: str | Path, kind: str | None = None, flag: str | None = None) -> Artifact:
    """THE reader of a run or export folder: its manifest (derived from the metadata file for
    a folder made before manifests), checked against its metadata and files. `kind`: the one
    the caller needs ("run" or "export"; another is refused, `flag` naming the option)."""
    folder = Path(path)
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "no such folder"
        raise DataError(f"{_for(flag)}{what}; {MAKE.get(kind, _point_at())}", folder)
    manifest = _read_manifest(folder)
    found = _kind_of(folder, manifest)
    if kind is not None and found != kind:
        raise DataError(f"{_for(flag)}{WRONG_KIND[kind].format(folder=folder)}", folder)
    meta_path = folder / KINDS[found]
    meta = _read_json(meta_path, FIX[found])
    if found == "run" and isinstance(meta, dict) and "side_features" not in meta:
        meta = {**meta, "side_features": _config_side_features(folder)}
    if manifest is None and isinstance(meta, dict) and meta.get("manifest") == MANIFEST:
        raise DataError(f"{MANIFEST} is missing, and its {meta_path.name} says this {found} "
                        "wrote one: the files' checksums are in it (without it a damaged or "
                        f"swapped file was read unchecked); restore it, or {FIX[found]} (a run "
                        "still training writes it before gate.pt)", folder)  # fmt: skip
    present = tuple(v for v, name in VARIANTS.items() if (folder / name).is_file())
    derived = Manifest.from_metadata(meta, found, meta_path, present if found == "export" else ())
    if manifest is not None:
        _agree(manifest, derived, folder, meta_path)
    if found == "run":
        _check_weights(folder / RunFolder.WEIGHTS)
    if manifest is None:  # a folder made before manifests: its metadata says it all
        return Artifact(folder, derived, meta, meta_path)
    return Artifact(folder, manifest, meta, folder / MANIFEST)


def _check_weights(path: Path) -> None:
    """A run's weights are a `torch.save` zip archive: one cut short (a copy or a write that
    stopped) has no central directory, found here in milliseconds before torch imports."""
    if not path.is_file():
        return  # a run still training has only its checkpoints; the loader says so
    try:
        with zipfile.ZipFile(path):
            pass
    except (zipfile.BadZipFile, OSError) as e:
        raise DataError(f"gate.pt is corrupt or incomplete ({e}); {FIX['run']}", path) from e


def is_checked(name: Any) -> bool:
    """A file name `checksums` may hold: a checked file, or one file of a run's tokenizer/ or
    backbone/."""
    if not isinstance(name, str):
        return False
    if name in CHECKED_FILES:
        return True
    folder, _, rest = name.partition("/")
    return (
        f"{folder}/" in (RUN_TOKENIZER, RUN_BACKBONE)
        and rest not in ("", ".", "..")
        and ("/" not in rest)
    )


def verified_sha256(folder: Path, name: str, checksums: dict[str, str], kind: str) -> str:
    """`folder/name`'s sha256, refused when it is not the one `checksums` recorded."""
    path = Path(folder) / name
    got, want = sha256_file(path), checksums.get(name)
    if want is not None and got != want:
        raise DataError(f"damaged or replaced: its sha256 is {got[:16]}..., not the "
                        f"{want[:16]}... {MANIFEST} recorded when it was written (a bit "
                        f"flipped by a disk or a copy, or the file of another folder); "
                        f"{FIX[kind]} (a file you changed on purpose: delete its entry from "
                        f"the 'checksums' of {MANIFEST})", path)  # fmt: skip
    return got


def recorded_checksums(folder: Path) -> dict[str, str]:
    """The checksums the folder's manifest holds ({} without a readable one)."""
    try:
        manifest = _read_manifest(Path(folder))
    except DataError:
        return {}
    return dict(manifest.checksums) if manifest is not None else {}


def _read_manifest(folder: Path) -> Manifest | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    return Manifest.from_dict(_read_json(path, "re-train or re-export it"), path)


def _kind_of(folder: Path, manifest: Manifest | None) -> str:
    """run or export: the manifest's, which the folder's files must not contradict; for a
    folder without one, the files'."""
    run = (folder / RunFolder.METADATA).is_file() or RunFolder(folder).is_run()
    export = (folder / EXPORT_METADATA).is_file() or any(
        (folder / f).is_file() for f in VARIANTS.values())  # fmt: skip
    if manifest is not None:
        if (manifest.kind == "run" and export and not run) or (manifest.kind == "export" and run):
            raise DataError(f"field 'kind' = {manifest.kind!r} contradicts the folder's files "
                            f"(those of {'an export' if export else 'a training run'}); "
                            f"{FIX['export' if export else 'run']}", folder / MANIFEST)  # fmt: skip
        return manifest.kind
    if run:
        return "run"
    if export:
        return "export"
    raise DataError(f"neither an export (model*.onnx, {EXPORT_METADATA}) nor a training run "
                    f"({RunFolder.WEIGHTS}, {RunFolder.METADATA}); {_point_at()}"
                    f"{_held_inside(folder)}", folder)  # fmt: skip


def _held_inside(folder: Path) -> str:
    """The exports or runs one level down, named: `export --out-dir` is their parent folder,
    and a user easily points at it."""
    if not folder.is_dir():
        return ""
    inside = sorted(str(c) for c in folder.iterdir() if c.is_dir() and (
        (c / MANIFEST).is_file() or (c / EXPORT_METADATA).is_file()
        or (c / RunFolder.METADATA).is_file()))  # fmt: skip
    return (
        f"; it holds {', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}" if inside else ""
    )


# how to make the folder a caller needs, for one that is not there
MAKE = {
    "export": "no export folder here: export a training run with `retrieval-gate export --run "
    "RUN` (it writes export/<name>; `make demo` writes runs/demo/export/minilm-gate)",
    "run": "no training run here: train one with `retrieval-gate train` (it writes "
    "checkpoints/<name>; `make demo` writes runs/demo/checkpoints/minilm-closed-book)",
}


# what to do with the other kind of folder than the one a caller needs
WRONG_KIND = {
    "export": "this folder holds a training run, not an export: export it first "
    "(`retrieval-gate export --run {folder}`) and pass the folder it writes",
    "run": "this folder holds an export, not a training run: it has no PyTorch weights. Pass "
    "the training run it was exported from (`retrieval-gate train` wrote it under "
    "checkpoints/), or, where the verb reads ONNX gates, this folder as the onnx gate "
    "(`--gate onnx --onnx {folder}`; evaluate: `--gates onnx --onnx {folder}`)",
}


def _for(flag: str | None) -> str:
    return f"{flag}: " if flag else ""


def _point_at() -> str:
    return ("point at the folder that `retrieval-gate export` (an export) or `retrieval-gate "
            "train` (a training run) wrote")  # fmt: skip


def _config_side_features(run_dir: Path) -> Any:
    """Runs trained before the side features' scaling moved to metadata.json kept it in
    config.yaml (`model.side_features`): what such a run reads (None if unreadable; loading
    the run names the problem)."""
    import yaml

    from .yaml_files import read_yaml

    try:
        config = read_yaml(run_dir / RunFolder.CONFIG)
        return config["model"].get("side_features")
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None


def _read_json(path: Path, fix: str) -> Any:
    if not path.is_file():
        raise DataError(f"missing file; {fix}", path)
    try:
        return parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # truncated, not JSON or UTF-8, nested too deep
        raise DataError(f"unreadable JSON ({e}); {fix}", path) from None


def _at(value: dict[str, Any], where: str) -> Any:
    """The value at a dotted `where` ("calibration.costs") below its first part."""
    _, _, key = where.partition(".")
    return value.get(key) if key else value


def _agree(manifest: Manifest, derived: Manifest, folder: Path, meta_path: Path) -> None:
    """manifest.json against the metadata file and the folder's files: any difference is
    damage (a hand edit, a copy from another folder), never settled by picking one."""
    path, fix = folder / MANIFEST, FIX[derived.kind]
    for field in ("kind", "task", "strategies", "calibration", "signals"):
        ours, theirs = getattr(manifest, field), getattr(derived, field)
        if ours != theirs:
            where = field
            if isinstance(ours, dict) and isinstance(theirs, dict):  # a calibration: its key
                where = next((f"{field}.{k}" for k in {**ours, **theirs}
                              if ours.get(k) != theirs.get(k)), field)  # fmt: skip
                ours, theirs = _at(ours, where), _at(theirs, where)
            raise DataError(f"field {where!r} = {clipped(repr(ours))} contradicts "
                            f"{meta_path.name} (which says {clipped(repr(theirs))}); {fix}",
                            path)  # fmt: skip
    missing = [v for v in manifest.variants if v not in derived.variants]
    if missing:
        raise DataError(f"field 'variants' lists {', '.join(missing)}, but "
                        f"{', '.join(VARIANTS[v] for v in missing)} is not in the folder; {fix}",
                        path)  # fmt: skip
    if manifest.kind == "export" and not manifest.variants:
        raise DataError(f"field 'variants' is empty: an export has at least one model; {fix}", path)  # fmt: skip
    if manifest.kind == "run" and manifest.variants:
        raise DataError(f"field 'variants' must be empty for a training run; {fix}", path)


def run_manifest(
    meta: dict[str, Any], run_dir: Path, checksums: dict[str, str] | None = None
) -> Manifest:
    """The manifest of a run, from the metadata.json training (or tuning) just wrote, with
    `checksums` of the weights being written (None: the ones the run's manifest holds)."""
    derived = Manifest.from_metadata(meta, "run", Path(run_dir) / RunFolder.METADATA)
    kept = recorded_checksums(run_dir) if checksums is None else checksums
    return replace(derived, checksums=kept)


def export_manifest(
    meta: dict[str, Any], out_dir: Path, variants: tuple[str, ...], checksums: dict[str, str]
) -> Manifest:
    """The manifest of an export of a run with metadata `meta`, holding `variants`, whose
    model files have `checksums`."""
    path = Path(out_dir) / EXPORT_METADATA
    derived = Manifest.from_metadata(meta, "export", path, variants)
    return replace(derived, package_version=__version__, checksums=checksums)
