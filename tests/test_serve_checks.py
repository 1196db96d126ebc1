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
