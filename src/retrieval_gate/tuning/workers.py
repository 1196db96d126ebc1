"""Several processes on one Optuna study (`tune --workers N`), and the loop each runs.

`optimize_until` runs trials until the STUDY holds `n_trials` finished ones (COMPLETE or
PRUNED), whoever ran them: `--trials N` bounds the study, not each worker. A worker starts a
trial only while finished + running trials are below N; when the rest are running elsewhere it
waits, checking heartbeats, so a trial whose worker died is failed, re-queued by the retry
callback and run by a live worker (storage.py); a journal has no heartbeats, and a trial whose
process on this machine is gone is failed and re-queued the same way (`fail_dead_here`). Two
workers that check at the same instant may both start the last trial: the study then ends with
at most N + workers - 1 trials.

`run_workers` starts N - 1 worker processes (spawned: no forked database connections) and is
the N-th itself; each samples with its own seed (seed + worker index), else identical TPE
samplers would propose the same parameters."""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from tqdm import tqdm

from ..fileio import process_alive

log = logging.getLogger(__name__)

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
RUNNING = optuna.trial.TrialState.RUNNING
PROCESS = "process"  # the user attribute naming a trial's process (`_signed`)


def counts(study: optuna.Study) -> tuple[int, int]:
    """(finished, running) trials of the study."""
    trials = study.get_trials(deepcopy=False, states=(*FINISHED, RUNNING))
    running = sum(t.state == RUNNING for t in trials)
    return len(trials) - running, running


def optimize_until(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], Any],
    n_trials: int,
    poll: float = 1.0,
) -> int:
    """Runs trials until the study has `n_trials` finished ones; returns how many ran here.
    The progress bar shows in the main process only (workers would draw over each other)."""
    from optuna.storages._heartbeat import is_heartbeat_enabled

    from .storage import failures_said

    progress = multiprocessing.parent_process() is None
    heartbeats = is_heartbeat_enabled(study._storage)
    ran = 0
    with failures_said(study):
        finished, _ = counts(study)
    bar = tqdm(total=n_trials, initial=min(finished, n_trials), unit="trial", disable=not progress)
    with bar, failures_said(study):
        while True:
            if heartbeats:  # trials of dead workers: FAIL, then re-queued by the callback
                with warnings.catch_warnings():  # "experimental" since Optuna 2.9
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    optuna.storages.fail_stale_trials(study)
            else:
                fail_dead_here(study)
            finished, running = counts(study)
            bar.update(min(finished, n_trials) - bar.n)
            if finished >= n_trials:
                return ran
            if finished + running >= n_trials:
                if not heartbeats:  # no way to tell a dead worker's trial: leave it
                    return ran
                time.sleep(poll)  # the rest run elsewhere; wait for them (or their heartbeat)
                continue
            _optimize_one(study, objective)
            ran += 1


def _optimize_one(study: optuna.Study, objective: Callable[[optuna.Trial], Any]) -> None:
    """One trial. A Ctrl-C that lands while Optuna records the trial (its storage commit)
    comes out of Optuna's `finally` as an UnboundLocalError (`updated_state`), read as a bug
    (exit 1): it goes on as the KeyboardInterrupt it was (the CLI's exit 130)."""
    try:
        study.optimize(lambda trial: _signed(trial, objective), n_trials=1, catch=())
    except Exception as e:
        interrupt = _interrupt_in(e)
        if interrupt is None:
            raise
        raise interrupt from None  # its own traceback says where the Ctrl-C landed


def _interrupt_in(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt along the chain of exceptions `error` was raised in, if any."""
    seen: set[int] = set()
    at = error.__cause__ or error.__context__
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return at
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def fail_dead_here(study: optuna.Study) -> None:
    """A storage without heartbeats (a journal): a RUNNING trial run by a process of this
    machine and PID namespace (`_signed`'s key) that is gone is failed and re-queued with its
    parameters, as an RDB's heartbeat callback does; it counted as running, so a rerun after a
    kill ended a trial short. Another machine's or container's trial cannot be told dead."""
    from .storage import MAX_RETRY

    with warnings.catch_warnings():  # "experimental" since Optuna 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
    here, me = _namespace(), os.getpid()  # no trial of this process runs now
    for trial in study.get_trials(deepcopy=False, states=(RUNNING,)):
        where, _, pid = str(trial.user_attrs.get(PROCESS, "")).rpartition("/")
        if where != here or not pid.isdigit() or (int(pid) != me and process_alive(int(pid))):
            continue
        try:
            study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:  # another rerun failed it first
            continue
        log.warning(
            f"trial {trial.number} of study {study.study_name!r} was left running "
            f"by process {pid}, which is gone: failed, its parameters run again"
        )
        failed = copy.deepcopy(study._storage.get_trial(trial._trial_id))
        failed.user_attrs = {k: v for k, v in failed.user_attrs.items() if k != PROCESS}
        retry(study, failed)  # its copy, RUNNING at once, must not look dead


def _namespace() -> str:
    """This boot of this machine and this PID namespace (a container has its own): where a
    process id names one process."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(path) if "/ns/" in path else Path(path).read_text().strip())
        except OSError:  # not Linux: the host name alone
            parts.append(socket.gethostname())
    return ":".join(parts)


def _signed(trial: optuna.Trial, objective: Callable[[optuna.Trial], Any]) -> Any:
    """Runs the trial with the worker that ran it recorded: host:pid for audits, and the
    process's key (`fail_dead_here`)."""
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
    trial.set_user_attr(PROCESS, f"{_namespace()}/{os.getpid()}")
    return objective(trial)


def _child(job: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    job(**kwargs)


def run_workers(job: Callable[..., Any], kwargs: dict[str, Any], workers: int) -> Any:
    """Runs `job(**kwargs)` in `workers` processes (this one included) on the study its
    kwargs name; returns this process's result once every worker has stopped. `job` must be
    importable by name (spawned processes import it) and take `seed` and `workers`."""
    from .storage import open_storage

    open_storage(kwargs["storage"])  # the tables, made once before the workers start
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_child, args=(job, {**kwargs, "seed": kwargs["seed"] + i, "workers": 1}),
                    name=f"tune-worker-{i}", daemon=False)
        for i in range(1, workers)
    ]  # fmt: skip
    for p in procs:
        p.start()
    log.info("tuning with %d workers: this process and pids %s", workers, [p.pid for p in procs])
    try:
        result = job(**{**kwargs, "workers": 1})
    finally:
        for p in procs:
            p.join()
    for p in procs:
        if p.exitcode:
            log.warning("worker %s (pid %s) ended with exit code %s; a trial it left was re-run "
                        "by heartbeat", p.name, p.pid, p.exitcode)  # fmt: skip
    return result
