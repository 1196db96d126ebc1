"""Which files a command may replace: the ones retrieval-gate wrote, unchanged since.

A report, table, figure or score file goes through `write_owned`, which records its checksum in
the ledger of its folder (`.retrieval-gate-files.json`). An existing file is replaced only when
the ledger holds its present checksum, so a file of the user's, or one of ours they edited, is
never overwritten: it is an InputError naming the file. `refuse_foreign` and
`refuse_foreign_in` make the same check for a verb's outputs when it starts, before any work.
(Caches, label files, runs and exports have rules of their own: keys, resume, manifests.)"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import InputError
from .fileio import make_parent, regular_target, sha256_file, write_bytes
from .strict_rows import parse_json

LEDGER = ".retrieval-gate-files.json"


def refuse_foreign(paths: Iterable[str | Path], flag: str) -> None:
    """An InputError naming the first of `paths` that exists and that retrieval-gate did not
    write, or that changed since it did."""
    for path in paths:
        target = regular_target(path)
        if target.exists() and not _owned(target):
            raise InputError(
                f"already exists, and retrieval-gate did not write it (or it was changed since), "
                f"so it will not replace it: move it away, or pass another {flag}",
                path,
            )


def refuse_foreign_in(folder: str | Path, patterns: Iterable[str], flag: str) -> None:
    """`refuse_foreign` for the files in `folder` whose names match `patterns`: the shapes of
    the names a verb writes there, checked before it knows each one."""
    if Path(folder).is_dir():
        found = {p for pattern in patterns for p in Path(folder).glob(pattern)}
        refuse_foreign(sorted(p for p in found if not p.is_dir()), flag)


def write_owned(path: str | Path, data: str | bytes, flag: str = "--out") -> Path:
    """Writes `data` to `path` atomically unless a file retrieval-gate did not write is there,
    and records it in the folder's ledger."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    make_parent(Path(path))
    target = regular_target(path)
    with _locked(target.parent):  # two writers in one folder: neither loses the other's record
        refuse_foreign([path], flag)
        write_bytes(path, raw)
        _record(target, hashlib.sha256(raw).hexdigest())
    return Path(path)


def refuse_unrecorded(path: str | Path, flag: str = "--out") -> None:
    """A cache file of ours is one whose name the folder's ledger records, whatever it holds
    now (a damaged one is computed and written again); any other file by its name is the
    user's, refused before the work that would replace it."""
    target = regular_target(path)
    if target.exists() and target.name not in _ledger(target.parent):
        raise InputError(f"already exists, and retrieval-gate did not write it, so it will not "
                         f"replace it: move it away, or pass another {flag}", path)  # fmt: skip


def write_cache(path: str | Path, data: bytes, flag: str = "--out") -> Path:
    """`write_owned` for a cache file (`refuse_unrecorded`'s rule)."""
    make_parent(Path(path))
    target = regular_target(path)
    with _locked(target.parent):
        refuse_unrecorded(path, flag)
        write_bytes(path, data)
        _record(target, hashlib.sha256(data).hexdigest())
    return Path(path)


def adopt_owned(source: Path, path: str | Path, flag: str = "--out") -> Path:
    """Moves a finished file of ours (`source`, in the same folder) to `path`, under the same
    rule as `write_owned`, without reading it into memory: a long output written as it went."""
    target = regular_target(path)
    with _locked(target.parent):
        refuse_foreign([path], flag)
        os.replace(source, target)
        _record(target, sha256_file(target))
    return Path(path)


def vouch_for(path: str | Path) -> None:
    """Records a file already there as retrieval-gate's, as it is now, when the ledger has no
    entry for it: one it wrote before its folder kept a ledger, which the caller recognised by
    its contents (an entry of other contents stays: the file was edited since)."""
    target = regular_target(path)
    with _locked(target.parent):
        if target.name not in _ledger(target.parent):
            _record(target, sha256_file(target))


def record_owned(path: str | Path) -> None:
    """Records a file retrieval-gate has just written by other means (a label file, rewritten
    whole) as it is now: a later run replaces it only while it stays so."""
    target = regular_target(path)
    with _locked(target.parent):
        _record(target, sha256_file(target))


def _record(target: Path, digest: str) -> None:
    """The ledger of `target`'s folder with its checksum (entries of removed files dropped)."""
    files = _ledger(target.parent) | {target.name: digest}
    kept = {name: d for name, d in files.items() if (target.parent / name).exists()}
    raw = (json.dumps(kept, indent=1, sort_keys=True) + "\n").encode()
    write_bytes(target.parent / LEDGER, raw)


def recorded_digest(path: Path) -> str | None:
    """The sha256 the folder's ledger records for the file retrieval-gate wrote at `path`
    (None: none recorded)."""
    return _ledger(Path(path).parent).get(Path(path).name)


def _owned(target: Path) -> bool:
    recorded = _ledger(target.parent).get(target.name)
    return recorded is not None and target.is_file() and recorded == sha256_file(target)


def _ledger(folder: Path) -> dict[str, str]:
    """name -> sha256 of what was written; a missing or damaged ledger vouches for nothing."""
    try:
        data = parse_json((folder / LEDGER).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
