"""An output file written as its lines are made, so a long run loses nothing when stopped.

Lines go to `<file>.partial`, beside `<file>.partial.json`, which records what they depend on
(the model's checksum, the input's, the options). When every line is written, the partial file
becomes `<file>` through the folder's ledger (`outputs.adopt_owned`: never over a file
retrieval-gate did not write). A run stopped part-way leaves both; the same command with
`--resume` keeps the complete lines and continues after them, and only when the recorded
identity is the present one: a partial file of another model, input or option is refused, as
is one left by a stopped run when `--resume` is not given, and so is a kept line that is not the
one this run writes for its record (edited, lost, repeated, extra: the resume ended in a wrong
file without a word). A `<file>.partial.json` or `.<file>.lock` that retrieval-gate did not
write is refused, never overwritten. One run writes an output at a time
(`fileio.take_writer_lock`, held until `finish` or `release`): a second one, with or without
`--resume`, is refused while the first is writing, instead of being told the first stopped."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from .errors import InputError
from .fileio import (
    disk_errors_named,
    lock_path,
    make_parent,
    regular_target,
    take_writer_lock,
    write_bytes,
    writer_busy,
)
from .outputs import adopt_owned
from .strict_rows import parse_json


class ResumableOutput:
    """`records`: what each line says of its record, in the input's order, read only to resume:
    the fields a kept line must hold, with these values (None: without that field)."""

    def __init__(
        self,
        path: str | Path,
        identity: dict[str, Any],
        resume: bool,
        flag: str,
        *,
        records: Callable[[], Iterable[dict[str, Any]]],
    ):
        self.path, self.flag, self._records = Path(path), flag, records
        beside = regular_target(path)  # a link's target: the rename at the end stays in its folder
        self.partial = beside.with_name(beside.name + ".partial")
        self.sidecar = beside.with_name(beside.name + ".partial.json")
        busy = writer_busy("run", flag, self.path)
        self._refuse_foreign(lock_path(beside), _is_lock, "the pid of the run")
        self._lock: int | None = take_writer_lock(beside, busy)  # before the partial file is read
        try:
            self._open(identity, resume)
        except BaseException:
            self.release()
            raise

    def _open(self, identity: dict[str, Any], resume: bool) -> None:
        """The partial file: refused (left by a stopped run, without --resume), continued, or
        started with the sidecar recording what its lines depend on."""
        if self.partial.exists() and not resume:
            lines = self.partial.read_bytes().count(b"\n")
            raise InputError(
                f"a run writing {self.flag} {self.path} stopped after {lines} "
                f"line{'s' * (lines != 1)} and left {'them' if lines != 1 else 'it'} here: pass "
                f"--resume to continue it, or remove {self.partial.name} and "
                f"{self.sidecar.name} to start over",
                self.partial,
            )
        self.done = self._resumed(identity) if self.partial.exists() else 0
        if not self.partial.exists():
            # a sidecar without its partial file is ours only when it reads as one we write
            self._refuse_foreign(self.sidecar, lambda p: _is_sidecar(p, identity),
                                 "what its lines depend on")  # fmt: skip
            make_parent(self.path)
            write_bytes(self.sidecar, (json.dumps(identity, sort_keys=True) + "\n").encode())
            self.partial.touch()

    def _resumed(self, identity: dict[str, Any]) -> int:
        """Complete lines already written, checked to come from this very run; a line cut short
        (the run stopped while writing it) is dropped, to be written again."""
        try:
            recorded = parse_json(self.sidecar.read_bytes())
        except (OSError, ValueError):
            recorded = None
        if not isinstance(recorded, dict):  # a list or a number was a traceback
            raise InputError(
                f"{self.sidecar.name} (what its lines depend on) is missing or damaged, so "
                f"they cannot be continued: remove {self.partial.name} and {self.sidecar.name} "
                "to start over",
                self.partial,
            )
        changed = sorted(k for k in {**recorded, **identity} if recorded.get(k) != identity.get(k))
        if changed:
            raise InputError(
                f"these lines were made with another {', '.join(changed)} than this run's: "
                f"remove {self.partial.name} and {self.sidecar.name} to start over",
                self.partial,
            )
        done, size = self._checked_lines()
        if size != self.partial.stat().st_size:  # only once every complete line checked out
            with open(self.partial, "r+b") as f:
                f.truncate(size)
        return done

    def _checked_lines(self) -> tuple[int, int]:
        """(complete lines, their bytes), each line checked to be the one written for its
        record: the resume skips that many records, so a line edited, lost or added would leave
        a wrong output that looks whole. Read as a stream, without scoring anything again."""
        records = iter(self._records())
        done = size = 0
        with open(self.partial, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # cut short by the stop: dropped, to be written again
                done += 1
                self._check_line(raw, next(records, None), done)
                size += len(raw)
        return done, size

    def _check_line(self, raw: bytes, says: dict[str, Any] | None, n: int) -> None:
        if says is None:
            self._refuse_line(n, "is past the input's last record")
        try:
            row = parse_json(raw)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            self._refuse_line(n, "is not a JSON object")
        wrong = [k for k, v in says.items() if row.get(k) != v]
        if wrong:
            absent = " or ".join(k for k, v in says.items() if v is None)
            named = ", ".join([*(f"{k} {v!r}" for k, v in says.items() if v is not None),
                               *([f"no {absent}"] if absent else [])])  # fmt: skip
            self._refuse_line(n, f"is not the one written for record {n} of the input ({named})")

    def _refuse_line(self, n: int, what: str) -> NoReturn:
        raise InputError(
            f"this line {what}, so the partial file was changed or is not this run's and "
            f"cannot be continued: remove {self.partial.name} and {self.sidecar.name} to start "
            "over",
            self.partial,
            n,
        )

    def _refuse_foreign(self, path: Path, ours: Callable[[Path], bool], kept: str) -> None:
        """A file at one of the names this output keeps beside it that retrieval-gate did not
        write (a user's own file): refused by name, where it was overwritten (and a sidecar
        then removed)."""
        if not (path.exists() or path.is_symlink()) or (
            path.is_file() and not path.is_symlink() and ours(path)
        ):
            return
        raise InputError(
            f"retrieval-gate keeps {kept} here while it writes {self.flag} {self.path}, and "
            f"this file is not one it wrote: move it away, or pass another {self.flag}",
            path,
        )

    def write(self, text: str) -> None:
        """Appends lines and puts them on disk before the next ones are made."""
        with disk_errors_named(self.path), open(self.partial, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def finish(self) -> Path:
        """Every line written: the partial file becomes the output."""
        adopt_owned(self.partial, self.path, self.flag)
        self.sidecar.unlink(missing_ok=True)
        self.release()
        return self.path

    def release(self) -> None:
        """Lets another run write the output (a stopped run's lines stay, to resume)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


SIDE_BYTES = 1 << 16  # more than a sidecar or a lock file of ours ever holds


def _head(path: Path) -> bytes | None:
    """The bytes of a small file, None for a larger or unreadable one."""
    try:
        with open(path, "rb") as f:
            data = f.read(SIDE_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= SIDE_BYTES else None


def _is_lock(path: Path) -> bool:
    """A lock file as `take_writer_lock` leaves it: a pid, or nothing."""
    data = _head(path)
    return data is not None and (not data.strip() or data.strip().isdigit())


def _is_sidecar(path: Path, identity: dict[str, Any]) -> bool:
    """A sidecar as `_open` writes it: one JSON object, keys sorted, on one line, of the keys of
    this run's identity (give or take an optional one)."""
    data = _head(path)
    try:
        row = parse_json(data) if data else None
    except ValueError:
        return False
    return (
        isinstance(row, dict)
        and bool(row.keys() & identity.keys())
        and (row.keys() <= identity.keys() or identity.keys() <= row.keys())
        and (json.dumps(row, sort_keys=True) + "\n").encode() == data
    )
