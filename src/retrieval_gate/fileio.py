"""Small file helpers every stage shares: files and folders written whole and atomically (a
temporary file or folder beside the target renamed over it: a crash never leaves half a file or
half a folder, a reader never sees one), with the modes the user's umask implies (like a plain
`open()`/`mkdir`, not the 0600/0700 of `mkstemp`/`mkdtemp`), JSON read with errors naming the
line, file checksums, the rules for output names and paths (plain names; an output is never
an input), and the one-writer lock of a file being written.

JSONL data rows are read by `data.jsonl_files.read_jsonl`, which reports bad lines per row."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import DataError, InputError, RetrievalGateError, os_error
from .strict_rows import parse_json
from .text_bytes import not_utf8


def write_text(path: str | Path, text: str) -> Path:
    """Writes `text` to `path` atomically; a missing or read-only folder is an InputError."""
    return write_bytes(path, text.encode("utf-8"))


def umask() -> int:
    """The process's umask, read from /proc where Linux has it (setting and restoring it, the
    fallback, is not thread-safe)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """What `open(path, "w")` would give a new file: 0644 under umask 022."""
    return 0o666 & ~umask()


def folder_mode() -> int:
    """What `mkdir` would give a new folder: 0755 under umask 022."""
    return 0o777 & ~umask()


def umask_modes(folder: Path) -> Path:
    """`folder` and everything in it given the modes the umask implies, as `cp` would: a
    folder made by mkdtemp (0700), or files a library wrote 0600, are then readable by the
    others sharing a cache or a model folder."""
    for path in [folder, *Path(folder).rglob("*")]:
        if not path.is_symlink():
            path.chmod(folder_mode() if path.is_dir() else file_mode())
    return folder


def make_parent(path: Path) -> None:
    """Creates the folder `path` goes into, or says in one line why it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # "File exists" alone did not say which: name the file in the way
        file = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        why = f"{file} is a file, not a folder" if file is not None else e.strerror
        raise InputError(f"cannot create its folder ({why}); choose another output", path) from None


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes `data` to `path` atomically; a missing or read-only folder is an InputError."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def nearest_existing(path: Path) -> Path:
    """`path`, or the nearest folder above it that exists: where a file would be in the way of
    making `path` a folder."""
    return next(p for p in (path, *path.parents) if p.exists())


def _unwritable(e: OSError, path: str | Path) -> InputError:
    """What every writer here says when the OS refuses a file in an output's folder."""
    return InputError(f"cannot write in its folder ({e.strerror}); choose another output", path)


def check_writable(path: str | Path) -> None:
    """Refuses (an InputError naming `path`) an output whose folder, or the nearest existing
    folder above a missing one, cannot be written: before the work that would fill it, and
    leaving nothing behind (the probe is an unnamed temporary file, closed at once)."""
    folder = nearest_existing(Path(path).parent)
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise _unwritable(e, path) from None


def not_a_file(path: Path) -> str | None:
    """What is at `path` where a file is expected and something else is there: "a folder",
    "a device, pipe or socket" (reading /dev/zero or a FIFO never ends) or "a link to
    nothing"; None for a regular file, or for nothing at all."""
    if path.is_file() or not (path.exists() or path.is_symlink()):
        return None
    if not path.exists():
        return "a link to nothing"
    return "a folder" if path.is_dir() else "a device, pipe or socket"


def regular_target(path: str | Path) -> Path:
    """The file a write to `path` lands in: a symbolic link's target (the link stays), never a
    device, pipe or socket, which a rename would replace with a file (an InputError)."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if path.is_symlink() and not target.exists():  # writing would make folders where it points
        raise InputError(f"is a symbolic link to {target}, which does not exist: pass a file "
                         "path", path)  # fmt: skip
    if target.exists() and not target.is_file() and not target.is_dir():
        raise InputError("is not a regular file (a device, pipe or socket), and a file is "
                         "written whole here: pass a file path", path)  # fmt: skip
    return target


FULL_BYTES = 1 << 20  # free space under this where a write just failed: the disk filled up


def disk_full(path: Path) -> bool:
    """Whether the file system holding `path` (or its nearest existing folder) is full."""
    try:
        stats = os.statvfs(nearest_existing(path))
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL_BYTES


@contextlib.contextmanager
def disk_errors_named(path: str | Path) -> Iterator[None]:
    """A block writing `path` that fails on a full disk (a quota, a read-only file system)
    says so, naming `path`: Python's writes raise an OSError without the file's name, and
    torch.save and the tokenizers a RuntimeError or a bare Exception there (read as a bug)."""
    try:
        yield
    except RetrievalGateError:
        raise
    except Exception as e:
        if isinstance(e, OSError):
            said = os_error(e, path)
        else:
            said = os_error(OSError(errno.ENOSPC, "full"), path) if disk_full(Path(path)) else None
        if said is None:
            raise
        raise said from e


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file name beside `path` for a writer that wants a path (torch.save,
    onnx.save); renamed over `path` with the umask's mode when the block ends without error,
    removed when it fails. A missing or read-only folder is an InputError."""
    path = regular_target(path)
    make_parent(path)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _unwritable(e, path) from None
    tmp = Path(name)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes it 0600: others could not read the result
        os.close(fd)
        with disk_errors_named(path):  # before the partial file goes, freeing its space
            yield tmp
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the temp file is ours; the target is untouched
        raise


