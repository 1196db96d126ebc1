"""The demo's done markers, keyed by what a stage's result depends on.

`<stage>.done.json` holds the stage's command, seconds, work counters, `inputs`: a sha256
over the package's code and the data folder (`shared_key`, once per demo run), the command,
every file it names and every file a YAML config it names points at, followed as training
reads them (`named_files`: the configs it `extends`, its label file), and the markers of the
stages whose results it reads (`demo.upstream`), and `outputs`: the size, mtime and sha256 of
each file it made (`output_record`). A stage is reused only while its `inputs` match: after an
edited config or label file, new code or new data it runs again, and so does every stage that
reads it (its marker changed), and so does a stage whose outputs are not as it left them
(`damaged_output`: a truncated gate.pt). A marker that cannot be read, or whose fields are not
of the types written, is no marker: the stage runs (`demo` notes it)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .fileio import sha256_file
from .strict_rows import parse_json
from .yaml_files import read_yaml

MARKER = "{}.done.json"
# Files one stage's arguments and the YAML configs they name may bring in (an `extends` chain
# is a few): the walk is bounded, and each file is followed once (a cycle of `extends` ends).
MAX_NAMED = 200
# Where `extends: NAME` finds an example config by name (training.config.find_config's).
CONFIG_FOLDERS = ("experiments", "backbones", ".")


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker's record, or None when it is missing, cut short or not a marker: a field
    not of the type `demo` writes is damage too (an edited one crashed every later report)."""
    try:
        info = parse_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    argv, work = info.get("argv"), info.get("work", {})  # no `work`: an older demo's marker
    made = info.get("outputs", {})  # none: an older demo's marker (its outputs unrecorded)
    whole = (
        isinstance(argv, list)
        and all(isinstance(a, str) for a in argv)
        and _number(info.get("seconds"))
        and isinstance(info.get("inputs", ""), str)  # no `inputs`: an older demo's marker
        and isinstance(work, dict)
        and all(isinstance(k, str) and _number(v) for k, v in work.items())
        and isinstance(made, dict)
        and all(isinstance(k, str) and _file_record(v) for k, v in made.items())
    )
    return info if whole else None


def _file_record(value: Any) -> bool:
    """[size, mtime in ns, sha256], as `output_record` writes it."""
    return (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value[:2])
        and isinstance(value[2], str)
    )


