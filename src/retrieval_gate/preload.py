"""The demo's stages forked from a process that has imported torch, transformers and vLLM once.

Each torch-using verb spends about 6 s (on a 2-core Xeon) importing its libraries before any
work: transformers alone pulls in scikit-learn, torch._dynamo and torch.distributed. The demo
runs ten such verbs, so on Linux with a CPU-only torch it imports them once and forks every
stage from itself. A forked stage is still its own process: `cli.main(argv)` with the stage's
environment, its output through a pipe, its exit code, and the exit handlers a normal
interpreter exit runs (the work counters are written by one).

Fork is used only where it is safe: Linux (macOS frameworks are not fork-safe), a torch built
without CUDA (a CUDA context does not survive fork), and a parent with one thread. Elsewhere, or
with `RETRIEVAL_GATE_PRELOAD=0`, each stage is a fresh interpreter, as before."""

from __future__ import annotations

import atexit
import ctypes
import functools
import gc
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence

PRELOAD_ENV = "RETRIEVAL_GATE_PRELOAD"
# What most stages import; each module is imported once here instead of once per stage.
MODULES = (
    "torch",
    "transformers",
    "retrieval_gate.training.checkpoint",  # transformers' model classes, scikit-learn
    "retrieval_gate.gates.learned",
    "vllm",
)


def check_setting() -> None:
    """`$RETRIEVAL_GATE_PRELOAD` is 0 (fresh interpreters), 1 or unset; checked before the demo
    starts (`maybe` or `off` read as on)."""
    value = os.environ.get(PRELOAD_ENV, "").strip()
    if value not in ("", "0", "1"):
        from .errors import ConfigError

        raise ConfigError(f"${PRELOAD_ENV} is {value!r}: set 0 (a fresh interpreter per stage) "
                          "or 1 (forked stages, where safe), or unset it")  # fmt: skip


def available() -> bool:
    """True when stages can be forked from this process (importing MODULES on first call):
    the platform allows it and no thread runs now (an import's, or a previous stage's output
    pump still draining)."""
    return _preload() and threading.active_count() == 1


@functools.cache
def _preload() -> bool:
    if os.environ.get(PRELOAD_ENV, "1").strip() == "0" or not sys.platform.startswith("linux"):
        return False
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    if torch.version.cuda is not None or torch.version.hip is not None:
        return False
    from .generation.vllm_backend import known_warnings_hidden

    with known_warnings_hidden():  # vLLM's import says what each stage's would have
        for name in MODULES:
            if importlib.util.find_spec(name.split(".")[0]) is not None:
                importlib.import_module(name)
    return True


class ForkedStage:
    """`main(argv)` (the CLI's) in a forked child with `env` as its environment; the parts of
    `subprocess.Popen` the demo uses (stdout, poll, wait, send_signal, terminate, kill)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        main: Callable[[list[str]], int] | None = None,
    ) -> None:
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        # the imported heap frozen, as CPython's gc docs advise before a fork: the stage's
        # collections neither walk it nor write into its pages (copy-on-write)
        gc.freeze()
        parent, prctl = os.getpid(), _prctl()  # looked up before the fork, not in the child
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(list(argv), env, write, main, parent, prctl)  # never returns
        os.close(write)
        self.pid = pid
        self.args = ["retrieval-gate", *argv]
        self.stdout = os.fdopen(read, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# A stage in a fresh interpreter: `fresh_stage` asks to die with the demo, then runs the CLI.
_FRESH = "import sys; from retrieval_gate.preload import fresh_stage; sys.exit(fresh_stage())"


def fresh_command(argv: Sequence[str]) -> list[str]:
    """The command line of a stage run in a fresh interpreter (`RETRIEVAL_GATE_PRELOAD=0`, or
    a stage not forked): `cli.main(argv)` in a child that dies with this process, kill -9
    included, as a forked stage does. Started as `-m retrieval_gate.cli`, a stage went on as
    an orphan after the demo was killed (SIGTERM or SIGKILL), writing into its folder. The
    parent-death signal follows the thread that starts the child: start it from the demo's
    main thread."""
    return [sys.executable, "-c", _FRESH, str(os.getpid()), *argv]


def fresh_stage() -> int:
    """The fresh interpreter's side of `fresh_command` (argv: the demo's pid, then the verb's
    arguments): dies with the demo (`_die_with_parent`), then runs the verb."""
    from .errors import RetrievalGateError

    parent, *argv = sys.argv[1:]
    try:
        _die_with_parent(int(parent), _prctl())  # first: the demo may be killed any time
    except RetrievalGateError as e:
        print(f"retrieval-gate: error: {e}", file=sys.stderr)
        return e.exit_code
    from . import cli

    sys.argv = ["retrieval-gate", *argv]
    return cli.main(argv)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, on Linux; None elsewhere (no such call: macOS, the BSDs)."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent(parent: int, prctl: Callable[..., int] | None) -> None:
    """Makes the kernel SIGKILL this child when the demo (`parent`) dies, kill -9 included.
    Orphaned, a stage went on writing into the demo's folder for half a minute (until a write
    to its dead pipe failed) while holding the demo's `.demo.lock` open, so a rerun was refused
    in the name of a dead pid. SIGKILL, not SIGTERM: a stage's libraries may install their own
    SIGTERM handler, and the parent's stages write their files atomically."""
    if prctl is None:
        # Not Linux: no parent-death signal to ask for, and nothing to do: `available()` forks
        # stages only on Linux, elsewhere each stage is a fresh interpreter.
        return
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        from .errors import RetrievalGateError

        err = ctypes.get_errno()
        raise RetrievalGateError(
            f"prctl(PR_SET_PDEATHSIG) failed ({os.strerror(err)}): a forked stage could outlive "
            f"the demo; set {PRELOAD_ENV}=0 to run each stage in a fresh interpreter"
        )
    if os.getppid() != parent:
        os._exit(1)  # the parent died before prctl: no signal will come, so stop now


def _child(
    argv: list[str],
    env: dict[str, str],
    write: int,
    main: Callable[[list[str]], int] | None,
    parent: int,
    prctl: Callable[..., int] | None,
) -> None:
    """The forked stage: output to the pipe, the stage's environment, the verb, the exit
    handlers, then `os._exit`, so the parent's stack never resumes in this process. It dies
    with `parent` (`_die_with_parent`) and drops its copies of the parent's writer locks."""
    code = 1
    try:
        _die_with_parent(parent, prctl)
        from .fileio import close_inherited_locks

        close_inherited_locks()  # the stage takes its own locks; the parent's are not its own
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        # fresh file objects: the parent's could hold a lock taken by a thread fork dropped
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = ["retrieval-gate", *argv]
        from . import cli, work

        work.reset()  # the parent's counts are not this stage's
        code = (main or cli.main)(argv)
    except SystemExit as e:  # as an interpreter exits: None is 0, a message is 1
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported, and the child must never return
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what an interpreter exit runs: counters, engine shutdown
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
