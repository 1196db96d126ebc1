"""A demo stage run in a fresh interpreter (`RETRIEVAL_GATE_PRELOAD=0`, or a stage not forked)
dies with the demo. Started as `python -m retrieval_gate.cli`, it ran on as an orphan after
`kill` (SIGTERM) or `kill -9` of the demo, burning CPU and writing into the demo's folder; a
forked stage already died with it (tests/test_preload.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pg_server import free_port
from processes import gone

# The demo, in small: one stage run as the demo runs it. The stage is a real verb that runs
# until stopped and needs no model: a gate-only server of the `always` gate.
DEMO = """
import sys
from retrieval_gate import demo
demo.run_stage(sys.argv[1:], "serve", 600, None, fork=True)
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError, OSError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


@pytest.mark.slow  # subprocesses: the stage starts a server (about 5 s)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_a_fresh_interpreter_stage_dies_with_a_killed_demo(sig):
    pytest.importorskip("uvicorn")
    env = {**os.environ, "RETRIEVAL_GATE_PRELOAD": "0"}
    argv = ["serve", "--mode", "gate", "--gate", "always", "--port", str(free_port())]
    demo = subprocess.Popen([sys.executable, "-c", DEMO, *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    watchdog = threading.Timer(180, demo.kill)  # a stage that never starts fails, not hangs
    watchdog.start()
    stages: list[int] = []
    try:
        seen = []
        for line in demo.stdout:  # the stage's output, passed through by the demo
            seen.append(line)
            if "Uvicorn running" in line:
                break
        assert "Uvicorn running" in "".join(seen), "".join(seen)
        stages = _children(demo.pid)
        assert len(stages) == 1, stages
        demo.send_signal(sig)
        demo.wait(timeout=10)
        end = time.monotonic() + 5
        while not gone(stages[0]) and time.monotonic() < end:
            time.sleep(0.05)
        assert gone(stages[0]), f"the stage outlived the demo killed with {sig.name}"
    finally:
        watchdog.cancel()
        for pid in stages:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        demo.kill()
        demo.wait()
