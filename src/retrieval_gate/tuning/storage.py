"""Where Optuna studies live (`tune --storage`), checked before any work starts.

- a file path or `sqlite:///...`: one SQLite file, for ONE process (Optuna's docs: SQLite
  locks the whole file and is not for parallel workers; `--workers` > 1 is refused);
- `postgresql://user:pass@host/db` (or `mysql://...`): Optuna's RDBStorage, for many workers
  on one or many machines;
- `journal:PATH`: Optuna's JournalStorage in a file on a shared file system.

RDB storages (SQLite included) record a heartbeat of every running trial: a trial whose
worker died (kill -9, a lost node) goes stale after the grace period, is marked FAIL and
re-queued once more by Optuna's RetryHeartbeatStaleTrialCallback. A running trial is never
assumed dead just because it is RUNNING: another worker may be running it. JournalStorage has
no heartbeats in Optuna 5.0: a killed worker's trial is found by its process alone, on the same
machine (`workers.fail_dead_here`); another machine's stays RUNNING (docs/scale.md)."""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import time
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import optuna

from ..errors import BackendError, ConfigError, InputError, RetrievalGateError, first_line
from ..strict_rows import loads

HEARTBEAT_S = 5  # a running trial's heartbeat period, seconds
GRACE_PERIODS = 4  # this many periods without a heartbeat: the trial's worker is gone
CREATE_TRIES = 8  # opening a new database that other processes are creating at the same time
MAX_RETRY = 2  # a trial cut off by a dead worker is re-run at most this often
JOURNAL = "journal:"

log = logging.getLogger(__name__)


def storage_url(spec: str | Path) -> str:
    """The storage URL of a `--storage` value: a plain path is a SQLite file (made absolute;
    its folder is made when the study opens), `journal:PATH` and URLs are kept. Nothing is
    created here: a refused run leaves no folder."""
    spec = str(spec)
    if "://" in spec:
        url = _checked_url(spec)
        if url.startswith("sqlite:///"):  # the URL form of a path: a folder is refused alike
            _not_a_folder(Path(url.removeprefix("sqlite:///").split("?")[0]))
        return url
    prefix = re.match(r"([A-Za-z][\w+.-]*):", spec)
    if prefix and prefix.group(0).lower() == JOURNAL and prefix.group(0) != JOURNAL:
        spec = JOURNAL + spec[len(JOURNAL) :]  # JOURNAL:x made a SQLite file named so
    elif prefix and prefix.group(0) != JOURNAL:  # a misspelt kind, not a file name
        raise InputError(f"--storage {shown(spec)!r}: {prefix.group(1)!r} is no storage kind; "
                         "pass a SQLite file path, journal:PATH or a database URL "
                         "(postgresql://user:pass@host/db); a file whose name holds ':' as "
                         f"./{spec}")  # fmt: skip
    if spec.startswith(JOURNAL):  # its path may not be empty or a folder (".": "Is a directory")
        journal = spec.removeprefix(JOURNAL)
        if not journal.strip() or Path(journal).is_dir():
            raise InputError(f"--storage {spec!r} names no journal file; pass journal:PATH, e.g. "
                             "journal:studies.journal")  # fmt: skip
        _a_file_or_none(Path(journal), "journal")
        return spec
    path = Path(spec)
    _not_a_folder(path)
    _a_file_or_none(path, "SQLite file")
    return f"sqlite:///{path.resolve()}"


def _a_file_or_none(path: Path, what: str) -> None:
    """A storage file is a regular file or none yet (a FIFO hung the journal's reader, a
    device failed its fsync after the gate was scored)."""
    if path.exists() and not path.is_file():
        raise InputError(f"--storage names a device, pipe or socket, not a {what}; name a file",
                         path)  # fmt: skip


