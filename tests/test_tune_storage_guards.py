"""Tuning storages that fail in the ways a real cluster does (docs/scale.md): a trial left
RUNNING with no heartbeat, a SIGINT sent to the `--workers` driver alone, passwords in URL
forms SQLAlchemy misreads, a read-only PostgreSQL user, a database that goes away under
several workers. A real PostgreSQL server (tests/pg_server.py) where Postgres is claimed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

from pg_server import postgres_server
from retrieval_gate.cli import main
from retrieval_gate.errors import BackendError
from retrieval_gate.tuning.storage import check_storage, open_storage, shown, shown_arg
from retrieval_gate.tuning.studies import open_study
from retrieval_gate.tuning.workers import counts, optimize_until

optuna.logging.set_verbosity(optuna.logging.WARNING)
TESTS = Path(__file__).parent
# a `--workers 2` driver as the CLI runs it: its error in one line and its exit code
DRIVER = """import sys
sys.path.insert(0, {tests!r})
from tune_jobs import sleepy_study
from retrieval_gate.errors import RetrievalGateError
try:
    sleepy_study({name!r}, {storage!r}, 100000, workers=2, seconds={seconds})
except RetrievalGateError as e:
    print("driver: error:", e, file=sys.stderr)
    sys.exit(e.exit_code)
except KeyboardInterrupt:
    print("driver: interrupted", file=sys.stderr)
    sys.exit(130)