STAGING = ".staging-"  # name part of a temporary folder beside its target: `.NAME.staging-PID-*`


@contextlib.contextmanager
def staged_folder(target: str | Path) -> Iterator[Path]:
    """A new empty folder beside `target` to write a whole folder into; when the block ends
    without error it replaces `target` in one rename (an older `target` is swapped out and
    removed), so a reader finds the old folder or the new one, never half of one. On error, or
    a kill, `target` is untouched; the next call removes folders that killed runs left."""
    target = Path(target)
    make_parent(target)
    refuse_link(target)
    if target.exists() and not target.is_dir():
        raise InputError("is a file, not a folder; choose another output", target)
    _remove_abandoned(target)
    try:
        stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=_stage_prefix(target)))
    except OSError as e:
        raise _unwritable(e, target) from None
    try:
        stage.chmod(folder_mode())  # mkdtemp makes it 0700
        with disk_errors_named(target):
            yield stage
            replace_folder(stage, target)
    except BaseException:
        remove_entry(stage, ignore_errors=True)
        raise


def refuse_link(target: str | Path, output: str = "the output") -> None:
    """Refuses (an InputError naming `target` and the fix) a whole folder's target that is a
    symbolic link: `staged_folder` replaces what is at the path, so the link itself would
    become a folder (the one it points to left holding the old content), never what was meant.
    `output`: what the user passes to name it (a flag)."""
    target = Path(target)
    if not target.is_symlink():
        return
    to = os.readlink(target)
    if not target.exists():
        raise InputError(f"is a symbolic link to {to}, which does not exist; a folder written "
                         f"here would replace the link: remove it, or pass another {output}",
                         target)  # fmt: skip
    raise InputError(f"is a symbolic link to {to}; a folder written here would replace the "
                     f"link, not the folder it points to: write to that folder "
                     f"({os.path.realpath(target)}) instead, or remove the link, or pass "
                     f"another {output}", target)  # fmt: skip


