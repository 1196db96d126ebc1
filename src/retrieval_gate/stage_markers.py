"""The demo's done markers, keyed by what a stage's result depends on.

`<stage>.done.json` holds the stage's command, seconds, work counters and `inputs`: a sha256
over the package's code and the data folder (`shared_key`, once per demo run), the command,
every file it names and every file a YAML config it names points at, and the markers of the
stages whose results it reads (`demo.upstream`). A stage is reused only while its `inputs`
match: after an edited config or label file, new code or new data it runs again, and so does
every stage that reads it (its marker changed), and so does a stage whose outputs are not as
it left them (`damaged_output`). A marker that cannot be read, or whose fields are not of the
types written, is no marker: the stage runs (`demo` notes it)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from .fileio import sha256_file
from .outputs import recorded_digest
from .strict_rows import parse_json
from .yaml_files import read_yaml

MARKER = "{}.done.json"


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
    whole = (
        isinstance(argv, list)
        and all(isinstance(a, str) for a in argv)
        and _number(info.get("seconds"))
        and isinstance(info.get("inputs", ""), str)  # no `inputs`: an older demo's marker
        and isinstance(work, dict)
        and all(isinstance(k, str) and _number(v) for k, v in work.items())
    )
    return info if whole else None


def _number(value: Any) -> bool:
    """A finite number of seconds or of work (a bool is an int to Python, not to a marker)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value >= 0


def damaged_output(paths: Sequence[Path]) -> str | None:
    """Why the files a finished stage made (`demo.Stage.outputs`) are not as it left them, or
    None when they are: one missing or not a file (a folder removed or replaced), or one the
    folder's ledger records with other contents (edited since: `outputs`). A stage is reused
    only while they are: a report built on the files would describe what is not there."""
    for path in paths:
        if not path.is_file():
            return f"its output {path} is missing"
        recorded = recorded_digest(path)
        if recorded is not None and recorded != sha256_file(path):
            return f"its output {path} was changed since it wrote it"
    return None


def shared_key(data_dir: Path | None) -> str:
    """What every stage reads: this package's code and the data folder's files."""
    h = hashlib.sha256()
    package = Path(__file__).parent
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    for path in sorted(data_dir.rglob("*")) if data_dir else ():
        if path.is_file():
            h.update(f"{path.relative_to(data_dir).as_posix()}\0{sha256_file(path)}".encode())
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
    """The files an argument names, and those its YAML files name (a config's label file).
    Folders are earlier stages' outputs: their markers stand for them."""
    files = []
    for arg in argv:
        path = Path(arg)
        if not path.is_file():
            continue
        files.append(path)
        if path.suffix in (".yaml", ".yml"):
            files += [Path(s) for s in _yaml_strings(path) if Path(s).is_file()]
    return files


def _yaml_strings(path: Path) -> Iterator[str]:
    try:
        stack = [read_yaml(path)]
    except (OSError, yaml.YAMLError):
        return  # the stage itself says what is wrong with it
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, list):
            stack += value
