"""Optuna studies: one study per gate x label file x objective x content identity (the questions
and labels studied, the recorded answers, the gate's weights and options), resumed by name (a
stopped run loses no finished trial; rerunning adds only the missing trials). Where they live (a SQLite
file by default, a PostgreSQL/MySQL URL or a journal file for several workers): storage.py."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import optuna

from ..errors import LeakageError
from ..labels.evalset import EvalSet
from .storage import failures_said, open_storage

STUDIES_FILE = "studies.db"  # the SQLite storage in the report folder, unless --storage names one


def study_name(gate: str, label_file: str, objective: str, identity: str) -> str:
    """Readable names plus the content identity: a retrained model or a rewritten label file
    under the same names opens a new study instead of reusing the old trials."""
    return f"{gate}|{label_file}|{objective}|{identity}"


def tpe(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed)


def open_study(
    name: str,
    storage: str | Path,
    sampler: Callable[[int], optuna.samplers.BaseSampler],
    seed: int,
    directions: list[str],
) -> optuna.Study:
    """The study, created or resumed, sampling with `sampler(seed)` when new, and with a seed
    of its own when it holds trials already: a resumed study, or a second `tune` on the same
    storage, replayed the first run's parameters (trials 5-9 were trials 0-4 again)."""
    opened = open_storage(storage)
    with failures_said(opened):  # a read-only database failed here after the gate was scored
        study = optuna.create_study(
            study_name=name,
            storage=opened,
            sampler=sampler(seed),
            directions=directions,
            load_if_exists=True,
        )
        held = len(study.get_trials(deepcopy=False))
    if held:  # not reproducible by nature (whoever ran what): new points, not the old ones
        mixed = hashlib.sha256(f"{seed}|{held}|{os.getpid()}|{time.time_ns()}".encode())
        study.sampler = sampler(int.from_bytes(mixed.digest()[:4], "big"))
    return study


def require_no_test(evalset: EvalSet, what: str = "tuning") -> EvalSet:
    """Tuning sees train/dev questions only: a test question here is a bug, not a choice."""
    bad = [q.id for q in evalset.questions if q.split == "test"]
    if bad:
        raise LeakageError(f"{what} was given {len(bad)} test-split questions (e.g. {bad[0]}); "
                        "tuning must never read the test split")  # fmt: skip
    return evalset
