"""Tuning with many workers (docs/scale.md): stale trials found by heartbeat, never by
"RUNNING"; `--trials` bounds the study; a real PostgreSQL server with 2 worker processes and a
kill -9 of one; storage errors before any work."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import time

import optuna
import pytest

from pg_server import postgres_server
from retrieval_gate.cli import main
from retrieval_gate.errors import BackendError, ConfigError, InputError
from retrieval_gate.tuning.storage import check_storage, open_storage, shown
from retrieval_gate.tuning.studies import open_study
from retrieval_gate.tuning.workers import counts, optimize_until
from tune_jobs import sleepy_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def fast_heartbeat(monkeypatch):
    monkeypatch.setenv("RETRIEVAL_GATE_HEARTBEAT", "1")  # stale after 4 s without a beat


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


@pytest.mark.slow  # waits out the grace period (4 s)
def test_a_dead_workers_trial_is_found_by_heartbeat_and_rerun(tmp_path, fast_heartbeat):
    db = tmp_path / "s.db"
    study = open_study("cut", db, lambda s: optuna.samplers.RandomSampler(seed=s), 0, ["maximize"])
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    cut = study.ask()  # a trial whose process died: one heartbeat, then silence
    cut.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(cut._trial_id)
    reopened = open_study(
        "cut", db, lambda s: optuna.samplers.RandomSampler(seed=s), 0, ["maximize"]
    )
    # still beating: a RUNNING trial is another worker's live trial, not stale
    optuna.storages.fail_stale_trials(reopened)
    assert counts(reopened) == (2, 1)
    started = time.perf_counter()
    assert optimize_until(reopened, lambda t: t.suggest_float("x", 0, 1), 4, poll=0.2) == 2
    states = [t.state.name for t in reopened.trials]
    assert (
        states.count("COMPLETE") == 4 and states == ["COMPLETE"] * 2 + ["FAIL"] + ["COMPLETE"] * 2
    )
    retried = [t for t in reopened.trials if t.system_attrs.get("failed_trial") == cut.number]
    assert len(retried) == 1 and retried[0].params == reopened.trials[cut.number].params
    assert time.perf_counter() - started >= 3  # it waited for the grace period, not less


@pytest.mark.slow  # a subprocess
def test_a_journal_trial_left_running_by_a_dead_process_is_failed_and_rerun(tmp_path):
    """A journal has no heartbeats: a `tune` killed mid-trial left it RUNNING, counted as
    running, so the rerun stopped a trial short of --trials. A trial of a process of this
    machine that is gone is failed and its parameters run again; a live process's is left."""
    from retrieval_gate.tuning.workers import PROCESS, _namespace

    study = optuna.create_study(storage=open_storage(f"journal:{tmp_path / 'j.log'}"),
                                sampler=optuna.samplers.RandomSampler(seed=0))  # fmt: skip
    objective = lambda t: t.suggest_float("x", 0, 1)  # noqa: E731
    optimize_until(study, objective, 2)
    assert study.trials[0].user_attrs[PROCESS] == f"{_namespace()}/{os.getpid()}"
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        for pid in (dead.pid, live.pid):
            cut = study.ask()
            cut.suggest_float("x", 0, 1)
            cut.set_user_attr(PROCESS, f"{_namespace()}/{pid}")
        assert counts(study) == (2, 2)
        assert optimize_until(study, objective, 5) == 2  # the dead one's retry and one more
    finally:
        live.kill()
        live.wait()
    states = [t.state.name for t in study.trials]
    assert states[:4] == ["COMPLETE", "COMPLETE", "FAIL", "RUNNING"], states
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == 2]
    assert len(retried) == 1 and retried[0].params == study.trials[2].params
    assert retried[0].state.name == "COMPLETE" and counts(study) == (4, 1)


def test_trials_bound_the_study_not_each_run(tmp_path):
    db = tmp_path / "s.db"
    first = sleepy_study("bound", str(db), 3, seconds=0.0)
    again = sleepy_study("bound", str(db), 5, seconds=0.0)
    assert (first, again) == (3, 2)
    assert counts(optuna.load_study(study_name="bound", storage=f"sqlite:///{db}")) == (5, 0)


