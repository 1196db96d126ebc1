"""Several processes on one Optuna study (`tune --workers N`), and the loop each runs.

`optimize_until` runs trials until the STUDY holds `n_trials` finished ones (COMPLETE or
PRUNED), whoever ran them: `--trials N` bounds the study, not each worker. A worker starts a
trial only while finished + running trials are below N; when the rest are running elsewhere it
waits, checking heartbeats, so a trial whose worker died is failed, re-queued by the retry
callback and run by a live worker (storage.py); so is one that never got a heartbeat (its
worker lost the database as the trial began, `fail_beatless`); a journal has no heartbeats, and
a trial whose process on this machine is gone is failed and re-queued the same way
(`fail_dead_here`). Two
workers that check at the same instant may both start the last trial: the study then ends with
at most N + workers - 1 trials.

`run_workers` starts N - 1 worker processes (spawned: no forked database connections) and is
the N-th itself; each samples with its own seed (seed + worker index), else identical TPE
samplers would propose the same parameters. A Ctrl-C (or any error) in this process stops
the spawned workers too: SIGINT, then SIGTERM after a bounded wait."""

from __future__ import annotations

import copy
import datetime
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from tqdm import tqdm

from ..errors import RetrievalGateError
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
                fail_beatless(study)
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
    here, me = _namespace(), os.getpid()  # no trial of this process runs now
    for trial in study.get_trials(deepcopy=False, states=(RUNNING,)):
        where, _, pid = str(trial.user_attrs.get(PROCESS, "")).rpartition("/")
        if where != here or not pid.isdigit() or (int(pid) != me and process_alive(int(pid))):
            continue
        _fail_and_retry(study, trial, f"by process {pid}, which is gone")


def fail_beatless(study: optuna.Study) -> None:
    """An RDB storage: a RUNNING trial with no heartbeat row, started more than the grace
    period ago, is failed and re-queued. Its worker lost the database between creating it and
    its first heartbeat; Optuna's `fail_stale_trials` looks only at trials with a heartbeat,
    so it counted as running for ever and every later run of the study waited on it. A live
    trial writes its first heartbeat as it starts (clocks of the workers' machines agree to
    well within the grace period, as NTP keeps them)."""
    storage = getattr(study._storage, "_backend", study._storage)  # under Optuna's cache
    if not isinstance(storage, optuna.storages.RDBStorage) or not storage.heartbeat_interval:
        return
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    grace = storage.grace_period or 2 * storage.heartbeat_interval
    before = datetime.datetime.now() - datetime.timedelta(seconds=grace)  # Optuna's local time
    with _create_scoped_session(storage.scoped_session) as session:
        beatless = {
            number
            for (number,) in session.query(models.TrialModel.number)
            .outerjoin(models.TrialHeartbeatModel)
            .filter(models.TrialModel.study_id == study._study_id)
            .filter(models.TrialModel.state == RUNNING)
            .filter(models.TrialHeartbeatModel.trial_heartbeat_id.is_(None))
        }
    for trial in study.get_trials(deepcopy=False, states=(RUNNING,)):
        started = trial.datetime_start
        if trial.number in beatless and started is not None and started < before:
            _fail_and_retry(study, trial, "with no heartbeat ever (its worker lost the database)")


def _fail_and_retry(study: optuna.Study, trial: optuna.trial.FrozenTrial, why: str) -> None:
    """FAIL, then re-queued with its parameters by Optuna's retry callback (at most
    MAX_RETRY times), as the heartbeat's callback does for a stale trial."""
    from .storage import MAX_RETRY

    with warnings.catch_warnings():  # "experimental" since Optuna 2.8
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)
    try:
        study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
        return
    log.warning(f"trial {trial.number} of study {study.study_name!r} was left running {why}: "
                "failed, its parameters run again")  # fmt: skip
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
    """A spawned worker: its error is said in one line and its exit code kept (each worker
    printed a traceback of the storage failure that the main process then said cleanly)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    threading.excepthook = _thread_error  # Optuna's heartbeat thread, when the database goes
    name = f"retrieval-gate tune worker {os.getpid()}"
    try:
        job(**kwargs)
    except RetrievalGateError as e:
        print(f"{name}: error: {e}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the Ctrl-C and the driver's: one line
        print(f"{name}: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)


def _thread_error(args: threading.ExceptHookArgs) -> None:
    """A storage failure in a worker's thread (Optuna's heartbeat) in one line: the trial's own
    thread says it too; anything else keeps its traceback."""
    from .storage import _storage_cause

    cause = _storage_cause(args.exc_value) if args.exc_value is not None else None
    if cause is None:
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)
        return
    print(f"retrieval-gate tune worker {os.getpid()}: heartbeat not recorded ({cause})",
          file=sys.stderr, flush=True)  # fmt: skip


STOP_WAIT_S = 10  # a worker told to stop finishes its trial's bookkeeping within this


def run_workers(job: Callable[..., Any], kwargs: dict[str, Any], workers: int) -> Any:
    """Runs `job(**kwargs)` in `workers` processes (this one included) on the study its
    kwargs name; returns this process's result once every worker has stopped. `job` must be
    importable by name (spawned processes import it) and take `seed` and `workers`. When this
    process's own part fails or is interrupted (a SIGINT sent to it alone), the workers are
    stopped, not waited for (they would run their remaining trials first)."""
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
    except BaseException:
        _stop(procs)
        raise
    for p in procs:
        p.join()
    for p in procs:
        if p.exitcode:
            log.warning("worker %s (pid %s) ended with exit code %s; a trial it left was re-run "
                        "by heartbeat", p.name, p.pid, p.exitcode)  # fmt: skip
    return result


def _stop(procs: list[Any]) -> None:
    """Workers stopped as a Ctrl-C stops one (SIGINT: its trial is recorded as failed, the
    study resumable), SIGTERM for one that does not stop in time, SIGKILL at last. A worker
    the terminal's own Ctrl-C reached first is given a moment before the second SIGINT."""
    deadline = time.monotonic() + 1
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive() and p.pid is not None:
            os.kill(p.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_WAIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            log.warning("worker %s (pid %s) did not stop on SIGINT: terminated", p.name, p.pid)
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
