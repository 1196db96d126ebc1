"""`serve` refuses every bad flag before the engine starts: a --max-backlog too small for one
full request of a router's multi-step questions was found by `create_app`, after the engine
had started (minutes on a CPU). A stand-in router (`routers.LengthRouter`, multi-step among
its strategies) is loaded from a router folder; the engine and the server only record that
they were reached."""

from __future__ import annotations

import json

import pytest

from retrieval_gate.cli import main
from routers import COSTS, STRATEGIES, LengthRouter, ScriptedGenerator


@pytest.fixture
def router_dir(tmp_path, monkeypatch):
    """A router folder whose metadata `serve` checks before loading it; loading it gives a
    `LengthRouter` (its model.onnx is not ONNX). Returns (folder, the loads made)."""
    folder = tmp_path / "router"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not onnx")
    (folder / "tokenizer.json").write_text("{}")
    curve = {"price": [0.0], "mean_cost": [1.0], "shares": [[0.2, 0.6, 0.2]]}
    meta = {"strategies": list(STRATEGIES), "costs": list(COSTS), "dev": curve,
            "default_budget": 1.0, "default_price": 0.0,
            "objective": "budget-accuracy"}  # fmt: skip
    (folder / "gate_metadata.json").write_text(json.dumps({"task": "strategies", "router": meta}))
    loads: list[str] = []

    def load(path, variant="fp32"):
        loads.append(str(path))
        return LengthRouter(short=3, long=6)

    monkeypatch.setattr("retrieval_gate.rag.modes.load_router", load)
    return folder, loads


@pytest.fixture
def reached(monkeypatch):
    """What `serve` reached: "engine" (the generator opened) and "server" (serving began)."""
    seen: list[str] = []

    def engine(*_, **__):
        seen.append("engine")
        return ScriptedGenerator({})

    monkeypatch.setattr("retrieval_gate.rag.backends.open_generator", engine)

    def server(service, host, port, limits, *_, **__):
        from retrieval_gate.rag.service import create_app

        create_app(service, limits)  # the app the server would serve: its own checks pass
        seen.append("server")

    monkeypatch.setattr("retrieval_gate.rag.service.serve", server)
    return seen


def _serve(folder, *flags: str) -> int:
    from pg_server import free_port

    port = str(free_port())  # a port free now: serve tries it before anything starts
    return main(["serve", "--router", str(folder), "--retriever", "contexts", "--port", port,
                 *flags])  # fmt: skip


def test_a_backlog_too_small_for_multi_step_questions_is_refused_before_the_engine(
    router_dir, reached, capsys
):
    """64 questions of 4 steps (--max-steps' default) weigh 256: a backlog of 100 can never
    hold one full request. Refused with exit 2, the fix named, and no engine started."""
    folder, loads = router_dir
    code = _serve(folder, "--max-backlog", "100")
    err = capsys.readouterr().err
    assert reached == [], f"reached {reached} before refusing the backlog"
    assert code == 2, err
    assert "--max-backlog (100) must hold one full request" in err, err
    assert "pass --max-backlog 256, or a lower --max-steps" in err, err
    assert len(loads) == 1


def test_a_backlog_that_holds_one_full_request_serves_with_the_router_loaded_once(
    router_dir, reached, capsys
):
    folder, loads = router_dir
    assert _serve(folder, "--max-backlog", "100", "--max-steps", "1") == 0, capsys.readouterr()
    assert reached == ["engine", "server"] and len(loads) == 1  # not loaded again after the check