def _made_folder(path: Path) -> None:
    """The storage file's folder, made where missing (a file in its way is said)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--storage: its folder cannot be made ({e.strerror}); name a file in "
                         "a folder that exists or can be made", path) from None  # fmt: skip


def _not_a_folder(path: Path) -> None:
    if path.is_dir():
        raise InputError("--storage is a folder; name a SQLite file in it (e.g. studies.db) or a "
                         "database URL", path)  # fmt: skip


def _checked_url(url: str) -> str:
    """A database URL that parses (a port that is no number, a '[' left open raised deep in
    SQLAlchemy as the study opened), before anything is contacted."""
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except (ValueError, sqlalchemy.exc.ArgumentError) as e:
        raise ConfigError(f"--storage {shown(url)} is not a database URL ({e}); e.g. "
                          "postgresql://user:pass@host:5432/db") from None  # fmt: skip
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        # the report said "studies in sqlite://": gone when tune exits, shared with no worker
        raise ConfigError(f"--storage {shown(url)} is a database in memory: the studies are "
                          "gone when tune exits and no other worker can join them; name a "
                          "file (studies.db) or a database server")  # fmt: skip
    return url


def is_sqlite(spec: str | Path) -> bool:
    return storage_url(spec).startswith("sqlite:")


def shown(spec: str | Path) -> str:
    """The storage for messages and reports, password hidden. SQLAlchemy reads the URL (a
    password may hold '/', '#' or '?', which urlsplit takes for the path); one it cannot read,
    or one with an unencoded '@' in its password (SQLAlchemy took the rest for the host), has
    whatever stands between the user's ':' and the last '@' hidden. A password in the query
    (`?password=...`, `passfile`, `sslpassword`) is hidden too."""
    url = str(spec)
    if "://" not in url:
        return url
    from sqlalchemy.engine import make_url

    if url.partition("://")[2].count("@") > 1:
        parsed = None
    else:
        try:
            parsed = make_url(url)
        except Exception:  # noqa: BLE001 (any parse failure: hide by pattern)
            parsed = None
    if parsed is not None and parsed.password:
        url = parsed.render_as_string(hide_password=True)
    else:
        url = re.sub(r"(://[^:/@]*:).*@", r"\1***@", url)
    return QUERY_SECRET.sub(r"\1***", url)


# libpq's query keys that hold a secret (or where it is kept)
QUERY_SECRET = re.compile(r"([?&](?:password|passfile|sslpassword)=)[^&#]*", re.IGNORECASE)


def _secrets(url: str) -> list[str]:
    """What `shown` hides, as a driver may repeat it: the password (and, past an unencoded '@',
    the part SQLAlchemy took for the host) and query secrets; longest first."""
    found = [m.group(0).partition("=")[2] for m in QUERY_SECRET.finditer(url)]
    hidden = re.search(r"://[^:/@]*:(.*)@", url)
    if hidden:
        parts = hidden.group(1).split("@")
        found += ["@".join(parts[i:]) for i in range(len(parts))]
    return sorted({f for f in found if f}, key=len, reverse=True)


def _said(error: Exception, url: str) -> str:
    """The driver's first line with the URL's secrets hidden (a host it could not resolve was
    the tail of a password holding '@')."""
    return _hidden(_first_line(error), url)


def _hidden(text: str, url: str) -> str:
    """`text` with the secrets of `url` (`_secrets`) written ***."""
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def _at_hint(url: str) -> str:
    """A password holding '@' must be percent-encoded: SQLAlchemy splits at its first '@'."""
    if url.partition("://")[2].count("@") > 1:
        return ("; a '@' in the user or password is written %40 (percent-encoded, as ':' is "
                "%3A and '/' is %2F)")  # fmt: skip
    return ""


def shown_arg(arg: str) -> str:
    """A command-line word as reports record it: a storage URL's password hidden (the report
    kept `--storage postgresql://user:secret@...` word for word), `--storage=URL` too."""
    flag, sep, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    return flag + sep + shown(value)


def heartbeat_s() -> int:
    """HEARTBEAT_S, or $RETRIEVAL_GATE_HEARTBEAT (seconds: shorter for tests and demos)."""
    raw = os.environ.get("RETRIEVAL_GATE_HEARTBEAT") or str(HEARTBEAT_S)
    try:
        seconds = int(raw)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ConfigError(f"$RETRIEVAL_GATE_HEARTBEAT={raw!r}: a whole number of seconds, 1 or "
                          f"more (default {HEARTBEAT_S}); or unset it")  # fmt: skip
    return seconds


def open_storage(spec: str | Path) -> optuna.storages.BaseStorage:
    """The Optuna storage of `spec` (see the module doc); a clear BackendError when it cannot
    be reached or used."""
    url = storage_url(spec)
    heartbeat = heartbeat_s()
    if url.startswith(JOURNAL):
        return _journal(Path(url.removeprefix(JOURNAL)))
    import sqlalchemy.exc

    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///").split("?")[0]).resolve()
        if "://" not in str(spec):  # a plain path's folder is made; a URL's must exist
            _made_folder(path)
        _check_sqlite(path, url)
    engine_kwargs: dict = {"pool_pre_ping": True}  # a dropped connection is re-opened
    if url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _created(url, engine_kwargs, heartbeat)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ConfigError(
            f"--storage {shown(url)}: unknown database kind; use a SQLite file path, "
            "postgresql://user:pass@host/db, mysql://... or journal:PATH"
        ) from None
    except ImportError as e:
        raise BackendError(
            f"no database driver for --storage {shown(url)} ({e}); install it: pip install "
            "'retrieval-gate[cluster]' (psycopg for PostgreSQL), or PyMySQL for MySQL"
        ) from None
    except sqlalchemy.exc.ArgumentError as e:
        raise ConfigError(f"--storage {shown(url)} is not a database URL ({e})") from None
    except sqlalchemy.exc.ProgrammingError as e:
        raise BackendError(
            f"the database at {shown(url)} refused Optuna's tables ({_said(e, url)}); give the "
            "user the right to create tables in its schema (PostgreSQL: GRANT CREATE ON SCHEMA "
            "public TO <user>) or point --storage at a database it owns"
        ) from None
    except sqlalchemy.exc.OperationalError as e:
        check = ("its folder exists and may be written" if url.startswith("sqlite:") else
                 "the server runs and the host, port, user, password and database name are "
                 "right")  # fmt: skip
        raise BackendError(
            f"cannot open the study database {shown(url)} ({_said(e, url)}); check that {check}"
            f"{_at_hint(url)}"
        ) from None
    except optuna.exceptions.StorageInternalError as e:  # Optuna's wrapper of a failed commit
        raise BackendError(
            f"cannot open the study database {shown(url)} ({_said_along(e, url)}); check that "
            f"the server runs and the user may read and write it{_at_hint(url)}"
        ) from None
    except sqlalchemy.exc.DatabaseError as e:  # e.g. a SQLite path holding another kind of file
        raise InputError(
            f"--storage {shown(url)} is not a usable study database ({_said(e, url)}); it is "
            "left as it is: pass a new file name"
        ) from None


def _created(url: str, engine_kwargs: dict, heartbeat: int) -> optuna.storages.RDBStorage:
    """The storage, its tables created by whichever process gets there first: a process that
    meets another one creating them tries again (each try skips the tables that exist by
    then; one retry was not enough for eight processes on a loaded machine)."""
    import sqlalchemy.exc

    for attempt in range(CREATE_TRIES - 1):
        try:
            return _rdb(url, engine_kwargs, heartbeat)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as e:
            if not _created_at_once(e):
                raise
            time.sleep(0.25 * (attempt + 1) + random.random() * 0.25)  # apart, not in step
    return _rdb(url, engine_kwargs, heartbeat)  # the last try: its error goes to the caller


def _created_at_once(e: Exception) -> bool:
    """Two processes (workers, or two `tune` commands on one --out) creating the tables of a
    new database at once: PostgreSQL says IntegrityError, SQLite "table ... already exists"."""
    import sqlalchemy.exc

    return isinstance(e, sqlalchemy.exc.IntegrityError) or "already exists" in str(e)


def _rdb(url: str, engine_kwargs: dict, heartbeat: int) -> optuna.storages.RDBStorage:
    return optuna.storages.RDBStorage(
        url,
        engine_kwargs=engine_kwargs,
        heartbeat_interval=heartbeat,
        grace_period=GRACE_PERIODS * heartbeat,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
            max_retry=MAX_RETRY
        ),
    )


def _journal(path: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    _check_journal(path)
    _made_folder(path)
    try:
        _cut_torn_tail(path)
        return JournalStorage(JournalFileBackend(str(path)))
    except OSError as e:
        raise InputError(f"cannot write the study journal ({e.strerror})", path) from None
    except ValueError as e:  # a record Optuna cannot decode: damaged inside, not at its end
        raise InputError(f"--storage journal: this Optuna journal is damaged ({first_line(e)}); "
                         "it is left as it is: pass a new file name (its studies start over)",
                         path) from None  # fmt: skip


def _cut_torn_tail(path: Path) -> None:
    """A record that a full disk or a kill cut short ends the journal without its newline:
    Optuna appended the next record to it and could read the journal no more. The torn bytes
    (never read as a record) are cut, holding Optuna's own append lock, so no worker is
    mid-write."""
    from optuna.storages.journal import JournalFileSymlinkLock

    if _whole(path):  # checked again under the lock: a worker may be writing its record
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        if _whole(path):
            return
        with open(path, "r+b") as f:
            data = f.read()
            kept = data.rfind(b"\n") + 1
            f.truncate(kept)
        log.warning("%s: cut a half-written last record (%d bytes, a full disk or a killed "
                    "worker) from the study journal", path, len(data) - kept)  # fmt: skip
    finally:
        lock.release()


def _check_journal(path: Path) -> None:
    """An existing journal starts with an Optuna operation record: another file is refused
    before Optuna would append to it (and then fail reading it back)."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        first = f.readline()
    try:
        record = loads(first)
    except ValueError:  # not JSON or UTF-8, nested too deep
        record = None
    if not (isinstance(record, dict) and "op_code" in record):
        raise InputError("--storage journal: this file is not an Optuna journal (its first line "
                         "is no operation record); it is left as it is: pass a new file name",
                         path)  # fmt: skip


