"""Optuna studies: one study per gate x label file x objective x content identity (checksums of
the label file, the recorded answers and the gate's weights), resumed by name (a stopped run
loses no finished trial; rerunning adds only the missing trials). Where they live (a SQLite
file by default, a PostgreSQL/MySQL URL or a journal file for several workers): storage.py."""

from __future__ import annotations

from pathlib import Path

import optuna

from ..errors import LeakageError
from ..labels.evalset import EvalSet
from .storage import open_storage

STUDIES_FILE = "studies.db"  # the SQLite storage in the report folder, unless --storage names one


def study_name(gate: str, label_file: str, objective: str, identity: str) -> str:
    """Readable names plus the content identity: a retrained model or a rewritten label file
    under the same names opens a new study instead of reusing the old trials."""
    return f"{gate}|{label_file}|{objective}|{identity}"


def open_study(name: str, storage: str | Path, sampler, directions: list[str]) -> optuna.Study:
    return optuna.create_study(
        study_name=name,
        storage=open_storage(storage),
        sampler=sampler,
        directions=directions,
        load_if_exists=True,
    )


def require_no_test(evalset: EvalSet, what: str = "tuning") -> EvalSet:
    """Tuning sees train/dev questions only: a test question here is a bug, not a choice."""
    bad = [q.id for q in evalset.questions if q.split == "test"]
    if bad:
        raise LeakageError(f"{what} was given {len(bad)} test-split questions (e.g. {bad[0]}); "
                        "tuning must never read the test split")  # fmt: skip
    return evalset