def _number(value: Any) -> bool:
    """A finite number of seconds or of work (a bool is an int to Python, not to a marker)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value >= 0


def output_record(paths: Sequence[Path], out: Path) -> dict[str, list[int | str]]:
    """The marker's `outputs`: each file of `paths` (`demo.Stage.outputs`) there, by its path
    under the demo folder `out`, as [size, mtime in ns, sha256] (hashed once, as the stage
    ends: about 0.1 s for gate.pt's 90 MB)."""
    record: dict[str, list[int | str]] = {}
    for path in paths:
        if path.is_file():
            st = path.stat()
            record[_under(path, out)] = [st.st_size, st.st_mtime_ns, sha256_file(path)]
    return record


def damaged_output(
    paths: Sequence[Path], out: Path, records: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why the files a finished stage made (`demo.Stage.outputs`, and those its marker's
    `outputs` record: a removed folder's) are not as it left them, or None when they are: one
    missing or not a file, or one whose contents are not those recorded (edited, truncated).
    `records`: the stage's own `outputs`, then those of later stages that rewrite a file of
    its (tune saves its threshold into the run's metadata.json); a file is as one of them left
    it. A file of the size and mtime recorded is not hashed again (a check costs a stat)."""
    own = records[0] if records else {}
    for path in dict.fromkeys([*paths, *(out / name for name in own)]):
        if not path.is_file():
            return f"its output {path} is missing"
        known = [r[_under(path, out)] for r in records if _under(path, out) in r]
        if not known:
            return f"its output {path} has no record in its marker (an older demo's)"
        st = path.stat()
        if any(size == st.st_size and ns == st.st_mtime_ns for size, ns, _ in known):
            continue
        if sha256_file(path) not in {digest for _, _, digest in known}:
            return f"its output {path} was changed since it wrote it"
    return None


def _under(path: Path, out: Path) -> str:
    """`path`'s name in a marker: relative to the demo folder (a moved one is still known)."""
    return path.relative_to(out).as_posix() if path.is_relative_to(out) else str(path)


def shared_key(data_dir: Path | None) -> str:
    """What every stage reads: this package's code and the data folder's files."""
    h = hashlib.sha256()
    package = Path(__file__).parent
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    h.update(folder_key(data_dir).encode())
    return h.hexdigest()


def folder_key(folder: Path | None) -> str:
    """A sha256 over a folder's files (their paths in it and contents): a copy elsewhere has
    the same key; "-" for none."""
    if folder is None:
        return "-"
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}".encode())
    return h.hexdigest()


def inputs_key(argv: Sequence[str], shared: str, earlier: Sequence[Path], out: Path) -> str:
    """`inputs` of a stage run as `argv` after the stages whose markers are `earlier`; files
    under the demo folder `out` are the stages' outputs, not inputs (the markers stand for
    them: a stage's own report would otherwise change its key)."""
    h = hashlib.sha256(f"{shared}\0{json.dumps(list(argv))}".encode())
    for path in named_files(argv):
        if path.resolve().is_relative_to(out.resolve()):
            continue
        h.update(f"\0{path}\0{sha256_file(path)}".encode())
    for marker in earlier:
        h.update(b"\0" + (marker.read_bytes() if marker.is_file() else b"-"))
    return h.hexdigest()


def named_files(argv: Sequence[str]) -> list[Path]:
    """The files an argument names (`--set key=FILE`'s too), and those its YAML files name,
    followed as training reads a config: an `extends:` entry beside the YAML (else an example
    config by name), any other string (a config's label file) from the working directory,
    else from the checkout that holds the YAML's configs/ folder; a YAML found so is followed
    in turn. Folders are earlier stages' outputs: their markers stand for them."""
    todo = deque(Path(p) for arg in argv for p in dict.fromkeys([arg, arg.split("=", 1)[-1]]))
    found: dict[Path, Path] = {}  # resolved -> as named (the key's text)
    while todo and len(found) < MAX_NAMED:
        path = todo.popleft()
        if not _is_file(path) or path.resolve() in found:
            continue
        found[path.resolve()] = path
        if path.suffix in (".yaml", ".yml"):
            todo += _yaml_named(path)
    return list(found.values())


def _is_file(path: Path) -> bool:
    """Whether a string names a file; one too long for a path, or holding NUL, names none."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _yaml_named(path: Path) -> list[Path]:
    """The files a YAML file may name: its `extends:` entries, then its other strings."""
    try:
        doc = read_yaml(path)
    except (OSError, yaml.YAMLError):
        return []  # the stage itself says what is wrong with it
    if not isinstance(doc, dict):
        return []
    root = next((p.parent for p in path.resolve().parents if p.name == "configs"), None)
    extends = doc.get("extends")
    parents = [extends] if isinstance(extends, str) else extends
    named = [_parent_config(path, p, root) for p in parents or () if isinstance(p, str) and p]
    for text in _yaml_strings({k: v for k, v in doc.items() if k != "extends"}):
        named += [Path(text), *([root / text] if root else [])]
    return named


def _parent_config(path: Path, parent: str, root: Path | None) -> Path:
    """What `extends: parent` in `path` reads (training.config._parent_config's rule)."""
    beside = path.parent / parent
    if _is_file(beside) or Path(parent).suffix in (".yaml", ".yml") or len(Path(parent).parts) > 1:
        return beside
    bases = [Path("configs"), *([root / "configs"] if root else [])]
    found = (b / f / f"{parent}.yaml" for b in bases for f in CONFIG_FOLDERS)
    return next((p for p in found if _is_file(p)), beside)


def _yaml_strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, list):
            stack += value