def _whole(path: Path) -> bool:
    """No journal yet, an empty one, or one whose last record ends with its newline."""
    if not path.is_file() or path.stat().st_size == 0:
        return True
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


# Tables every Optuna RDB database holds (optuna/storages/_rdb/models.py).
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})


def _check_sqlite(path: Path, url: str) -> None:
    """An existing SQLite file that holds tables, none of them Optuna's, is another program's:
    refused before Optuna would add its own to it; its contents are only read."""
    import sqlite3

    if not path.is_file() or path.stat().st_size == 0:
        return  # a new (or empty) file: Optuna's to create
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            # its pages and indexes whole (a damaged page failed Optuna's commit, a traceback)
            damage = [why for (why,) in db.execute("PRAGMA quick_check").fetchall() if why != "ok"]
        if damage:
            raise sqlite3.DatabaseError(f"damaged: {damage[0]}")
    except sqlite3.OperationalError:  # busy: another process creating it, which Optuna retries
        return
    except sqlite3.DatabaseError as e:  # not SQLite at all
        raise InputError(f"--storage {shown(url)} is not a usable study database ({e}); it is "
                         "left as it is: pass a new file name") from None  # fmt: skip
    tables = sorted(name for (name,) in rows)
    if tables and not OPTUNA_TABLES & set(tables):  # some: another process is creating them
        listed = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise InputError(f"--storage {shown(url)} is a SQLite database of something else (tables "
                         f"{listed}), not Optuna's studies; it is left as it is: pass a new file "
                         "name") from None  # fmt: skip


