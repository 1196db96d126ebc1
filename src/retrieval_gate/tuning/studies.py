"""Optuna studies in one SQLite file: one study per gate x label file x objective x content
identity (checksums of the label file, the recorded answers and the gate's weights), resumed by
name (a stopped run loses no finished trial; rerunning adds only the missing trials)."""

from __future__ import annotations

from pathlib import Path

import optuna

from ..errors import LeakageError
from ..labels.evalset import EvalSet

DEFAULT_STORAGE = Path("reports/tune/studies.db")


def storage_url(path: str | Path) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def study_name(gate: str, label_file: str, objective: str, identity: str) -> str:
    """Readable names plus the content identity: a retrained model or a rewritten label file
    under the same names opens a new study instead of reusing the old trials."""
    return f"{gate}|{label_file}|{objective}|{identity}"


def open_study(name: str, storage: str | Path, sampler, directions: list[str]) -> optuna.Study:
    return optuna.create_study(
        study_name=name,
        storage=storage_url(storage),
        sampler=sampler,
        directions=directions,
        load_if_exists=True,
    )


def fail_interrupted(study: optuna.Study) -> int:
    """Marks trials left RUNNING by a stopped process as FAIL (one worker per study here, so a
    RUNNING trial at start-up cannot be alive); they are then re-run, not counted."""
    stale = [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    for t in stale:
        study.tell(t.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    return len(stale)


def remaining(study: optuna.Study, n_trials: int) -> int:
    """Trials still to run for a study to reach n_trials finished ones (resume)."""
    counted = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = [t for t in study.trials if t.state in counted]  # failed ones are re-run
    return max(n_trials - len(done), 0)


def require_no_test(evalset: EvalSet, what: str = "tuning") -> EvalSet:
    """Tuning sees train/dev questions only: a test question here is a bug, not a choice."""
    bad = [q.id for q in evalset.questions if q.split == "test"]
    if bad:
        raise LeakageError(f"{what} was given {len(bad)} test-split questions (e.g. {bad[0]}); "
                        "tuning must never read the test split")  # fmt: skip
    return evalset