def test_storage_flags_are_checked_before_work(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="--workers must be at least 1"):
        check_storage(tmp_path / "s.db", 0)
    for bad in ("abc", "-5", "0", "2.5"):  # were tracebacks once the first study opened
        monkeypatch.setenv("RETRIEVAL_GATE_HEARTBEAT", bad)
        with pytest.raises(ConfigError, match=f"RETRIEVAL_GATE_HEARTBEAT='{bad}': a whole"):
            check_storage(tmp_path / "s.db", 1, reach=False)
    monkeypatch.delenv("RETRIEVAL_GATE_HEARTBEAT")
    with pytest.raises(ConfigError, match="SQLite serves one process"):
        check_storage(tmp_path / "s.db", 2)
    with pytest.raises(
        BackendError, match="cannot open the study database postgresql://u:\\*\\*\\*@"
    ):
        open_storage("postgresql://u:secret@127.0.0.1:1/db")
    with pytest.raises(ConfigError, match="unknown database kind"):
        open_storage("nosuchdb://x/y")
    for bad in ("postgresql://u:secret@h:abc/db", "postgresql://u:secret@[::1/db"):
        with pytest.raises(ConfigError, match=r"--storage postgresql://u:\*\*\*@.* is not a "
                           "database URL"):  # fmt: skip
            open_storage(bad)  # was SQLAlchemy's ValueError: a traceback
    journal = open_storage(f"journal:{tmp_path / 'j' / 'study.log'}")
    assert isinstance(journal, optuna.storages.JournalStorage)
    assert shown("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"


def test_tune_cli_refuses_bad_storage_before_any_gate(tmp_path, capsys):
    labels = tmp_path / "missing.jsonl"  # never read: the flags fail first
    base = ["tune", "--gate", "always", "--labels", str(labels), "--out", str(tmp_path / "o")]
    assert main([*base, "--workers", "0"]) == 2
    assert main([*base, "--workers", "2", "--storage", str(tmp_path / "s.db")]) == 2
    assert main([*base, "--storage", "postgresql://u:pw@127.0.0.1:1/db"]) == 3
    err = capsys.readouterr().err
    assert "--workers must be at least 1" in err and "SQLite serves one process" in err
    assert "cannot open the study database postgresql://u:***@127.0.0.1:1/db" in err
    assert "pw@" not in err


@pytest.mark.slow
def test_postgres_user_without_create_right_gets_a_clear_error(pg_url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:  # PostgreSQL 15: only the owner may create in schema public
        c.execute(sqlalchemy.text("CREATE ROLE reader LOGIN"))
    engine.dispose()
    with pytest.raises(BackendError, match="refused Optuna's tables.*GRANT CREATE ON SCHEMA"):
        open_storage(pg_url.replace("postgres@", "reader@"))


@pytest.mark.slow
def test_two_workers_on_postgres_survive_a_kill_9(pg_url, fast_heartbeat):
    """2 processes on one study (this one + a spawned worker); the worker is killed with
    SIGKILL in the middle of a trial; its trial goes stale, is failed and re-run, and the study
    still ends with exactly its 8 finished trials."""
    killed: list[int] = []

    def kill_the_worker_mid_trial() -> None:
        study = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            children = multiprocessing.active_children()
            try:
                study = study or optuna.load_study(study_name="kill9", storage=pg_url)
            except KeyError:  # not created yet
                time.sleep(0.1)
                continue
            pid = children[0].pid if children else None
            mine = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("pid") == pid]
            running = [t for t in mine if t.state.name == "RUNNING"]
            if running and len(mine) >= 2:  # it finished one trial and is inside the next
                os.kill(children[0].pid, signal.SIGKILL)
                killed.append(running[0].number)
            time.sleep(0.05)

    open_storage(pg_url)  # Optuna's tables, before the watching thread reads them
    killer = threading.Thread(target=kill_the_worker_mid_trial)
    killer.start()
    # 0.8 s trials: this process alone takes ~6 s for the 8, the time the spawned worker has
    # to start (imports; 1-2.6 s here under load) and be caught in its second trial
    ran_here = sleepy_study("kill9", pg_url, 8, workers=2, seconds=0.8)
    killer.join()
    assert killed, "the worker was never caught in a trial"
    trials = optuna.load_study(study_name="kill9", storage=pg_url).trials
    states = [t.state.name for t in trials]
    assert states.count("COMPLETE") == 8 and states.count("RUNNING") == 0
    assert [t.number for t in trials if t.state.name == "FAIL"] == killed
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed[0]]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE"
    pids = {t.user_attrs["pid"] for t in trials if t.state.name == "COMPLETE"}
    assert len(pids) == 2 and ran_here < 8  # both processes ran trials


def _open_when_all_are_ready(path, barrier, results) -> None:
    barrier.wait()
    try:
        open_storage(path)
        results.put("ok")
    except Exception as e:  # noqa: BLE001  (the test reports what each process met)
        results.put(f"{type(e).__name__}: {e}")


def test_commands_creating_one_sqlite_study_file_at_once_all_open_it(tmp_path):
    """Two `tune` commands on one --out created its studies.db at once: SQLite's "table
    study_directions already exists" failed the second (exit 3, 'check that the server
    runs'). Eight processes open a new file together; every one gets the storage."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_open_when_all_are_ready, args=(tmp_path / "s.db", barrier,
                                                                   results)) for _ in range(8)]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(results.get(timeout=5) for _ in procs) == ["ok"] * 8