# The real `serve` in a process of its own (signals), its router and answer gate the stand-ins
# of `routers`; argv[1]: uvicorn's graceful timeout (SHUTDOWN_GRACE), the rest serve's flags.
_CHILD = """
import signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's job gets it
import retrieval_gate.rag.cascade as cascade, retrieval_gate.rag.modes as modes
import retrieval_gate.rag.service as service
from routers import AnswerConfidenceGate, LengthRouter
modes.load_router = lambda path, variant="fp32": (
    AnswerConfidenceGate() if Path(path).name == "answers" else LengthRouter(short=3, long=6))
modes.check_answer_gate_folder = cascade.check_answer_gate_folder = lambda *a, **k: None
service.SHUTDOWN_GRACE = float(sys.argv[1])
from retrieval_gate.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def serve_child(router_dir, tmp_path):
    """Starts `serve` (the router of `router_dir`, --generator-url the project's fake server,
    holding the prompts that hold `hold`: "" all) in a child process: `start(grace, *flags,
    hold=)` -> (process, generator, port); killed at the end."""
    import subprocess
    import sys
    from pathlib import Path

    from pg_server import free_port

    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    from fake_openai_server import FakeServer

    folder, _ = router_dir
    (tmp_path / "answers").mkdir()
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(tests=str(Path(__file__).parent)))
    started: list = []

    def start(grace: float, *flags: str, hold: str | None = None):
        generator, port = FakeServer(latency=0.0, hold=hold), free_port()
        generator.__enter__()  # serving until `stop`, below
        argv = [sys.executable, str(script), str(grace), "serve", "--router", str(folder),
                "--retriever", "contexts", "--generator-url", generator.url, "--no-cache",
                "--port", str(port), *flags]  # fmt: skip
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        started.append((proc, generator))
        return proc, generator, port

    yield start
    for proc, generator in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        generator.stop()


def _until(done, seconds: float = 60) -> None:
    import time

    end = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_requests_a_stopping_server_cannot_answer_get_503_not_500(serve_child):
    """SIGTERM while /answer requests wait on a generator that never answers: uvicorn's
    graceful timeout ran out and cancelled them, each a bare "500 Internal Server Error". Now
    they get a 503 saying the server is shutting down, just before, and serve exits."""
    import signal
    import threading

    import httpx

    proc, generator, port = serve_child(2.0, "--request-timeout", "30")
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, proc.stderr.read()
        try:
            return httpx.get(url + "/health").status_code == 200
        except httpx.TransportError:
            return False

    _until(up)
    generator.hold, replies = "", []

    def ask(i: int) -> None:
        replies.append(httpx.post(url + "/answer", json={"questions": [f"Who is {i}?"]},
                                  timeout=30))  # fmt: skip

    askers = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in askers:
        t.start()
    _until(lambda: generator.held > 0)  # their batch is in the generator, held
    proc.send_signal(signal.SIGTERM)
    for t in askers:
        t.join(20)
    assert proc.wait(10) == -signal.SIGTERM
    assert [r.status_code for r in replies] == [503, 503], [r.text for r in replies]
    assert all("server is shutting down" in r.json()["detail"] for r in replies)
    assert all(r.headers["retry-after"] == "1" for r in replies)


@pytest.mark.slow
@pytest.mark.parametrize("cascade", [False, True], ids=["warm-up", "logprobs-check"])
def test_ctrl_c_at_startup_while_the_generator_hangs_stops_at_once(serve_child, tmp_path,
                                                                   cascade):  # fmt: skip
    """Ctrl-C while the warm-up question (or a cascade's check that the generator returns
    log-probabilities) waits on a generator that never answers: the process stayed until
    --request-timeout. Now it stops at once: "interrupted", exit 130."""
    import signal
    import time

    flags = ["--answer-gate", str(tmp_path / "answers")] if cascade else []
    hold = "Reply with one word" if cascade else "Who wrote Hamlet?"  # the warm-up's question
    proc, generator, _ = serve_child(2.0, "--request-timeout", "60", *flags, hold=hold)
    _until(lambda: generator.held > 0 or proc.poll() is not None)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    code = proc.wait(15)
    assert time.monotonic() - start < 5
    err = proc.stderr.read()
    assert code == 130, err
    assert "retrieval-gate serve: interrupted" in err, err
