"""A forked demo stage (`preload.ForkedStage`) dies with the demo and never holds its lock.

After `kill -9` of the demo, its forked stage ran on as an orphan for ~30 s, writing into the
demo's folder and holding the inherited `.demo.lock` open, so a rerun was refused in the name
of the dead demo's pid."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from processes import gone
from retrieval_gate.errors import InputError
from retrieval_gate.fileio import take_writer_lock

# The demo, in small: holds the demo's lock, forks a stage that would run for a minute, says
# the stage's pid once the stage runs, then waits for it.
DEMO = """
import os, sys, time
from pathlib import Path
from retrieval_gate import preload
from retrieval_gate.fileio import take_writer_lock

lock = take_writer_lock(Path(sys.argv[1]) / "demo", "busy (pid {pid})")

def stage(argv):
    print("ready", flush=True)
    time.sleep(60)
    return 0

stage = preload.ForkedStage(["x"], dict(os.environ), main=stage)
assert stage.stdout.readline() == b"ready\\n"
if sys.argv[2] == "release":  # the demo lets go of its lock while the stage runs
    os.close(lock)
    try:
        os.close(take_writer_lock(Path(sys.argv[1]) / "demo", "held by the stage (pid {pid})"))
    finally:
        stage.kill()
    print("free", flush=True)
else:
    print(stage.pid, flush=True)
    stage.wait()
"""


@pytest.mark.slow  # subprocesses
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="stages are forked on Linux")
def test_a_forked_stage_dies_with_a_killed_demo_and_frees_its_lock(tmp_path):
    demo = subprocess.Popen([sys.executable, "-c", DEMO, str(tmp_path), "kill"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    child = None
    try:
        child = int(demo.stdout.readline())
        demo.send_signal(signal.SIGKILL)
        demo.wait(timeout=10)
        end = time.monotonic() + 5
        while not gone(child) and time.monotonic() < end:
            time.sleep(0.05)
        assert gone(child), "the stage outlived the demo"
        os.close(take_writer_lock(tmp_path / "demo", "still held (pid {pid})"))  # a rerun
    finally:
        if child is not None and not gone(child):
            os.kill(child, signal.SIGKILL)
        demo.kill()
        demo.wait()


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="stages are forked on Linux")
def test_a_forked_stage_does_not_hold_the_demos_lock(tmp_path):
    """The child closes its copy of the demo's lock descriptor: once the demo's own is closed,
    the lock is free though the stage still runs."""
    run = subprocess.run([sys.executable, "-c", DEMO, str(tmp_path), "release"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0 and run.stdout.split() == ["free"], run.stderr


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_stage_whose_parent_died_before_prctl_exits_at_once():
    """The parent-death signal is asked for after the fork: a parent that died in between
    sends none, so the child checks its parent pid itself."""
    code = """
import os
from retrieval_gate import preload
pid = os.fork()
if pid == 0:
    try:
        preload._die_with_parent(os.getppid() + 1, preload._prctl())  # not its parent
    finally:
        os._exit(0)  # returned, or raised
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "1", run.stderr


def test_a_lock_refusal_can_name_the_folder_rather_than_the_lock_target(tmp_path):
    """The demo locks `<out>/demo`, no real path: `shown` names what the user passed."""
    fd = take_writer_lock(tmp_path / "demo", "busy")
    try:
        with pytest.raises(InputError) as refused:
            take_writer_lock(tmp_path / "demo", "another demo (pid {pid})", shown=tmp_path)
        assert str(refused.value) == f"{tmp_path}: another demo (pid {os.getpid()})"
        with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path / 'demo'))}: busy$"):
            take_writer_lock(tmp_path / "demo", "busy")  # without it, the target as before
    finally:
        os.close(fd)


def test_the_parent_death_signal_is_linux_only(monkeypatch):
    from retrieval_gate import preload

    preload._prctl.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert preload._prctl() is None
        preload._die_with_parent(os.getppid() + 1, None)  # a no-op: it returns
    finally:
        preload._prctl.cache_clear()