"""


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url


def _sql(url: str, *statements: str) -> None:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        for statement in statements:
            c.execute(sqlalchemy.text(statement))
    engine.dispose()


def _uniform(trial: optuna.Trial) -> float:
    return trial.suggest_float("x", 0, 1)


@pytest.mark.slow  # a database
def test_a_running_trial_that_never_had_a_heartbeat_is_failed_and_rerun(pg_url):
    """A worker that lost the database just after creating its trial left it RUNNING with no
    heartbeat row; `fail_stale_trials` skips such trials, so the rerun waited for ever."""
    study = open_study("beatless", pg_url, lambda s: optuna.samplers.RandomSampler(seed=s), 0,
                       ["maximize"])  # fmt: skip
    optimize_until(study, _uniform, 2)
    orphan, fresh = study.ask(), study.ask()  # ask() writes no heartbeat, as a cut-off worker
    orphan.suggest_float("x", 0, 1)
    _sql(pg_url, "UPDATE trials SET datetime_start = datetime_start - interval '1 hour' "
         f"WHERE trial_id = {orphan._trial_id}")  # fmt: skip
    ran: list[int] = []
    runner = threading.Thread(target=lambda: ran.append(optimize_until(study, _uniform, 4, 0.1)),
                              daemon=True)  # fmt: skip
    runner.start()
    deadline = time.monotonic() + 20
    while counts(study) != (3, 1) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts(study) == (3, 1), "optimize_until waited for a trial nobody runs"
    # a trial started within the grace period may be starting (no beat yet): left alone
    assert study.trials[fresh.number].state.name == "RUNNING"
    study.tell(fresh, 0.5)
    runner.join(10)
    assert ran == [1]
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"], states
    retried = study.trials[4]
    assert retried.system_attrs["failed_trial"] == orphan.number
    assert retried.params == study.trials[orphan.number].params


def _wait_for_both_workers(storage: str, name: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(KeyError):  # not created yet
            trials = optuna.load_study(study_name=name, storage=open_storage(storage)).trials
            if len({t.user_attrs.get("pid") for t in trials} - {None}) == 2:
                return
        time.sleep(0.2)
    raise AssertionError(f"the two workers never both ran a trial (rc {proc.poll()})")


def _driver(storage: str, name: str, seconds: float) -> subprocess.Popen:
    code = DRIVER.format(tests=str(TESTS), name=name, storage=storage, seconds=seconds)
    env = {**os.environ, "RETRIEVAL_GATE_HEARTBEAT": "1"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _ended(proc: subprocess.Popen, within: float) -> tuple[int | None, str]:
    """Its exit code and stderr; None when it had to be killed (with its workers)."""
    try:
        _, err = proc.communicate(timeout=within)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its session: the driver and its workers
        _, err = proc.communicate()
        return None, err


@pytest.mark.slow  # a subprocess spawning a worker
def test_sigint_to_the_driver_alone_stops_its_workers(tmp_path):
    """`kill -INT <driver>` (a scheduler, `timeout -s INT`): the driver waited in join while
    its worker ran all its remaining trials. Now it exits 130 promptly, the worker stopped."""
    storage = f"journal:{tmp_path / 'j.log'}"
    proc = _driver(storage, "sigint", 0.2)
    _wait_for_both_workers(storage, "sigint", proc)
    os.kill(proc.pid, signal.SIGINT)  # the driver only, not its process group
    started = time.monotonic()
    rc, err = _ended(proc, 30)
    assert rc == 130, err
    assert time.monotonic() - started < 20
    # the worker's own line, not multiprocessing's traceback (Optuna logs each failed trial)
    assert "worker" in err and "interrupted" in err and "_bootstrap" not in err
    study = optuna.load_study(study_name="sigint", storage=open_storage(storage))
    finished = counts(study)[0]
    assert optimize_until(study, _uniform, finished + 1) == 1  # resumable


def test_passwords_are_hidden_in_every_url_form():
    for url, seen in [
        ("postgresql://postgres@h:5/db?password=secret", "postgresql://postgres@h:5/db?password=***"),
        ("postgresql://u@h/db?sslmode=require&PassWord=secret&x=1",
         "postgresql://u@h/db?sslmode=require&PassWord=***&x=1"),
        ("postgresql://u@h/db?passfile=/s/secret&sslpassword=secret",
         "postgresql://u@h/db?passfile=***&sslpassword=***"),
        ("postgresql://at:p@ssw0rd@127.0.0.1:5432/postgres", "postgresql://at:***@127.0.0.1:5432/postgres"),
        ("postgresql://at:p@ss@w0rd@h/db?password=secret", "postgresql://at:***@h/db?password=***"),
    ]:  # fmt: skip
        assert shown(url) == seen
        assert shown_arg(f"--storage={url}") == f"--storage={seen}"
    assert shown("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"


def test_a_password_holding_an_at_sign_is_hidden_in_the_connection_error(capsys):
    url = "postgresql://at:p@ssw0rd@127.0.0.1:1/postgres"
    with pytest.raises(BackendError, match="written %40") as e:
        open_storage(url)
    said = str(e.value)
    assert "ssw0rd" not in said and "postgresql://at:***@127.0.0.1:1/postgres" in said
    base = ["tune", "--gate", "always", "--labels", "missing.jsonl", "--objective", "pareto"]
    assert main([*base, "--storage", "postgresql://u@127.0.0.1:1/db?password=secret"]) == 3
    err = capsys.readouterr().err
    assert "secret" not in err and "?password=***" in err


@pytest.mark.slow  # a database
def test_a_read_only_postgres_user_is_refused_before_any_work(pg_url, tmp_path, capsys):
    open_storage(pg_url)  # Optuna's tables, by their owner
    _sql(pg_url, "CREATE ROLE ro LOGIN",
         "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ro",
         "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ro",
         "ALTER ROLE ro SET default_transaction_read_only = on")  # fmt: skip
    ro = pg_url.replace("postgres@", "ro@")
    with pytest.raises(BackendError, match="cannot be written .*read-only transaction"):
        check_storage(ro, 1)
    with pytest.raises(BackendError, match="read-only transaction"):  # past the check too
        open_study("ro", ro, optuna.samplers.RandomSampler, 0, ["maximize"])
    out = tmp_path / "o"
    base = ["tune", "--gate", "always", "--labels", "missing.jsonl", "--out", str(out)]
    assert main([*base, "--objective", "pareto", "--storage", ro]) == 3
    assert "cannot be written" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow  # a database that is stopped, and a subprocess spawning a worker
def test_a_database_outage_under_two_workers_is_said_without_tracebacks():
    with contextlib.ExitStack() as server:
        url = server.enter_context(postgres_server())
        proc = _driver(url, "outage", 0.3)
        try:
            _wait_for_both_workers(url, "outage", proc)
        finally:
            server.close()  # the server stops (immediate), mid-trial
        rc, err = _ended(proc, 60)
    assert rc == 3, err
    assert "Traceback" not in err, err
    assert "driver: error: the study storage postgresql://postgres@" in err
