"""`rag` against the project's fake OpenAI-compatible server (scripts/fake_openai_server.py):
--strategies for the fitted routers, the confidence gate without log-probabilities, Ctrl-C
while the server holds requests, flags a strategy's own settings override, and prompts the
server refuses for good."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from retrieval_gate.cli import main
from retrieval_gate.errors import MissingInputError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from fake_openai_server import FakeServer  # noqa: E402

STRATEGIES = """strategies:
  - {name: no_retrieval, cost: 0.0}
  - {name: top1, cost: 0.5, retriever: default, k: 1}
  - {name: one_retrieval, cost: 1.0, retriever: default}
  - {name: ms2, cost: 3.0, retriever: default, k: 2, steps: multi, max_steps: 2}
"""


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Four questions, a two-document corpus and the strategies file, in `tmp_path`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": f"Who is Ada {i}?", "answers": ["Lovelace"],
                    "split": "test"}) + "\n" for i in range(4)))  # fmt: skip
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"id": "d1", "title": "", "text": "Ada is Ada Lovelace"})
        + "\n"
        + json.dumps({"id": "d2", "title": "", "text": "Ada Lovelace wrote notes"})
        + "\n"
    )
    (tmp_path / "s.yaml").write_text(STRATEGIES)
    return ["rag", "--questions", "q.jsonl", "--limit", "all", "--corpus", "c.jsonl",
            "--strategies", "s.yaml"]  # fmt: skip


def test_the_fitted_routers_run_the_strategies_file_declares(tmp_path, capsys):
    """router-prior fitted on labels of top1 was refused: "strategy 'top1' is not a built-in
    ... declare them with --strategies FILE.yaml", that file passed."""
    questions = ROOT / "examples" / "your-data" / "questions.csv"
    ids = [line.split(",")[0] for line in questions.read_text().splitlines()[1:]]
    rng = random.Random(0)
    rows = ["id,no_retrieval_correct,top1_correct,one_retrieval_correct"]
    rows += [f"{i},{rng.random() < 0.3},{rng.random() < 0.6},{rng.random() < 0.7}" for i in ids]
    (tmp_path / "o.csv").write_text("\n".join(rows) + "\n")
    assert main(["label", "--policy", "outcomes", "--outcomes", str(tmp_path / "o.csv"),
                 "--questions", str(questions), "--strategies", "no_retrieval", "top1",
                 "one_retrieval", "--generator", "b",
                 "--labels-dir", str(tmp_path / "L")]) == 0  # fmt: skip
    spec = tmp_path / "s3.yaml"
    spec.write_text("\n".join(STRATEGIES.splitlines()[:4]) + "\n")
    with FakeServer(latency=0.0) as url:
        capsys.readouterr()
        labels = str(tmp_path / "L" / "b" / "strategies.jsonl")
        code = main(["rag", "--questions", str(questions), "--limit", "3", "--modes", "never",
                     "router-prior", "--labels", labels, "--strategies", str(spec),
                     "--retriever", "bm25", "--generator-url", url])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def test_confidence_without_logprobs_is_refused_not_always_retrieve(files, capsys):
    """A server that returns no log-probabilities: every question scored 1.0 ("certainly
    wrong"), the confidence mode retrieving 100%, with exit code 0."""
    from retrieval_gate.gates.confidence import ConfidenceGate
    from retrieval_gate.generation.remote import RemoteGenerator

    with FakeServer(latency=0.0, logprobs=False) as url:
        code = main([*files[:-2], "--modes", "never", "confidence", "--generator-url", url])
        said = capsys.readouterr().err
        assert code == 3, said
        assert "--generator-url" in said and "the confidence mode" in said, said
        gate = ConfidenceGate(None, lambda: RemoteGenerator(url))
        with pytest.raises(MissingInputError, match="no token log-probabilities.*'0'"):
            gate.scores(["Who is Ada 0?"])


def test_a_strategys_own_max_steps_and_k_refuse_the_flags_it_overrides(files, capsys):
    """--max-steps / -k given to modes whose strategies set their own were unused, and the
    note reported them as the run's settings."""
    url = ["--generator-url", "http://127.0.0.1:9/v1"]  # refused before any engine
    assert main([*files, "--modes", "ms2", "--max-steps", "3", *url]) == 2
    assert "max_steps: of ms2" in capsys.readouterr().err
    assert main([*files, "--modes", "never", "top1", "-k", "3", *url]) == 2
    assert "k: of top1" in capsys.readouterr().err
    with FakeServer(latency=0.0) as served:
        assert main([*files, "--modes", "top1", "ms2", "--generator-url", served]) == 0
        out = capsys.readouterr().out
        # the multi-step mode reads it: taken
        assert main([*files, "--modes", "multi-step", "ms2", "--max-steps", "3",
                     "--generator-url", served]) == 0, capsys.readouterr().err  # fmt: skip
    assert "top1: k=1; ms2: k=2, max_steps=2, max_docs=2, step_k=1" in out, out


def test_a_prompt_refused_for_good_is_a_miss_kept_not_asked_again(files, tmp_path, monkeypatch,
                                                                  capsys):  # fmt: skip
    """A final 400 and a reply with no answer were `retryable`: every rerun ran those modes
    again and sent the refused prompts again."""
    monkeypatch.setenv("RETRIEVAL_GATE_NO_CACHE", "0")
    monkeypatch.setenv("RETRIEVAL_GATE_CACHE", str(tmp_path / "cache"))
    argv = [*files[:-2], "--modes", "never", "always", "--out", "r"]
    server = FakeServer(latency=0.0, refuse="Ada 1", garbled="Ada 2")
    with server as url:
        assert main([*argv, "--generator-url", url]) == 0, capsys.readouterr().err
        saved = [json.loads(line) for line in Path("r.modes.jsonl").read_text().splitlines()]
        failed = [a for m in saved for a in m["answers"] if a["error"]]
        assert len(failed) == 4 and all(a["refused"] and not a["retryable"] for a in failed)
        capsys.readouterr()
        refused = server.refused
        assert main([*argv, "--generator-url", url]) == 0
    assert server.refused == refused  # not asked again
    out = capsys.readouterr().out
    assert "modes kept from an earlier run: never, always" in out, out
    assert "run again" not in out


@pytest.mark.slow  # a child `rag`: about 5 s
def test_ctrl_c_while_the_server_holds_requests_exits_at_once(files, tmp_path):
    """Ctrl-C while the server held requests: `rag` waited for each, retries and all (about
    4 minutes), before it said "interrupted"."""
    import signal
    import subprocess
    import time

    from processes import gone

    server = FakeServer(latency=0.0, hold="Ada")
    with server as url:
        cmd = [str(ROOT / ".venv" / "bin" / "retrieval-gate"), *files[:-2], "--modes", "never",
               "always", "--generator-url", url, "--no-cache"]  # fmt: skip
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 60
            while server.held < 2:  # the warm-up answered, the questions held
                assert time.monotonic() < end and proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            assert proc.wait(timeout=15) == 130
            assert time.monotonic() - sent < 10
            assert "interrupted" in proc.stderr.read()
        finally:
            if not gone(proc.pid):
                proc.kill()
            proc.wait()