def _said_along(error: BaseException, url: str) -> str:
    """What the database said along the chain of `error` (Optuna's StorageInternalError
    wraps it), secrets hidden."""
    return _hidden(_storage_cause(error) or first_line(error), url)


def _first_line(error: Exception) -> str:
    """SQLAlchemy's wrapper says what the driver said in `orig`."""
    return first_line(getattr(error, "orig", None) or error)


def check_storage(spec: str | Path, workers: int, reach: bool = True) -> None:
    """`--storage` and `--workers` together, before any gate is built: the worker count, SQLite
    with one process only, and (`reach`) the storage reachable and writable."""
    if workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    heartbeat_s()  # a bad $RETRIEVAL_GATE_HEARTBEAT is said before any study
    if workers > 1 and is_sqlite(spec):
        raise ConfigError(
            f"--workers {workers} with a SQLite --storage: SQLite serves one process (Optuna "
            "advises against it for parallel workers); pass a PostgreSQL/MySQL URL "
            "(postgresql://user:pass@host/db) or journal:PATH on a shared file system"
        )
    if reach:
        _check_writable(open_storage(spec), storage_url(spec))


PROBE = "retrieval-gate-write-check-"  # a probe study's name: made and deleted at once


def _check_writable(storage: optuna.storages.BaseStorage, url: str) -> None:
    """A database that can be read but not written (a read-only user, a hot standby) passed
    the check and failed once the gate was scored: a probe study is created and deleted. A
    journal's file is opened for appending already (`_journal`)."""
    import sqlalchemy.exc

    if not isinstance(storage, optuna.storages.RDBStorage):
        return
    try:
        study_id = storage.create_new_study(
            [optuna.study.StudyDirection.MINIMIZE], f"{PROBE}{os.getpid()}-{time.time_ns()}"
        )
        storage.delete_study(study_id)
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as e:
        raise BackendError(
            f"the study database {shown(url)} cannot be written ({_said_along(e, url)}); "
            "give the user the right to write its tables (INSERT, UPDATE, DELETE; not a "
            "read-only user or transaction) and point --storage at the primary server, not a "
            "read-only replica"
        ) from None


