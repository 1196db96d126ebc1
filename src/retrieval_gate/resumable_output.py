"""An output file written as its lines are made, so a long run loses nothing when stopped.

Lines go to `<file>.partial`, beside `<file>.partial.json`, which records what they depend on
(the model's checksum, the input's, the options). When every line is written, the partial file
becomes `<file>` through the folder's ledger (`outputs.adopt_owned`: never over a file
retrieval-gate did not write). A run stopped part-way leaves both; the same command with
`--resume` keeps the complete lines and continues after them, and only when the recorded
identity is the present one: a partial file of another model, input or option is refused, as
is one left by a stopped run when `--resume` is not given. One run writes an output at a time
(`fileio.take_writer_lock`, held until `finish` or `release`): a second one, with or without
`--resume`, is refused while the first is writing, instead of being told the first stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import InputError
from .fileio import (
    disk_errors_named,
    make_parent,
    regular_target,
    take_writer_lock,
    write_bytes,
    writer_busy,
)
from .outputs import adopt_owned
from .strict_rows import parse_json


class ResumableOutput:
    def __init__(self, path: str | Path, identity: dict[str, Any], resume: bool, flag: str):
        self.path, self.flag = Path(path), flag
        beside = regular_target(path)  # a link's target: the rename at the end stays in its folder
        self.partial = beside.with_name(beside.name + ".partial")
        self.sidecar = beside.with_name(beside.name + ".partial.json")
        busy = writer_busy("run", flag, self.path)
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
            make_parent(self.path)
            write_bytes(self.sidecar, (json.dumps(identity, sort_keys=True) + "\n").encode())
            self.partial.touch()

    def _resumed(self, identity: dict[str, Any]) -> int:
        """Complete lines already written, checked to come from this very run; a line cut short
        (the run stopped while writing it) is dropped, to be written again."""
        try:
            recorded = parse_json(self.sidecar.read_bytes())
        except (OSError, ValueError):
            raise InputError(
                f"{self.sidecar.name} (what its lines depend on) is missing or damaged, so "
                f"they cannot be continued: remove {self.partial.name} to start over",
                self.partial,
            ) from None
        changed = sorted(k for k in {**recorded, **identity} if recorded.get(k) != identity.get(k))
        if changed:
            raise InputError(
                f"these lines were made with another {', '.join(changed)} than this run's: "
                f"remove {self.partial.name} and {self.sidecar.name} to start over",
                self.partial,
            )
        data = self.partial.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with open(self.partial, "r+b") as f:
                f.truncate(len(complete))
        return complete.count(b"\n")

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