def remove_entry(path: Path, ignore_errors: bool = False) -> None:
    """Removes what is at `path`: a symbolic link (or a file) itself, never what it points
    to (rmtree refuses a link), or a real folder with everything in it."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=ignore_errors)
    except OSError:
        if not ignore_errors:
            raise


def _stage_prefix(target: Path) -> str:
    return f".{target.name}{STAGING}{os.getpid()}-"


def _remove_abandoned(target: Path) -> None:
    """Staging folders of `target` whose process is gone (a killed export): ours, and never
    renamed into place, so nothing in them was ever a result. A symbolic link of that name
    (an old target a swap left there) goes as the link, never what it points to."""
    pattern = re.compile(re.escape(f".{target.name}{STAGING}") + r"(\d+)-")
    for entry in target.parent.iterdir():
        match = pattern.match(entry.name)
        if match and (entry.is_symlink() or entry.is_dir()):
            if not process_alive(int(match.group(1))):
                remove_entry(entry, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists in this PID namespace (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_folder(new: Path, target: Path) -> None:
    """Puts the folder `new` at `target`: a rename, or an atomic swap with an existing
    `target` (Linux renameat2 RENAME_EXCHANGE) whose old content is then removed. Where the
    swap is unsupported, the old folder is renamed aside first (a kill between the two renames
    leaves no `target`, never a mixed one). A symbolic link at `target` is replaced as the
    link: what it points to is never removed."""
    if not os.path.lexists(target):  # a link to nothing counts: a rename onto it fails
        os.rename(new, target)
        return
    if _exchange(new, target):
        remove_entry(new)  # `new` now holds what was at `target`: the old folder, or a link
        return
    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=_stage_prefix(target)))
    os.rename(target, aside / "old")
    os.rename(new, target)
    shutil.rmtree(aside)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two paths; False where the C library or file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def write_json(path: str | Path, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def plain_name(name: str, what: str) -> str:
    """A run or export name: one folder name, never a path (`../x`, `a/b`) or a hidden name."""
    name = str(name)
    if not name or name in (".", "..") or name.startswith(".") or any(s in name for s in "/\\"):
        raise InputError(
            f"{what} {name!r} must be a plain folder name (no '/', '\\', '..' or leading '.')"
        )
    return name


def not_an_input(output: str | Path, inputs: list[str | Path], flag: str = "--output") -> None:
    """Refuses an output path that is one of the inputs (it would be overwritten)."""
    out = Path(output).resolve()
    for src in inputs:
        if Path(src).resolve() == out:
            raise InputError(f"{flag} {output} is also an input; write to another file")


def read_json(path: Path, missing: str = "missing file") -> Any:
    """The parsed file; a missing file raises DataError(`missing`), a corrupt one names the
    line and column."""
    if not Path(path).is_file():
        raise DataError(missing, path)
    data = Path(path).read_bytes()
    try:
        return parse_json(data.decode("utf-8-sig"))  # a Windows editor's byte-order mark
    except UnicodeDecodeError as e:
        raise DataError(not_utf8(data, e.start, path), path) from None
    except json.JSONDecodeError as e:  # too deep or an integer too long among them
        raise DataError(f"malformed JSON ({e.msg}, column {e.colno})", path, e.lineno) from None


def write_arrays(path: str | Path, **arrays: Any) -> Path:
    """Named numpy arrays as one `.npz`, atomically; zip's CRC-32 per array lets
    `read_arrays` tell a damaged file from data."""
    return write_bytes(path, arrays_bytes(**arrays))


def arrays_bytes(**arrays: Any) -> bytes:
    """The `.npz` bytes `write_arrays` writes (for a writer that checks ownership first)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def read_arrays(path: str | Path) -> dict[str, Any] | None:
    """The arrays `write_arrays` wrote, every one read and CRC-checked; None when the file is
    missing, truncated, garbled or not an `.npz` (a cache computes it again, never reads a
    damaged file as numbers)."""
    import zipfile

    import numpy as np

    if not Path(path).is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError):
        return None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_id(*parts: str | None) -> str:
    """A short hash of what a cached result depends on (file, weight and model checksums)."""
    return hashlib.sha256("|".join(p or "-" for p in parts).encode()).hexdigest()[:16]


def writer_busy(who: str, flag: str, path: str | Path) -> str:
    """What a second writer of an output is told; `take_writer_lock` fills in `{pid}`."""
    return (
        f"another {who} (pid {{pid}}) is writing {flag} {path} now: wait for it to finish, "
        f"or pass another {flag}"
    )


@contextlib.contextmanager
def one_writer(target: Path, busy: str, shown: Path | None = None) -> Iterator[None]:
    """Holds `target`'s writer lock (`take_writer_lock`) for the block, or refuses at once."""
    fd = take_writer_lock(target, busy, shown)
    try:
        yield
    finally:
        _held_locks.pop(fd, None)
        os.close(fd)  # closing releases the flock


def lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.lock")


# The lock descriptors this process took: fd -> (st_dev, st_ino) of its lock file. A forked
# child closes its copies (`close_inherited_locks`): the flock belongs to the open file, so a
# child still running after its parent died would otherwise hold the parent's lock.
_held_locks: dict[int, tuple[int, int]] = {}


def take_writer_lock(target: Path, busy: str, shown: Path | None = None) -> int:
    """The one-writer lock of `target`: an advisory `flock` on the hidden `.<name>.lock` beside
    it, taken at once or refused (an InputError: `busy`, with the holder's pid for `{pid}`,
    naming `shown`, else `target`: a lock named for a folder's own output, as the demo's
    `<out>/demo`, is no path a user could look for).
    Returns its descriptor: closing it releases the lock, as the end of the process does, however
    it ends (kill -9 included), so a stale lock never blocks a resume. The lock file stays:
    removing it would let two runs lock two different files of the same name."""
    path = lock_path(target)
    make_parent(target)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise _unwritable(e, target) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        where = target if shown is None else shown
        raise InputError(busy.replace("{pid}", holder), where) from None  # a path may hold braces
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    st = os.fstat(fd)
    _held_locks[fd] = (st.st_dev, st.st_ino)
    return fd


def close_inherited_locks() -> None:
    """In a forked child: closes its copies of the parent's lock descriptors. The parent's
    flock stays held (its own descriptor still refers to the lock), but no longer also for as
    long as the child runs. A descriptor closed elsewhere without `one_writer` (and maybe
    reused) is closed only if it still refers to the same lock file."""
    for fd, file_id in list(_held_locks.items()):
        del _held_locks[fd]
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # closed since
        if (st.st_dev, st.st_ino) == file_id:
            os.close(fd)