@contextmanager
def failures_said(where: optuna.Study | optuna.storages.BaseStorage) -> Iterator[None]:
    """A study whose storage fails mid-run (a full disk, a dropped server) says so, naming
    the storage and the cause: Optuna's StorageInternalError, or the "Should not reach"
    assertion that follows it, read as a bug. The finished trials are kept. `where` is the
    study, or its storage while the study is being opened."""
    try:
        yield
    except RetrievalGateError:
        raise
    except Exception as e:
        cause = _storage_cause(e)
        if cause is None:
            raise
        raise BackendError(
            f"the study storage {_named(where)} failed during tuning ({cause}); its finished "
            "trials are kept: fix that (free disk space, restart the database server, give "
            "the user the right to write) and run the same tune command again to continue"
        ) from e


DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # an objective's other OSErrors are its own


def _storage_cause(error: BaseException) -> str | None:
    """What the database or the disk said, found along the chain of `error`; None when no
    storage error is in it (then it is not the storage's)."""
    import sqlalchemy.exc

    seen: BaseException | None = error
    storage_said = None
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.DBAPIError):  # OperationalError, IntegrityError, ...
            return _first_line(seen)
        if isinstance(seen, OSError) and seen.errno in DISK_FULL:  # a journal file's disk
            return seen.strerror or first_line(seen)
        if isinstance(seen, optuna.exceptions.StorageInternalError):
            storage_said = first_line(seen)
        seen = seen.__cause__ or seen.__context__
    return storage_said


def _named(where: optuna.Study | optuna.storages.BaseStorage) -> str:
    """The study's storage for a message: its URL (password hidden) or journal file."""
    storage = getattr(where, "_storage", where)
    storage = getattr(storage, "_backend", storage)  # under Optuna's cache
    url = getattr(storage, "url", None)
    if url:
        return shown(url)
    path = getattr(storage, "_file_path", None)  # a journal's file backend
    return f"{JOURNAL}{path}" if path else type(storage).__name__
