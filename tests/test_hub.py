"""Without a network (the Hub's name does not resolve), a Hub name is looked up in the Hugging
Face cache alone, so one that is not there is refused at once, saying why (`datasets` and
transformers retried the Hub for ~24 s first), and one that is there loads: vLLM, listing a
cached model's files, retried for minutes and then failed. Offline mode stays on for the rest
of the process and the engines it starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrieval_gate.errors import DataError, InputError

NO_HUB = r"Hub cannot be reached from here \(huggingface.co: Name or service not known\)"


@pytest.fixture
def no_dns(monkeypatch):
    import datasets
    from huggingface_hub import constants

    from retrieval_gate import hub

    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "huggingface.co":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_WENT_OFFLINE", {})  # put back with the flags after the test
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.monotonic()
    yield
    assert time.monotonic() - start < 10
    # on from here: for the engines this process starts, too
    assert constants.HF_HUB_OFFLINE is True and os.environ["HF_HUB_OFFLINE"] == "1"


def test_an_hf_questions_spec(no_dns):
    from retrieval_gate.data.user_questions import read_questions

    with pytest.raises(DataError, match=rf"'no-such/set'.* The {NO_HUB}: offline"):
        read_questions("hf:no-such/set@test")


def test_a_generator_or_backbone_hub_name(no_dns):
    from retrieval_gate.generation.model_folders import read_config

    with pytest.raises(InputError, match=rf"not a model transformers knows \(.*; the {NO_HUB}\)"):
        read_config("no-such/model")
    with pytest.raises(InputError, match=NO_HUB):  # the second load still says why
        read_config("no-such/other")


def test_a_gate_hub_id_not_in_the_cache(no_dns):
    from retrieval_gate import RetrievalGate

    with pytest.raises(InputError, match=rf"not in the local Hub cache.*; the {NO_HUB}"):
        RetrievalGate.from_pretrained("no-such/gate")


def cached_hub_model(hf_home: Path, repo: str, folder: Path) -> None:
    """`folder`'s files as the Hugging Face cache keeps `repo` (links: no copy)."""
    snapshot = "0" * 40
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(snapshot)
    (root / "snapshots" / snapshot).mkdir(parents=True)
    for f in folder.iterdir():
        if f.is_file() and f.name != "prepared.json":
            (root / "snapshots" / snapshot / f.name).symlink_to(f.resolve())


def test_a_cached_hub_name_is_read_offline_at_once(no_dns, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from retrieval_gate.generation.model_folders import read_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    cached_hub_model(tmp_path / "hf", "some-org/cached", model)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    assert read_config("some-org/cached").hidden_size == 64


@pytest.mark.slow  # starts vLLM
def test_label_with_a_cached_hub_generator_and_no_network(tmp_path):
    """`label --generator owner/name` of a model the cache holds, the Hub unreachable: it took
    227 s of vLLM's retries and failed (exit 3); now it labels."""
    from retrieval_gate.generation.model_folders import prepare_smollm2

    cached_hub_model(tmp_path / "hf", "some-org/smol", prepare_smollm2())
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Who wrote Hamlet?",
                                     "answers": ["Shakespeare"]}) + "\n")  # fmt: skip
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "https://hub.invalid"}
    env.pop("HF_HUB_OFFLINE", None)
    cmd = [sys.executable, "-m", "retrieval_gate.cli", "label", "--policy", "closed-book",
           "--questions", str(questions), "--labels-dir", str(tmp_path / "labels"),
           "--generator", "some-org/smol", "--no-cache"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Hub cannot be reached (hub.invalid" in done.stderr
    row = json.loads((tmp_path / "labels" / "smol" / "closed-book.jsonl").read_text())
    assert row["id"] == "q1" and row["prediction"]
