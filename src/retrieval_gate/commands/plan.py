"""Checks every verb runs on its flags before it starts anything (issue 36: a plan before
engines): counts and their bounds, output folders and files, input files and folders. Each
raises an `InputError` (exit 2) that names the flag and the fix."""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConfigError, InputError
from ..fileio import nearest_existing, regular_target
from ..outputs import refuse_foreign, refuse_foreign_in


class Distinct(argparse.Action):
    """A list flag whose values are named once each: `--gates tfidf tfidf` is refused (exit 2)
    instead of running a gate twice into one report."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            parser.error(f"{option_string}: {', '.join(twice)} given more than once; name each "
                         "once")  # fmt: skip
        setattr(namespace, self.dest, values)


def check_counts(args: argparse.Namespace, least: Mapping[str, int]) -> None:
    """`least`: flag -> its smallest value; a flag left unset (None) is not checked."""
    for flag, low in least.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None and value < low:
            raise InputError(f"{flag} must be at least {low}, got {value}")


def check_at_most(flag: str, value: int, most: int, offered: str) -> None:
    """An upper bound on a resource count: `offered` says what the machine has."""
    if value > most:
        raise ConfigError(f"{flag} {value}: {offered}; pass at most {most}")


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity, not the machine's total)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def gpu_count() -> int:
    """The CUDA devices visible here (0 without torch or a GPU); imports torch, so callers ask
    only when a count above 1 needs checking."""
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count()


def check_output_dir(path: Path, flag: str, writes: Sequence[str] = ()) -> None:
    """`path` is a folder, or can become one: no file where the folder (or one above it) goes,
    and no file of the user's where the verb writes (`writes`: the shapes of those names)."""
    there = nearest_existing(path)
    if not there.is_dir():
        where = "" if there == path else f" ({there} is a file)"
        raise InputError(f"{flag} must be a folder, and a file is in the way{where}: pass a "
                         "folder", path)  # fmt: skip
    refuse_foreign_in(path, writes, flag)


def check_output_file(path: Path, flag: str, replaces_only_its_own: bool = True) -> None:
    """`path` can be written as a file: not a folder, not a device or pipe, no file where its
    folder goes, and (`replaces_only_its_own`) not a file retrieval-gate did not write."""
    if path.is_dir():
        raise InputError(f"{flag} names a folder; pass a file name in it", path)
    regular_target(path)
    there = nearest_existing(path.parent)
    if not there.is_dir():
        raise InputError(f"{flag}: {there} is a file, so nothing can be written under it; "
                         "pass a path in a folder", path)  # fmt: skip
    if replaces_only_its_own:
        refuse_foreign([path], flag)


def check_input_dir(path: Path | None, flag: str, fix: str) -> None:
    """A folder the user named exists (`fix`: what to pass instead)."""
    if path is not None and not Path(path).is_dir():
        what = "a file, not a folder" if Path(path).exists() else "no such folder"
        raise InputError(f"{flag}: {what}; {fix}", path)


def check_run_dir(path: Path | None) -> None:
    """A labelling run named with --run-dir exists and holds recorded answers: a folder
    without them read as none, and every gate and objective needing them was skipped."""
    from ..labels.labelling_run import CLOSED_BOOK, RAG_GAIN, holds_answers

    fix = (f"pass the folder `retrieval-gate label` wrote (<labels-dir>/<generator>, with "
           f"{CLOSED_BOOK} or {RAG_GAIN}), or drop --run-dir")  # fmt: skip
    check_input_dir(path, "--run-dir", fix)
    if path is None:
        return
    if not any([holds_answers(Path(path) / f) for f in (CLOSED_BOOK, RAG_GAIN)]):  # both checked
        raise InputError(f"--run-dir: holds neither {CLOSED_BOOK} nor {RAG_GAIN}, the "
                         f"recorded answers it is read for{_a_gate(Path(path))}; {fix}",
                         path)  # fmt: skip


# `--run checkpoints/my-gate` (read as --run-dir, its prefix) named the gate, not its labels
_GATE_FLAGS = {"run": "a training run: a trained gate goes in --learned-run",
               "export": "an export: an exported gate goes in --onnx"}  # fmt: skip


def _a_gate(folder: Path) -> str:
    """Where the folder holds a gate instead of recorded answers, the flag the gate goes in."""
    from ..artifacts import KINDS

    kind = next((k for k, name in KINDS.items() if (folder / name).is_file()), None)
    return f" (it is {_GATE_FLAGS[kind]})" if kind else ""


def check_input_file(path: Path | str | None, flag: str, fix: str) -> None:
    """A file the user named exists and is a file (`fix`: what to pass instead)."""
    if path is not None and not Path(path).is_file():
        what = "a folder, not a file" if Path(path).is_dir() else "no such file"
        raise InputError(f"{flag}: {what}; {fix}", path)
